"""A vLLM OpenAI-compatible server serving DiffusionGemma, read over HTTP.

Each canvas is one chat completion carrying the structured-read fields in `vllm_xargs`: the seeded
canvas, its width, one step, read-only. `logprob_token_ids` asks for every label's exact logprob at every
canvas position. `temperature` and `seed` are never sent: vLLM rejects them on diffusion requests.
Reads go out concurrently, a bounded number in flight.

With `reads_per_request` above 1, text reads that share a canvas (every item of a run's draw does: the
noise is seeded by the run, not the item) go out together as one `/v1/completions` request: the prompts as
the token ids this client built (the chat template rendered here, as djev's continuation reads send them),
one `vllm_xargs` for all, and vLLM reads each prompt as a request of its own. One HTTP round trip and one
JSON answer then carry several reads: on a client the request itself, not the read, is most of the CPU.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import httpx

from diffjev.canvas import Canvas, CanvasBuilder, DEFAULT_MAX_WIDTH, ModelFormat, chat_flags
from diffjev.decide import SlotRead
from diffjev.engines._http import HTTPClients, post_json, server_failed
from diffjev.engines.base import CanvasEngine, EngineError, shown_url
from diffjev.engines.servers import Servers, server_urls
from diffjev.models import load_tokenizer

TOP_LOGPROBS = 20
MAX_LOGPROB_TOKEN_IDS = 128  # djev's cap: more than this and the request itself becomes the cost
MAX_COMPLETION_PROMPTS = 1024  # vLLM's default cap on the prompts of one completions request


def parse_token(token: str) -> int:
    if not isinstance(token, str) or not token.startswith("token_id:"):
        raise ValueError(f"expected a token as 'token_id:N' (return_tokens_as_token_ids), got {token!r}")
    return int(token[len("token_id:") :])


def parse_chat_logprobs(data: Any, canvas: Canvas) -> dict[str, SlotRead]:
    """Each slot's id -> logprob map from `choices[0].logprobs.content[pos].top_logprobs`."""
    content = data["choices"][0]["logprobs"]["content"]
    out = {}
    for qid, pos in canvas.slots.items():
        entry = content[pos]
        logprobs = {parse_token(t["token"]): float(t["logprob"]) for t in entry.get("top_logprobs") or []}
        out[qid] = SlotRead(logprobs, parse_token(entry["token"]))
    return out


def parse_completion_logprobs(choice: Any, canvas: Canvas) -> dict[str, SlotRead]:
    """Each slot's id -> logprob map from a completions choice's `logprobs.top_logprobs[pos]` (a map keyed by
    'token_id:N'), and the token read there from `logprobs.tokens[pos]`."""
    logprobs = choice["logprobs"]
    tops, tokens = logprobs["top_logprobs"], logprobs["tokens"]
    out = {}
    for qid, pos in canvas.slots.items():
        read = {parse_token(t): float(v) for t, v in (tops[pos] or {}).items()}
        out[qid] = SlotRead(read, parse_token(tokens[pos]))
    return out


def multimodal_messages(canvas: Canvas) -> list[dict[str, Any]]:
    """The chat messages with the item's images ahead of its text in the user turn, as OpenAI's chat format
    (and vLLM's) takes them: an `image_url` part per image, a data URL, then the text."""
    messages = [dict(m) for m in canvas.messages]
    if canvas.images:
        user = next(m for m in reversed(messages) if m["role"] == "user")
        parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": i.data_url()}} for i in canvas.images]
        user["content"] = [*parts, {"type": "text", "text": user["content"]}]
    return messages


class ReadBudget:
    """At most `size` reads out at once, whatever the requests that carry them, handed out in the order the
    requests asked (the order their pool started them, which is the order they were queued): a run takes its
    results in input order, so a later request overtaking an earlier one would only hold the earlier one's
    items back. A request takes its turn when it starts, so the turn being served is always one that started
    and no request waits on one still queued behind it."""

    def __init__(self, size: int):
        self._size = size
        self._free = size
        self._issued = 0  # tickets handed out, in queue order
        self._serving = 0  # the ticket whose request goes out next
        self._closed = False
        self._changed = threading.Condition()

    @contextmanager
    def taking(self, reads: int) -> Iterator[None]:
        if not 0 < reads <= self._size:  # never to be served: it would hold every request behind it
            raise ValueError(f"a request of {reads} reads does not fit a budget of {self._size}")
        with self._changed:
            ticket = self._issued
            self._issued += 1
            self._changed.wait_for(lambda: self._closed or (self._serving == ticket and self._free >= reads))
            if self._closed:
                raise EngineError("the engine was closed")
            self._free -= reads
            self._serving += 1
            self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                self._free += reads
                self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()


class VLLMServerEngine(CanvasEngine):
    name = "vllm"
    pipeline_depth = 2
    reads_images = True

    def __init__(
        self,
        url: str | Sequence[str],
        model: str,
        tokenizer: Any = None,
        *,
        canvas_length: int = DEFAULT_MAX_WIDTH,
        max_in_flight: int = 32,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        api_key: str | None = None,
        vocab_size: int | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        thought: str = "prompt",
        reads_per_request: int = 1,
    ):
        # One server or several (a list, commas, or a file of them); each a base URL with no query or
        # fragment, which would change the path the read goes to.
        urls = server_urls(url)
        self._servers = Servers(urls)
        self.url = urls[0]
        self.servers = ", ".join(shown_url(u) for u in urls)  # kept with the run's settings
        self.endpoint = (
            f"{self.url}/v1/chat/completions" if len(urls) == 1 else f"{self.servers} (/v1/chat/completions)"
        )
        self.model_name = model
        self.tokenizer = load_tokenizer(model if tokenizer is None else tokenizer)
        # Noise is drawn from the tokenizer's ids unless the served vocabulary is named.
        fmt = ModelFormat.from_tokenizer(self.tokenizer, "uniform", vocab_size=vocab_size)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.builder = CanvasBuilder(self.tokenizer, fmt, canvas_length, self.chat_template_kwargs, thought=thought)
        self.thought_layout = self.builder.thought_placement  # where the thought block went, kept with a run
        self.max_in_flight = max_in_flight
        self.batch_size = 2 * max_in_flight
        if reads_per_request < 1:
            raise ValueError("reads_per_request must be at least 1")
        # At most max_in_flight reads in flight either way: fewer requests, each carrying more reads.
        self.reads_per_request = min(reads_per_request, max_in_flight, MAX_COMPLETION_PROMPTS)
        self._clients = HTTPClients(timeout, connect_timeout, api_key, servers=len(urls))
        self._pool = ThreadPoolExecutor(max_in_flight, thread_name_prefix="vllm-read")
        # Batched requests are bounded by the reads they carry, not by their count: a run's first chunks
        # (1, 2, 4 ... items) make small requests, which must not hold back the reads behind them.
        self._batches = ThreadPoolExecutor(max_in_flight, thread_name_prefix="vllm-batch")
        self._reads_out = ReadBudget(max_in_flight)
        self.span_items_at_once = max_in_flight  # each item's span reads go out beside the others'
        self._context_lock = threading.Lock()
        self._context_asked = False

    def _decide_chunk(self, schema, states, seed):
        self._learn_context()
        return super()._decide_chunk(schema, states, seed)

    def _learn_context(self) -> None:
        """Ask the server once how long a request may be (`max_model_len` on vLLM's model card), so a state
        past it is cut to fit before the prompt is built, as in-process, rather than refused item by item."""
        with self._context_lock:
            if self._context_asked:
                return
            self._context_asked = True
            try:
                answer = self._servers.call(lambda base: self._get(f"{base}/v1/models"), retriable=lambda _: True)
                cards = answer.json().get("data") if answer.status_code == 200 else None
            except (EngineError, ValueError, AttributeError):  # the reads themselves say what is wrong
                return
            card = next((c for c in cards or [] if isinstance(c, dict) and c.get("id") == self.model_name), {})
            length = card.get("max_model_len")
            if isinstance(length, int) and length > self.builder.max_width:
                self.builder.max_prompt_tokens = length - self.builder.max_width

    def request_body(self, canvas: Canvas) -> dict[str, Any]:
        label_ids = sorted({t for ids in canvas.label_ids.values() for t in ids})
        if len(label_ids) > MAX_LOGPROB_TOKEN_IDS:
            raise EngineError(f"{len(label_ids)} label ids in one read; at most {MAX_LOGPROB_TOKEN_IDS} fit a request")
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": multimodal_messages(canvas),
            "max_tokens": canvas.reply_tokens,  # as djev sends: logprobs for the reply, not the padding
            "logprobs": True,
            "top_logprobs": TOP_LOGPROBS,
            "logprob_token_ids": label_ids,
            "return_tokens_as_token_ids": True,
            "vllm_xargs": {
                "diffusion_seed_canvas": list(canvas.ids),
                "diffusion_canvas_length": canvas.width,
                "diffusion_max_steps": 1,
                "diffusion_read_only": True,
            },
        }
        return self._chat_fields(body)

    def _chat_fields(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat rendering a read asks for: the template's kwargs, and a final assistant message (the
        thought block) continued rather than a generation prompt added, as the builder rendered it."""
        if self.chat_template_kwargs:
            body["chat_template_kwargs"] = self.chat_template_kwargs
        if chat_flags(body["messages"])["continue_final_message"]:
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        return body

    def read(self, canvases: Sequence[Canvas]) -> list[dict[str, SlotRead]]:
        if self.reads_per_request == 1:
            return list(self._pool.map(self._read_one, canvases))
        # Text reads sharing a request's fields go out together; a read with images goes alone, by chat.
        together: dict[tuple, list[int]] = {}
        alone = []
        for i, canvas in enumerate(canvases):
            if canvas.images:
                alone.append(i)
            else:
                key = (canvas.ids, canvas.width, canvas.reply_tokens, tuple(sorted(canvas.label_ids.items())))
                together.setdefault(key, []).append(i)
        step = self.reads_per_request
        batches = [ids[k : k + step] for ids in together.values() for k in range(0, len(ids), step)]
        asked = [(b, self._batches.submit(self._read_batch, [canvases[i] for i in b])) for b in batches]
        asked += [([i], self._batches.submit(self._read_alone, canvases[i])) for i in alone]
        out: list[dict[str, SlotRead]] = [{}] * len(canvases)
        for where, future in asked:
            for i, got in zip(where, future.result()):
                out[i] = got
        return out

    def completion_body(self, canvases: Sequence[Canvas]) -> dict[str, Any]:
        """One `/v1/completions` request reading `canvases` (text reads that share their canvas, width and
        labels): each prompt as its token ids, as the builder rendered and tokenised it."""
        first = self.request_body(canvases[0])  # the label ids and the read's fields, checked once
        return {
            "model": self.model_name,
            "prompt": [list(c.prompt_ids) for c in canvases],
            "max_tokens": first["max_tokens"],
            "logprobs": TOP_LOGPROBS,  # completions take the top-k as a count; beside the ids vLLM ignores it
            "logprob_token_ids": first["logprob_token_ids"],
            "return_tokens_as_token_ids": True,
            "vllm_xargs": first["vllm_xargs"],
        }

    def _read_alone(self, canvas: Canvas) -> list[dict[str, SlotRead]]:
        """A read that cannot share a request (its images go by chat), within the same budget of reads."""
        with self._reads_out.taking(1):
            return [self._read_one(canvas)]

    def _read_batch(self, canvases: Sequence[Canvas]) -> list[dict[str, SlotRead]]:
        with self._reads_out.taking(len(canvases)):
            data = self._post("/v1/completions", self.completion_body(canvases))
        try:
            choices = sorted(data["choices"], key=lambda c: c["index"])
            # each prompt's choice by its index, exactly once: a read handed to another canvas is never stored
            if [c["index"] for c in choices] != list(range(len(canvases))):
                raise ValueError("one choice per prompt")
            return [parse_completion_logprobs(choice, c) for choice, c in zip(choices, canvases)]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise EngineError(
                f"the answer from {self.servers} (/v1/completions) has no usable choices[i].logprobs, one per "
                f"prompt (indexes 0 to {len(canvases) - 1}), at the slots; the server must be a vLLM build with "
                "structured reads"
            ) from None

    def span_request_body(self, canvas: Any) -> dict[str, Any]:
        """A span read: several denoise steps with every position but the blank pinned, and the logprobs
        of the item's own token ids (at most 128) at every position."""
        if len(canvas.request_ids) > MAX_LOGPROB_TOKEN_IDS:
            raise EngineError(
                f"{len(canvas.request_ids)} item token ids in one span read; at most {MAX_LOGPROB_TOKEN_IDS} fit"
            )
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": list(canvas.messages),
            "max_tokens": canvas.reply_tokens,
            "logprobs": True,
            "top_logprobs": TOP_LOGPROBS,
            "logprob_token_ids": list(canvas.request_ids),
            "return_tokens_as_token_ids": True,
            "vllm_xargs": {
                "diffusion_seed_canvas": list(canvas.ids),
                "diffusion_canvas_length": canvas.width,
                "diffusion_max_steps": canvas.steps,
                "diffusion_read_only": True,
                "diffusion_pinned": canvas.pinned,
            },
        }
        return self._chat_fields(body)

    def read_blanks(self, canvases: Sequence[Any]) -> list[list[dict[int, float]]]:
        self._learn_context()
        return list(self._pool.map(self._read_blank, canvases))

    def _read_blank(self, canvas: Any) -> list[dict[int, float]]:
        data = self._post("/v1/chat/completions", self.span_request_body(canvas))
        try:
            content = data["choices"][0]["logprobs"]["content"]
            return [
                {parse_token(t["token"]): float(t["logprob"]) for t in content[p].get("top_logprobs") or []}
                for p in canvas.blank
            ]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise EngineError(
                f"the answer from {shown_url(self.endpoint)} has no usable choices[0].logprobs.content over "
                f"the span's blank; the server must be a vLLM build with structured reads"
            ) from None

    def _read_one(self, canvas: Canvas) -> dict[str, SlotRead]:
        data = self._post("/v1/chat/completions", self.request_body(canvas))
        try:
            return parse_chat_logprobs(data, canvas)
        except (KeyError, IndexError, TypeError, ValueError):  # the exception would quote the answer: not shown
            raise EngineError(
                f"the answer from {shown_url(self.endpoint)} has no usable choices[0].logprobs.content at the "
                f"slots; the server must be a vLLM build with structured reads"
            ) from None

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        """POST to the least busy healthy server; one that is down or unwell hands the read to another."""
        return self._servers.call(
            lambda base: post_json(self._clients.get(), f"{base}{path}", body, "vLLM server"), server_failed
        )

    def _get(self, where: str) -> httpx.Response:
        try:
            return self._clients.get().get(where)
        except httpx.HTTPError:
            raise EngineError(f"cannot reach {shown_url(where)}") from None

    def server_health(self) -> list[dict[str, Any]]:
        """Per server: reads in flight and sent, failures, and whether it is taken out for now."""
        return self._servers.health()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._reads_out.close()  # before the pool: a request waiting its turn must not wait for ever
        self._batches.shutdown(wait=False, cancel_futures=True)
        self._clients.close()
