"""benchmarks/span_accuracy.py: the labeled data it reads, how it scores, and what it counts."""

from __future__ import annotations

import importlib.util
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diffjev.engines import AutoregressiveEngine


def benchmark():
    """The script under benchmarks/, imported from its file (benchmarks/ is not a package)."""
    path = Path(__file__).parent.parent / "benchmarks" / "span_accuracy.py"
    spec = importlib.util.spec_from_file_location("span_accuracy", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


bench = benchmark()

CONLL = """Empire\tB-facility
State\tI-facility
Building\tI-facility
=\tO
ESB\tB-facility
.\tO
\t
Ada\tB-person
Lovelace\tI-person
met\tO
Paris\tI-geo-loc
"""


def test_conll_entities_get_exact_offsets_in_the_space_joined_text():
    first, second = bench.read_conll(CONLL.splitlines())
    text, entities = bench.sentence_entities(first)
    assert text == "Empire State Building = ESB ."
    assert [(k, text[s:e]) for k, s, e in entities] == [("facility", "Empire State Building"), ("facility", "ESB")]
    text, entities = bench.sentence_entities(second)
    # an I- tag with no entity of its type before it starts one, as conlleval reads it
    assert [(k, text[s:e]) for k, s, e in entities] == [("person", "Ada Lovelace"), ("geo-loc", "Paris")]


def test_a_malformed_conll_line_is_named_with_its_number():
    with pytest.raises(ValueError, match=r"ner.txt line 2: expected 'token<TAB>tag'.*'State I-facility'"):
        bench.read_conll(["Empire\tB-facility", "State I-facility"], source="ner.txt")


def test_the_packaged_wnut16_tweets_give_single_gold_spans_that_slice_the_text():
    importlib.import_module(bench.DATA_PACKAGE)  # the test extra installs it: missing is a failure, not a skip
    sentences = bench.read_conll(bench.data_path().read_text(encoding="utf-8").splitlines())
    assert len(sentences) == 2394  # WNUT-16's training tweets
    items = bench.wnut_items(40)
    assert len(items) == 40
    # the file's own order, no picking: its first tweet naming a company, a person or a place
    first = items[0]
    assert first.text.startswith("Pxleyes Top 50") and first.gold == {
        "company": (0, 7),
        "person": None,
        "geo-loc": None,
    }
    for item in items:
        found = {kind: item.text[s:e] for kind, span in item.gold.items() if span for s, e in [span]}
        assert found and all(text == text.strip() and text for text in found.values())
    # the reference that answers none to everything: what a reader must beat on these tweets
    *_, overall = bench.measure("none", bench.AlwaysNone(), None, items[:12], bench.span_schema(8))
    assert overall["exact"] == overall["gold_none"] / overall["n"] == 24 / 36 and overall["passes_per_item"] == 0


def test_scores_follow_squad_exact_offsets_and_token_f1():
    assert bench.token_f1("the Barack Obama", "Barack Obama") == 1.0
    assert bench.token_f1("Obama", "Barack Obama") == pytest.approx(2 / 3)
    assert bench.token_f1(None, None) == 1.0 and bench.token_f1("Paris", None) == 0.0
    from diffjev.spans import Span, SpanAnswer

    item = bench.LabeledItem("I met Barack Obama", {"person": (6, 18), "geo-loc": None})
    near = SpanAnswer("person", "span", (Span(13, 18, "Obama", 0.6),), 0.6, 1)
    assert bench.score(near, item, "person") == {
        "exact": 0.0,
        "f1": pytest.approx(2 / 3),
        "found": 1.0,
        "confidence": 0.6,
    }
    nothing = SpanAnswer("geo-loc", "span", (), 0.9, 1)
    assert bench.score(nothing, item, "geo-loc") == {"exact": 1.0, "f1": 1.0, "found": 1.0, "confidence": 0.9}


def test_the_cost_counts_the_backbones_own_passes_and_agrees_with_the_engine(causal_lm, tokenizer):
    engine = AutoregressiveEngine(causal_lm, tokenizer, mode="options", instruction_tuned=False, batch_size=4)
    none = {"person": None, "geo-loc": None, "company": None}
    items = [bench.LabeledItem("Ada met Bob .", {**none, "person": (0, 3)}), bench.LabeledItem("rain again", none)]
    schema = bench.span_schema(max_tokens=2)
    claimed = [sum(map(engine.span_passes, engine.read_spans(schema, item.text)[0].values())) for item in items]
    *by_question, overall = bench.measure("ar", engine, causal_lm, items, schema)
    assert [r["question"] for r in by_question] == ["person", "geo-loc", "company"] and overall["question"] == "all"
    assert overall["n"] == 6 and overall["gold_none"] == 5 and by_question[0]["gold_none"] == 1
    assert overall["passes_per_item"] == sum(claimed) / 2 and overall["seconds_per_item"] > 0
    assert overall["tokens_per_item"] > 0 and 0 <= overall["exact"] <= 1
    assert "| ar | all | 6 | 5 |" in bench.table([*by_question, overall])


def test_the_script_prints_its_table_from_the_command_line():
    importlib.import_module(bench.DATA_PACKAGE)  # the test extra installs it: missing is a failure, not a skip
    script = Path(__file__).parent.parent / "benchmarks" / "span_accuracy.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(script), "--items", "12", "--engines", "none"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "12 tweets x 3 span questions from WNUT-16" in done.stdout
    assert "| always none (reference) | all | 36 | 24 | 0.67 | 0.67 | 0.67 |" in done.stdout
    bad = subprocess.run([sys.executable, str(script), "--engines", "gpt"], capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and "--engines takes none, autoregressive and diffusion, not 'gpt'" in bad.stderr
    assert "Traceback" not in bad.stderr
