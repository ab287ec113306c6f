"""Accept-to-next-item latency of the studio, through gradio_client, against `python app.py` launched as
its own process over a project of 100k pre-labeled items.

Each measured call is one Accept: the answer is stored, the lease released, the next item leased from
the least-confidence queue, and the next card (item, distribution, progress) sent back. The item view's row
measures accept-item -> next item on a 3-question schema of the same size: every answer of the item stored
in one transaction, the item's leases released, the next item (by its least confident question) leased
for every question and its whole view sent back.
Run: python benchmarks/app_latency.py [--items 100000] [--accepts 300]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
from gradio_client import Client

from sqlalchemy import insert

from diffjev.schema import Schema
from storage import repo as store
from storage.db import Database
from storage.models import ItemRead, Suggestion

# benchmarks/storage_scale.py: the synthetic projects
from storage_scale import insert_tickets, seeded_file, synthetic_suggestion

TARGET_P95_MS = 150
# 0.3 x Label Studio's annotate-then-next at 100k tasks (328 ms on these machines)
ITEM_TARGET_P95_MS = 100
THREE_QUESTIONS = {
    "questions": [
        {"id": "team", "type": "choice", "instructions": "Which team?", "options": ["billing", "technical", "account"]},
        {"id": "tone", "type": "choice", "instructions": "Tone?", "options": ["calm", "annoyed", "furious"]},
        {"id": "urgent", "type": "yes_no", "instructions": "Urgent?"},
    ],
    "samples": 1,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_app(database: Path, **settings: str) -> Iterator[subprocess.Popen]:
    """`python app.py` as its own process over `database`, with `settings` as DIFFJEV_* variables; yields
    once it answers on a free port (the process's `url`), and stops it afterwards."""
    port = free_port()
    env = {
        **os.environ,
        "DIFFJEV_DB": str(database),
        "PORT": str(port),
        **{f"DIFFJEV_{k.upper()}": v for k, v in settings.items()},
    }
    app = subprocess.Popen(
        [sys.executable, "app.py"],
        cwd=Path(__file__).parent.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    app.url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:  # answers without a login too, unlike /config
                if httpx.get(app.url + "gradio_api/startup-events", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if app.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the app did not start: {app.stderr.read().decode()[-2000:]}")
            time.sleep(0.5)
        yield app
    finally:
        app.terminate()
        try:
            app.wait(timeout=10)
        except subprocess.TimeoutExpired:  # open client streams can hold a graceful shutdown
            app.kill()


def seeded_three_questions(n: int) -> Path:
    """A new SQLite file with project "bench3": n items, each with a suggestion to each of three questions
    from one run, and random confidences."""
    import random
    import tempfile

    rng = random.Random(0)
    path = Path(tempfile.mkdtemp(prefix="diffjev-app3-")) / "app3.db"
    db = Database(path)
    with db.session() as session:
        project = store.create_project(session, "bench3", Schema.from_dict(THREE_QUESTIONS), "bench")
        version = store.latest_version(session, project.id)
        _, rows = store.version_schema(version)
        run = store.create_run(session, project.id, version, "bench", "none", None, {}, "bench")
        run_id, project_id = run.id, project.id
    ids = insert_tickets(db, project_id, n)
    with db.session() as session:
        # the reads, so the run is the project's latest that read anything and the queues order by it
        session.execute(insert(ItemRead), [{"run_id": run_id, "item_id": i, "status": "ok"} for i in ids])
    for key, row in rows.items():
        names = Schema.from_dict(THREE_QUESTIONS).question(key).names
        with db.session() as session:
            batch = [synthetic_suggestion(run_id, i, row, tuple(names), rng.random()) for i in ids]
            session.execute(insert(Suggestion), batch)
    with db.session() as session:
        store.finish_run(session, run_id, "completed", None, "bench")
    db.dispose()
    return path


def measure(app_url: str, start: tuple, start_api: str, accept: tuple, accept_api: str, accepts: int) -> list[float]:
    client = Client(app_url, verbose=False)
    client.predict(*start, api_name=start_api)
    times = []
    for _ in range(accepts):
        started = time.perf_counter()
        client.predict(*accept, api_name=accept_api)
        times.append(time.perf_counter() - started)
    return sorted(times)


def row(label: str, items: int, times: list[float], target: int) -> str:
    p50 = statistics.median(times) * 1000
    p95 = times[int(0.95 * (len(times) - 1))] * 1000
    return f"| {label} | {items:,} | {len(times)} | {p50:.0f} ms | {p95:.0f} ms | < {target} ms |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--accepts", type=int, default=300)
    ap.add_argument(
        "--views",
        default="one,item",
        help="which views to measure: one (one question at a time), item (the whole item); "
        "'one' alone also runs on code from before the item view, as a baseline",
    )
    args = ap.parse_args()
    views = {v.strip() for v in args.views.split(",")}
    rows = []
    if "one" in views:
        with running_app(seeded_file("app", args.items), project="bench") as app:
            one = measure(app.url, ("team", "Least confidence first"), "/annotate_start", (), "/accept", args.accepts)
        rows.append(row("one question at a time (1 question)", args.items, one, TARGET_P95_MS))
    if "item" in views:
        with running_app(seeded_three_questions(args.items), project="bench3") as app:
            whole = measure(
                app.url,
                ("Least confidence first (the item's least sure question)",),
                "/item_start",
                ("{}",),
                "/item_accept",
                args.accepts,
            )
        rows.append(row("whole item (3 questions, all stored)", args.items, whole, ITEM_TARGET_P95_MS))
    print("| view | items | accepts | p50 accept → next item | p95 | target p95 |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
