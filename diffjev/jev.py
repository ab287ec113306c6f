"""vLLM 0.33's decision reads for DiffusionGemma (`DiffusionGemmaCanvasStrategy`), as its `/v1/systemone`
and `/v1/decisions` make them; diffjev's own reads put every question on its template canvas instead, and
this module exists to serve and to measure the upstream way.

- Questions are parsed as vLLM's `build_question` parses them (`upstream_schema`), with its messages.
- Per question (`question_canvas`): the chat prompt (the state, `Question: {instructions}` where there are
  instructions, the option lines and the reply instruction), then the closed thought block outside the
  canvas, and a 16-wide canvas `[noise, turn close, pad, ...]`. A label is its token as the reply's first.
- Jointly (`joint_canvases`, `joint: true`): the user turn is the state, then each question as
  `Question {k}: {instructions}` with its option lines and reply instruction, then `Reply with one line per
  question, in order, formatted as "number: answer".`. The canvas is one answer line per question,
  `{k}: <noise>\\n`, then the turn close, padded to a multiple of 16 and capped at the served width; the
  questions split, in order, into the fewest even chunks that fit, one read each. A label counts under
  both its spellings, the answer line's token and the reply's first token, and scores the larger.
- The noise is drawn from `random.Random(sha256(json.dumps(prompt_ids)).digest())` over the model's
  vocabulary, the prompt ids without the thought block, so a repeated read is identical.
- Prompts are rendered with `enable_thinking: false`, whatever the builder's chat template kwargs say.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from diffjev.canvas import Canvas, CanvasBuilder, WIDTH_STEP
from diffjev.decide import Decision, SlotRead, decide
from diffjev.question_types import DIGITS, LETTERS, Alternative
from diffjev.schema import Question, SamplingPolicy, Schema, SchemaError

logger = logging.getLogger(__name__)

# vLLM's DecisionLimits for DiffusionGemma: questions per request; a question's options are its type's labels.
UPSTREAM_MAX_QUESTIONS = 64
UPSTREAM_LABELS = {"choice": LETTERS, "yes_no": ("yes", "no"), "score": DIGITS}
UPSTREAM_TYPES = {"choice": "choice", "noul": "yes_no", "score": "score"}  # the wire name -> diffjev's kind
UPSTREAM_QUESTION_FIELDS = {"type", "instructions", "criteria"}
JOINT_REPLY = 'Reply with one line per question, in order, formatted as "number: answer".'
THINKING_ON = "a read is the reply's first token, so thinking must be off"


class UpstreamError(ValueError):
    """A request vLLM refuses with a 400; the message is vLLM's own."""


def check_upstream_limits(schema: Schema) -> None:
    """Refuse what vLLM's API cannot take (a score labels its levels 0..9 only, so at most ten)."""
    for q in schema.questions:
        q.type.check_jev(q)


# --- questions, as vLLM's question_types.build_question parses them --------------------------------------


def upstream_schema(
    questions: Mapping[str, Mapping[str, Any]],
    instructions: str | None = None,
    own_kinds: Mapping[str, Callable[[str, Mapping[str, Any]], Question]] | None = None,
) -> Schema:
    """The request's `{id: {type, instructions, criteria}}` as vLLM reads them, in order; UpstreamError
    with vLLM's message where it refuses one. `own_kinds` parses types vLLM does not have (the studio's
    span questions), by type name, with their own fields."""
    if not questions:
        raise UpstreamError("questions: needs at least one question")
    if len(questions) > UPSTREAM_MAX_QUESTIONS:
        raise UpstreamError(f"questions: at most {UPSTREAM_MAX_QUESTIONS} for this model")
    own_kinds = own_kinds or {}
    parsed = []
    for qid, q in questions.items():
        own = own_kinds.get(q.get("type")) if isinstance(q.get("type"), str) else None
        if own is not None:
            parsed.append(own(qid, q))
            continue
        unknown = sorted(set(q) - UPSTREAM_QUESTION_FIELDS)
        if unknown:
            raise UpstreamError(f"question {qid!r}: unknown field(s) {unknown}")
        parsed.append(upstream_question(qid, q.get("type"), q.get("instructions", ""), q.get("criteria")))
    # Built directly: diffjev's own parser is stricter (it trims names, wants two options) than vLLM's.
    return Schema(tuple(parsed), instructions=instructions or "", sampling=SamplingPolicy(samples=1))


def upstream_question(qid: str, type_name: Any, instructions: Any, criteria: Any) -> Question:
    if not qid:
        raise UpstreamError("question ids must be non-empty")
    kind = UPSTREAM_TYPES.get(type_name) if isinstance(type_name, str) else None
    if kind is None:
        raise UpstreamError(
            f"question {qid!r}: unknown question type {type_name!r}; supported: {sorted(UPSTREAM_TYPES)}"
        )
    options = _upstream_options(qid, kind, criteria)
    if not options:
        raise UpstreamError(f"question {qid!r}: needs at least one option")
    names = [name for name, _ in options]
    if len(set(names)) != len(names):
        raise UpstreamError(f"question {qid!r}: duplicate option names")
    labels = UPSTREAM_LABELS[kind]
    if len(options) > len(labels):
        raise UpstreamError(f"question {qid!r}: at most {len(labels)} options for this model")
    if not isinstance(instructions, str):
        instructions = "" if instructions is None else str(instructions)
    alternatives = tuple(Alternative(name, label, desc) for (name, desc), label in zip(options, labels))
    return Question(qid, kind, instructions, alternatives)


def _upstream_options(qid: str, kind: str, criteria: Any) -> list[tuple[str, str | None]]:
    text = lambda value: None if value is None else str(value)  # noqa: E731
    if kind == "choice":
        if not isinstance(criteria, dict) or not criteria:
            raise UpstreamError(f"question {qid!r}: choice criteria must map option names to a description or null")
        return [(str(name), text(desc)) for name, desc in criteria.items()]
    if kind == "yes_no":
        if isinstance(criteria, str):  # a client's plain description of what makes the answer yes
            criteria = {"true": criteria}
        if criteria is not None and (not isinstance(criteria, dict) or not criteria.keys() <= {"true", "false"}):
            raise UpstreamError(
                f"question {qid!r}: noul criteria must be an object with true and false, or the text of yes"
            )
        criteria = criteria or {}
        return [("yes", text(criteria.get("true"))), ("no", text(criteria.get("false")))]
    if not isinstance(criteria, list) or len(criteria) < 2:
        raise UpstreamError(f"question {qid!r}: score criteria must be an ordered list of levels")
    return [(str(level), None) for level in criteria]


def question_body(question: Question) -> str:
    """The option lines (`label: name - description`) and the reply instruction."""
    lines = question.type.option_lines(question, separator=": ", describe=" - {}")
    return "\n".join([*lines, question.type.reply_instruction])


def state_text(state: Any) -> str:
    return state if isinstance(state, str) else json.dumps(state, ensure_ascii=False)


# --- prompts and canvases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpstreamCanvas(Canvas):
    """A canvas as vLLM reads it. `label_ids` holds each label's token at the slot (one per label, as every
    canvas has it); `label_groups` every token that counts for a label, the larger logprob scoring it."""

    label_groups: Mapping[str, tuple[tuple[int, ...], ...]] = field(default_factory=dict)

    @property
    def request_ids(self) -> dict[str, tuple[int, ...]]:
        """Per slot, the union of the canvas's label ids: the logprob_token_ids of its one read."""
        union = tuple(sorted({i for groups in self.label_groups.values() for g in groups for i in g}))
        return {qid: union for qid in self.slots}


def upstream_prompt_ids(
    builder: CanvasBuilder, messages: Sequence[Mapping[str, str]], chat_template_kwargs: Mapping | None = None
) -> list[int]:
    """The chat prompt's ids as vLLM renders a read: thinking off over the builder's kwargs (a read is the
    reply's first token), then the request's own kwargs, which may not turn it on."""
    if (chat_template_kwargs or {}).get("enable_thinking"):
        raise UpstreamError(THINKING_ON)
    kwargs = {**builder.chat_template_kwargs, "enable_thinking": False, **(chat_template_kwargs or {})}
    text = builder.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True, **kwargs)
    return list(builder.tokenizer(text, add_special_tokens=False)["input_ids"])


def prompt_noise(prompt_ids: Sequence[int]) -> random.Random:
    """vLLM's noise source for a read: seeded by the prompt (without the thought block)."""
    return random.Random(hashlib.sha256(json.dumps(list(prompt_ids)).encode()).digest())


def reply_label_ids(builder: CanvasBuilder, labels: Sequence[str]) -> list[int]:
    """Each label's token as the reply's first, after the thought block (vLLM's reply_label_ids)."""
    tokenizer = builder.tokenizer
    head = list(builder.format.head_ids)
    added = set(tokenizer.get_added_vocab().values())
    tail = head[max((i + 1 for i, t in enumerate(head) if t in added), default=0) :]
    text = tokenizer.decode(tail)
    ids: list[int] = []
    for label in labels:
        extended = tokenizer.encode(text + label, add_special_tokens=False)
        if extended[:-1] != tail or extended[-1] in ids:
            raise SchemaError(f"label {label!r} is not one distinct token after this model's chat prompt")
        ids.append(extended[-1])
    return ids


def _messages(user: str, instructions: str | None) -> tuple[dict[str, str], ...]:
    system = ({"role": "system", "content": instructions},) if instructions else ()
    return (*system, {"role": "user", "content": user})


def question_messages(question: Question, state: Any, instructions: str | None = "") -> tuple[dict[str, str], ...]:
    body = question_body(question)
    asked = f"Question: {question.instructions}\n{body}" if question.instructions else body
    return _messages(f"{state_text(state)}\n\n{asked}", instructions)


def question_canvas(
    builder: CanvasBuilder,
    question: Question,
    state: Any,
    instructions: str | None = "",
    chat_template_kwargs: Mapping | None = None,
) -> UpstreamCanvas:
    """One question's upstream read: the thought block closes the prompt, the slot opens the canvas."""
    fmt = builder.format
    messages = question_messages(question, state, instructions)
    prompt = upstream_prompt_ids(builder, messages, chat_template_kwargs)
    noise = fmt.mask_id if fmt.noise == "mask" else prompt_noise(prompt).randrange(fmt.vocab_size)
    ids = [noise, fmt.turn_close_id] + [fmt.pad_id] * (WIDTH_STEP - 2)
    labels = tuple(reply_label_ids(builder, question.labels))
    return UpstreamCanvas(
        messages,
        tuple(prompt) + tuple(fmt.head_ids),
        tuple(ids),
        {question.id: 0},
        {question.id: labels},
        seed=0,
        reply_tokens=2,
        label_groups={question.id: tuple((i,) for i in labels)},
    )


def answer_line(tokenizer: Any, number: int, labels: Sequence[str]) -> tuple[list[int], list[int]]:
    """The answer line's ids before its label, and each label's id at the end of the line; SchemaError
    where a line is not a prefix and one label token."""
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    newline = encode("\n")
    prefix = encode(f"{number}: {labels[0]}")[:-1]
    ids = []
    for label in labels:
        line = encode(f"{number}: {label}")
        if line[:-1] != prefix or encode(f"{number}: {label}\n{number}: {label}") != line + newline + line:
            raise SchemaError(f"the answer line {number}: {label} is not a prefix and one label token")
        ids.append(line[-1])
    return prefix, ids


def joint_reads_off(builder: CanvasBuilder) -> str | None:
    """Why this model cannot read jointly, or None: vLLM 0.33 checks once, at startup, that a newline is one
    token and that every answer line `k: label` (k up to the question limit, every type's labels) is the
    same prefix and one label token, the same token for every k; and that the labels' ids fit one request."""
    tokenizer = builder.tokenizer
    if len(tokenizer.encode("\n", add_special_tokens=False)) != 1:
        return "a newline is not one token"
    slot_ids: dict[str, int] = {}
    for k in range(1, UPSTREAM_MAX_QUESTIONS + 1):
        for labels in UPSTREAM_LABELS.values():
            try:
                _, ids = answer_line(tokenizer, k, labels)
            except SchemaError as exc:
                return str(exc)
            for label, tid in zip(labels, ids):
                if slot_ids.setdefault(label, tid) != tid:
                    return f"the answer line {k}: {label} ends in another token than at 1"
    reply_ids = {i for labels in UPSTREAM_LABELS.values() for i in reply_label_ids(builder, labels)}
    if len({*slot_ids.values(), *reply_ids}) > MAX_LOGPROB_TOKEN_IDS:
        return f"the labels have more token ids than the {MAX_LOGPROB_TOKEN_IDS} logprob_token_ids a request asks for"
    return None


MAX_LOGPROB_TOKEN_IDS = 128  # vllm.sampling_params


def joint_question(number: int, question: Question) -> str:
    """A numbered question; the heading shows even without instructions, so each answer line's number
    matches a question."""
    head = f"Question {number}: {question.instructions}" if question.instructions else f"Question {number}:"
    return f"{head}\n{question_body(question)}"


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
    builder: CanvasBuilder,
    schema: Schema,
    state: Any,
    instructions: str | None,
    served_width: int,
    chat_template_kwargs: Mapping | None = None,
) -> list[UpstreamCanvas]:
    """One canvas per chunk of the schema's questions, numbered from 1 across the chunks."""
    fmt, tokenizer = builder.format, builder.tokenizer
    questions = list(schema.questions)
    newline = tokenizer.encode("\n", add_special_tokens=False)
    if len(newline) != 1:
        raise SchemaError("joint reads need a newline that is one token")
    lines = [answer_line(tokenizer, k, q.labels) for k, q in enumerate(questions, 1)]
    reply_ids = [reply_label_ids(builder, q.labels) for q in questions]
    chunks = joint_chunks([len(prefix) + 2 for prefix, _ in lines], served_width)
    canvases = []
    for a, b in chunks:
        asks = "\n\n".join(joint_question(k, q) for k, q in enumerate(questions[a:b], a + 1))
        messages = _messages(f"{state_text(state)}\n\n{asks}\n\n{JOINT_REPLY}", instructions)
        prompt = upstream_prompt_ids(builder, messages, chat_template_kwargs)
        rng = prompt_noise(prompt)
        ids: list[int] = []
        slots, label_ids, groups = {}, {}, {}
        for q, (prefix, labels), first in zip(questions[a:b], lines[a:b], reply_ids[a:b]):
            ids += prefix
            slots[q.id] = len(ids)
            label_ids[q.id] = tuple(labels)
            groups[q.id] = tuple(tuple(dict.fromkeys(pair)) for pair in zip(labels, first))
            ids += [fmt.mask_id if fmt.noise == "mask" else rng.randrange(fmt.vocab_size), *newline]
        ids.append(fmt.turn_close_id)
        width = min(-(-(len(ids) + 1) // WIDTH_STEP) * WIDTH_STEP, served_width)
        ids += [fmt.pad_id] * (width - len(ids))
        canvases.append(
            UpstreamCanvas(
                messages,
                tuple(prompt) + tuple(fmt.head_ids),
                tuple(ids),
                slots,
                label_ids,
                seed=0,
                reply_tokens=max(slots.values()) + 1,
                label_groups=groups,
            )
        )
    return canvases


# --- reading ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpstreamRead:
    """One question's read as vLLM scores it (`_question_read`)."""

    probs: tuple[float, ...]  # over the question's labels, in option order
    label_mass: float  # the label tokens' summed full-vocabulary probability
    argmax_is_label: bool


def score_slot(groups: Sequence[Sequence[int]], slot: SlotRead) -> UpstreamRead:
    """A label scores its best token; the mass sums every label token asked for."""
    if not slot.logprobs:
        raise ValueError("the read returned no logprobs at its slot")
    logprobs = [[slot.logprobs[i] for i in g] for g in groups]
    best = [max(g) for g in logprobs]
    top = max(best)
    weights = [math.exp(lp - top) for lp in best]
    total = sum(weights)
    return UpstreamRead(
        tuple(w / total for w in weights),
        sum(math.exp(lp) for g in logprobs for lp in g),
        slot.argmax is not None and any(slot.argmax in g for g in groups),
    )


def read_upstream(engine: Any, canvases: Sequence[UpstreamCanvas]) -> dict[str, UpstreamRead]:
    """The canvases read by a canvas engine, one read each with the union of its label ids, scored as vLLM
    scores them; keyed by question id."""
    asked = [dataclasses.replace(c, label_ids=c.request_ids) for c in canvases]
    reads = engine.read(asked)
    return {
        qid: score_slot(canvas.label_groups[qid], read[qid])
        for canvas, read in zip(canvases, reads)
        for qid in canvas.slots
    }


def upstream_answer(question: Question, read: UpstreamRead) -> dict[str, Any]:
    """vLLM's `/v1/systemone` answer shape (question_types' `answer`)."""
    probs, mass = read.probs, read.label_mass
    top = max(range(len(probs)), key=probs.__getitem__)
    if question.kind == "yes_no":
        return {
            "type": "noul",
            "noul": probs[0],
            "probabilities": {"yes": probs[0], "no": probs[1]},
            "confidence": max(probs) * mass,
        }
    if question.kind == "choice":
        return {
            "type": "choice",
            "choice": question.names[top],
            "probabilities": dict(zip(question.names, probs)),
            "confidence": probs[top] * mass,
        }
    return {
        "type": "score",
        "score": sum(i * p for i, p in enumerate(probs)),
        "legend": {str(i): name for i, name in enumerate(question.names)},
        "probabilities": {str(i): p for i, p in enumerate(probs)},
        "confidence": probs[top] * mass,
    }


def read_joint(engine: Any, schema: Schema, state: Any, served_width: int) -> Decision:
    """One item read by a canvas engine on upstream's joint canvases, to answers by the answer line's token
    (diffjev's scoring, for the benchmarks); `model_passes` in its diagnostics is the number of canvases."""
    canvases = joint_canvases(engine.builder, schema, state, schema.instructions or "", served_width)
    reads = engine.read(canvases)
    label_ids = {qid: ids for canvas in canvases for qid, ids in canvas.label_ids.items()}
    merged = {qid: slot for read in reads for qid, slot in read.items()}
    return Decision(decide(schema, [merged], label_ids), schema, {"model_passes": len(canvases)})
