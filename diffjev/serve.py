"""An HTTP server that speaks vLLM's wire format for structured reads, computing with a transformers
diffusion model in-process.

vLLM cannot run DiffusionGemma without a GPU, so this is how diffjev's vLLM client is exercised for real
on a CPU host, and how a developer can stand a local model behind the same client. It serves:

- `POST /v1/chat/completions`: read-only reads (`vllm_xargs` with `diffusion_seed_canvas`,
  `diffusion_read_only`, `diffusion_max_steps`, `diffusion_pinned`), validated as vLLM validates them,
  answered in vLLM's chat response shape with per-position logprobs at temperature 1; a read of more
  than one step rewrites only the positions not pinned, as vLLM does;
- `POST /v1/completions`: the same reads with the prompt given as token ids, one prompt or a batch of
  them in one request (vLLM reads each as its own request, with the request's `vllm_xargs`), answered in
  vLLM's completions shape, one choice per prompt;
- `POST /v1/systemone`: the Jev decision API in vLLM's shapes, one canvas read per question;
- `GET /v1/models`.

Free generation (a request that is not read-only) is refused with a 400 that says so: this server reads.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import random
import threading
import time
import uuid
from typing import Any

import jinja2
import orjson

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, TypeAdapter, ValidationError

from diffjev.api import (
    DecisionRequest,
    StructuredDecisionRequest,
    decision_answer,
    elapsed_ms,
    error_response,
    validation_param,
)
from diffjev.canvas import DEFAULT_MAX_WIDTH, MAX_CHARS_PER_TOKEN, Canvas
from diffjev.engines.base import DEFAULT_MAX_MODEL_LEN
from diffjev.engines.transformers import TransformersEngine
from diffjev.engines.vllm import MAX_COMPLETION_PROMPTS
from diffjev.jev import UpstreamError, joint_canvases, question_canvas, read_upstream, upstream_answer
from diffjev.schema import Schema, SchemaError

logger = logging.getLogger(__name__)

# Sampling fields vLLM rejects on a diffusion request (SamplingParams._validate_diffusion): only a value that
# changes sampling is refused; its neutral value (temperature 1, min_p 0, an empty list) passes.
NEUTRAL_FOR_DIFFUSION = {
    "temperature": lambda v: v == 1.0,
    "min_p": lambda v: v <= 1e-5,
    "seed": lambda v: False,
    "min_tokens": lambda v: v == 0,
    "logit_bias": lambda v: not v,
    "bad_words": lambda v: not v,
    "allowed_token_ids": lambda v: not v,
}
NUMERIC_SAMPLING = ("temperature", "min_p", "seed", "min_tokens")
DIFFUSION_REFUSAL = (
    "The temperature, min_p, seed, min_tokens, logit_bias, bad_words, and allowed_token_ids sampling parameters "
    "are not yet supported with diffusion models."
)
DEFAULT_MAX_LOGPROBS = 20  # vLLM's --max-logprobs default (ModelConfig.max_logprobs)
MAX_LOGPROB_TOKEN_IDS = 128  # vllm.sampling_params
DEFAULT_MAX_STEPS = 8  # diffjev's reads take 1 to 8 steps (a span read 4); one step of the tiny model on this CPU
# is about 0.3 s, and every request waits on the one model lock
# The keyword arguments of `apply_chat_template` that a request may not set: they change what it returns, or (a
# template of the caller's own, as vLLM refuses without --trust-request-chat-template) run code in the server.
RESERVED_TEMPLATE_KWARGS = {"chat_template", "tokenize", "conversation", "documents", "tools", "return_dict"}


class RequestError(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.message, self.param, self.status = message, param, status


def require_api_key(app: FastAPI, api_key: str) -> None:
    """Every route, the docs included, answers only `Authorization: Bearer <api_key>`, as vLLM's
    `--api-key` does; anything else gets a 401. The comparison takes the same time wherever the given
    key first differs, so the key cannot be guessed a character at a time."""
    expected = f"Bearer {api_key}".encode()

    @app.middleware("http")
    async def _check_api_key(request: Request, call_next):
        given = request.headers.get("authorization", "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(given, expected):
            return error_response(
                "this server needs an API key: send it as 'Authorization: Bearer <key>'",
                401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return await call_next(request)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _flag(xargs: dict[str, Any], key: str) -> bool:
    value = xargs.get(key, False)
    if value in (True, False, 0, 1):
        return bool(value)
    raise RequestError(f"extra_args {key} must be a bool or 0/1", "vllm_xargs")


def diffusion_args(body: dict[str, Any], served_width: int, vocab: int, max_steps: int) -> dict[str, Any]:
    """Validate the diffusion fields of `vllm_xargs` the way vLLM's `vllm/utils/diffusion.py` does, and cap
    the steps of one read at `max_steps`: vLLM takes any positive count, but here one model lock serves
    every request, so a read of a million steps would hold all the others until its last forward."""
    xargs = body.get("vllm_xargs") or {}
    if not isinstance(xargs, dict):
        raise RequestError("vllm_xargs must be an object", "vllm_xargs")
    width = xargs.get("diffusion_canvas_length", served_width)
    if not _is_int(width) or not 0 < width <= served_width:
        raise RequestError(f"extra_args diffusion_canvas_length must be a positive int <= {served_width}", "vllm_xargs")
    seed = xargs.get("diffusion_seed_canvas")
    if seed is not None:
        if not isinstance(seed, list) or not all(_is_int(t) and 0 <= t < vocab for t in seed):
            raise RequestError(f"extra_args diffusion_seed_canvas must be a list of ints in [0, {vocab})", "vllm_xargs")
        if len(seed) != width:
            raise RequestError(
                f"extra_args diffusion_seed_canvas has {len(seed)} tokens but the canvas is {width} wide", "vllm_xargs"
            )
    pinned = xargs.get("diffusion_pinned")
    if pinned is not None:
        if seed is None:
            raise RequestError("extra_args diffusion_pinned needs diffusion_seed_canvas", "vllm_xargs")
        if not isinstance(pinned, list) or not all(_is_int(p) and 0 <= p < width for p in pinned):
            raise RequestError(
                "extra_args diffusion_pinned must be a list of positions inside the canvas", "vllm_xargs"
            )
    steps = xargs.get("diffusion_max_steps", 1)
    if not _is_int(steps) or steps <= 0:
        raise RequestError("extra_args diffusion_max_steps must be a positive int", "vllm_xargs")
    if steps > max_steps:
        raise RequestError(
            f"extra_args diffusion_max_steps is {steps}; this server reads at most {max_steps} steps "
            "(serve-model --max-steps)",
            "vllm_xargs",
        )
    read_only = _flag(xargs, "diffusion_read_only")
    if _flag(xargs, "diffusion_constrained") and not body.get("logprob_token_ids"):
        raise RequestError("extra_args diffusion_constrained needs logprob_token_ids", "vllm_xargs")
    if not read_only:
        raise RequestError(
            "this server answers read-only reads only (diffusion_read_only true); serve the model with vLLM "
            "for generation",
            "vllm_xargs",
        )
    return {
        "width": width,
        "seed": seed,
        "constrained": _flag(xargs, "diffusion_constrained"),
        "steps": steps,
        "pinned": sorted(set(pinned or [])),
    }


def sampling_refusal(body: dict[str, Any]) -> None:
    """vLLM's refusal of the sampling fields a diffusion read cannot honour (a 400 naming the first), after
    SamplingParams' own range checks, which vLLM makes first."""
    for name, neutral in NEUTRAL_FOR_DIFFUSION.items():
        value = body.get(name)
        if value is None:
            continue
        if name in NUMERIC_SAMPLING and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise RequestError(f"{name}: Input should be a valid number", name)
        if name == "temperature" and value < 0:
            raise RequestError(f"temperature must be non-negative, got {value}.", name)
        if name == "min_p" and not 0 <= value <= 1:
            raise RequestError(f"min_p must be in [0, 1], got {value}.", name)
        if not neutral(value):
            raise RequestError(DIFFUSION_REFUSAL, name)


_LAX_INT = TypeAdapter(int | None)


def check_one_choice(body: dict[str, Any]) -> None:
    """A read-only read is one canvas: `n` other than 1 would ask for choices this server never returns. `n`
    is read as vLLM's request model reads it, a pydantic int (1.0, "1" and true are 1)."""
    try:
        n = _LAX_INT.validate_python(body.get("n", 1))
    except ValidationError:
        raise RequestError("n: Input should be a valid integer", "n") from None
    if n is not None and n != 1:
        raise RequestError("n: a read-only read has one choice per prompt", "n")


def logprob_args(body: dict[str, Any], max_logprobs: int, vocab: int) -> dict[str, Any]:
    """The logprob fields checked as vLLM 0.33's ChatCompletionRequest and SamplingParams check them. With
    `logprob_token_ids`, top-k is not asked for (`to_sampling_params` passes logprobs=None), so
    `top_logprobs` is then ignored, -1 and values past max_logprobs included."""
    logprobs = body.get("logprobs", False)
    if logprobs is None:
        logprobs = False
    if not isinstance(logprobs, bool):
        raise RequestError("logprobs: Input should be a valid boolean", "logprobs")
    top = body.get("top_logprobs")
    if top is not None:
        if isinstance(top, bool) or not isinstance(top, (int, float)):
            raise RequestError("`top_logprobs` must be an integer.", "top_logprobs")
        if top < 0 and top != -1:
            raise RequestError("`top_logprobs` must be a positive value or -1.", "top_logprobs")
        if (top == -1 or top > 0) and not logprobs:
            raise RequestError("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
        if top != int(top):
            raise RequestError("top_logprobs: Input should be a valid integer", "top_logprobs")
        if abs(top) >= 2**63:  # pydantic's int, as vLLM's request model reads it
            raise RequestError(
                "top_logprobs: Unable to parse input string as an integer, exceeded maximum size", "top_logprobs"
            )
        top = int(top)
    ids = body.get("logprob_token_ids")
    if ids:
        if not logprobs:
            raise RequestError("when using `logprob_token_ids`, `logprobs` must be set to true.", "logprob_token_ids")
        if not isinstance(ids, list) or not all(_is_int(t) for t in ids):
            raise RequestError("logprob_token_ids: Input should be a list of integers", "logprob_token_ids")
        if len(ids) > MAX_LOGPROB_TOKEN_IDS:
            raise RequestError(
                f"Requested logprob_token_ids of length {len(ids)}, which is greater than max allowed: "
                f"{MAX_LOGPROB_TOKEN_IDS}",
                "logprob_token_ids",
            )
        outside = [t for t in ids if not 0 <= t < vocab]
        if outside:
            raise RequestError(
                f"token_id(s) {outside} in logprob_token_ids contain out-of-vocab token ids. Vocabulary size: {vocab}",
                "logprob_token_ids",
            )
        return {"logprobs": True, "top": None, "ids": list(dict.fromkeys(ids))}
    if logprobs:
        asked = vocab if top == -1 else (top or 0)
        if asked > max_logprobs:
            raise RequestError(
                f"Requested sample logprobs of {asked}, which is greater than max allowed: {max_logprobs} "
                "(the server's max_logprobs, --max-logprobs)",
                "logprobs",
            )
        top = asked
    return {"logprobs": logprobs, "top": top or 0, "ids": None}


def completion_logprob_args(body: dict[str, Any], max_logprobs: int, vocab: int) -> dict[str, Any]:
    """The logprob fields of a completions request, as vLLM 0.33's CompletionRequest takes them: `logprobs`
    is the top-k count (an int, -1 for the whole vocabulary), and `logprob_token_ids` needs it set; with the
    ids given, top-k is not asked for."""
    top = body.get("logprobs")
    if top is not None:
        if isinstance(top, bool) or not _is_int(top):
            raise RequestError("logprobs: Input should be a valid integer", "logprobs")
        if top < 0 and top != -1:
            raise RequestError("`logprobs` must be a positive value or -1.", "logprobs")
    if body.get("logprob_token_ids") and top is None:
        raise RequestError("when using `logprob_token_ids`, `logprobs` must be set.", "logprob_token_ids")
    # the ids' checks are the chat request's; `logprobs` there is a bool, here a count
    chat = {"logprobs": top is not None, "logprob_token_ids": body.get("logprob_token_ids")}
    if top is not None and top != 0:
        chat["top_logprobs"] = top
    return logprob_args(chat, max_logprobs, vocab)


def prompt_batch(prompt: Any, vocab: int) -> list[list[int]]:
    """The prompts of a completions request given as token ids: one list of ids, or a list of them. Text
    prompts are refused: a read's prompt is built and tokenised by the client, so this server never guesses
    how a text would be wrapped."""
    if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        prompt = [prompt]
    if (
        not isinstance(prompt, list)
        or not prompt
        or not all(isinstance(p, list) and p and all(_is_int(t) for t in p) for p in prompt)
    ):
        raise RequestError(
            "prompt must be token ids: a non-empty list of ints, or a non-empty list of such lists (this server "
            "takes no text prompts; send the chat messages to /v1/chat/completions)",
            "prompt",
        )
    if len(prompt) > MAX_COMPLETION_PROMPTS:
        raise RequestError(
            f"prompt list length {len(prompt)} exceeds the maximum allowed count of {MAX_COMPLETION_PROMPTS}.",
            "prompt",
        )
    for i, ids in enumerate(prompt):
        outside = next((t for t in ids if not 0 <= t < vocab), None)
        if outside is not None:
            raise RequestError(f"Token id {outside} in prompt {i} is out of vocabulary (size {vocab})", "prompt")
    return prompt


_LAX_BOOL = TypeAdapter(bool | None)


def bool_field(body: dict[str, Any], name: str) -> bool:
    """A flag read as vLLM's request model reads it, a pydantic bool ("false", "0" and 0 are false; absent or
    null is false), or a 400 naming the field."""
    try:
        return bool(_LAX_BOOL.validate_python(body.get(name)))
    except ValidationError:
        raise RequestError(f"{name} must be a bool", name) from None


def rendering_flags(body: dict[str, Any]) -> dict[str, bool]:
    """`add_generation_prompt` (default true) and `continue_final_message` (default false), as vLLM's chat
    request takes them: bools, never both true."""
    flags = {"add_generation_prompt": body.get("add_generation_prompt", True)}
    flags["continue_final_message"] = body.get("continue_final_message", False)
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise RequestError(f"{name} must be a bool", name)
    if body.get("add_generation_prompt") and body.get("continue_final_message"):  # vLLM's check: both given
        raise RequestError(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.", "continue_final_message"
        )
    return flags


def text_messages(messages: Any) -> list[dict[str, Any]]:
    """The chat messages with each content as one string. Content given as parts is read as vLLM reads it
    (text parts joined by newlines); any other part is refused by its place, since this server's model reads
    text only and a read of the text alone would pass for a read of the image too."""
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise RequestError("messages must be a non-empty list of {role, content} with text content", "messages")
    read = []
    for i, message in enumerate(messages):
        if not isinstance(message.get("role"), str):
            raise RequestError(f"messages[{i}].role must be a string", f"messages[{i}].role")
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(_text_part(part, f"messages[{i}].content[{j}]") for j, part in enumerate(content))
        elif not isinstance(content, str):
            raise RequestError(
                f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content"
            )
        read.append({**message, "content": content})
    return read


def _text_part(part: Any, where: str) -> str:
    if not isinstance(part, dict):
        raise RequestError(f"{where} must be an object with a type, such as {{type: text, text}}", where)
    kind = part.get("type")
    if kind != "text":
        raise RequestError(
            f"{where} is a part of type {kind!r}, but this server reads text only (its model has no vision or "
            f"audio input): send the content as text, or serve a multimodal model with vLLM",
            where,
        )
    if not isinstance(part.get("text"), str):
        raise RequestError(f"{where}.text must be a string", f"{where}.text")
    return part["text"]


def create_app(
    engine: TransformersEngine,
    served_model_name: str,
    *,
    canvas_length: int = DEFAULT_MAX_WIDTH,
    max_logprobs: int = DEFAULT_MAX_LOGPROBS,
    service_latency_s: float = 0.0,
    memoize: bool = False,
    api_key: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
) -> FastAPI:
    """With `api_key`, every request must carry it as `Authorization: Bearer <api_key>` (vLLM's
    `--api-key`); without one, the server answers anyone who reaches it.

    For throughput benchmarks, where this server stands in for a GPU server:

    - `service_latency_s` is a GPU server's service time: each request is answered that long after it
      arrived (or as soon as it is ready, when reading it took longer), outside the model lock. This
      server's own parsing and encoding fall within it, as a real server's do within its latency, so a
      client with no cost of its own would reach in-flight / latency;
    - `memoize` answers a seeded read asked before from memory: what the model answered the first
      time, with none of this CPU's forward cost. The benchmark warms it with the same reads, so the
      timed pass measures the client against the configured latency, not this CPU's speed.
    """
    app = FastAPI(title="diffjev structured-read server (vLLM wire format)")
    if api_key:
        require_api_key(app, api_key)
    tokenizer = engine.tokenizer
    builder = engine.builder
    vocab = builder.format.vocab_size
    model_lock = threading.Lock()  # one forward at a time: the CPU has no spare cores for two
    answered: dict[bytes, tuple[dict[str, Any], dict[str, int]]] = {}

    def locked(fn, *args):
        with model_lock:
            return fn(*args)

    async def answer(started: float, content: Any) -> Response:
        """`content` encoded, sent `service_latency_s` after the request arrived at `started`."""
        response = json_response(content)
        await asyncio.sleep(service_latency_s - (time.perf_counter() - started))
        return response

    def check_model(name: Any) -> None:
        if name is not None and name != served_model_name:
            raise RequestError(f"The model `{name}` does not exist.", "model", 404)

    # The longest prompt this host reads: the model's own context may be far longer than its memory allows.
    own_limit = builder.max_prompt_tokens
    prompt_limit = max_model_len - canvas_length if own_limit is None else min(own_limit, max_model_len - canvas_length)

    def check_context(prompt_tokens: int, what: str = "your messages", param: str = "messages") -> None:
        """Refuse, as vLLM does, a prompt past the model's context: attention's memory grows with its square,
        and one 10 MB message would ask this host for hundreds of gigabytes."""
        if prompt_tokens > prompt_limit:
            raise RequestError(
                f"This model's maximum context length is {prompt_limit + canvas_length} tokens, "
                f"{canvas_length} of them the canvas. However, {what} {'have' if what.endswith('s') else 'has'} "
                f"at least {prompt_tokens} tokens. Please reduce the length of the {param}.",
                param,
            )

    def token_text(tid: int, as_ids: bool) -> str:
        return f"token_id:{tid}" if as_ids else tokenizer.decode([tid])

    @app.exception_handler(RequestError)
    async def _request_error(_: Request, exc: RequestError) -> JSONResponse:
        return error_response(exc.message, exc.status, exc.param)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_param(exc.errors())
        return error_response(message, 400, param)

    @app.exception_handler(Exception)
    async def _server_error(_: Request, exc: Exception) -> JSONResponse:
        """Anything else in vLLM's error shape too, never a plain-text page; the traceback stays in the log."""
        logger.error("a request failed", exc_info=exc)
        return error_response(f"the server could not read this request ({type(exc).__name__})", 500)

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        card = {
            "id": served_model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "diffjev",
            "root": engine.model_name,
        }
        card["max_model_len"] = prompt_limit + canvas_length  # vLLM's model card says how long a request may be
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        started = time.perf_counter()
        body = await _json_body(request)
        check_model(body.get("model"))
        messages = text_messages(body.get("messages"))
        if body.get("stream"):
            raise RequestError("this server does not stream", "stream")
        check_one_choice(body)
        sampling_refusal(body)
        lp = logprob_args(body, max_logprobs, vocab)
        diff = diffusion_args(body, canvas_length, vocab, max_steps)
        kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise RequestError("chat_template_kwargs must be an object", "chat_template_kwargs")
        if body.get("chat_template") is not None or "chat_template" in kwargs:
            raise RequestError(
                "Chat template is passed with request, but --trust-request-chat-template is not set. "
                "Refused request with untrusted chat template.",
                "chat_template",
            )
        reserved = sorted(RESERVED_TEMPLATE_KWARGS & set(kwargs))
        if reserved:
            raise RequestError(f"chat_template_kwargs may not set {', '.join(reserved)}", "chat_template_kwargs")
        kwargs = {**kwargs, **rendering_flags(body)}
        max_tokens = body.get("max_tokens")
        if max_tokens is not None and (not _is_int(max_tokens) or max_tokens <= 0):
            raise RequestError("max_tokens must be a positive int", "max_tokens")
        as_ids = bool_field(body, "return_tokens_as_token_ids")
        # With `memoize`, the same seeded read asked again gets the model's answer from the first time.
        key = (
            orjson.dumps([messages, kwargs, diff, lp, max_tokens, as_ids], option=orjson.OPT_SORT_KEYS)
            if memoize and diff["seed"] is not None
            else None
        )  # an unseeded canvas is never the same read
        choice_and_usage = answered.get(key) if key is not None else None
        if choice_and_usage is None:
            # Sure to be over before any rendering: the texts, the template's own arguments (a 10 MB `bos_token`
            # is text too), and a token at least for each message's turn markers.
            chars = sum(len(m["content"]) for m in messages) + len(orjson.dumps(kwargs))
            check_context(chars // MAX_CHARS_PER_TOKEN + len(messages))
            # Rendering and tokenising a long prompt takes seconds: off the event loop, so other requests go on.
            try:
                text = await run_in_threadpool(
                    lambda: tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
                )
            except ValueError as exc:  # e.g. a final message the template does not end with, to continue
                raise RequestError(str(exc), "messages") from None
            except (TypeError, jinja2.TemplateError) as exc:  # a kwarg the template cannot take
                raise RequestError(
                    f"the chat template failed with these kwargs: {exc}", "chat_template_kwargs"
                ) from None
            prompt = await run_in_threadpool(lambda: tokenizer(text, add_special_tokens=False)["input_ids"])
            check_context(len(prompt))
            canvas = diff["seed"] or [random.randrange(vocab) for _ in range(diff["width"])]  # unseeded: vLLM draws
            # read-only caps the output at the canvas width and ignores EOS: position i is canvas position i
            n_out = min(max_tokens or diff["width"], diff["width"])
            logprobs = await run_in_threadpool(
                locked, engine.denoised_logprobs, prompt, canvas, diff["pinned"], diff["steps"], n_out
            )
            choice_and_usage = _chat_choice(logprobs, lp, diff["constrained"], as_ids, len(prompt))
            if key is not None:
                answered[key] = choice_and_usage
        choice, usage = choice_and_usage
        return await answer(
            started,
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": served_model_name,
                "choices": [choice],
                "usage": usage,
            },
        )

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        started = time.perf_counter()
        body = await _json_body(request)
        check_model(body.get("model"))
        if body.get("stream"):
            raise RequestError("this server does not stream", "stream")
        if body.get("echo"):
            raise RequestError("this server does not echo the prompt", "echo")
        if body.get("suffix") is not None:  # vLLM renders a suffix only for FIM models, from text prompts
            raise RequestError("suffix requires text prompt input for FIM completion rendering", "suffix")
        check_one_choice(body)
        if body.get("prompt_logprobs") is not None:
            raise RequestError("this server does not return prompt logprobs", "prompt_logprobs")
        # Checking every id of up to 1,024 prompts takes seconds: off the event loop, so other requests go on.
        prompts = await run_in_threadpool(prompt_batch, body.get("prompt"), vocab)
        sampling_refusal(body)
        lp = completion_logprob_args(body, max_logprobs, vocab)
        diff = diffusion_args(body, canvas_length, vocab, max_steps)
        max_tokens = body.get("max_tokens", 16)  # CompletionRequest's default
        if max_tokens is not None and (not _is_int(max_tokens) or max_tokens <= 0):
            raise RequestError("max_tokens must be a positive int", "max_tokens")
        as_ids = bool_field(body, "return_tokens_as_token_ids")
        for i, prompt in enumerate(prompts):
            check_context(len(prompt), f"prompt {i}", "prompt")
        # read-only caps the output at the canvas width and ignores EOS: position i is canvas position i
        n_out = min(max_tokens or diff["width"], diff["width"])
        shared = orjson.dumps([diff, lp, n_out, as_ids], option=orjson.OPT_SORT_KEYS)
        choices, prompt_tokens = [], 0
        for index, prompt in enumerate(prompts):  # vLLM reads each prompt as a request of its own
            if index and await request.is_disconnected():
                # vLLM aborts a request whose caller hung up; reading on would hold the model lock for nobody
                logger.info("completions: the caller hung up after %d of %d prompts", index, len(prompts))
                return Response(status_code=499)
            key = shared + orjson.dumps(prompt) if memoize and diff["seed"] is not None else None
            choice = answered.get(key) if key is not None else None
            if choice is None:
                canvas = diff["seed"] or [random.randrange(vocab) for _ in range(diff["width"])]
                logprobs = await run_in_threadpool(
                    locked, engine.denoised_logprobs, prompt, canvas, diff["pinned"], diff["steps"], n_out
                )
                choice = _completion_choice(logprobs, lp, diff["constrained"], as_ids)
                if key is not None:
                    answered[key] = choice
            choices.append({**choice, "index": index})
            prompt_tokens += len(prompt)
        completion_tokens = n_out * len(prompts)
        return await answer(
            started,
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": served_model_name,
                "choices": choices,
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
        )

    def _completion_choice(logprobs, lp: dict[str, Any], constrained: bool, as_ids: bool) -> dict[str, Any]:
        """vLLM's completions choice for one read: the text, and per position the sampled token's logprob and
        a map of the candidates' (the sampled token first, then the asked ids or the top k)."""
        logprobs = _constrained(logprobs, lp) if constrained else logprobs
        top_ids = logprobs.argmax(dim=-1).tolist()
        shown = None
        if lp["logprobs"]:
            tokens, token_logprobs, top_logprobs, offsets, offset = [], [], [], [], 0
            for pos, tid in enumerate(top_ids):
                row = logprobs[pos]
                asked = (
                    lp["ids"] if lp["ids"] is not None else row.topk(lp["top"]).indices.tolist() if lp["top"] else []
                )
                candidates = list(dict.fromkeys([tid, *asked]))
                tokens.append(token_text(tid, as_ids))
                token_logprobs.append(max(float(row[tid]), -9999.0))
                top_logprobs.append(
                    {token_text(t, as_ids): max(v, -9999.0) for t, v in zip(candidates, row[candidates].tolist())}
                )
                offsets.append(offset)
                offset += len(tokenizer.decode([tid]))
            shown = {"text_offset": offsets, "token_logprobs": token_logprobs, "tokens": tokens}
            shown["top_logprobs"] = top_logprobs
        return {
            "text": tokenizer.decode(top_ids, skip_special_tokens=True),
            "logprobs": shown,
            # a read-only read ignores EOS and is capped at the canvas: it always ends at its length
            "finish_reason": "length",
            "stop_reason": None,
            "prompt_logprobs": None,
        }

    def _chat_choice(
        logprobs, lp: dict[str, Any], constrained: bool, as_ids: bool, prompt_tokens: int
    ) -> tuple[dict[str, Any], dict[str, int]]:
        """vLLM's `choices[0]` and `usage` for one read's `(positions, vocab)` log-probabilities."""
        logprobs = _constrained(logprobs, lp) if constrained else logprobs
        top_ids = logprobs.argmax(dim=-1).tolist()
        content = None
        if lp["logprobs"]:
            content = []
            for pos, tid in enumerate(top_ids):
                row = logprobs[pos]
                # vLLM's candidates at a position: the sampled token first, then the asked ids (all of them)
                # or the top k, each once; top-k keeps the first k of those.
                asked = lp["ids"] if lp["ids"] is not None else row.topk(lp["top"]).indices.tolist()
                candidates = list(dict.fromkeys([tid, *asked]))
                if lp["ids"] is None:
                    candidates = candidates[: lp["top"]]
                values = row[candidates].tolist()
                text = tokenizer.decode([tid])
                content.append(
                    {
                        "token": token_text(tid, as_ids),
                        "logprob": max(float(row[tid]), -9999.0),
                        # the entry's bytes are its decoded text's, even where its token is token_id:N
                        "bytes": list(text.encode("utf-8", errors="replace")),
                        "top_logprobs": [
                            {
                                "token": (shown := token_text(t, as_ids)),
                                "logprob": max(v, -9999.0),
                                "bytes": list(shown.encode("utf-8", errors="replace")),
                            }
                            for t, v in zip(candidates, values)
                        ],
                    }
                )
        n_out = len(top_ids)
        choice = {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": tokenizer.decode(top_ids, skip_special_tokens=True),
                "tool_calls": [],
            },
            "logprobs": {"content": content} if content is not None else None,
            # a read-only read ignores EOS and is capped at the canvas: it always ends at its length
            "finish_reason": "length",
            "stop_reason": None,
        }
        return choice, {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": n_out,
            "total_tokens": prompt_tokens + n_out,
        }

    @app.post("/v1/systemone")
    async def systemone(request: Request) -> Response:
        started = time.perf_counter()
        body = await _json_body(request)
        req = _validated(StructuredDecisionRequest, body)
        check_model(req.model)
        if req.images or req.audio or req.videos:
            raise RequestError("this server reads text states only; send no images, audio or videos", "images")
        # vLLM names the read after the caller's X-Request-Id header where one is sent, else `request_id`.
        request_id = f"decision-{request.headers.get('X-Request-Id') or req.request_id}"
        try:
            schema = req.upstream_schema()
        except UpstreamError as exc:
            raise RequestError(str(exc), "questions") from None
        fields = {"state": req.state, "instructions": req.instructions, "questions": body["questions"]}
        canvases, joint = await run_in_threadpool(
            decision_canvases, schema, req.state, req.instructions or "", req.joint, fields
        )
        reads = await run_in_threadpool(locked, read_upstream, engine, canvases)
        return await answer(
            started,
            {
                "id": request_id,
                "object": "structured_decision",
                "created": int(time.time()),
                "model": served_model_name,
                "answers": {q.id: upstream_answer(q, reads[q.id]) for q in schema.questions},
                "usage": {
                    "input_tokens": sum(len(c.prompt_ids) for c in canvases),
                    "output_tokens": sum(c.reply_tokens for c in canvases),
                },
                "diagnostics": {
                    q.id: {"label_mass": reads[q.id].label_mass, "argmax_is_label": reads[q.id].argmax_is_label}
                    for q in schema.questions
                },
                # As vLLM 0.33: null unless read jointly (one question reads on its own prompt, joint or not).
                "joint": {"canvases": joint_diagnostics(canvases)} if joint else None,
                "latency_ms": elapsed_ms(started),
            },
        )

    @app.post("/v1/decisions")
    async def decisions(request: Request) -> Response:
        started = time.perf_counter()
        body = await _json_body(request)
        req = _validated(DecisionRequest, body)
        check_model(req.model)
        try:
            schema = req.read_schema()
        except UpstreamError as exc:
            raise RequestError(str(exc), "questions") from None
        # The Decisions API has no instructions field: the input alone is the state.
        fields = {"input": body.get("input"), "questions": body.get("questions")}
        canvases, _ = await run_in_threadpool(decision_canvases, schema, req.input_text(), "", req.joint, fields)
        reads = await run_in_threadpool(locked, read_upstream, engine, canvases)
        answers = [decision_answer(asked, reads[q.id]) for q, asked in zip(schema.questions, req.questions)]
        input_tokens = sum(len(c.prompt_ids) for c in canvases)
        output_tokens = sum(c.reply_tokens for c in canvases)
        return await answer(
            started,
            {
                "model": served_model_name,
                "answers": answers,
                "usage": {
                    "input_tokens": input_tokens,
                    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                    "output_tokens": output_tokens,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": input_tokens + output_tokens,
                },
            },
        )

    def decision_canvases(
        schema: Schema, state: Any, instructions: str, joint: bool, fields: dict[str, Any]
    ) -> tuple[list[Canvas], bool]:
        """The canvases a read takes, and whether they are joint. As vLLM 0.33: one question reads best on
        its own prompt, and where the joint answer lines do not fit the tokenizer the read falls back to one
        canvas per question, with a warning. A read past the context names the longest of the request's
        `fields` as the one to shorten."""

        def per_question() -> list[Canvas]:
            try:
                return [question_canvas(builder, q, state, instructions) for q in schema.questions]
            except (SchemaError, UpstreamError) as exc:
                raise RequestError(str(exc), "questions") from None

        if not joint or len(schema.questions) < 2:
            canvases, joint = per_question(), False
        else:
            try:
                canvases = joint_canvases(builder, schema, state, instructions, canvas_length)
            except SchemaError as exc:
                logger.warning("joint read falls back to one read per question: %s", exc)
                canvases, joint = per_question(), False
        # The builder cuts a state to the model's own context; this host's (--max-model-len) may be shorter,
        # and questions and instructions are never cut.
        most_tokens = max((len(canvas.prompt_ids) for canvas in canvases), default=0)
        if most_tokens > prompt_limit:  # the fields are measured only then: a read's state may be megabytes
            check_context(most_tokens, "the questions, instructions and state", longest_field(fields))
        return canvases, joint

    return app


def _constrained(logprobs, lp: dict[str, Any]):
    """`diffusion_constrained`: the logprobs normalised over the requested ids only."""
    ids = lp["ids"]
    sub = logprobs[:, ids]
    out = logprobs.new_full(logprobs.shape, float("-inf"))
    out[:, ids] = sub - sub.logsumexp(dim=-1, keepdim=True)
    return out


def joint_diagnostics(canvases: list[Canvas]) -> list[dict[str, Any]]:
    """vLLM 0.33's `joint` canvases: per canvas, the question ids it read, its width and each slot's position."""
    return [{"questions": list(c.slots), "width": len(c.ids), "slots": list(c.slots.values())} for c in canvases]


def longest_field(fields: dict[str, Any]) -> str:
    """The name of the field whose JSON is longest: the one a caller past the context should shorten."""
    return max(fields, key=lambda name: _json_size(fields[name]))


def _json_size(value: Any) -> int:
    try:
        return len(orjson.dumps(value))
    except orjson.JSONEncodeError:  # nested past orjson's 255 levels: the json module goes deeper
        try:
            return len(json.dumps(value, ensure_ascii=False))
        except RecursionError:
            return 0


def _validated(model: type[BaseModel], body: dict[str, Any]) -> Any:
    """The request as `model`, or vLLM's 400 naming the first bad field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise RequestError(*validation_param(exc.errors())) from None


def json_response(content: Any) -> Response:
    """orjson encodes a read's few hundred logprob entries several times faster than the json module."""
    return Response(orjson.dumps(content), media_type="application/json")


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.body())
    except ValueError:
        raise RequestError("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    return body
