"""The engine protocol, and the read pipeline every canvas engine shares.

An engine turns (schema, states) into Decisions. Canvas engines (vLLM, transformers, autoregressive)
only implement `read(canvases) -> slot logprobs`; building canvases, the sampling policy, batching and
deciding live here once.
"""

from __future__ import annotations

import dataclasses
import re
import time
from abc import ABC, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from typing import Any, Iterable, Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

from diffjev.canvas import Canvas, CanvasBuilder, draw_seed, fill_noise
from diffjev.decide import Decision, SlotRead, decide, needs_more_draws
from diffjev.images import ImageState
from diffjev.schema import Schema

DEFAULT_SEED = 42


def growing_chunks(limit: int) -> Iterator[int]:
    """Chunk sizes 1, 2, 4, ... up to `limit`, then `limit` for good: the first result of a long stream
    arrives after one item's read instead of a whole batch's, and the doubling reaches full batches
    within a few chunks, so a whole run costs no more than with full batches from the start."""
    size = 1
    while True:
        yield min(size, max(1, limit))
        size *= 2


class EngineError(RuntimeError):
    """A read that could not be made. The message names the engine or endpoint and what went wrong."""


def shown_url(url: str) -> str:
    """A server URL fit for a page, a log or a stored run: without any user and password in it."""
    try:
        parts = urlsplit(url)
        if parts.username is None and parts.password is None:
            return url
        return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))
    except (ValueError, TypeError):  # a malformed URL: drop whatever stands before an '@' all the same
        return re.sub(r"//[^/]*@", "//", str(url))


def server_url(url: str) -> str:
    """`url` as the base of a model server's endpoints, or EngineError saying what is wrong with it.

    The engines append their fixed paths (/v1/chat/completions, /v1/systemone) to this base, so a query
    or a fragment would turn that path into something else (`http://host/secret?x=` asks for
    `/secret?x=/v1/...`): for any caller, such a URL is refused, never sent.
    """
    if not isinstance(url, str) or not url:
        raise EngineError("the server URL is empty; give it as http://host:port")
    base = url.split("?", 1)[0].split("#", 1)[0]
    shown = shown_url(base)
    if "?" in url or "#" in url:
        raise EngineError(
            f"the server URL {shown} has a query or a fragment ('?' or '#'); give the server's "
            "base URL alone, as http://host:port"
        )
    if any(c.isspace() or not c.isprintable() or c == "\\" for c in url):
        raise EngineError(
            f"the server URL {shown!r} holds spaces, control characters or backslashes; give it as http://host:port"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise EngineError(f"the server URL {shown} must start with http:// or https://")
    if parts.netloc.count("@") > 1 or not parts.hostname or "%" in parts.hostname:
        raise EngineError(f"the server URL {shown} names no host clearly; give it as http://host:port")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        raise EngineError(f"the server URL {shown} has a port that is not a number from 1 to 65535") from None
    return url.rstrip("/")


class Engine(ABC):
    name: str = "engine"
    model_name: str = ""

    @abstractmethod
    def decide_many(self, schema: Schema, states: Iterable[Any], seed: int = DEFAULT_SEED) -> Iterator[Decision]:
        """One Decision per state, in order."""

    def check_schema(self, schema: Schema) -> None:
        """Raise SchemaError if this engine cannot read the schema at all, before anything is read or
        stored (a run it would refuse is never started)."""

    def close(self) -> None:
        """Release connections or threads; an engine is usable until then."""

    @property
    def draws_vary(self) -> bool:
        """Whether another noise draw of an item can read differently (so more draws can tell more)."""
        return False


def prompt_token_limit(model: Any, canvas_length: int) -> int | None:
    """The most prompt tokens an in-process model takes: its positions less the canvas (a masked or causal
    model reads both in one sequence). None when the model does not say."""
    positions = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    return positions - canvas_length if isinstance(positions, int) and positions > canvas_length else None


class CanvasEngine(Engine):
    builder: CanvasBuilder
    batch_size: int = 8  # items per chunk handed to read()
    pipeline_depth: int = 1  # chunks read at once; >1 keeps a remote server busy across chunk edges
    reads_images: bool = False  # whether read() shows a canvas's images to the model

    @abstractmethod
    def read(self, canvases: Sequence[Canvas]) -> list[dict[str, SlotRead]]:
        """For each canvas, each question's slot logprobs over (at least) its label ids."""

    def passes_per_canvas(self, schema: Schema) -> int:
        """Model forward passes one canvas read costs: one for a joint read."""
        return 1

    def check_schema(self, schema: Schema) -> None:
        self.builder.layout(schema)  # a template that does not fit fails before any read is sent

    @property
    def draws_vary(self) -> bool:
        # Mask noise is the same on every draw, so more draws of a masked model would only repeat it.
        return self.builder.format.noise == "uniform"

    def decide_many(self, schema: Schema, states: Iterable[Any], seed: int = DEFAULT_SEED) -> Iterator[Decision]:
        self.check_schema(schema)
        states = iter(states) if self.reads_images else self._text_only(states)
        sizes = growing_chunks(self.batch_size)
        with ThreadPoolExecutor(self.pipeline_depth, thread_name_prefix=f"{self.name}-read") as pool:
            pending: list[Future] = []
            while True:
                chunk = list(islice(states, next(sizes)))
                if chunk:
                    pending.append(pool.submit(self._decide_chunk, schema, chunk, seed))
                # Keep pipeline_depth chunks reading while the caller takes the oldest one's results,
                # in input order.
                if len(pending) > self.pipeline_depth or (pending and not chunk):
                    yield from pending.pop(0).result()
                elif not chunk:
                    return

    def _text_only(self, states: Iterable[Any]) -> Iterator[Any]:
        """The states, refusing an item with an image: reading its text alone would pass a guess about a
        picture the model never saw for a read of the item."""
        for state in states:
            if isinstance(state, ImageState):
                raise EngineError(
                    f"the {self.name} engine reads text only, and this item has an image; pre-label items "
                    f"with images with the vLLM engine (a server serving DiffusionGemma, which reads images)"
                )
            yield state

    def _decide_chunk(self, schema: Schema, states: Sequence[Any], seed: int) -> list[Decision]:
        started = time.perf_counter()
        layout = self.builder.layout(schema)
        repeatable = self.draws_vary
        first = schema.sampling.first_draws if repeatable else 1
        base = [self.builder.build(schema, state, draw_seed(seed, 0)) for state in states]
        draws: list[list[Canvas]] = [[c] + [self._redraw(c, layout, seed, k) for k in range(1, first)] for c in base]
        built = time.perf_counter()
        reads = self._read_grouped(draws)
        # "auto": draw again where the first read left a slot unsure.
        extra = [needs_more_draws(schema, r[0], layout.label_ids) if repeatable else 0 for r in reads]
        more = [[self._redraw(draws[i][0], layout, seed, k) for k in range(1, 1 + n)] for i, n in enumerate(extra)]
        if any(extra):
            for r, got in zip(reads, self._read_grouped(more)):
                r.extend(got)
            draws = [d + m for d, m in zip(draws, more)]
        finished = time.perf_counter()
        decisions = []
        for canvases, item_reads in zip(draws, reads):
            diagnostics = {
                "engine": self.name,
                "model": self.model_name,
                "prompt_ids": list(canvases[0].prompt_ids),
                "canvas_ids": list(canvases[0].ids),
                "slots": dict(canvases[0].slots),
                "label_ids": {q: list(ids) for q, ids in canvases[0].label_ids.items()},
                "width": canvases[0].width,
                "seeds": [c.seed for c in canvases],
                "draws": len(canvases),
                "model_passes": len(canvases) * self.passes_per_canvas(schema),
                "sampling": dataclasses.asdict(schema.sampling),
                "timing": {"build_s": built - started, "read_s": finished - built, "batch_items": len(states)},
            }
            if canvases[0].truncated:  # the item was longer than the model's context: what was read of it
                diagnostics["truncated"] = canvases[0].truncated
            decisions.append(Decision(decide(schema, item_reads, layout.label_ids), schema, diagnostics))
        return decisions

    def _redraw(self, canvas: Canvas, layout, seed: int, draw: int) -> Canvas:
        """The same canvas with fresh noise: another draw reuses the tokenised prompt."""
        s = draw_seed(seed, draw)
        return dataclasses.replace(canvas, ids=fill_noise(layout, self.builder.format, s), seed=s)

    def _read_grouped(self, groups: Sequence[Sequence[Canvas]]) -> list[list[dict[str, SlotRead]]]:
        flat = [c for g in groups for c in g]
        got = iter(self.read(flat) if flat else [])
        return [[next(got) for _ in g] for g in groups]
