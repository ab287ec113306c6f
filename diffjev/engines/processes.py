"""Reads made in worker processes, past one interpreter's lock.

One Python process reading over HTTP tops out where its own CPU per read (tokenising, building the
canvas, encoding the request, decoding the answer, the distribution maths) fills one core: the global
interpreter lock, not the server, sets the ceiling. `ProcessEngine` runs an engine in each of N worker
processes: each builds, sends and decodes its reads, and only the items going out and the Decisions
coming back cross the process boundary. The caller (a pre-label run) still only streams items and stores
results, in order, exactly as with the engine in-process.

A worker is long-lived and reads one stream of items at a time through its engine's own pipeline: the
caller hands it more items as its earlier ones come back, so its reads stay in flight across chunk edges.
(Handed a chunk as one task instead, a worker had no read out 20% of the time at 50 ms × 64 in flight,
in gaps at every chunk's end while it decoded the last answers and took the next chunk.)

An engine is named by a recipe: a picklable zero-argument callable returning it (for example
`functools.partial(engine_from_choice, EngineChoice(...))`), so every worker builds its own client with
its own connections and caches. In-process model engines gain nothing here (the model is the bottleneck,
and each worker would hold a copy): use it for server engines.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import queue
import signal
import threading
from collections import deque
from itertools import islice
from multiprocessing.connection import wait
from typing import Any, Callable, Iterable, Iterator

from diffjev.decide import Decision
from diffjev.engines.base import DEFAULT_SEED, Engine, EngineError, growing_chunks
from diffjev.schema import Schema

POLL_S = 0.5  # how often a caller waiting on the workers checks that the engine is still open and its stream current


class _Dropped(BaseException):  # not an Exception: an engine catching its errors must not take this one
    """The caller dropped the stream being read: `message` is its "abort", or another stream's "start"."""

    def __init__(self, message: Any):
        super().__init__("the stream was dropped")
        self.message = message


def _stream_items(inbox: Any, stream: int) -> Iterator[Any]:
    """The items of `stream` as the caller sends them, until it ends the stream or drops it."""
    while True:
        message = inbox.get()
        kind, number, payload = message
        if kind == "start":  # the caller went on to another stream without ending this one
            raise _Dropped(message)
        if number != stream:  # what is left of a stream dropped earlier
            continue
        if kind == "items":
            yield from payload
        elif kind == "end":
            return
        else:  # "abort"
            raise _Dropped(message)


def _portable(exc: BaseException) -> BaseException:
    """`exc` if it crosses a process boundary intact (an EngineError, CannotRead), else an EngineError
    saying the same: an exception that fails to pickle would be lost in the queue, and the caller wait."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        return EngineError(f"{type(exc).__name__}: {exc}")


def _send_batches(sending: queue.SimpleQueue, results: Any) -> None:
    """Whatever the worker has produced, sent as one message: a chunk's Decisions come out together, and
    one message for them costs the caller less than one each."""
    while True:
        batch = [sending.get()]
        while True:
            try:
                batch.append(sending.get_nowait())
            except queue.Empty:
                break
        try:
            results.send(batch)  # pickled whole before anything is written
        except Exception as exc:  # noqa: BLE001 - a result that cannot be pickled fails its stream, by name
            streams = dict.fromkeys(number for number, _, _ in batch)
            results.send(
                [
                    (number, "error", EngineError(f"a read's result could not leave the worker: {exc}"))
                    for number in streams
                ]
            )


def _work(recipe: Callable[[], Engine], inbox: Any, results: Any) -> None:
    """A worker process: builds its engine once, then reads each stream the caller starts."""
    # Ctrl-C reaches the whole process group: the run in the main process stops cleanly and closes the
    # workers; a worker dying of it first would turn the reads it held into recorded failures.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_end_with_parent, args=(multiprocessing.parent_process().sentinel,), daemon=True).start()
    try:
        engine = recipe()
    except BaseException as exc:  # noqa: BLE001 - the caller raises it, not a worker's traceback
        results.send([(None, "broken", _portable(exc))])
        return
    sending: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_send_batches, args=(sending, results), daemon=True).start()
    # Until the caller ends the process (close() terminates it); what is left of a dropped stream is skipped.
    message = inbox.get()
    while True:
        kind, stream, payload = message
        message = None
        if kind == "start":
            schema, seed = payload
            try:
                for decision in engine.decide_many(schema, _stream_items(inbox, stream), seed):
                    sending.put((stream, "decision", decision))
            except _Dropped as dropped:
                message = dropped.message if dropped.message[0] == "start" else None
            except Exception as exc:  # noqa: BLE001 - the caller raises it where the run reaches this item
                sending.put((stream, "error", _portable(exc)))
        message = message or inbox.get()


def _end_with_parent(parent: Any) -> None:
    """End this worker when the process that started it is gone. A caller killed outright (SIGKILL, the out of
    memory killer) never closes its workers, and they would run on, orphaned, holding their memory."""
    wait([parent])
    os._exit(1)


def engine_from_choice(choice: Any) -> Engine:
    """The engine an EngineChoice names, built in the process that calls this (a recipe's body)."""
    from diffjev.engines.auto import choose_engine

    return choose_engine(choice).engine


class ProcessEngine(Engine):
    """`recipe`'s engine run in `processes` worker processes; Decisions come back in input order.

    Items go to the workers in chunks (1, 2, 4 ... up to `chunk_items`, by default the engine's own batch,
    so the first result comes back after one item's read), each chunk to the worker with the fewest items
    out. A worker is handed items while it holds fewer than its engine takes ahead (`Engine.look_ahead`)
    plus one chunk, so its pipeline never waits for items and a long stream is never queued whole. A failure
    in a worker (a server down) raises here as the engine's own error would, where the run reaches the item;
    the run's retry path reads the items it held again, one by one, through the workers. A worker that dies
    is started again for the next stream.
    """

    def __init__(self, recipe: Callable[[], Engine], processes: int = 2, *, chunk_items: int | None = None):
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
        self.chunk_items = chunk_items or getattr(self.local, "batch_size", 0) or 16
        self.window_items = self.local.look_ahead + self.chunk_items
        # spawn: a forked child would inherit the parent's threads' locks (HTTP clients, torch) mid-use.
        self._context = multiprocessing.get_context("spawn")
        # A pipe back from each worker, not one shared queue: a worker killed while writing would leave a
        # shared queue's lock held, or half a message in it, and every other worker's results behind it.
        self._results: list[Any] = [None] * processes  # None once the worker's pipe has closed
        self._inboxes: list[Any] = [None] * processes
        self._workers: list[Any] = [None] * processes
        self._broken: dict[int, BaseException] = {}  # a worker whose engine could not be built: why
        self._streams = itertools.count(1)
        self._stream = 0  # the stream being read; an older one's generator stops
        self._closed = False
        for index in range(processes):
            self._start_worker(index)

    @property
    def worker_pids(self) -> list[int]:
        return [worker.pid for worker in self._workers]

    def _start_worker(self, index: int) -> None:
        self._inboxes[index] = self._context.Queue()  # a dead worker's queue may hold half a message
        self._results[index], sending_end = self._context.Pipe(duplex=False)
        self._workers[index] = self._context.Process(
            target=_work,
            args=(self.recipe, self._inboxes[index], sending_end),
            name=f"diffjev-reader-{index}",
            daemon=True,
        )
        self._workers[index].start()
        sending_end.close()  # the worker holds the only sending end: its death closes the pipe

    def _end_worker(self, index: int) -> None:
        """End worker `index` (if it still runs) and release its queue and pipe: it is started again, or closed."""
        worker = self._workers[index]
        worker.terminate()
        worker.join(timeout=10)
        if worker.is_alive():  # still starting up (importing) when told to stop: SIGKILL cannot wait
            worker.kill()
            worker.join(timeout=10)
        self._inboxes[index].cancel_join_thread()  # what is still buffered for it is dropped, not waited on
        self._inboxes[index].close()
        if self._results[index] is not None:
            self._results[index].close()
            self._results[index] = None

    def check_schema(self, schema: Schema) -> None:
        self.local.check_schema(schema)

    @property
    def draws_vary(self) -> bool:
        return self.local.draws_vary

    @property
    def look_ahead(self) -> int:
        return self.processes * self.window_items

    def decide_many(self, schema: Schema, states: Iterable[Any], seed: int = DEFAULT_SEED) -> Iterator[Decision]:
        self.check_schema(schema)
        if self._closed:
            raise EngineError("the engine was closed")
        for index, worker in enumerate(self._workers):
            if not worker.is_alive() or self._results[index] is None:
                self._end_worker(index)
                self._start_worker(index)
        stream = self._stream = next(self._streams)
        for inbox in self._inboxes:
            inbox.put(("start", stream, (schema, seed)))
        states, sizes = iter(states), growing_chunks(self.chunk_items)
        order: deque[list[int]] = deque()  # [worker, items of the chunk not yet given back], in input order
        back: list[deque] = [deque() for _ in self._workers]  # what each worker sent back, not given yet
        out = [0] * self.processes  # items handed to each worker, not given back yet
        feeding, finished = True, False
        try:
            while True:
                while feeding:
                    index = min(range(self.processes), key=out.__getitem__)
                    if out[index] >= self.window_items:
                        break
                    chunk = list(islice(states, next(sizes)))
                    if not chunk:
                        feeding = False
                        for inbox in self._inboxes:
                            inbox.put(("end", stream, None))
                        break
                    self._inboxes[index].put(("items", stream, chunk))
                    order.append([index, len(chunk)])
                    out[index] += len(chunk)
                if not order:
                    finished = True
                    return
                index = order[0][0]
                if not back[index]:
                    self._receive(stream, back, index)
                    continue
                kind, value = back[index].popleft()
                if kind == "error":
                    raise value
                out[index] -= 1
                order[0][1] -= 1
                if not order[0][1]:
                    order.popleft()
                yield value
        finally:
            if not finished and not self._closed and self._stream == stream:
                for inbox in self._inboxes:  # the workers stop taking this stream's items
                    inbox.put(("abort", stream, None))

    def _receive(self, stream: int, back: list[deque], waiting_on: int) -> None:
        """What the workers have sent, into `back`, each entry to the worker that sent it; raises if the
        worker being waited on has ended, or another stream has taken the workers."""
        while True:
            if self._closed:
                raise EngineError("the engine was closed")
            if self._stream != stream:
                raise EngineError("the worker processes were given another stream of items to read")
            if self._results[waiting_on] is None:  # its pipe closed: the worker ended
                if waiting_on in self._broken:
                    raise self._broken.pop(waiting_on)
                worker = self._workers[waiting_on]
                worker.join(timeout=1)
                raise EngineError(
                    f"worker process {worker.pid} ended (exit code {worker.exitcode}) holding reads; "
                    "they are read again, and the worker is started again for the next reads"
                )
            ready = wait([pipe for pipe in self._results if pipe is not None], timeout=POLL_S)
            for pipe in ready:
                index = self._results.index(pipe)
                try:
                    batch = pipe.recv()
                except (EOFError, OSError):  # the worker ended (a partial message too ends here)
                    self._results[index] = None
                    pipe.close()
                    continue
                for number, kind, value in batch:
                    if kind == "broken":
                        self._broken[index] = value
                    elif number == stream:
                        back[index].append((kind, value))
            if back[waiting_on]:
                return

    def close(self) -> None:
        # A stopped run drops the reads still in flight (they are never stored), so the workers holding
        # them are ended now: waiting for their reads kept Ctrl-C from stopping at once.
        if self._closed:
            return
        self._closed = True
        for worker in self._workers:  # all told at once: the joins below then wait for the slowest only
            worker.terminate()
        for index in range(self.processes):
            self._end_worker(index)
        self.local.close()
