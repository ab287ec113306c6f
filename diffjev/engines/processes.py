"""Reads made in worker processes, past one interpreter's lock.

One Python process reading over HTTP tops out where its own CPU per read (tokenising, building the
canvas, encoding the request, decoding the answer, the distribution maths) fills one core: the global
interpreter lock, not the server, sets the ceiling. `ProcessEngine` runs an engine in each of N worker
processes: each builds, sends and decodes its reads, and only the items going out and the Decisions
coming back cross the process boundary. The caller (a pre-label run) still only streams items and stores
results, in order, exactly as with the engine in-process.

An engine is named by a recipe: a picklable zero-argument callable returning it (for example
`functools.partial(engine_from_choice, EngineChoice(...))`), so every worker builds its own client with
its own connections and caches. In-process model engines gain nothing here (the model is the bottleneck,
and each worker would hold a copy): use it for server engines.
"""

from __future__ import annotations

import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterable, Iterator, Sequence

from diffjev.decide import Decision
from diffjev.engines.base import DEFAULT_SEED, Engine, chunks_in_order, growing_chunks
from diffjev.schema import Schema

_worker_engine: Engine | None = None  # the engine of this worker process, built once by its initializer


def _start_worker(recipe: Callable[[], Engine]) -> None:
    global _worker_engine
    # Ctrl-C reaches the whole process group: the run in the main process stops cleanly and closes the
    # pool; a worker dying of it first would turn the reads it held into recorded failures.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_engine = recipe()


def _decide_chunk(schema: Schema, states: Sequence[Any], seed: int) -> list[Decision]:
    assert _worker_engine is not None, "the worker was started without its engine"
    # The engine's own pipeline, in full chunks (this process's caller sent the small first ones): a server
    # engine sends the chunk's reads at once, up to its reads in flight, and decodes the first of them while
    # the rest are still out.
    steady = getattr(_worker_engine, "decide_steady", None)
    return list(steady(schema, states, seed) if steady else _worker_engine.decide_many(schema, states, seed))


def engine_from_choice(choice: Any) -> Engine:
    """The engine an EngineChoice names, built in the process that calls this (a recipe's body)."""
    from diffjev.engines.auto import choose_engine

    return choose_engine(choice).engine


class ProcessEngine(Engine):
    """`recipe`'s engine run in `processes` worker processes; Decisions come back in input order.

    Items go to the workers in chunks (1, 2, 4 ... up to `chunk_items`, by default four times the engine's
    reads in flight, so the first result comes back after one item's read), at most `chunks_in_flight`
    full chunks' items at once, so a long stream is never queued whole. A worker reads a chunk through its engine's own
    pipeline (decoding the reads that are back while the rest are out), and is idle on the network only
    at a chunk's end. A failure in a
    worker (a server down) raises here as the engine's own error would, and the run's retry path reads
    the items it held again, one by one, through the workers.
    """

    def __init__(
        self,
        recipe: Callable[[], Engine],
        processes: int = 2,
        *,
        chunk_items: int | None = None,
        chunks_in_flight: int | None = None,
    ):
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self.recipe = recipe
        # A local instance answers what a run asks before any read (name, model, schema checks, draws)
        # and reads an item alone when the run retries it.
        self.local = recipe()
        self.name = self.local.name
        self.model_name = self.local.model_name
        self.model_version = getattr(self.local, "model_version", None)
        for key, value in vars(self.local).items():  # the local engine's plain settings, kept with a run
            if not key.startswith("_") and isinstance(value, (str, int, float, bool)) and key not in vars(self):
                setattr(self, key, value)
        self.processes = processes
        # A chunk is several waves of a worker's reads (four times its engine's reads in flight): within a
        # chunk the engine decodes one wave while the next is out, so a worker is idle on the network only
        # at a chunk's end; two chunks per worker keep the next one queued.
        self.chunk_items = chunk_items or 4 * getattr(self.local, "max_in_flight", 16)
        self.chunks_in_flight = chunks_in_flight or 2 * processes
        # spawn: a forked child would inherit the parent's threads' locks (HTTP clients, torch) mid-use.
        self._pool = ProcessPoolExecutor(
            processes, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker, initargs=(recipe,)
        )

    def check_schema(self, schema: Schema) -> None:
        self.local.check_schema(schema)

    @property
    def draws_vary(self) -> bool:
        return self.local.draws_vary

    def decide_many(self, schema: Schema, states: Iterable[Any], seed: int = DEFAULT_SEED) -> Iterator[Decision]:
        self.check_schema(schema)
        # Bounded by items, not chunks: the small first chunks all go out at once, as full ones would; a
        # stopped run's chunks not started are dropped, never stored.
        yield from chunks_in_order(
            lambda chunk: self._pool.submit(_decide_chunk, schema, chunk, seed),
            iter(states),
            growing_chunks(self.chunk_items),
            self.chunks_in_flight * self.chunk_items,
        )

    def close(self) -> None:
        # A stopped run drops the reads still in flight (they are never stored), so the workers holding
        # them are ended now: waiting for their chunks kept Ctrl-C from stopping at once.
        workers = list((self._pool._processes or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():  # still starting up (importing) when told to stop: SIGKILL cannot wait
                worker.kill()
                worker.join(timeout=10)
        self.local.close()
