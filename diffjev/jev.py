"""The Jev decision API's per-question read, as vLLM's own `/v1/systemone` makes it for DiffusionGemma.

Upstream reads one question per canvas: the chat prompt (state, the question, its options and a reply
instruction) plus the closed thought block, and a 16-wide canvas `[noise, turn close, pad, ...]` whose
noise is seeded by the sha256 of the prompt ids, so a repeated read is identical. diffjev's own reads put
every question on one joint canvas instead; this module exists to serve and to measure the upstream way.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from diffjev.canvas import Canvas, CanvasBuilder, WIDTH_STEP, option_lines, render_state, resolve_layout
from diffjev.schema import Question, Schema
from diffjev.template import Template


def check_upstream_limits(schema: Schema) -> None:
    """Refuse what vLLM's API cannot take (a score labels its levels 0..9 only, so at most ten)."""
    for q in schema.questions:
        q.type.check_jev(q)


def question_messages(question: Question, state: Any, instructions: str = "") -> tuple[dict[str, str], ...]:
    lines = option_lines(question, separator=": ", describe=" - {}")
    user = (
        f"{render_state(state)}\n\nQuestion: {question.instructions}\n"
        + "\n".join(lines)
        + f"\n{question.type.reply_instruction}"
    )
    messages = [{"role": "user", "content": user}]
    if instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    return tuple(messages)


def question_canvas(builder: CanvasBuilder, question: Question, state: Any, instructions: str = "") -> Canvas:
    """One question's upstream read: the thought block closes the prompt, the slot opens the canvas."""
    fmt = builder.format
    messages = question_messages(question, state, instructions)
    prompt = builder.prompt_ids(messages) + fmt.head_ids
    layout = resolve_layout(
        builder.tokenizer, fmt, Template.parse("{%s}" % question.id), [question], max_width=WIDTH_STEP, head_ids=()
    )
    ids = list(layout.clear_ids)
    slot = layout.slots[question.id]
    if fmt.noise == "mask":
        ids[slot] = fmt.mask_id
    else:
        digest = hashlib.sha256(",".join(map(str, prompt)).encode()).digest()
        ids[slot] = random.Random(int.from_bytes(digest[:8], "big")).randrange(fmt.vocab_size)
    return Canvas(
        messages, tuple(prompt), tuple(ids), layout.slots, layout.label_ids, seed=0, reply_tokens=layout.reply_tokens
    )
