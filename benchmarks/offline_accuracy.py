"""How well the offline model (Gemma 3 270M from PyPI) answers the demo, per question, against the answers
each demo ticket was composed with: accuracy beside chance (one over the number of options, and the rate of
always answering the most common one), top-label ECE (diffjev.calibration), mean label mass, mean confidence
and seconds per item, for the old reading ("single": one pass over diffjev's joint template canvas, noise in
the answer slots), the same pass over vLLM 0.33's joint layout ("upstream-single": numbered questions,
`k: <noise>` answer lines), and the offline default ("options": each question with its own prompt, options
listed, whole option names scored).

`demo_accuracy(engine)` is the measurement; `benchmarks/first_suggestion.py` can call it for its table.
Run: python benchmarks/offline_accuracy.py [--items 60] [--modes single,upstream-single,options] [--heldout]
(--heldout reads tests/data/offline_heldout.jsonl instead: tickets worded unlike the demo, with their own
expected answers, so a reading is not chosen for the demo's wording alone.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Iterator

from diffjev import Decision, Schema, read_many
from diffjev.calibration import ece
from diffjev.canvas import DEFAULT_MAX_WIDTH
from diffjev.demo import EXPECTED_FIELDS, TICKETS_SCHEMA, demo_tickets
from diffjev.engines import AutoregressiveEngine
from diffjev.engines.base import DEFAULT_SEED, Engine
from diffjev.models import OFFLINE_GEMMA


UPSTREAM_PREFIX = "upstream-"  # a mode read over vLLM 0.33's joint layout: upstream-single, upstream-sequential
HELDOUT = Path(__file__).parent.parent / "tests" / "data" / "offline_heldout.jsonl"


def heldout_tickets() -> list[dict[str, str]]:
    """Tickets with the demo's questions but not its wording, each with its expected answers."""
    return [json.loads(line) for line in HELDOUT.read_text().splitlines() if line.strip()]


def demo_accuracy(engine: Any, items: int = 60, tickets: list[dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """One row per demo question: the engine's accuracy against the expected answers, and what to judge it
    by. One read per ticket (no extra noise draws), so every reading is measured at the same cost. The
    tickets are the demo's first `items` unless others (the held-out set) are given."""
    schema = Schema.from_dict({**TICKETS_SCHEMA, "samples": 1})
    tickets = demo_tickets(items) if tickets is None else tickets
    started = time.perf_counter()
    decisions = list(read_many(schema, [t["text"] for t in tickets], engine))
    seconds = (time.perf_counter() - started) / len(tickets)
    rows = []
    for q in schema.questions:
        expected = [t[EXPECTED_FIELDS[q.id]] for t in tickets]
        answers = [d.answers[q.id] for d in decisions]
        probs = [[a.probabilities[name] for name in q.names] for a in answers]
        rows.append(
            {
                "engine": engine.name,
                "items": len(tickets),
                "question": q.id,
                "accuracy": sum(a.answer == e for a, e in zip(answers, expected)) / len(tickets),
                "ece": ece(probs, [q.names.index(e) for e in expected]),
                "chance": 1 / len(q.alternatives),
                "majority": Counter(expected).most_common(1)[0][1] / len(tickets),
                "label_mass": statistics.fmean(a.label_mass for a in answers),
                "confidence": statistics.fmean(a.confidence for a in answers),
                "seconds_per_item": seconds,
            }
        )
    return rows


class UpstreamJointReading(Engine):
    """A canvas engine read through vLLM 0.33's joint layout (`joint: true`: the numbered questions in the
    user turn, `k: <noise>` answer lines on the canvas, one read per chunk that fits), so the same model can
    be compared on upstream's layout beside diffjev's template on the same items."""

    def __init__(self, engine: AutoregressiveEngine, served_width: int = DEFAULT_MAX_WIDTH):
        from diffjev.jev import read_joint

        self.read_joint = read_joint
        self.engine, self.served_width = engine, served_width
        self.name = f"{engine.name}, vLLM 0.33 joint layout"
        self.model_name = engine.model_name

    def decide_many(self, schema: Schema, states: Iterable[Any], seed: int = DEFAULT_SEED) -> Iterator[Decision]:
        for state in states:
            yield self.read_joint(self.engine, schema, state, self.served_width)


def offline_engines(modes: list[str]) -> list[Engine]:
    """The offline model loaded once, read each of the given ways: a mode of AutoregressiveEngine, or
    `upstream-<mode>` for that mode over vLLM 0.33's joint layout."""
    default = AutoregressiveEngine.offline()
    engines: list[Engine] = []
    by_mode: dict[str, AutoregressiveEngine] = {default.mode: default}
    for mode in modes:
        upstream = mode.startswith(UPSTREAM_PREFIX)
        mode = mode.removeprefix(UPSTREAM_PREFIX)
        if mode not in by_mode:
            by_mode[mode] = AutoregressiveEngine(
                default.model, default.tokenizer, mode=mode, instruction_tuned=default.instruction_tuned
            )
            by_mode[mode].model_name = OFFLINE_GEMMA
        engines.append(UpstreamJointReading(by_mode[mode]) if upstream else by_mode[mode])
    return engines


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| reading | question | items | accuracy | ECE | chance (1/options) | majority class | label mass "
        "| confidence | s/item |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['engine']} | {r['question']} | {r['items']} | {r['accuracy']:.2f} | {r['ece']:.2f} "
            f"| {r['chance']:.2f} | {r['majority']:.2f} | {r['label_mass']:.4f} | {r['confidence']:.2f} "
            f"| {r['seconds_per_item']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=60, help="demo tickets to read (default 60, the whole demo)")
    parser.add_argument(
        "--modes",
        default="single,upstream-single,options",
        help="readings to compare, comma-separated: single, sequential, options, or upstream-<mode> for a mode "
        "over vLLM 0.33's joint layout",
    )
    parser.add_argument("--heldout", action="store_true", help=f"read {HELDOUT.name} instead of the demo")
    args = parser.parse_args()
    tickets = heldout_tickets() if args.heldout else None
    rows = []
    for engine in offline_engines(args.modes.split(",")):
        rows.extend(demo_accuracy(engine, args.items, tickets))
    print(table(rows), flush=True)


if __name__ == "__main__":
    main()
