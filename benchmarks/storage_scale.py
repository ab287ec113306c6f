"""Storage at scale, on a SQLite file, against the size Label Studio's documentation advises per
project (about 100k tasks).

- import throughput for 100k and 1M short texts (a CSV file, through `import_items`);
- "next item by least confidence" latency, p50 and p95, with 10k, 100k and 1M items, a third of them
  answered: the third the queue hands out first, the worst case for a queue that skips answered items;
- export of 1M items to Parquet.

Run: python benchmarks/storage_scale.py [--sizes 10000,100000,1000000] [--queries 300] [--folder /tmp/diffjev-bench]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert, select, update

from diffjev.schema import Schema
from diffjev.services.exporting import export_project
from diffjev.services.importing import import_items
from storage import repo
from storage.db import Database
from storage.models import Item, Response, Suggestion, utcnow

LABEL_STUDIO_ADVISED = 100_000  # tasks per project, from Label Studio's documentation
SCHEMA = {
    "questions": [
        {"id": "team", "type": "choice", "instructions": "Which team?", "options": ["billing", "technical", "account"]}
    ],
    "samples": 1,
}


def write_csv(path: Path, n: int) -> None:
    with open(path, "w") as f:
        f.write("id,text\n")
        for i in range(n):
            f.write(f"t{i},Ticket {i}: the dashboard is slow again today\n")


def fresh(folder: Path, name: str) -> Database:
    path = folder / f"{name}.db"
    for p in folder.glob(f"{name}.db*"):
        p.unlink()
    db = Database(path)
    with db.session() as session:
        repo.create_project(session, "bench", Schema.from_dict(SCHEMA), "bench")
    return db


def seeded_file(name: str, n: int) -> Path:
    """A new SQLite file in a temporary folder holding `seed_queue`'s project of n items."""
    folder = Path(tempfile.mkdtemp(prefix=f"diffjev-{name}-"))
    db = fresh(folder, name)
    seed_queue(db, n)
    db.dispose()
    return folder / f"{name}.db"


def insert_tickets(db: Database, project_id: int, n: int, step: int = 50_000) -> list[int]:
    """n items "Ticket 0" … into the project, `step` to a transaction; their ids in order."""
    now = utcnow()
    for start in range(0, n, step):
        with db.session() as session:
            session.execute(
                insert(Item),
                [
                    {
                        "project_id": project_id,
                        "external_id": None,
                        "content_hash": f"h{i}",
                        "text": f"Ticket {i}",
                        "fields": {},
                        "created_at": now,
                    }
                    for i in range(start, min(n, start + step))
                ],
            )
    with db.read() as session:
        return list(session.scalars(select(Item.id).where(Item.project_id == project_id).order_by(Item.id)))


def synthetic_suggestion(run_id: int, item_id: int, question_id: int, names: tuple, confidence: float) -> dict:
    """A suggestion row as a one-draw read stores it: the first answer at `confidence`, the rest sharing
    what is left."""
    rest = (1 - confidence) / (len(names) - 1)
    return {
        "run_id": run_id,
        "item_id": item_id,
        "question_id": question_id,
        "answer": names[0],
        "distribution": {name: (confidence if k == 0 else rest) for k, name in enumerate(names)},
        "confidence": confidence,
        "full_vocab_confidence": confidence,
        "entropy": 1 - confidence,
        "margin": confidence / 2,
        "label_mass": 1.0,
        "stderr": None,
        "agreement": None,
        "draws": 1,
        "value": None,
        "latency_ms": 1.0,
        "is_open": True,
    }


def seed_queue(db: Database, n: int) -> tuple[int, int]:
    """n items with a suggestion each for one run; the least confident third answered."""
    rng = random.Random(0)
    with db.session() as session:
        project = repo.get_project(session, "bench")
        version = repo.latest_version(session, project.id)
        _, rows = repo.version_schema(version)
        run = repo.create_run(session, project.id, version, "bench", "none", None, {}, "bench")
        run_id, question, project_id = run.id, rows["team"], project.id
    step = 50_000
    ids = insert_tickets(db, project_id, n, step)
    now = utcnow()
    confidences = [rng.random() for _ in ids]
    for start in range(0, n, step):
        with db.session() as session:
            session.execute(
                insert(Suggestion),
                [
                    synthetic_suggestion(run_id, i, question, ("billing", "technical", "account"), c)
                    for i, c in zip(ids[start : start + step], confidences[start : start + step])
                ],
            )
    answered = [i for _, i in sorted(zip(confidences, ids))[: n // 3]]
    for start in range(0, len(answered), step):
        part = answered[start : start + step]
        with db.session() as session:
            session.execute(
                insert(Response),
                [
                    {
                        "item_id": i,
                        "question_id": question,
                        "annotator": "a",
                        "value": "billing",
                        "source": "accepted",
                        "suggestion_id": None,
                        "suggestion_shown": True,
                        "seconds": 2.0,
                        "status": "submitted",
                        "revision": 1,
                        "created_at": now,
                        "updated_at": now,
                    }
                    for i in part
                ],
            )
            session.execute(update(Suggestion).where(Suggestion.item_id.in_(part)).values(is_open=False))
    with db.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
    return run_id, question


def next_item_latency(db: Database, run_id: int | None, question: int, queries: int) -> tuple[float, float]:
    """p50 and p95 of a "next item" pick from one run's suggestions, or (None) from each item's current
    suggestion (the studio's default queue: the latest run that read the item)."""
    times = []
    for k in range(queries):
        started = time.perf_counter()
        with db.read() as session:
            # a few items leased to other annotators, as the studio excludes them
            repo.next_in_queue(session, run_id, question, "least_confidence", exclude=[k, k + 1, k + 2])
        times.append(time.perf_counter() - started)
    times.sort()
    return statistics.median(times) * 1000, times[int(0.95 * (len(times) - 1))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--import-sizes", default="100000,1000000")
    ap.add_argument("--export-size", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--folder", help="where the database files go (default: a temporary folder)")
    args = ap.parse_args()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="diffjev-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for n in [int(x) for x in args.import_sizes.split(",") if x]:
            csv_path = folder / f"items-{n}.csv"
            write_csv(csv_path, n)
            db = fresh(folder, f"import-{n}")
            started = time.perf_counter()
            report = import_items(db, "bench", csv_path, id_field="id")
            seconds = time.perf_counter() - started
            assert report.imported == n, report.summary()
            rows.append(("import (CSV)", n, f"{n / seconds:,.0f} rows/s", f"{seconds:.1f} s", "> 50,000 rows/s"))
            db.dispose()
            csv_path.unlink()
        for n in [int(x) for x in args.sizes.split(",") if x]:
            db = fresh(folder, f"queue-{n}")
            run_id, question = seed_queue(db, n)
            p50, p95 = next_item_latency(db, run_id, question, args.queries)
            rows.append(("next item, least confidence", n, f"p50 {p50:.2f} ms", f"p95 {p95:.2f} ms", "p95 < 20 ms"))
            p50, p95 = next_item_latency(db, None, question, args.queries)
            rows.append(
                (
                    "next item, least confidence, latest reads",
                    n,
                    f"p50 {p50:.2f} ms",
                    f"p95 {p95:.2f} ms",
                    "p95 < 20 ms",
                )
            )
            if n == args.export_size:
                target = folder / "export.parquet"
                started = time.perf_counter()
                count = export_project(db, "bench", target, "parquet", reviewed_only=False)
                seconds = time.perf_counter() - started
                rows.append(
                    ("export (Parquet)", count, f"{count / seconds:,.0f} rows/s", f"{seconds:.1f} s", "> 50,000 rows/s")
                )
            db.dispose()
    finally:
        if not args.folder:
            shutil.rmtree(folder, ignore_errors=True)
    print("| operation | items | × Label Studio's advised project size | figure | total | target |")
    print("|---|---|---|---|---|---|")
    for op, n, figure, total, target in rows:
        print(f"| {op} | {n:,} | {n / LABEL_STUDIO_ADVISED:g}× | {figure} | {total} | {target} |")


if __name__ == "__main__":
    main()
