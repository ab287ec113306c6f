"""Accept-to-next-item latency of the studio, through gradio_client, against `python app.py` launched as
its own process over a project of 100k pre-labeled items.

Each measured call is one Accept: the answer is stored, the lease released, the next item leased from
the least-confidence queue, and the next card (item, distribution, progress) sent back.
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

sys.path.insert(0, str(Path(__file__).parent))
from storage import seeded_file  # noqa: E402  (the storage benchmark's synthetic project)

TARGET_P95_MS = 150


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--accepts", type=int, default=300)
    args = ap.parse_args()
    with running_app(seeded_file("app", args.items), project="bench") as app:
        client = Client(app.url, verbose=False)
        client.predict("team", "Least confidence first", api_name="/annotate_start")
        times = []
        for _ in range(args.accepts):
            started = time.perf_counter()
            client.predict(api_name="/accept")
            times.append(time.perf_counter() - started)
    times.sort()
    p50 = statistics.median(times) * 1000
    p95 = times[int(0.95 * (len(times) - 1))] * 1000
    print("| items | accepts | p50 accept → next item | p95 | target p95 |")
    print("|---|---|---|---|---|")
    print(f"| {args.items:,} | {args.accepts} | {p50:.0f} ms | {p95:.0f} ms | < {TARGET_P95_MS} ms |")


if __name__ == "__main__":
    main()
