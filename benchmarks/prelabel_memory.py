"""Memory over a long pre-label run: the main process's resident memory (and each worker's) sampled as a
100,000-item run goes, against `diffjev serve-model --tiny --memoize` with no added latency.

Every item has the same text under its own id, so the endpoint computes the one read with the model once
and answers the rest from memory: the run measures the client's memory, not the tiny model's speed.
The figure to read is the growth after the first 10,000 items: flat means nothing accumulates per item
(no growing queue, cache or list of results).

Run: python benchmarks/prelabel_memory.py [--items 100000] [--workers 0]
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from prelabel_throughput import SERVED, start_server  # noqa: E402

from diffjev.demo import TICKETS_SCHEMA  # noqa: E402
from diffjev.engines import VLLMServerEngine  # noqa: E402
from diffjev.engines.processes import ProcessEngine  # noqa: E402
from diffjev.models import offline_gemma_tokenizer  # noqa: E402
from diffjev.schema import Schema  # noqa: E402
from diffjev.services.importing import import_items  # noqa: E402
from diffjev.services.prelabel import prelabel  # noqa: E402
from storage import repo  # noqa: E402
from storage.db import Database  # noqa: E402


def rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--every", type=int, default=10_000, help="items between samples")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="diffjev-memory-"))
    db = Database(folder / "memory.db")
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict({**TICKETS_SCHEMA, "samples": 1}), "bench")
    texts = ["Ticket: the invoice export has been failing since the update."] * args.items
    import_items(db, "p", pd.DataFrame({"id": [f"t{i}" for i in range(args.items)], "text": texts}), id_field="id")
    tokenizer = offline_gemma_tokenizer()
    tokenizer.save_pretrained(folder / "tokenizer")
    proc, url = start_server(0)
    if args.workers:
        recipe = functools.partial(VLLMServerEngine, url, SERVED, str(folder / "tokenizer"), max_in_flight=16)
        engine = ProcessEngine(recipe, processes=args.workers)
    else:
        engine = VLLMServerEngine(url, SERVED, tokenizer, max_in_flight=32)
    samples: list[tuple[int, float, float, list[float]]] = []
    started = time.perf_counter()

    def sample(progress) -> None:
        if not samples or progress.done - samples[-1][0] >= args.every or progress.done == progress.total:
            workers = [rss_mb(pid) for pid in getattr(engine, "worker_pids", [])]
            samples.append((progress.done, time.perf_counter() - started, rss_mb(), workers))

    try:
        report = prelabel(db, "p", engine, progress=sample)
    finally:
        engine.close()
        proc.terminate()
    print(f"{report.status}: {report.read} read, {report.failed} failed, {report.seconds:.0f} s\n")
    print("| items stored | seconds | main process RSS (MB) | worker RSS (MB) |")
    print("|---|---|---|---|")
    for done, seconds, main_mb, workers in samples:
        shown = ", ".join(f"{w:.0f}" for w in workers) or "-"
        print(f"| {done:,} | {seconds:.0f} | {main_mb:.0f} | {shown} |")
    base = next((s for s in samples if s[0] >= args.every), samples[0])
    print(f"\nmain process growth from {base[0]:,} items to the end: {samples[-1][2] - base[2]:+.0f} MB")


if __name__ == "__main__":
    main()
