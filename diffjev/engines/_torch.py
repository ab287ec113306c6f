"""Shared pieces of the in-process engines: the output head applied at slot rows only, and grouping
canvases into batches that stack without padding."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Sequence

import torch

from diffjev.canvas import Canvas
from diffjev.decide import SlotRead


def head_logprobs(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """Full-vocabulary log-probabilities at temperature 1 for the given hidden rows.

    Applying the head only where a slot is keeps a read cheap: with a 262k vocabulary the head over
    every canvas or prompt position costs more than the backbone.
    """
    if hasattr(model, "head") and hasattr(model, "decoder"):  # ModernBERT-style MLM: transform, then decoder
        logits = model.decoder(model.head(hidden))
    else:
        logits = model.get_output_embeddings()(hidden)
    logits = logits.float()
    cap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return torch.log_softmax(logits, dim=-1)


def slot_reads(logprobs: torch.Tensor, canvas: Canvas) -> dict[str, SlotRead]:
    """`logprobs` holds one row per slot, in `canvas.slots` order."""
    out = {}
    for row, (qid, _) in zip(logprobs, canvas.slots.items()):
        ids = canvas.label_ids[qid]
        values = row[list(ids)].tolist()
        out[qid] = SlotRead(dict(zip(ids, values)), int(row.argmax()))
    return out


def batched_by_shape(
    canvases: Sequence[Canvas], batch_size: int, read_batch: Callable[[list[Canvas]], list[dict[str, SlotRead]]]
) -> list[dict[str, SlotRead]]:
    """Read canvases in batches of equal prompt length and width, so they stack with no padding and
    every read is exactly what it would be alone."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, c in enumerate(canvases):
        groups[(len(c.prompt_ids), c.width)].append(i)
    results: list[dict[str, SlotRead] | None] = [None] * len(canvases)
    for indices in groups.values():
        for start in range(0, len(indices), batch_size):
            part = indices[start : start + batch_size]
            for i, read in zip(part, read_batch([canvases[i] for i in part])):
                results[i] = read
    return results  # type: ignore[return-value]


def resolve_device(device: str | None) -> torch.device:
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
