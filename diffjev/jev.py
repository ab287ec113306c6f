"""The Jev decision API's per-question read, as vLLM's own `/v1/systemone` makes it for DiffusionGemma.

Upstream reads one question per canvas: the chat prompt (state, the question, its options and a reply
instruction) plus the closed thought block, and a 16-wide canvas `[noise, turn close, pad, ...]` whose
noise is seeded by the sha256 of the prompt ids, so a repeated read is identical. diffjev's own reads put
every question on one joint canvas instead; this module exists to serve and to measure the upstream way.

With `joint: true` (vLLM 0.33, `DiffusionGemmaCanvasStrategy.read_joint`) upstream reads the questions
together on its own joint layout (`joint_canvases`):

- The user turn is the state, then each question as `Question {k}: {instructions}` with its option lines and
  reply instruction, then `Reply with one line per question, in order, formatted as "number: answer".`; the
  schema's instructions, if any, are a system message ahead of it. The closed thought block closes the
  prompt, outside the canvas.
- The canvas is one answer line per question, `{k}: <noise>\\n`, then the turn-close token, padded to a
  multiple of 16 and capped at the served width.
- Questions are split, in order, into the fewest even chunks whose lines, turn close and a pad row fit the
  served width; each chunk is one read.
- A slot's noise is drawn from a `random.Random` seeded by the sha256 of the prompt ids, so a repeated read
  is identical.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from diffjev.canvas import Canvas, CanvasBuilder, WIDTH_STEP, option_lines, render_state, resolve_layout
from diffjev.decide import Decision, decide
from diffjev.schema import Question, Schema, SchemaError
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


JOINT_REPLY = 'Reply with one line per question, in order, formatted as "number: answer".'


def joint_question(number: int, question: Question) -> str:
    lines = question.type.option_lines(question, separator=": ", describe=" - {}")
    return f"Question {number}: {question.instructions}\n" + "\n".join(lines) + f"\n{question.type.reply_instruction}"


def answer_line(tokenizer: Any, number: int, question: Question) -> tuple[list[int], list[int]]:
    """The answer line's ids before its label, and each label's id at the end of the line; SchemaError
    where a line is not a prefix and one label token (upstream then reads each question on its own)."""
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    newline = encode("\n")
    prefix = encode(f"{number}: {question.labels[0]}")[:-1]
    ids = []
    for label in question.labels:
        line = encode(f"{number}: {label}")
        if line[:-1] != prefix or encode(f"{number}: {label}\n{number}: {label}") != line + newline + line:
            raise SchemaError(f"the answer line {number}: {label} is not a prefix and one label token")
        ids.append(line[-1])
    return prefix, ids


def joint_chunks(rows: list[int], served_width: int) -> list[tuple[int, int]]:
    """The fewest even runs of questions whose rows, the turn close and a pad row fit the canvas."""
    n = len(rows)
    for count in range(1, n):
        size, extra = divmod(n, count)
        bounds = [i * size + min(i, extra) for i in range(count + 1)]
        spans = list(zip(bounds, bounds[1:]))
        if all(1 + sum(rows[a:b]) < served_width for a, b in spans):
            return spans
    return [(i, i + 1) for i in range(n)]


def joint_canvases(
    builder: CanvasBuilder, schema: Schema, state: Any, instructions: str, served_width: int
) -> list[Canvas]:
    """One canvas per chunk of the schema's questions, numbered from 1 across the chunks."""
    fmt, tokenizer = builder.format, builder.tokenizer
    questions = list(schema.questions)
    lines = [answer_line(tokenizer, k, q) for k, q in enumerate(questions, 1)]
    newline = tokenizer.encode("\n", add_special_tokens=False)
    if len(newline) != 1:
        raise SchemaError("joint reads need a newline that is one token")
    chunks = joint_chunks([len(prefix) + 2 for prefix, _ in lines], served_width)
    canvases = []
    for a, b in chunks:
        asks = "\n\n".join(joint_question(k, q) for k, q in enumerate(questions[a:b], a + 1))
        messages = [{"role": "user", "content": f"{render_state(state)}\n\n{asks}\n\n{JOINT_REPLY}"}]
        if instructions:
            messages.insert(0, {"role": "system", "content": instructions})
        prompt = list(builder.prompt_ids(messages))
        rng = random.Random(hashlib.sha256(json.dumps(prompt).encode()).digest())
        ids: list[int] = []
        slots, label_ids = {}, {}
        for q, (prefix, labels) in zip(questions[a:b], lines[a:b]):
            ids += prefix
            slots[q.id] = len(ids)
            label_ids[q.id] = tuple(labels)
            ids += [fmt.mask_id if fmt.noise == "mask" else rng.randrange(fmt.vocab_size), *newline]
        ids.append(fmt.turn_close_id)
        width = min(-(-(len(ids) + 1) // WIDTH_STEP) * WIDTH_STEP, served_width)
        ids += [fmt.pad_id] * (width - len(ids))
        canvases.append(
            Canvas(
                tuple(messages),
                tuple(prompt) + tuple(fmt.head_ids),
                tuple(ids),
                slots,
                label_ids,
                seed=0,
                reply_tokens=max(slots.values()) + 1,
            )
        )
    return canvases


def read_joint(engine: Any, schema: Schema, state: Any, served_width: int) -> Decision:
    """One item read by a canvas engine on upstream's joint canvases, to answers; `model_passes` in its
    diagnostics is the number of canvases."""
    canvases = joint_canvases(engine.builder, schema, state, schema.instructions or "", served_width)
    reads = engine.read(canvases)
    label_ids = {qid: ids for canvas in canvases for qid, ids in canvas.label_ids.items()}
    merged = {qid: slot for read in reads for qid, slot in read.items()}
    return Decision(decide(schema, [merged], label_ids), schema, {"model_passes": len(canvases)})
