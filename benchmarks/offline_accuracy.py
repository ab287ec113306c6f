"""How well the offline model (Gemma 3 270M from PyPI) answers the demo, per question, against the answers
each demo ticket was composed with: accuracy beside chance (one over the number of options, and the rate of
always answering the most common one), mean label mass, mean confidence and seconds per item, for the old
reading ("single": one pass over the joint canvas, noise in the answer slots) and the offline default
("options": each question with its own prompt, options listed, whole option names scored).

`demo_accuracy(engine)` is the measurement; `benchmarks/first_suggestion.py` can call it for its table.
Run: python benchmarks/offline_accuracy.py [--items 60] [--modes single,options] [--heldout]
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
from typing import Any

from diffjev import Schema, read_many
from diffjev.demo import EXPECTED_FIELDS, TICKETS_SCHEMA, demo_tickets
from diffjev.engines import AutoregressiveEngine
from diffjev.models import OFFLINE_GEMMA


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
        rows.append(
            {
                "engine": engine.name,
                "question": q.id,
                "accuracy": sum(a.answer == e for a, e in zip(answers, expected)) / len(tickets),
                "chance": 1 / len(q.alternatives),
                "majority": Counter(expected).most_common(1)[0][1] / len(tickets),
                "label_mass": statistics.fmean(a.label_mass for a in answers),
                "confidence": statistics.fmean(a.confidence for a in answers),
                "seconds_per_item": seconds,
            }
        )
    return rows


def offline_engines(modes: list[str]) -> list[AutoregressiveEngine]:
    """The offline model loaded once, read each of the given ways."""
    default = AutoregressiveEngine.offline()
    engines = []
    for mode in modes:
        if mode == default.mode:
            engines.append(default)
            continue
        engine = AutoregressiveEngine(
            default.model, default.tokenizer, mode=mode, instruction_tuned=default.instruction_tuned
        )
        engine.model_name = OFFLINE_GEMMA
        engines.append(engine)
    return engines


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| reading | question | accuracy | chance (1/options) | majority class | label mass | confidence | s/item |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['engine']} | {r['question']} | {r['accuracy']:.2f} | {r['chance']:.2f} | {r['majority']:.2f} "
            f"| {r['label_mass']:.4f} | {r['confidence']:.2f} | {r['seconds_per_item']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=60, help="demo tickets to read (default 60, the whole demo)")
    parser.add_argument("--modes", default="single,options", help="readings to compare, comma-separated")
    parser.add_argument("--heldout", action="store_true", help=f"read {HELDOUT.name} instead of the demo")
    args = parser.parse_args()
    tickets = heldout_tickets() if args.heldout else None
    rows = []
    for engine in offline_engines(args.modes.split(",")):
        rows.extend(demo_accuracy(engine, args.items, tickets))
    print(table(rows), flush=True)


if __name__ == "__main__":
    main()
