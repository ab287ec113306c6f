"""Reads distributed over a Ray cluster, through Ray Data.

`RayEngine` is an engine like any other to a pre-label run: Decisions come back one per item, in input
order, and the run stores them in batches, resumes and records failures exactly as it does with an engine
in this process. The reads themselves run on the cluster: the items of the run go out in windows, each a
Ray Data dataset read by `map_batches` over `workers` tasks at once, with GPU tasks where the engine is a
model read in-process and the cluster has GPUs.

- One engine per worker process: a task builds its engine from the recipe (a picklable zero-argument
  callable, as `ProcessEngine` takes) the first time that Ray worker process runs one, and keeps it, so
  a client's connections and caches, or an in-process model's weights, are made once per worker and
  reused by every later task and window.
- Order: the dataset preserves its input order, and a window's rows are yielded as they arrive.
- Failures: a task never raises into Ray Data (it would abort the dataset with its own wrapper and hide
  the cause); it returns the error beside the rows, and this engine raises the engine's own exception at
  the first failed item, in order, so the run's retry path (read the held items one by one, record what
  still fails) works as it does in-process. A worker or node lost mid-window is Ray's to retry: results
  only reach the run once their window yields them, so nothing is stored twice.
- Windows grow (one chunk, two, four ... up to `window_items`), so the first suggestion is stored after
  one chunk's reads, and each window's start (about 0.2 s) is paid over thousands of items at full size.

Ray is an optional extra (`pip install -e ".[ray]"`); this module imports it only when an engine is made.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import pickle
from itertools import islice
from typing import Any, Callable, Iterable, Iterator, Sequence

from diffjev.decide import Decision
from diffjev.engines.base import DEFAULT_SEED, Engine, EngineError
from diffjev.schema import Schema

DEFAULT_WINDOW = 4096  # items per dataset at full size

_engines: dict[str, Engine] = {}  # recipe key -> the engine this Ray worker process built for it


def _engine_for(recipe: Callable[[], Engine], key: str) -> Engine:
    if key not in _engines:
        _engines[key] = recipe()
    return _engines[key]


def _carried(exc: BaseException) -> BaseException:
    """The exception itself where it survives pickling; else an EngineError with its words."""
    try:
        return pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - an exception type that cannot cross processes
        return EngineError(f"{type(exc).__name__}: {exc}")


def _read_batch(batch: dict[str, Any], recipe: Callable[[], Engine], key: str, schema: Schema, seed: int):
    """A Ray Data batch of pickled states -> the same rows with their pickled Decisions (or the error)."""
    import numpy as np

    states = [pickle.loads(blob) for blob in batch["state"]]
    decisions: list[bytes | None] = [None] * len(states)
    error = None
    try:
        engine = _engine_for(recipe, key)
        chunk = getattr(engine, "decide_batch", None)
        read = chunk(schema, states, seed) if chunk else list(engine.decide_many(schema, states, seed))
        decisions = [pickle.dumps(decision) for decision in read]
    except Exception as exc:  # noqa: BLE001 - carried back to the run, which decides what to retry
        error = pickle.dumps(_carried(exc))
    return {
        "decision": np.array(decisions, dtype=object),
        "error": np.array([error] * len(states), dtype=object),
    }


def _describe(recipe: Callable[[], Engine], key: str, schema: Schema | None) -> dict[str, Any]:
    """What a run asks of an engine before it reads (its name, model, settings), from a worker's engine;
    with a schema, the engine's check of it (the exception, or None)."""
    engine = _engine_for(recipe, key)
    if schema is not None:
        try:
            engine.check_schema(schema)
        except Exception as exc:  # noqa: BLE001 - raised by the caller, as the engine raised it
            return {"error": pickle.dumps(_carried(exc))}
        return {"error": None}
    settings = {
        name: value
        for name, value in vars(engine).items()
        if not name.startswith("_") and isinstance(value, (str, int, float, bool))
    }
    for name in ("name", "model_name", "model_version"):  # often class attributes, not in vars()
        settings[name] = getattr(engine, name, None)
    return {"settings": settings, "draws_vary": engine.draws_vary}


def start_ray(address: str | None, **options: Any) -> bool:
    """Connect to the Ray cluster at `address` ("auto": the one this machine belongs to), or start a local
    one (None). Returns whether this call started the connection (and so should end it)."""
    import ray
    import ray.data  # noqa: F401 - configures its loggers on import; quieted below

    logging.getLogger("ray.data").setLevel(logging.WARNING)  # two lines per window otherwise
    if ray.is_initialized():
        return False
    if address:
        _check_reachable(address)
        import diffjev

        # The cluster's workers run the driver's own diffjev (its other packages must be installed there).
        options.setdefault("runtime_env", {"py_modules": [os.path.dirname(diffjev.__file__)]})
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
            **options,
        )
    except ray.exceptions.AuthenticationError:
        # token mode asked for (RAY_AUTH_MODE=token) with no token to hand; Ray's own text runs to a paragraph
        raise EngineError(
            f"cannot reach the Ray cluster at {address}: RAY_AUTH_MODE=token asks for Ray's token authentication, "
            "but no token was found; put the cluster's token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
            "~/.ray/auth_token"
        ) from None
    except ConnectionError as exc:
        hint = (
            ""
            if os.environ.get("RAY_AUTH_MODE")
            else (
                "; a cluster started with token authentication (Ray's default) also needs RAY_AUTH_MODE=token "
                "and its token in RAY_AUTH_TOKEN or ~/.ray/auth_token"
            )
        )
        raise EngineError(f"cannot reach the Ray cluster at {address}: {exc}{hint}") from None
    return True


def _check_reachable(address: str) -> None:
    """Fail fast on a host:port nobody answers at: Ray itself retries such an address for minutes."""
    import socket

    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise EngineError(f"--ray takes host:port, ray://host:port or auto, not {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise EngineError(
            f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}; is its head running (ray start --head)?"
        ) from None


class RayEngine(Engine):
    """`recipe`'s engine run on the Ray cluster that `start_ray` connected to; see the module's words.

    `workers`: tasks reading at once (default: the cluster's GPUs for a GPU engine, else its CPUs);
    `gpus_per_worker`: each task's GPUs (give 1 for an in-process model on a GPU cluster); `chunk_items`:
    items per task (default: the engine's reads in flight, else 16).
    """

    def __init__(
        self,
        recipe: Callable[[], Engine],
        *,
        workers: int | None = None,
        gpus_per_worker: float = 0,
        chunk_items: int | None = None,
        window_items: int = DEFAULT_WINDOW,
    ):
        import ray
        import ray.data

        if not ray.is_initialized():
            raise EngineError("Ray is not started: call start_ray (or ray.init) first")
        self.recipe = recipe
        self._key = hashlib.sha256(pickle.dumps(recipe)).hexdigest()
        self.gpus_per_worker = gpus_per_worker
        self._remote = ray.remote(num_gpus=gpus_per_worker, max_retries=3)(_describe)
        try:
            about = ray.get(self._remote.remote(recipe, self._key, None))
        except ray.exceptions.RayTaskError as exc:  # the engine's own words (a model not found, a bad URL)
            cause = exc.cause if exc.cause is not None else exc
            raise EngineError(f"the engine could not be built on the Ray cluster: {cause}") from None
        for name, value in about["settings"].items():  # the worker engine's plain settings, kept with a run
            if name not in vars(self):
                setattr(self, name, value)
        self.name, self.model_name = about["settings"]["name"], about["settings"]["model_name"]
        self.model_version = about["settings"].get("model_version")
        self._draws_vary = about["draws_vary"]
        resources = ray.cluster_resources()
        if workers is None:
            workers = int(resources.get("GPU", 0) // gpus_per_worker) if gpus_per_worker else 0
            workers = workers or max(1, int(resources.get("CPU", 1)))
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers
        self.chunk_items = chunk_items or int(about["settings"].get("max_in_flight", 16))
        self.window_items = max(window_items, self.chunk_items)
        self._checked: set[str] = set()
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True  # a run stores Decisions in its items' order
        context.enable_progress_bars = False  # the run shows its own progress

    @property
    def draws_vary(self) -> bool:
        return self._draws_vary

    def check_schema(self, schema: Schema) -> None:
        import ray

        key = repr(schema.to_dict())
        if key in self._checked:
            return
        answer = ray.get(self._remote.remote(self.recipe, self._key, schema))
        if answer["error"] is not None:
            raise pickle.loads(answer["error"])
        self._checked.add(key)

    def _windows(self, states: Iterator[Any]) -> Iterator[list[Any]]:
        size = self.chunk_items
        while window := list(islice(states, size)):
            yield window
            size = min(2 * size, self.window_items)

    def decide_many(self, schema: Schema, states: Iterable[Any], seed: int = DEFAULT_SEED) -> Iterator[Decision]:
        self.check_schema(schema)
        for window in self._windows(iter(states)):
            yield from self._read_window(schema, window, seed)

    def _read_window(self, schema: Schema, window: Sequence[Any], seed: int) -> Iterator[Decision]:
        import ray.data

        rows = [{"state": pickle.dumps(state)} for state in window]
        blocks = math.ceil(len(rows) / self.chunk_items)
        dataset = ray.data.from_items(rows, override_num_blocks=blocks)
        read = dataset.map_batches(
            _read_batch,
            fn_kwargs={"recipe": self.recipe, "key": self._key, "schema": schema, "seed": seed},
            batch_size=self.chunk_items,
            batch_format="numpy",
            compute=ray.data.TaskPoolStrategy(size=min(self.workers, blocks)),
            num_gpus=self.gpus_per_worker,
        )
        for row in read.iter_rows():
            if row["error"] is not None:
                raise pickle.loads(row["error"])
            yield pickle.loads(row["decision"])

    def close(self) -> None:
        """Nothing to end here: a stopped run's window may still be streaming in its reader thread, and
        shutting Ray down under it printed Ray's traceback; Ray ends the connection this process made when
        the process exits (its own exit hook)."""
