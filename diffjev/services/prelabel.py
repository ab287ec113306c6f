"""Pre-label runs: read a project's items through an engine and store every suggestion.

- Items are read in batches; each batch's reads and suggestions are stored in one transaction, so a
  killed process leaves whole batches or nothing, and a restart of the run continues with the items
  that still have no successful read.
- A batch whose read fails is read again item by item, each with retries and backoff; an item that
  still fails is recorded as failed for the run, with the error, and the run goes on.
- Progress goes to a callback after every batch; a cancel event stops the run between batches.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from diffjev.decide import Decision
from diffjev.engines.base import Engine
from diffjev.errors import SchemaError
from diffjev.read import read, read_many
from diffjev.schema import Schema
from diffjev.storage import repo
from diffjev.storage.db import Database

DEFAULT_BATCH = 64
DEFAULT_RETRIES = 3


@dataclass
class Progress:
    done: int
    total: int
    failed: int
    elapsed_s: float

    @property
    def items_per_s(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.items_per_s
        return (self.total - self.done) / rate if rate > 0 else None


@dataclass
class RunReport:
    run_id: int
    status: str
    read: int
    failed: int
    seconds: float
    failures: list[tuple[int, str | None, str]] = field(default_factory=list)  # item id, external id, error


def start_run(db: Database, project_name: str, engine: Engine, *, only_unlabeled: bool = False,
              seed: int = 42, actor: str = "system") -> int:
    with db.session() as session:
        project = repo.get_project(session, project_name)
        version = repo.latest_version(session, project.id)
        params = {"seed": seed, "only_unlabeled": only_unlabeled,
                  "engine_settings": {k: v for k, v in vars(engine).items()
                                      if isinstance(v, (str, int, float, bool)) and not k.startswith("_")}}
        run = repo.create_run(session, project.id, version, engine.name, engine.model_name,
                              getattr(engine, "model_version", None), params, actor)
        repo.inherit_temperatures(session, run, actor)
        return run.id


def prelabel(db: Database, project_name: str, engine: Engine, *, run_id: int | None = None,
             only_unlabeled: bool = False, seed: int = 42, batch_items: int = DEFAULT_BATCH,
             retries: int = DEFAULT_RETRIES, backoff_s: float = 0.5, actor: str = "system",
             progress: Callable[[Progress], None] | None = None,
             cancel: threading.Event | None = None) -> RunReport:
    """Run (or, given `run_id`, resume) a pre-label pass over a project's items."""
    if run_id is None:
        run_id = start_run(db, project_name, engine, only_unlabeled=only_unlabeled, seed=seed, actor=actor)
    with db.session() as session:
        project = repo.get_project(session, project_name)
        run = repo.get_run(session, run_id)
        if run.project_id != project.id:
            raise repo.NotFound(f"run {run_id} belongs to another project")
        if (run.engine, run.model_name) != (engine.name, engine.model_name):
            raise repo.Conflict(f"run {run_id} was made with {run.engine} {run.model_name}; resume it with that "
                                f"engine and model, or start a new run")
        version = session.get(repo.SchemaVersion, run.schema_version_id)
        schema, question_rows = repo.version_schema(version)
        only_unlabeled, seed = run.params.get("only_unlabeled", False), run.params.get("seed", seed)
        if run.status != "running":
            run.status, run.finished_at = "running", None
            repo.log(session, actor, "run.resumed", project.id, run_id=run_id)
        project_id = project.id
    with db.read() as session:
        total = repo.count_pending(session, project_id, run_id, only_unlabeled)

    started = time.perf_counter()
    done = failed = 0
    after = 0
    try:
        while True:
            if cancel is not None and cancel.is_set():
                return _finish(db, run_id, "cancelled", None, actor, started)
            with db.read() as session:
                ids = repo.pending_item_ids(session, project_id, run_id, after, batch_items, only_unlabeled)
                states = [item.text for item in repo.items_by_id(session, ids)]
            if not ids:
                break
            after = ids[-1]
            results = _read_batch(schema, list(zip(ids, states)), engine, seed, retries, backoff_s)
            db.write(lambda session: repo.store_reads(session, run_id, question_rows, results))
            done += len(results)
            failed += sum(1 for r in results if r[1] is None)
            if progress:
                progress(Progress(done, total, failed, time.perf_counter() - started))
    except SchemaError as exc:  # the schema cannot be read by this engine at all: the run cannot go on
        _finish(db, run_id, "failed", str(exc), actor, started)
        raise
    return _finish(db, run_id, "completed", None, actor, started)


ReadResult = tuple[int, "Decision | None", "str | None", int, "float | None"]


def _read_batch(schema: Schema, items: list[tuple[int, Any]], engine: Engine, seed: int, retries: int,
                backoff_s: float) -> list[ReadResult]:
    started = time.perf_counter()
    try:
        decisions = list(read_many(schema, [state for _, state in items], engine, seed=seed))
    except SchemaError:
        raise
    except Exception:  # noqa: BLE001 - any engine failure: fall back to reading item by item
        return [_read_one(schema, item_id, state, engine, seed, retries, backoff_s) for item_id, state in items]
    latency = (time.perf_counter() - started) * 1000 / max(1, len(items))
    return [(item_id, d, None, 1, latency) for (item_id, _), d in zip(items, decisions)]


def _read_one(schema: Schema, item_id: int, state: Any, engine: Engine, seed: int, retries: int,
              backoff_s: float) -> ReadResult:
    error = ""
    for attempt in range(1, retries + 1):
        started = time.perf_counter()
        try:
            decision = read(schema, state, engine, seed=seed)
            return item_id, decision, None, attempt, (time.perf_counter() - started) * 1000
        except SchemaError:
            raise
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
    return RunReport(run_id, status, counts.get("ok", 0), counts.get("failed", 0), time.perf_counter() - started,
                     failures)
