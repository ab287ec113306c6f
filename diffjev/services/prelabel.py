"""Pre-label runs: read a project's items through an engine and store every suggestion.

- Items stream through the engine from a reader thread, so reads stay in flight while earlier results
  are stored, and a cancel is honoured at once even while a slow server holds reads.
- Results are stored in batches, each batch's reads and suggestions in one transaction, so a killed
  process leaves whole batches or nothing, and a restart of the run continues with the items that
  still have no successful read.
- When the engine fails, the items it held are read again one by one, each with retries and backoff;
  an item that still fails is recorded as failed for the run, with its error, and the run goes on,
  unless `stop_after` items in a row failed (the server is gone): then the run stops as failed, every
  stored read kept, and resuming it continues where it stopped.
- Progress goes to a callback after every batch; a cancel event stops the run between batches. Batches
  grow 1, 2, 4, ... up to `batch_items` (as the engines' chunks do), so a run's first suggestion is
  stored as soon as its first item is read; a batch is also stored when FLUSH_S passed since its first
  read, so a slow engine shows its progress item by item, never only at its end. The progress of every
  run this process is making is in `live_runs`, for any tab to show.
- A quick first pass (`prelabel_quick_first`, the studio's demo) reads every item with one draw, then a
  second run reads again, with the schema's full draws, only the items whose first read was unsure.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from diffjev.decide import Decision
from diffjev.engines.base import CannotRead, Engine, growing_chunks, shown_url
from diffjev.errors import SchemaError
from diffjev.read import read, read_many
from diffjev.schema import Schema
from diffjev.services.images import item_states
from storage import repo
from storage.db import Database
from storage.models import utcnow

DEFAULT_BATCH = 64
DEFAULT_RETRIES = 3
DEFAULT_STOP_AFTER = 16  # failed items in a row that mean the server is gone, not that one item is bad
POLL_S = 0.1  # how often a run waiting on reads looks at its cancel event
FLUSH_S = 2.0  # the longest a read waits to be stored (and counted) while its batch fills


@dataclass
class Progress:
    done: int
    total: int
    failed: int
    elapsed_s: float
    # the items and seconds counted from the first stored batch on: the rate leaves out the start (a
    # model loading, a server warming up), which would make the first estimates far too slow
    first_done: int = 0
    since_first_s: float = 0.0

    @property
    def items_per_s(self) -> float:
        if self.since_first_s > 0 and self.done > self.first_done:
            return (self.done - self.first_done) / self.since_first_s
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.items_per_s
        return (self.total - self.done) / rate if rate > 0 else None

    def line(self) -> str:
        """ "12/60 read, 1.3 items/s, ETA 0:37", as the studio shows it."""
        text = f"{self.done}/{self.total} read" + (f", {self.failed} failed" if self.failed else "")
        if self.items_per_s > 0:
            text += f", {self.items_per_s:.1f} items/s"
        if self.eta_s is not None:
            minutes, seconds = divmod(round(self.eta_s), 60)
            text += (
                f", ETA {minutes // 60}:{minutes % 60:02d}:{seconds:02d}"
                if minutes >= 60
                else (f", ETA {minutes}:{seconds:02d}")
            )
        return text


# run id -> (project name, its latest progress): the runs this process is making now
live_runs: dict[int, tuple[str, Progress]] = {}
# Two requests may resume one run at once: its check in live_runs and its entry there are one step.
_live_runs_lock = threading.Lock()


def _claim_run(run_id: int, project_name: str) -> None:
    """Register the run as reading in this process, or refuse: a second reader of one run would read its
    items twice, and its end would drop the run from live_runs while the first still reads it."""
    with _live_runs_lock:
        if run_id in live_runs:
            raise repo.Conflict(f"run {run_id} is still reading; wait for it or cancel it")
        live_runs[run_id] = (project_name, Progress(0, 0, 0, 0.0))


@dataclass
class RunReport:
    run_id: int
    status: str
    read: int
    failed: int
    seconds: float
    failures: list[tuple[int, str | None, str]] = field(default_factory=list)  # item id, external id, error
    error: str | None = None  # why a failed run stopped


def engine_settings(engine: Engine) -> dict[str, Any]:
    """The engine's plain settings, kept with the run: never a key or token, and URLs without a password."""
    settings = {}
    for name, value in vars(engine).items():
        if name.startswith("_") or not isinstance(value, (str, int, float, bool)):
            continue
        if any(word in name.lower() for word in ("key", "token", "secret", "password")):
            continue
        settings[name] = shown_url(value) if isinstance(value, str) and "://" in value else value
    return settings


def start_run(
    db: Database,
    project_name: str,
    engine: Engine,
    *,
    only_unlabeled: bool = False,
    seed: int = 42,
    actor: str = "system",
    samples: int | None = None,
    refines: int | None = None,
) -> int:
    """Create a run of the project's latest schema version; an engine that cannot read the schema at all
    is refused here (SchemaError), before any run exists, so no empty run is ever left behind.

    `samples` overrides the schema's draws per item for this run (kept in its params, so a resumed run
    reads the same way); `refines` names an earlier run: this one reads only the items whose read there
    was unsure (an answer's entropy above the schema's auto threshold)."""
    with db.session() as session:
        project = repo.get_project(session, project_name)
        version = repo.latest_version(session, project.id)
        engine.check_schema(repo.version_schema(version)[0])
        params = {"seed": seed, "only_unlabeled": only_unlabeled, "engine_settings": engine_settings(engine)}
        params.update({k: v for k, v in (("samples", samples), ("refines", refines)) if v is not None})
        run = repo.create_run(
            session,
            project.id,
            version,
            engine.name,
            engine.model_name,
            getattr(engine, "model_version", None),
            params,
            actor,
        )
        repo.inherit_temperatures(session, run, actor)
        return run.id


def prelabel(
    db: Database,
    project_name: str,
    engine: Engine,
    *,
    run_id: int | None = None,
    only_unlabeled: bool = False,
    seed: int = 42,
    batch_items: int = DEFAULT_BATCH,
    retries: int = DEFAULT_RETRIES,
    backoff_s: float = 0.5,
    actor: str = "system",
    progress: Callable[[Progress], None] | None = None,
    cancel: threading.Event | None = None,
    stop_after: int = DEFAULT_STOP_AFTER,
    samples: int | None = None,
    refines: int | None = None,
) -> RunReport:
    """Run (or, given `run_id`, resume) a pre-label pass over a project's items (see start_run for
    `samples` and `refines`). A run this process is reading already is refused (repo.Conflict)."""
    if run_id is None:
        run_id = start_run(
            db,
            project_name,
            engine,
            only_unlabeled=only_unlabeled,
            seed=seed,
            actor=actor,
            samples=samples,
            refines=refines,
        )
    _claim_run(run_id, project_name)
    try:
        return _read_run(
            db,
            project_name,
            engine,
            run_id,
            seed=seed,
            batch_items=batch_items,
            reading=(retries, backoff_s, stop_after),
            actor=actor,
            progress=progress,
            cancel=cancel,
        )
    finally:
        live_runs.pop(run_id, None)  # only the call that claimed the run gets here


def _read_run(
    db: Database,
    project_name: str,
    engine: Engine,
    run_id: int,
    *,
    seed: int,
    batch_items: int,
    reading: tuple[int, float, int],
    actor: str,
    progress: Callable[[Progress], None] | None,
    cancel: threading.Event | None,
) -> RunReport:
    retries, backoff_s, stop_after = reading
    with db.session() as session:
        project = repo.get_project(session, project_name)
        run = repo.get_run(session, run_id, project.id)
        if (run.engine, run.model_name) != (engine.name, engine.model_name):
            raise repo.Conflict(
                f"run {run_id} was made with {run.engine} {run.model_name}; resume it with that "
                f"engine and model, or start a new run"
            )
        version = session.get(repo.SchemaVersion, run.schema_version_id)
        schema, question_rows = repo.version_schema(version)
        schema = _as_the_run_reads(schema, run.params)
        only_unlabeled, seed = run.params.get("only_unlabeled", False), run.params.get("seed", seed)
        refines = run.params.get("refines")
        unsure_in = (refines, schema.sampling.auto_threshold) if refines is not None else None
        if run.status != "running":
            run.status, run.finished_at = "running", None
            repo.log(session, actor, "run.resumed", project.id, run_id=run_id)
        project_id = project.id
    with db.read() as session:
        total = repo.count_pending(session, project_id, run_id, only_unlabeled, unsure_in)

    started = time.perf_counter()
    done = failed = 0
    first: tuple[int, float] | None = None  # (items, time) at the first stored batch
    live_runs[run_id] = (project_name, Progress(0, total, 0, 0.0))
    reader = _Reader(
        db,
        project_id,
        run_id,
        (only_unlabeled, unsure_in),
        (schema, engine, seed, retries, backoff_s, stop_after),
        batch_items,
    )
    status, error = "running", None
    sizes = growing_chunks(batch_items)
    try:
        while status == "running":
            batch: list[ReadResult] = []
            batch_started = None
            batch_size = next(sizes)
            while status == "running" and len(batch) < batch_size:
                if cancel is not None and cancel.is_set():
                    status = "cancelled"
                    break
                if batch_started is not None and time.perf_counter() - batch_started >= FLUSH_S:
                    break
                try:
                    kind, value = reader.results.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if kind == "read":
                    batch.append(value)
                    batch_started = batch_started or time.perf_counter()
                elif kind == "end":
                    status = "completed"
                elif kind == "stop":
                    status, error = "failed", value
                else:  # "schema": this engine cannot read the schema at all
                    _finish(db, run_id, "failed", str(value), actor, started)
                    raise value
            if batch:
                db.write(lambda session: repo.store_reads(session, run_id, question_rows, batch))
                done += len(batch)
                failed += sum(1 for r in batch if r[1] is None)
                now = time.perf_counter()
                first = first or (done, now)
                current = Progress(done, total, failed, now - started, first[0], now - first[1])
                live_runs[run_id] = (project_name, current)
                if progress:
                    progress(current)
    finally:
        reader.stop()  # reads still in flight finish in the background and are dropped, never stored
    return _finish(db, run_id, status, error, actor, started)


def _as_the_run_reads(schema: Schema, params: dict[str, Any]) -> Schema:
    """The schema with the run's own number of draws, where the run overrides the schema's."""
    if params.get("samples") is None:
        return schema
    return dataclasses.replace(schema, sampling=dataclasses.replace(schema.sampling, samples=params["samples"]))


def prelabel_quick_first(
    db: Database, project_name: str, engine: Engine, **options: Any
) -> tuple[RunReport, RunReport | None]:
    """Pre-label for a quick first look (the studio's demo): every item read once with one draw, so the
    whole project has suggestions as early as the engine allows, then, where the schema's "auto" policy
    would have drawn more, a second run reads those items again with all the draws it asks for.

    The second run is a run of its own, not an update of the first one's suggestions: each suggestion
    stays what was shown and answered (an answer keeps pointing at the read it saw), store_reads stays
    one read per item and run, and the second run's suggestions become the items' current ones as any
    newer run's do. It reads the unsure items with exactly the draws (seeds) one "auto" read takes, so
    its suggestions equal what a single-pass run would have stored for them. Returns (first, second or
    None when no second run was needed); `options` are prelabel's.
    """
    with db.read() as session:
        project = repo.get_project(session, project_name)
        sampling = repo.version_schema(repo.latest_version(session, project.id))[0].sampling
    if sampling.samples != "auto" or sampling.auto_max <= 1 or not engine.draws_vary:
        return prelabel(db, project_name, engine, **options), None  # one read per item is all there is
    first = prelabel(db, project_name, engine, samples=1, **options)
    cancel = options.get("cancel")
    if first.status != "completed" or (cancel is not None and cancel.is_set()):
        return first, None
    with db.read() as session:
        unsure = repo.count_unsure(session, first.run_id, sampling.auto_threshold)
    if unsure == 0:
        return first, None
    return first, prelabel(db, project_name, engine, samples=sampling.auto_max, refines=first.run_id, **options)


ReadResult = tuple[int, "Decision | None", "str | None", int, "float | None"]


class _Reader:
    """Feeds a run's pending items to the engine from a thread and queues each result, in order.

    The engine pulls items as it needs them (its batches and pipeline), so reads stay in flight across
    the caller's commits. The queue is bounded: a slow database holds the reads back.
    """

    def __init__(self, db: Database, project_id: int, run_id: int, which: tuple, reading: tuple, page: int):
        self.results: queue.Queue = queue.Queue(maxsize=4 * page)
        self._stopped = threading.Event()
        self._fed: deque[tuple[int, Any]] = deque()  # handed to the engine, not answered yet
        self._source_failed: Exception | None = None  # the pending items could not be listed
        self._source = (db, project_id, run_id, which, page)
        self._reading = reading
        threading.Thread(target=self._run, name=f"prelabel-run-{run_id}", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def _items(self) -> Iterator[Any]:
        db, project_id, run_id, (only_unlabeled, unsure_in), page = self._source
        after = 0
        while not self._stopped.is_set():
            try:
                with db.read() as session:
                    ids = repo.pending_item_ids(session, project_id, run_id, after, page, only_unlabeled, unsure_in)
                    states = item_states(session, project_id, repo.items_by_id(session, ids))
            except Exception as exc:  # noqa: BLE001 - ends the feed; the run must not read it as "all done"
                self._source_failed = exc
                return
            if not ids:
                return
            after = ids[-1]
            for item_id, state in zip(ids, states):
                if self._stopped.is_set():
                    return
                self._fed.append((item_id, state))
                yield state

    def _put(self, kind: str, value: Any) -> bool:
        while not self._stopped.is_set():
            try:
                self.results.put((kind, value), timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            self._put(*self._read_all())
        except SchemaError as exc:
            self._put("schema", exc)
        except Exception as exc:  # noqa: BLE001 - e.g. the database went away under the reader
            self._put("stop", f"reading the pending items failed: {type(exc).__name__}: {exc}")

    def _read_all(self) -> tuple[str, Any]:
        schema, engine, seed, retries, backoff_s, stop_after = self._reading
        items = self._items()
        failed_in_a_row = 0
        while not self._stopped.is_set():
            try:
                for decision in read_many(schema, items, engine, seed=seed):
                    item_id, _ = self._fed.popleft()
                    timing = decision.diagnostics.get("timing", {})
                    latency = (
                        1000
                        * (timing.get("build_s", 0) + timing.get("read_s", 0))
                        / max(1, timing.get("batch_items", 1))
                    )
                    failed_in_a_row = 0
                    if not self._put("read", (item_id, decision, None, 1, latency)):
                        break
                else:
                    if self._source_failed is not None:
                        raise self._source_failed
                    return "end", None
            except SchemaError:
                raise
            except Exception:  # noqa: BLE001 - any engine failure: read the items it held one by one
                if self._source_failed is not None:
                    raise self._source_failed from None
            while self._fed and not self._stopped.is_set():
                item_id, state = self._fed.popleft()
                result = _read_one(schema, item_id, state, engine, seed, retries, backoff_s)
                failed_in_a_row = failed_in_a_row + 1 if result[1] is None else 0
                self._put("read", result)
                if failed_in_a_row >= stop_after:
                    return "stop", (
                        f"stopped after {failed_in_a_row} items in a row failed to read; the last "
                        f"error: {result[2]}. Fix the engine or server, then resume the run"
                    )
        return "stopped", None


def _read_one(
    schema: Schema, item_id: int, state: Any, engine: Engine, seed: int, retries: int, backoff_s: float
) -> ReadResult:
    error = ""
    for attempt in range(1, retries + 1):
        started = time.perf_counter()
        try:
            decision = read(schema, state, engine, seed=seed)
            return item_id, decision, None, attempt, (time.perf_counter() - started) * 1000
        except SchemaError:
            raise
        except CannotRead as exc:  # the same every time: no retry, no backoff
            return item_id, None, f"EngineError: {exc}", attempt, None
        except Exception as exc:  # noqa: BLE001 - recorded with the item, the run goes on
            error = f"{type(exc).__name__}: {exc}"
            if attempt < retries:
                time.sleep(backoff_s * 2 ** (attempt - 1))
    return item_id, None, error, retries, None


def _finish(db: Database, run_id: int, status: str, error: str | None, actor: str, started: float) -> RunReport:
    def work(session):
        repo.finish_run(session, run_id, status, error, actor)
        return repo.run_counts(session, run_id), repo.failed_reads(session, run_id)

    counts, failures = db.write(work)
    return RunReport(
        run_id, status, counts.get("ok", 0), counts.get("failed", 0), time.perf_counter() - started, failures, error
    )


# The run list -------------------------------------------------------------------------------------------

RUN_COLUMNS = ["run", "engine", "model", "status", "items read", "failed", "started", "duration"]


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)  # SQLite drops the zone


def _duration(row: repo.RunRow) -> str:
    seconds = round(
        ((_aware(row.finished_at) if row.finished_at else utcnow()) - _aware(row.started_at)).total_seconds()
    )
    minutes, seconds = divmod(max(0, seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


def run_table(db: Database, project_name: str) -> list[list[Any]]:
    """The project's runs, newest first, as the Pre-label tab lists them (RUN_COLUMNS). A run this process
    is making shows its live count; one left "running" by another process shows as it is stored."""
    with db.read() as session:
        rows = repo.list_runs(session, repo.get_project(session, project_name).id)
    table = []
    for row in rows:
        live = live_runs.get(row.id)
        status = f"running ({live[1].line()})" if live else row.status
        started = _aware(row.started_at).strftime("%Y-%m-%d %H:%M:%S UTC")
        table.append([row.id, row.engine, row.model, status, row.read, row.failed, started, _duration(row)])
    return table


def latest_reading_run(db: Database, project_name: str) -> repo.RunRow | None:
    """The newest run that read at least one item: the one whose suggestions the Annotate tab shows
    unless a run is picked (each item's current suggestion is its latest read)."""
    with db.read() as session:
        rows = repo.list_runs(session, repo.get_project(session, project_name).id)
    return next((row for row in rows if row.read > 0), None)


def delete_run(db: Database, project_name: str, run_id: int, actor: str) -> str:
    """Delete a run with its suggestions (answers stay); a run still reading here is cancelled first."""
    if run_id in live_runs:
        raise repo.Conflict(f"run {run_id} is still reading; cancel it first, then delete it")

    def work(session) -> dict[str, int]:
        return repo.delete_run(session, repo.get_project(session, project_name).id, run_id, actor)

    counts = db.write(work)
    return f"Deleted run {run_id} and its {counts.get('ok', 0)} items' suggestions; every answer stays."


def background_line(project_name: str) -> str:
    """What the project's runs in this process are doing, one line each, or "" when none is reading."""
    lines = [
        f"Pre-labeling (run {run_id}): {progress.line()}"
        for run_id, (name, progress) in sorted(live_runs.items())
        if name == project_name
    ]
    return "  \n".join(lines)


def interrupt_stale_runs(db: Database, actor: str = "studio") -> list[int]:
    """At a studio's start: runs still marked "running" that no process of this studio reads any more
    (it was killed or restarted) are interrupted, so the run list says so and they can be resumed."""
    return db.write(lambda session: repo.mark_interrupted(session, actor, keep=list(live_runs)))
