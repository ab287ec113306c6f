"""A diffusion model in-process through transformers.

DiffusionGemma: the prompt goes to the encoder, the seeded canvas to the bidirectional decoder, in one
call; that single decoder pass with no self-conditioning is a one-step read-only read. A masked
diffusion LM (ModernBERT-style): one bidirectional pass over prompt + canvas, slots holding the mask.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from diffjev.canvas import Canvas, CanvasBuilder, DEFAULT_MAX_WIDTH, ModelFormat
from diffjev.decide import SlotRead
from diffjev.engines._torch import batched_by_shape, head_logprobs, resolve_device, slot_reads
from diffjev.engines.base import DEFAULT_MAX_MODEL_LEN, CanvasEngine, EngineError, prompt_token_limit
from diffjev.models import from_pretrained, load_tokenizer


def diffusion_family(model: Any) -> str:
    """'diffusion_gemma' (uniform-state, encoder + canvas decoder) or 'masked' (absorbing-state MLM)."""
    if model.config.model_type == "diffusion_gemma":
        return "diffusion_gemma"
    if type(model).__name__.endswith("ForMaskedLM"):
        return "masked"
    raise EngineError(
        f"TransformersEngine reads diffusion models (DiffusionGemma or a masked LM); "
        f"{type(model).__name__} is neither. Use AutoregressiveEngine for a causal LM."
    )


def load_diffusion_model(spec: str, dtype: torch.dtype | None) -> Any:
    from transformers import AutoConfig, AutoModelForMaskedLM

    config = from_pretrained(AutoConfig, spec, "model config")
    if config.model_type == "diffusion_gemma":
        from transformers import DiffusionGemmaForBlockDiffusion as loader
    else:
        loader = AutoModelForMaskedLM
    return from_pretrained(loader, spec, "model", dtype=dtype)


class TransformersEngine(CanvasEngine):
    name = "transformers"

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        batch_size: int = 8,
        canvas_length: int = DEFAULT_MAX_WIDTH,
        thought: str = "prompt",
        max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    ):
        if isinstance(model, str):
            self.model_name = model
            model = load_diffusion_model(model, dtype)
        else:
            self.model_name = getattr(model.config, "name_or_path", "") or type(model).__name__
        if tokenizer is None:
            tokenizer = self.model_name
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.family = diffusion_family(model)
        self.tokenizer = load_tokenizer(tokenizer)
        vocab = self.model.config.get_text_config().vocab_size
        fmt = ModelFormat.from_tokenizer(
            self.tokenizer, "uniform" if self.family == "diffusion_gemma" else "mask", vocab_size=vocab
        )
        self.builder = CanvasBuilder(
            self.tokenizer,
            fmt,
            canvas_length,
            max_prompt_tokens=prompt_token_limit(self.model, canvas_length, max_model_len),
            thought=thought,
        )
        self.thought_layout = self.builder.thought_placement  # where the thought block went, kept with a run
        self.batch_size = batch_size

    def read(self, canvases: Sequence[Canvas]) -> list[dict[str, SlotRead]]:
        return batched_by_shape(canvases, self.batch_size, self._read_batch)

    @torch.inference_mode()
    def _read_batch(self, canvases: list[Canvas]) -> list[dict[str, SlotRead]]:
        prompt = torch.tensor([c.prompt_ids for c in canvases], device=self.device)
        canvas = torch.tensor([c.ids for c in canvases], device=self.device)
        hidden = self._canvas_hidden(prompt, canvas)
        positions = torch.tensor([list(c.slots.values()) for c in canvases], device=self.device)
        rows = hidden[torch.arange(len(canvases), device=self.device)[:, None], positions]
        logprobs = head_logprobs(self.model, rows).cpu()
        return [slot_reads(lp, c) for lp, c in zip(logprobs, canvases)]

    def _canvas_hidden(self, prompt: torch.Tensor, canvas: torch.Tensor) -> torch.Tensor:
        """The backbone's last hidden states at the canvas positions: `(batch, width, hidden)`."""
        if self.family == "diffusion_gemma":
            return self.model.model(input_ids=prompt, decoder_input_ids=canvas).last_hidden_state
        hidden = self.model.model(input_ids=torch.cat([prompt, canvas], dim=1)).last_hidden_state
        return hidden[:, prompt.shape[1] :]

    @torch.inference_mode()
    def canvas_logprobs(
        self, prompt_ids: Sequence[int], canvas_ids: Sequence[int], rows: int | None = None
    ) -> torch.Tensor:
        """Log-probabilities over the canvas (what a server returns under read-only): `(width, vocab)`
        through the model's own full forward, or, given `rows`, `(rows, vocab)` for the first `rows`
        positions with the head applied there only (a server answering `max_tokens` below the width)."""
        prompt = torch.tensor([list(prompt_ids)], device=self.device)
        ids = torch.tensor([list(canvas_ids)], device=self.device)
        if rows is not None:
            return head_logprobs(self.model, self._canvas_hidden(prompt, ids)[0, :rows]).cpu()
        if self.family == "diffusion_gemma":
            logits = self.model(input_ids=prompt, decoder_input_ids=ids).logits[0]
        else:
            logits = self.model(input_ids=torch.cat([prompt, ids], dim=1)).logits[0, prompt.shape[1] :]
        return torch.log_softmax(logits.float(), dim=-1).cpu()

    @torch.inference_mode()
    def denoised_logprobs(
        self,
        prompt_ids: Sequence[int],
        canvas_ids: Sequence[int],
        pinned: Sequence[int] = (),
        steps: int = 1,
        rows: int | None = None,
    ) -> torch.Tensor:
        """A read of `steps` denoise steps: every step but the last writes its likeliest token into each
        position not pinned (pinned ones keep their seed value), and the last step's temperature-1
        logprobs are returned, as `canvas_logprobs`. vLLM's sampler accepts by an entropy bound and
        renoises the rest; this greedy schedule is its deterministic approximation."""
        ids = list(canvas_ids)
        held = set(pinned)
        open_positions = [p for p in range(len(ids)) if p not in held]
        prompt = torch.tensor([list(prompt_ids)], device=self.device)
        for _ in range(max(1, steps) - 1):
            if not open_positions:
                break
            hidden = self._canvas_hidden(prompt, torch.tensor([ids], device=self.device))[0, open_positions]
            for position, token in zip(open_positions, head_logprobs(self.model, hidden).argmax(dim=-1).tolist()):
                ids[position] = int(token)
        return self.canvas_logprobs(prompt_ids, ids, rows)

    def read_blanks(self, canvases: Sequence[Any]) -> list[list[dict[int, float]]]:
        out = []
        for canvas in canvases:
            logprobs = self.denoised_logprobs(
                canvas.prompt_ids, canvas.ids, canvas.pinned, canvas.steps, rows=canvas.reply_tokens
            )
            wanted = list(canvas.request_ids)
            out.append([dict(zip(wanted, logprobs[p, wanted].tolist())) for p in canvas.blank])
        return out
