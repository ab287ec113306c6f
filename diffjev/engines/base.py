"""The engine protocol, and the read pipeline every canvas engine shares.

An engine turns (schema, states) into Decisions. Canvas engines (vLLM, transformers, autoregressive)
only implement `read(canvases) -> slot logprobs`; building canvases, the sampling policy, batching and
deciding live here once.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from abc import ABC, abstractmethod
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from typing import Any, Callable, Iterable, Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

from diffjev.canvas import Canvas, CanvasBuilder, Layout, draw_seed, fill_noise, render_state
from diffjev.decide import Answer, Decision, SlotRead, aggregate, decide, needs_more_draws, slot_distribution
from diffjev.images import ImageState
from diffjev.schema import Schema
from diffjev.spans import SpanAnswer, SpanCanvasBuilder, question_seed, read_span_answer
from diffjev.staging import is_staged, read_groups, read_in_stages, skip_record

DEFAULT_SEED = 42
GROUP_SEED_STRIDE = 104729  # read group k of a staged read uses seed + 104729·k, as djev does


def growing_chunks(limit: int) -> Iterator[int]:
    """Chunk sizes 1, 2, 4, ... up to `limit`, then `limit` for good: the first result of a long stream
    arrives after one item's read instead of a whole batch's, and the doubling reaches full batches
    within a few chunks, so a whole run costs no more than with full batches from the start."""
    size = 1
    while True:
        yield min(size, max(1, limit))
        size *= 2


def chunks_in_order(
    submit: Callable[[list[Any]], Future], states: Iterator[Any], sizes: Iterator[int], limit: int
) -> Iterator[Decision]:
    """Each chunk's Decisions, in input order, from chunks of `sizes` handed to `submit` while fewer than
    `limit` items are out (bounded by items, not chunks: small first chunks all go out at once). Chunks not
    started when the caller stops are cancelled, never read."""
    pending: deque[tuple[Future, int]] = deque()
    items = 0
    try:
        while True:
            while items < limit:
                chunk = list(islice(states, next(sizes)))
                if not chunk:
                    break
                pending.append((submit(chunk), len(chunk)))
                items += len(chunk)
            if not pending:
                return
            future, size = pending.popleft()
            items -= size
            yield from future.result()
    finally:
        for future, _ in pending:
            future.cancel()


class EngineError(RuntimeError):
    """A read that could not be made. The message names the engine or endpoint and what went wrong."""


class CannotRead(EngineError):
    """A read this engine can never make, whatever the retries (an image for a text-only engine): a run
    records it at once instead of trying again."""


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

    # Whether several questions are read on one canvas (vLLM 0.33's joint reads): a canvas engine's are.
    reads_jointly: bool = False

    def check_schema(self, schema: Schema) -> None:
        """Raise SchemaError if this engine cannot read the schema at all, before anything is read or
        stored (a run it would refuse is never started)."""

    def close(self) -> None:
        """Release connections or threads; an engine is usable until then."""

    @property
    def draws_vary(self) -> bool:
        """Whether another noise draw of an item can read differently (so more draws can tell more)."""
        return False

    @property
    def look_ahead(self) -> int:
        """The most items decide_many takes from its input before it gives back the first of them: a caller
        feeding it items as results come back (a worker process) hands it at least this many, or waits for
        results that wait for items."""
        return 1


# Tokens of prompt and canvas one read may take on this host, as vLLM's --max-model-len: attention's memory
# grows with the square of it. A model's own positions say far more (131,072 for some): the 270M Gemma read a
# 10 MB state cut to its 32,768 positions for 8 minutes at 8.8 GB, and 64,000 tokens took a 24 GB host whole.
DEFAULT_MAX_MODEL_LEN = 8192


def prompt_token_limit(model: Any, canvas_length: int, max_model_len: int = DEFAULT_MAX_MODEL_LEN) -> int | None:
    """The most prompt tokens an in-process model reads: its positions, at most `max_model_len`, less the
    canvas (a masked or causal model reads both in one sequence). None when that leaves no room."""
    positions = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    limit = min(positions, max_model_len) if isinstance(positions, int) else max_model_len
    return limit - canvas_length if limit > canvas_length else None


class CanvasEngine(Engine):
    builder: CanvasBuilder
    batch_size: int = 8  # items per chunk handed to read()
    pipeline_depth: int = 1  # chunks read at once; >1 keeps a remote server busy across chunk edges
    span_items_at_once: int = 1  # items of a chunk whose span questions are read at once (a server takes many)
    reads_images: bool = False  # whether read() shows a canvas's images to the model
    reads_jointly = True

    @abstractmethod
    def read(self, canvases: Sequence[Canvas]) -> list[dict[str, SlotRead]]:
        """For each canvas, each question's slot logprobs over (at least) its label ids."""

    def passes_per_canvas(self, schema: Schema) -> int:
        """Model forward passes one canvas read costs: one for a joint read."""
        return 1

    def passes_per_read(self, schema: Schema) -> int:
        """Model passes one draw of an item costs when every question applies: one canvas per read group
        of a staged schema (see diffjev.staging), one canvas otherwise."""
        if not is_staged(schema.questions):
            return self.passes_per_canvas(schema)
        return sum(self.passes_per_group(schema, group) for stage in read_groups(schema.questions) for group in stage)

    def passes_per_group(self, schema: Schema, qids: Sequence[str]) -> int:
        """Model passes one canvas of a staged read costs when it reads questions `qids` alone."""
        return self.passes_per_canvas(schema)

    def check_schema(self, schema: Schema) -> None:
        self.builder.check(schema)  # a template that does not fit fails before any read is sent
        if schema.slot_part() is not schema and not self.reads_spans:
            raise EngineError(f"the {self.name} engine cannot read span questions; use a diffusion engine")

    # --- span questions: a read of their own per question, beside the joint label read ---------------------
    @property
    def reads_spans(self) -> bool:
        return type(self).read_blanks is not CanvasEngine.read_blanks

    def read_blanks(self, canvases: Sequence[Any]) -> list[list[dict[int, float]]]:
        """For each span canvas, one {token id: logprob} map per blank position over its requested ids."""
        raise EngineError(f"the {self.name} engine cannot read span questions")

    @property
    def span_builder(self) -> SpanCanvasBuilder:
        builder = getattr(self, "_span_builder", None)
        if builder is None or builder.builder is not self.builder:
            builder = self._span_builder = SpanCanvasBuilder(self.builder)
        return builder

    def read_spans(
        self, schema: Schema, state: Any, seed: int = DEFAULT_SEED, earlier: dict[str, Any] | None = None
    ) -> tuple[dict[str, SpanAnswer], dict[str, dict[str, Any]]]:
        """Every span question of `schema` read over the item's text (its state as the model reads it), and
        the skip record of each one whose `ask_if` the `earlier` answers (the label read's) do not meet: a
        question that does not apply is not read. No question depends on a span question (the schema
        refuses it), so the label answers are all a span question can wait for."""
        # Offsets index the item's text; a span read shows the model the text alone, not the item's image.
        text = state.text if isinstance(state, ImageState) else render_state(state)
        given = {qid: a.answer for qid, a in (earlier or {}).items()}
        out, skipped = {}, {}
        for index, q in enumerate(schema.questions):
            if q.type.reads != "span":
                continue
            record = skip_record(q, given)
            if record is not None:
                skipped[q.id] = record
                continue
            out[q.id] = read_span_answer(q, text, question_seed(seed, index), self.span_builder, self.read_blanks)
        return out, skipped

    def span_passes(self, answer: SpanAnswer) -> int:
        """Model passes a span answer took: each window's reads, each `steps` denoise passes."""
        return sum(answer.diagnostics.get("window_reads", [answer.reads])) * self.span_builder.steps

    @property
    def draws_vary(self) -> bool:
        # Mask noise is the same on every draw, so more draws of a masked model would only repeat it.
        return self.builder.format.noise == "uniform"

    def decide_many(self, schema: Schema, states: Iterable[Any], seed: int = DEFAULT_SEED) -> Iterator[Decision]:
        self.check_schema(schema)
        states = iter(states) if self.reads_images else self._text_only(states)
        sizes = growing_chunks(self.batch_size)
        if self.pipeline_depth > 1:
            yield from self._decide_streaming(schema, states, sizes, seed)
            return
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

    @property
    def look_ahead(self) -> int:
        # pipeline_depth batches being read, and the next batch being taken (see _decide_streaming; the
        # one-chunk path holds two)
        return (max(1, self.pipeline_depth) + 1) * max(1, self.batch_size)

    def _decide_streaming(
        self, schema: Schema, states: Iterator[Any], sizes: Iterator[int], seed: int
    ) -> Iterator[Decision]:
        """A remote server's reads: chunks go out while fewer than pipeline_depth full batches of items are
        being read, so the small first chunks (1, 2, 4 ... items, for a quick first result) all go out at
        once instead of one round trip after another; results come back in input order."""
        chunks_at_once = self.pipeline_depth + max(1, self.batch_size).bit_length()
        with ThreadPoolExecutor(chunks_at_once, thread_name_prefix=f"{self.name}-read") as pool:
            submit = functools.partial(pool.submit, self._decide_chunk, schema)
            yield from chunks_in_order(
                lambda chunk: submit(chunk, seed), states, sizes, self.pipeline_depth * self.batch_size
            )

    def decide_batch(self, schema: Schema, states: Sequence[Any], seed: int = DEFAULT_SEED) -> list[Decision]:
        """One batch read at once, every canvas in flight together (up to the engine's own limit): what a Ray
        task does with the batch Ray Data hands it, where decide_many's growing chunks would cost a round
        trip each."""
        self.check_schema(schema)
        states = list(states if self.reads_images else self._text_only(states))
        return self._decide_chunk(schema, states, seed) if states else []

    def _text_only(self, states: Iterable[Any]) -> Iterator[Any]:
        """The states, refusing an item with an image: reading its text alone would pass a guess about a
        picture the model never saw for a read of the item."""
        for state in states:
            if isinstance(state, ImageState):
                raise CannotRead(
                    f"the {self.name} engine reads text only, and this item has an image; pre-label items "
                    f"with images with the vLLM engine (a server serving DiffusionGemma, which reads images)"
                )
            yield state

    def _decide_chunk(self, schema: Schema, states: Sequence[Any], seed: int) -> list[Decision]:
        labels = schema.slot_part()
        if labels is schema:
            return self._decide_labels(schema, states, seed)
        decisions = (
            self._decide_labels(labels, states, seed)
            if labels
            else [Decision({}, schema, {"engine": self.name, "model": self.model_name, "model_passes": 0})]
            * len(states)
        )

        def spans_of(decision: Decision, state: Any) -> tuple[dict[str, SpanAnswer], dict[str, dict[str, Any]]]:
            return self.read_spans(schema, state, seed, decision.answers)

        if self.span_items_at_once > 1 and len(states) > 1:  # a server reads many at once: no item waits
            with ThreadPoolExecutor(min(self.span_items_at_once, len(states)), thread_name_prefix="spans") as pool:
                span_reads = list(pool.map(spans_of, decisions, states))
        else:
            span_reads = [spans_of(d, s) for d, s in zip(decisions, states)]
        out = []
        for decision, (spans, skipped) in zip(decisions, span_reads):
            diagnostics = dict(decision.diagnostics)
            if skipped:  # a span question asked only under an earlier answer that the read did not give
                diagnostics["skipped"] = {**diagnostics.get("skipped", {}), **skipped}
            answers = {**decision.answers, **spans}
            ordered = {q.id: answers[q.id] for q in schema.questions if q.id in answers}
            diagnostics["spans"] = {qid: a.diagnostics for qid, a in spans.items()}
            diagnostics["model_passes"] = diagnostics.get("model_passes", 0) + sum(
                map(self.span_passes, spans.values())
            )
            out.append(Decision(ordered, schema, diagnostics))
        return out

    def _decide_labels(self, schema: Schema, states: Sequence[Any], seed: int) -> list[Decision]:
        if is_staged(schema.questions):
            return self._decide_staged_chunk(schema, states, seed)
        started = time.perf_counter()
        layout = self.builder.layout(schema)
        repeatable = self.draws_vary
        first = schema.sampling.first_draws if repeatable else 1
        base = self.builder.build_many(schema, states, draw_seed(seed, 0))
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

    def _decide_staged_chunk(self, schema: Schema, states: Sequence[Any], seed: int) -> list[Decision]:
        """A staged read: stage by stage, each read group on its own canvas. Every prompt lists all the
        questions and every canvas holds the whole template; earlier stages' answers sit in their slots
        as their label tokens (prefilled, and pinned when a read takes several steps), the group's slots
        hold noise. A question whose `ask_if` is not met by the answers so far is not read: it is absent
        from the Decision's answers and listed in `diagnostics["skipped"]`."""
        started = time.perf_counter()
        layout = self.builder.layout(schema)
        base = self.builder.build_many(schema, states, draw_seed(seed, 0))
        reads_log: list[list[dict[str, Any]]] = [[] for _ in states]

        def read_group(number: int, qids, items: list[int], earlier: list[dict[str, Answer]]):
            # One read() per set of slots: canvases of a batch carry the same number of slots.
            got = self._read_group(
                schema, layout, qids, [base[i] for i in items], earlier, seed + GROUP_SEED_STRIDE * number
            )
            for i, (_, log) in zip(items, got):
                reads_log[i].append(log)
            return [group_answers for group_answers, _ in got]

        answers, skipped = read_in_stages(schema.questions, len(states), read_group)
        finished = time.perf_counter()
        order = [q.id for q in schema.questions]
        decisions = []
        for i, canvas in enumerate(base):
            log = reads_log[i]
            diagnostics = {
                "engine": self.name,
                "model": self.model_name,
                "prompt_ids": list(canvas.prompt_ids),
                "canvas_ids": list(log[0]["canvas_ids"]) if log else list(canvas.ids),
                "slots": dict(layout.slots),
                "label_ids": {q: list(ids) for q, ids in layout.label_ids.items()},
                "width": canvas.width,
                "seeds": [s for entry in log for s in entry["seeds"]],
                "draws": max((len(entry["seeds"]) for entry in log), default=0),
                "model_passes": sum(len(e["seeds"]) * self.passes_per_group(schema, e["questions"]) for e in log),
                "sampling": dataclasses.asdict(schema.sampling),
                "conditioning": "prefill",
                "stages": [{"questions": list(entry["questions"]), "prefilled": entry["prefilled"]} for entry in log],
                "skipped": {qid: skipped[i][qid] for qid in order if qid in skipped[i]},
                "timing": {"build_s": 0.0, "read_s": finished - started, "batch_items": len(states)},
            }
            if canvas.truncated:
                diagnostics["truncated"] = canvas.truncated
            ordered = {qid: answers[i][qid] for qid in order if qid in answers[i]}
            decisions.append(Decision(ordered, schema, diagnostics))
        return decisions

    def _read_group(
        self,
        schema: Schema,
        layout: Layout,
        qids: tuple[str, ...],
        canvases: Sequence[Canvas],
        earlier: Sequence[dict[str, Answer]],
        seed: int,
    ) -> list[tuple[dict[str, Answer], dict[str, Any]]]:
        """Read questions `qids` of each item (its base canvas and its answers so far), with the sampling
        policy: the first draws, then, under "auto", more where a slot of the group was unsure."""
        repeatable = self.draws_vary
        first = schema.sampling.first_draws if repeatable else 1
        draws = [
            [self._group_canvas(schema, layout, qids, c, a, draw_seed(seed, k)) for k in range(first)]
            for c, a in zip(canvases, earlier)
        ]
        reads = self._read_grouped(draws)
        extra = [_more_draws(schema, qids, r[0], layout) if repeatable else 0 for r in reads]
        if any(extra):
            more = [
                [self._group_canvas(schema, layout, qids, c, a, draw_seed(seed, k)) for k in range(first, first + n)]
                for c, a, n in zip(canvases, earlier, extra)
            ]
            for r, got in zip(reads, self._read_grouped(more)):
                r.extend(got)
            draws = [d + m for d, m in zip(draws, more)]
        out = []
        for group_draws, item_reads, earlier_answers in zip(draws, reads, earlier):
            group_answers = {}
            for qid in qids:
                q = schema.question(qid)
                dists = [slot_distribution(q, layout.label_ids[qid], read[qid]) for read in item_reads]
                group_answers[qid] = aggregate(q, dists)
            log = {
                "questions": qids,
                "prefilled": [qid for qid in earlier_answers if qid in layout.slots],
                "canvas_ids": group_draws[0].ids,
                "seeds": [c.seed for c in group_draws],
            }
            out.append((group_answers, log))
        return out

    def _group_canvas(
        self,
        schema: Schema,
        layout: Layout,
        qids: tuple[str, ...],
        canvas: Canvas,
        earlier: dict[str, Answer],
        seed: int,
    ) -> Canvas:
        """The item's canvas for one read group: noise in every unanswered slot, each earlier answer's
        label token in its slot, and only the group's slots read (every other position is pinned)."""
        ids = list(fill_noise(layout, self.builder.format, seed))
        for qid, answer in earlier.items():
            if qid in layout.slots:
                ids[layout.slots[qid]] = layout.label_ids[qid][schema.question(qid).names.index(answer.answer)]
        return dataclasses.replace(
            canvas,
            ids=tuple(ids),
            slots={qid: layout.slots[qid] for qid in qids},
            label_ids={qid: layout.label_ids[qid] for qid in qids},
            seed=seed,
        )


def _more_draws(schema: Schema, qids: Sequence[str], first: dict[str, SlotRead], layout: Layout) -> int:
    """The "auto" policy over one read group: more draws when any of its slots is unsure."""
    policy = schema.sampling
    if policy.samples != "auto" or policy.auto_max <= 1:
        return 0
    worst = max(slot_distribution(schema.question(q), layout.label_ids[q], first[q]).entropy for q in qids)
    return policy.auto_max - 1 if worst > policy.auto_threshold else 0
