"""The review screens at scale: the calibration view and the run comparison over 100k answered items,
and the diversity mix over 100k candidate texts.

Run: python benchmarks/review.py [--items 100000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert, select

from diffjev import active
from diffjev.schema import Schema
from diffjev.services import calibration
from storage import repo
from storage.db import Database
from storage.models import Item, ItemRead, Response, Suggestion, utcnow

SCHEMA = {
    "questions": [
        {"id": "team", "type": "choice", "instructions": "Which team?", "options": ["billing", "technical", "account"]}
    ],
    "samples": 1,
}
TOPICS = [
    "Refund for invoice {} please, I was charged twice",
    "The dashboard is down again since {}",
    "How do I add {} more seats to our plan",
    "Password reset link {} expired",
    "Export to CSV fails at {}",
    "Please update the card on file, ref {}",
    "API returns 500 for request {}",
    "Transfer workspace {} owner",
]
NAMES = ["billing", "technical", "account"]


def seed(db: Database, n: int) -> None:
    """n items answered by a human (with the suggestion shown, so every answer counts), read by two runs
    (a diffusion run and an AR sequential baseline)."""
    rng = random.Random(0)
    now = utcnow()
    with db.session() as session:
        project = repo.create_project(session, "bench", Schema.from_dict(SCHEMA), "bench")
        version = repo.latest_version(session, project.id)
        _, rows = repo.version_schema(version)
        runs = [
            repo.create_run(session, project.id, version, e, "m", None, {}, "bench").id
            for e in ("transformers", "autoregressive-sequential")
        ]
        project_id, question = project.id, rows["team"]
    step = 50_000
    for start in range(0, n, step):
        with db.session() as session:
            session.connection().execute(
                insert(Item.__table__),
                [
                    {
                        "project_id": project_id,
                        "external_id": None,
                        "content_hash": f"h{i}",
                        "text": TOPICS[i % len(TOPICS)].format(i),
                        "fields": {},
                        "created_at": now,
                    }
                    for i in range(start, min(n, start + step))
                ],
            )
    with db.read() as session:
        ids = list(session.scalars(select(Item.id).where(Item.project_id == project_id).order_by(Item.id)))
    truth = [rng.randrange(3) for _ in ids]
    for run_id, skill, passes in ((runs[0], 0.8, 1), (runs[1], 0.7, 3)):
        for start in range(0, n, step):
            part = list(zip(ids[start : start + step], truth[start : start + step]))
            suggestions, reads = [], []
            for item, t in part:
                guess = t if rng.random() < skill else rng.randrange(3)
                top = rng.uniform(0.4, 0.99)
                dist = {name: (top if k == guess else (1 - top) / 2) for k, name in enumerate(NAMES)}
                suggestions.append(
                    {
                        "run_id": run_id,
                        "item_id": item,
                        "question_id": question,
                        "answer": NAMES[guess],
                        "distribution": dist,
                        "confidence": top,
                        "full_vocab_confidence": top,
                        "entropy": 0.5,
                        "margin": top - (1 - top) / 2,
                        "label_mass": 1.0,
                        "stderr": None,
                        "agreement": None,
                        "draws": 1,
                        "value": None,
                        "latency_ms": 20.0 * passes,
                        "is_open": False,
                    }
                )
                reads.append(
                    {
                        "run_id": run_id,
                        "item_id": item,
                        "status": "ok",
                        "attempts": 1,
                        "latency_ms": 20.0 * passes,
                        "diagnostics": {"model_passes": passes},
                        "created_at": now,
                        "error": None,
                    }
                )
            with db.session() as session:
                session.connection().execute(insert(Suggestion.__table__), suggestions)
                session.connection().execute(insert(ItemRead.__table__), reads)
    for start in range(0, n, step):
        with db.session() as session:
            session.connection().execute(
                insert(Response.__table__),
                [
                    {
                        "item_id": item,
                        "question_id": question,
                        "annotator": "a",
                        "value": NAMES[t],
                        "source": "manual",
                        "suggestion_id": None,
                        "suggestion_shown": True,
                        "seconds": 2.0,
                        "status": "submitted",
                        "revision": 1,
                        "created_at": now,
                        "updated_at": now,
                    }
                    for item, t in zip(ids[start : start + step], truth[start : start + step])
                ],
            )


def timed(fn):
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=100_000)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="diffjev-review-bench-"))
    db = Database(folder / "review.db")
    seed(db, args.items)
    with db.read() as session:
        run_id = repo.latest_run(session, repo.get_project(session, "bench").id).id
        texts = list(session.scalars(select(Item.text).order_by(Item.id)))
    found, t_cal = timed(lambda: calibration.calibrate(db, "bench", run_id, "team"))
    table, t_cmp = timed(lambda: calibration.compare_runs(db, "bench"))
    clusters, t_cluster = timed(lambda: active.cluster_texts(texts, 8))
    order, t_order = timed(lambda: active.diverse_order(list(range(len(texts))), clusters))
    print("| step | items | seconds | target |")
    print("|---|---|---|---|")
    print(
        f"| calibration view (metrics, bins, curve, 5-fold temperature), {found.answers_used} answers | "
        f"{found.n:,} | {t_cal:.2f} | < 2 s |"
    )
    print(f"| comparison table ({len(table)} runs) | {args.items:,} | {t_cmp:.2f} | < 2 s |")
    print(
        f"| diversity mix: TF-IDF + k-means (8 clusters) and the round-robin order | {len(texts):,} | "
        f"{t_cluster + t_order:.2f} | < 5 s |"
    )
    print()
    print("| run | engine | accuracy | ECE | Brier | passes / item | latency ms / item |")
    print("|---|---|---|---|---|---|---|")
    for row in table:
        print(
            f"| {row['run']} | {row['engine']} | {row['accuracy']} | {row['ECE']} | {row['Brier']} | "
            f"{row['passes / item']} | {row['mean latency ms / item']} |"
        )


if __name__ == "__main__":
    main()
