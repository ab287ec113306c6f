"""Pre-label throughput against a vLLM-format endpoint with a fixed service latency per read.

A real pre-label job (`diffjev.services.prelabel`: canvases, one HTTP read per item, parsing, deciding,
batch commits to a SQLite file) runs against `diffjev serve-model --backend transformers --tiny`
started as its own process with `--service-latency-ms` 50 and 100, at 1, 8, 32 and 64 reads in flight.

- The ideal is in-flight / latency: what a client with no cost of its own would get.
- Each in-flight level reads 30 rounds of reads (1 × 30 items up to 64 × 30), three times; the table
  gives the median. "After the first result" is the rate from the run's first stored read to its end
  (the run's own progress rate): a pass's start (the first reads going out, the first small batches)
  is a large share of a short pass, and a long run's rate is this one.
- `--distinct-texts N` makes the items cycle through N texts (each item under its own id): the warm
  pass computes N reads with the model instead of every item's, so long passes take minutes, not hours.
  The client does the same work per item either way (nothing is cached by text).
- The endpoint runs a tiny random DiffusionGemma on this same 2-core CPU, where one read's forward
  costs more than the latency being modelled. So it runs with `--memoize`: a warm pass first computes
  every read with the model (its rate is printed as the CPU ceiling), and the timed passes, which ask
  for exactly the same seeded reads, get those answers back the configured latency after each request
  arrived (the endpoint's own parsing and encoding fall within it, as a real server's do within its
  latency). The timed passes measure the client against the latency, as a GPU server would serve it.
- The endpoint's CPU per read is read from /proc: client and endpoint share this machine's two cores,
  and "CPU cores busy" says how much of them a level used.
- The client's own overhead per read is its CPU time, measured per read on the threads that do the
  work: building the canvas, the HTTP request and parsing its answer, deciding, and the read's share
  of its batch commit. p50 and p95 over every read at 32 in flight.

- `--reads-per-request 1,8` also runs each level with reads sent several to a request (`/v1/completions`
  with the prompts as token ids; 1 is one chat completion per read): at most `in flight` reads are out at
  once either way, in fewer requests.
- `--workers 0,2` also runs each level with the reads in worker processes (`ProcessEngine`, as
  `diffjev prelabel --workers N`): the main process only streams items and stores batches. The per-step
  client breakdown is measured in-process only (workers' steps run in other interpreters); their CPU
  per read is read from /proc for the main process and every worker together. A latency of 0 gives the
  highest rate the client and endpoint reach together on this machine.
- `--endpoint-ceiling` adds a "bare client" row per level: threads that post one prepared request over and
  over and decode its answer, building, deciding and storing nothing. It is the most this endpoint gives on
  this machine at that level, so a run's gap to it is the client's and the rest is the endpoint's.

Run: python benchmarks/prelabel_throughput.py [--latencies 50,100] [--in-flight 1,8,32,64] [--rounds 30]
     [--workers 0,2] [--reads-per-request 1,8] [--distinct-texts N] [--endpoint-ceiling]
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import orjson
import pandas as pd

from diffjev.demo import TICKETS_SCHEMA
from diffjev.engines import VLLMServerEngine
from diffjev.engines import base as engine_base
from diffjev.engines.processes import ProcessEngine
from diffjev.models import offline_gemma_tokenizer
from diffjev.schema import Schema
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database

SERVED = "diffjev/tiny-diffusiongemma-random"
TOKENIZER_FOLDER = Path(tempfile.mkdtemp(prefix="diffjev-throughput-tokenizer-"))
TARGET_SHARE = 0.90  # of the ideal, at 32 in flight
TARGET_OVERHEAD_MS = 2.0  # client overhead per read, p50
PUBLISHED = "a published DiffusionGemma structured-read server: 9.6 req/s at 1 client (p50 0.10 s), 87.7 req/s at 32"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(latency_ms: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "diffjev.cli",
            "serve-model",
            "--backend",
            "transformers",
            "--tiny",
            "--port",
            str(port),
            "--service-latency-ms",
            str(latency_ms),
            "--memoize",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the endpoint did not start: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.5)


def process_cpu_s(pid: int) -> float:
    """CPU seconds a process has used (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ClientClock:
    """Per-read CPU time of the client's own work, from wrappers around the steps of a read."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.build, self.http, self.decide, self.store = [], [], [], []

    def timed(self, into: str, fn, per_items=None):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            started = time.thread_time()
            result = fn(*args, **kwargs)
            spent = time.thread_time() - started
            n = per_items(args, result) if per_items else 1
            with self.lock:
                getattr(self, into).extend([spent / n] * n)
            return result

        return wrapper

    def means_ms(self) -> dict[str, float]:
        means = {k: 1000 * statistics.mean(getattr(self, k) or [0.0]) for k in ("build", "http", "decide", "store")}
        means["decide"] -= means["build"]  # a chunk's time includes building its canvases
        return means

    def overhead_ms(self) -> list[float]:
        """Per read: its canvas, its HTTP round trip's CPU, and its share of deciding and storing."""
        means = self.means_ms()
        shared = (means["decide"] + means["store"]) / 1000
        n = min(len(self.build), len(self.http))
        return [1000 * (self.build[i] + self.http[i] + shared) for i in range(n)]


def instrument(engine: VLLMServerEngine, clock: ClientClock) -> None:
    engine.builder.build_many = clock.timed("build", engine.builder.build_many, per_items=lambda a, r: max(1, len(r)))
    engine._read_one = clock.timed("http", engine._read_one)
    engine._read_batch = clock.timed("http", engine._read_batch, per_items=lambda a, r: max(1, len(r)))


def project(db: Database, name: str, texts: list[str]) -> None:
    with db.session() as session:
        repo.create_project(session, name, Schema.from_dict({**TICKETS_SCHEMA, "samples": 1}), "bench")
    # each item under its own id: with --distinct-texts, texts repeat
    frame = pd.DataFrame({"id": [f"t{i}" for i in range(len(texts))], "text": texts})
    import_items(db, name, frame, id_field="id")


def measure(db, url, tokenizer, clock, server_pid, latency, n, workers, per_request, args):
    """One level: `repeats` passes of a pre-label run at `n` in flight, in-process or in `workers` processes."""
    rates, steady, overheads, cpu, parts, server_cpu = [], [], [], [], [], []
    pool = None
    if workers:
        pool = ProcessEngine(
            functools.partial(
                VLLMServerEngine,
                url,
                SERVED,
                str(TOKENIZER_FOLDER),
                max_in_flight=max(1, n // workers),
                reads_per_request=min(per_request, max(1, n // workers)),
            ),
            processes=workers,
        )
        list(pool.decide_many(Schema.from_dict({**TICKETS_SCHEMA, "samples": 1}), ["warm"] * (2 * workers)))
    for _ in range(args.repeats):
        engine = pool or VLLMServerEngine(url, SERVED, tokenizer, max_in_flight=n, reads_per_request=per_request)
        clock.reset()
        if not workers:
            instrument(engine, clock)
        pids = [os.getpid(), *(pool.worker_pids if pool else [])]
        client_started = sum(process_cpu_s(pid) for pid in pids)
        server_started = process_cpu_s(server_pid)
        started = time.perf_counter()
        last = []
        report = prelabel(db, f"n{n}", engine, batch_items=64, progress=last.append)
        seconds = time.perf_counter() - started
        cpu.append((sum(process_cpu_s(pid) for pid in pids) - client_started) / report.read * 1000)
        server_cpu.append((process_cpu_s(server_pid) - server_started) / report.read * 1000)
        if not workers:
            engine.close()
        assert report.status == "completed" and report.failed == 0, report
        rates.append(report.read / seconds)
        steady.append(last[-1].items_per_s)  # from the first stored result on: the run's start left out
        overheads.extend(clock.overhead_ms())
        parts.append(clock.means_ms())
    if pool:
        pool.close()
    ideal = n / (latency / 1000) if latency else float("nan")
    overheads.sort()
    return (
        latency,
        n,
        workers,
        min(per_request, n),
        n * args.rounds,
        statistics.median(rates),
        statistics.median(steady),
        ideal,
        statistics.median(overheads) if overheads else float("nan"),
        overheads[int(0.95 * (len(overheads) - 1))] if overheads else float("nan"),
        statistics.median(cpu),
        statistics.median(server_cpu),
        parts[len(parts) // 2],
    )


def endpoint_ceiling(url, tokenizer, server_pid, latency, n, per_request, texts, seconds=8.0):
    """The most this endpoint gives at `n` reads in flight: threads that only post one prepared request
    and decode its answer, with nothing built, decided or stored. No client reaches a larger share of the
    ideal against this endpoint on this machine, so the gap between this row and a run's is the client's."""
    engine = VLLMServerEngine(url, SERVED, tokenizer, max_in_flight=n, reads_per_request=per_request)
    schema = Schema.from_dict({**TICKETS_SCHEMA, "samples": 1})
    canvases = engine.builder.build_many(schema, texts[:per_request], seed=0)
    if per_request == 1:
        path, body = "/v1/chat/completions", orjson.dumps(engine.request_body(canvases[0]))
    else:
        path, body = "/v1/completions", orjson.dumps(engine.completion_body(canvases))
    engine.close()
    headers = {"Content-Type": "application/json"}
    httpx.post(url + path, content=body, headers=headers, timeout=600).raise_for_status()  # the model reads it once
    reads, lock = [0], threading.Lock()
    stop = time.perf_counter() + seconds

    def post_until_stopped() -> None:
        with httpx.Client(timeout=60) as client:
            while time.perf_counter() < stop:
                orjson.loads(client.post(url + path, content=body, headers=headers).raise_for_status().content)
                with lock:
                    reads[0] += per_request

    threads = [threading.Thread(target=post_until_stopped) for _ in range(max(1, n // per_request))]
    client_started, server_started = process_cpu_s(os.getpid()), process_cpu_s(server_pid)
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rate = reads[0] / (time.perf_counter() - started)
    client_cpu = (process_cpu_s(os.getpid()) - client_started) / reads[0] * 1000
    server_cpu = (process_cpu_s(server_pid) - server_started) / reads[0] * 1000
    ideal = n / (latency / 1000) if latency else float("nan")
    nan = float("nan")
    return (latency, n, "bare client", per_request, reads[0], rate, rate, ideal, nan, nan, client_cpu, server_cpu, None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latencies", default="50,100", help="service latency per read, ms")
    ap.add_argument("--in-flight", default="1,8,32,64")
    ap.add_argument("--rounds", type=int, default=30, help="reads per in-flight slot in one pass")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", default="0", help="worker processes per level, comma-separated (0: in-process)")
    ap.add_argument("--reads-per-request", default="1", help="reads per HTTP request, comma-separated (1: chat)")
    ap.add_argument(
        "--distinct-texts",
        type=int,
        default=0,
        help="texts the items cycle through (0: every item its own); fewer make the warm pass shorter",
    )
    ap.add_argument(
        "--endpoint-ceiling",
        action="store_true",
        help="also measure a bare client at each level (one prepared request posted over and over)",
    )
    args = ap.parse_args()
    worker_counts = [int(x) for x in args.workers.split(",")]
    per_requests = [int(x) for x in args.reads_per_request.split(",")]
    latencies = [float(x) for x in args.latencies.split(",")]
    levels = [int(x) for x in args.in_flight.split(",")]
    distinct = args.distinct_texts or max(levels) * args.rounds
    texts = [
        f"Ticket {j}: the {['dashboard', 'export', 'invoice', 'login'][j % 4]} has been failing since "
        f"the update on day {j % 28 + 1}."
        for j in (i % distinct for i in range(max(levels) * args.rounds))
    ]
    folder = Path(tempfile.mkdtemp(prefix="diffjev-throughput-"))
    db = Database(folder / "bench.db")
    for n in levels:
        project(db, f"n{n}", texts[: n * args.rounds])
    tokenizer = offline_gemma_tokenizer()
    tokenizer.save_pretrained(TOKENIZER_FOLDER)  # worker processes load it from a folder

    # Deciding and storing run once per chunk or batch: their per-read share comes from these wrappers.
    clock = ClientClock()
    original_decide_chunk = engine_base.CanvasEngine._decide_chunk
    engine_base.CanvasEngine._decide_chunk = clock.timed(
        "decide", original_decide_chunk, per_items=lambda a, r: max(1, len(r))
    )
    original_store = repo.store_reads
    repo.store_reads = clock.timed("store", original_store, per_items=lambda a, r: max(1, len(a[3])))

    rows, ceilings = [], []
    for latency in latencies:
        proc, url = start_server(latency)
        try:
            # The endpoint memoizes a chat read and a completions read apart: each way is warmed once.
            for per_request in sorted({p for p in per_requests if p == 1} | {max(per_requests)}):
                warm = VLLMServerEngine(
                    url, SERVED, tokenizer, max_in_flight=max(levels), reads_per_request=per_request
                )
                started = time.perf_counter()
                report = prelabel(db, f"n{max(levels)}", warm, batch_items=64)
                if per_request == 1:
                    ceilings.append((latency, report.read / (time.perf_counter() - started)))
                warm.close()
            for n in levels:
                for workers in worker_counts:
                    for per_request in per_requests:
                        rows.append(
                            measure(db, url, tokenizer, clock, proc.pid, latency, n, workers, per_request, args)
                        )
                if args.endpoint_ceiling:
                    for per_request in per_requests:
                        size = min(per_request, n)
                        rows.append(endpoint_ceiling(url, tokenizer, proc.pid, latency, n, size, texts))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    repo.store_reads = original_store
    engine_base.CanvasEngine._decide_chunk = original_decide_chunk

    print(f"Pre-label throughput, demo schema (3 questions), {os.cpu_count()} CPUs; median of {args.repeats} passes\n")
    print(
        "| latency | in flight | worker processes | reads / request | reads / pass | reads/s | ideal | share of ideal "
        "| after the first result: reads/s | share | client overhead p50 | p95 | client CPU / read (all processes) "
        "| endpoint CPU / read | CPU cores busy |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for latency, n, workers, per_request, reads, rate, after_first, ideal, p50, p95, cpu, server, _ in rows:
        share = f"{rate / ideal:.0%}" if latency else "-"
        steady_share = f"{after_first / ideal:.0%}" if latency else "-"
        print(
            f"| {latency:.0f} ms | {n} | {workers or 'none'} | {per_request} | {reads} | {rate:.1f} | {ideal:.0f} | "
            f"{share} | {after_first:.1f} | {steady_share} | "
            f"{p50:.2f} ms | {p95:.2f} ms | {cpu:.2f} ms | {server:.2f} ms | {rate * (cpu + server) / 1000:.2f} |"
        )
    print("\nWhere the client's time per read goes (mean CPU ms per read, one pass):\n")
    print("| latency | in flight | reads / request | canvas | HTTP + parsing | deciding and dispatch | storing |")
    print("|---|---|---|---|---|---|---|")
    for latency, n, workers, per_request, *_, part in rows:  # noqa: B007
        if workers:
            continue
        print(
            f"| {latency:.0f} ms | {n} | {per_request} | {part['build']:.2f} | {part['http']:.2f} | "
            f"{part['decide']:.2f} | {part['store']:.2f} |"
        )
    print()
    for latency, rate in ceilings:
        print(
            f"- warm pass, the tiny model computing every read on this CPU ({latency:.0f} ms added): {rate:.1f} reads/s"
        )
    print(f"- for scale, {PUBLISHED}")
    print(
        f"- targets: at least {TARGET_SHARE:.0%} of the ideal at 32 in flight; client overhead p50 under "
        f"{TARGET_OVERHEAD_MS:.0f} ms per read"
    )


if __name__ == "__main__":
    main()
