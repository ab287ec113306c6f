"""Many annotators at once: 20 `gradio_client` annotators, each with its own login, doing 200 accept or
correct actions each against one studio (`python app.py`, its own process) and one SQLite file.

Every fourth action is a correction (the second answer, by its key); the others accept the model's
answer. It checks what the test suite checks (every action stored exactly once, no two annotators
holding the same item at once, no failed request) and prints the latency per action.

The studio and the 20 clients share this machine's cores; the CPU each used per action is printed
beside the latency, read from /proc and from this process's own clock.

Run: python benchmarks/many_annotators.py [--annotators 20] [--actions 200] [--items 10000]
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from gradio_client import Client

ITEM_ID = re.compile(r"<div class='dj-id'>item ([^<]+)</div>")


@dataclass
class Annotated:
    """What the simulated annotators did and saw."""

    latencies: list[float] = field(default_factory=list)  # seconds per action, answer to next card
    holds: list[tuple[str, str, float, float]] = field(default_factory=list)  # who, item, card shown, answer sent
    actions: dict[str, int] = field(default_factory=dict)  # who -> actions that returned a card
    errors: list[str] = field(default_factory=list)

    def overlapping_holds(self) -> list[tuple[str, str, str]]:
        """(item, who, who) for every two annotators who held the same item at the same time."""
        by_item: dict[str, list[tuple[float, float, str]]] = {}
        for who, item, start, end in self.holds:
            by_item.setdefault(item, []).append((start, end, who))
        clashes = []
        for item, spans in by_item.items():
            spans.sort()
            for (s1, e1, w1), (s2, e2, w2) in zip(spans, spans[1:]):
                if s2 < e1 and w1 != w2:
                    clashes.append((item, w1, w2))
        return clashes

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return 1000 * ordered[int(q * (len(ordered) - 1))]


def simulate(
    url: str, users: list[tuple[str, str]], actions: int, question: str = "team", queue: str = "Least confidence first"
) -> Annotated:
    """Each user, in a thread of its own, takes items from the queue and answers `actions` of them."""
    done = Annotated()
    lock = threading.Lock()

    def annotator(user: tuple[str, str]) -> None:
        who = user[0]
        try:
            # 20 sign-ins at once each cost a password hash: on two busy cores the first answers can take
            # longer than httpx's 5 s default, which is a slow start, not an action lost
            client = Client(url, auth=user, verbose=False, httpx_kwargs={"timeout": 60})
            card = client.predict(question, queue, api_name="/annotate_start")
        except Exception as exc:  # noqa: BLE001 - reported, and the test fails on it
            with lock:
                done.errors.append(f"{who} start: {type(exc).__name__}: {exc}")
            return
        shown = time.monotonic()
        for k in range(actions):
            found = ITEM_ID.search(card[1] or "")
            if found is None:
                with lock:
                    done.errors.append(f"{who} action {k}: no item to answer (the queue ran dry)")
                return
            sent = time.monotonic()
            try:
                card = client.predict(api_name="/pick_2" if k % 4 == 3 else "/accept")
            except Exception as exc:  # noqa: BLE001
                with lock:
                    done.errors.append(f"{who} action {k}: {type(exc).__name__}: {exc}")
                return
            back = time.monotonic()
            with lock:
                done.holds.append((who, found.group(1), shown, sent))
                done.latencies.append(back - sent)
                done.actions[who] = done.actions.get(who, 0) + 1
            if "⚠️" in str(card):
                with lock:
                    done.errors.append(f"{who} action {k}: the card shows an error")
            shown = back

    threads = [threading.Thread(target=annotator, args=(user,), name=f"annotator-{user[0]}") for user in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from storage_scale import seeded_file
    from app_latency import running_app
    from prelabel_throughput import process_cpu_s

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--annotators", type=int, default=20)
    ap.add_argument("--actions", type=int, default=200)
    ap.add_argument("--items", type=int, default=10_000)
    args = ap.parse_args()
    database = seeded_file("annotators", args.items)
    users = [(f"annotator{k}", f"secret{k}") for k in range(args.annotators)]
    with running_app(database, project="bench", users=",".join(f"{u}:{p}" for u, p in users)) as app:
        started, app_cpu, own_cpu = time.perf_counter(), process_cpu_s(app.pid), time.process_time()
        done = simulate(app.url, users, args.actions)
        seconds = time.perf_counter() - started
        app_cpu, own_cpu = process_cpu_s(app.pid) - app_cpu, time.process_time() - own_cpu
    from sqlalchemy import func, select

    from storage.db import Database
    from storage.models import Response

    with Database(database).read() as session:
        stored = session.scalar(
            select(func.count()).select_from(Response).where(Response.annotator.in_([user for user, _ in users]))
        )
    total = len(done.latencies)
    print(
        "| annotators | actions each | actions | stored | failed requests | clashing holds | actions/s | "
        "p50 per action | p95 | studio CPU / action | the 20 clients' CPU / action |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.annotators} | {args.actions} | {total} | {stored} | {len(done.errors)} | "
        f"{len(done.overlapping_holds())} | {total / seconds:.1f} | {done.percentile_ms(0.5):.0f} ms | "
        f"{done.percentile_ms(0.95):.0f} ms | {1000 * app_cpu / total:.0f} ms | {1000 * own_cpu / total:.0f} ms |"
    )
    for error in done.errors[:10]:
        print("  ", error)


if __name__ == "__main__":
    main()
