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
import tempfile
import time
from pathlib import Path

import httpx
from gradio_client import Client

sys.path.insert(0, str(Path(__file__).parent))
from storage import fresh, seed_queue  # noqa: E402  (the storage benchmark's synthetic project)

TARGET_P95_MS = 150


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--accepts", type=int, default=300)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="diffjev-app-bench-"))
    db = fresh(folder, "app")
    seed_queue(db, args.items)
    db.dispose()
    port = free_port()
    env = {**os.environ, "DIFFJEV_DB": str(folder / "app.db"), "DIFFJEV_PROJECT": "bench", "PORT": str(port)}
    app = subprocess.Popen([sys.executable, "app.py"], cwd=Path(__file__).parent.parent, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(url + "config", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if app.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the app did not start: {app.stderr.read().decode()[-2000:]}")
            time.sleep(0.5)
        client = Client(url, verbose=False)
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
    finally:
        app.terminate()
        try:
            app.wait(timeout=10)
        except subprocess.TimeoutExpired:  # open client streams can hold a graceful shutdown
            app.kill()


if __name__ == "__main__":
    main()
