"""Building the seeded canvas a structured read denoises once.

The prompt is the model's own chat template over a system text (the questions and their labels) and
the item's state. The canvas is the model family's canvas head, the response template with every slot
holding noise, the turn-close token and padding up to the width. A slot is a position where swapping
the question's labels changes exactly one token; everything else on the canvas is fixed text.

DiffusionGemma's reply opens with an empty thought block, `<|channel>thought\n<channel|>`. vLLM's own
strategy puts it at the end of the prompt, outside the canvas ("far worse results otherwise"), and so
does a builder by default (`thought="prompt"`): where the chat template's generation prompt already closes
it (Gemma 4's does, with thinking off) nothing is added; else the prompt ends with a final assistant
message holding the block, continued (`continue_final_message`, as vLLM's chat API takes it). Only with
`thought="canvas"` (djev's layout), or a template that cannot continue a message, does the canvas start
with it. A vocabulary without the block's tags (Gemma 3, ModernBERT) has none to place.
"""

from __future__ import annotations

import json
import math
import random
import threading
from dataclasses import dataclass
from typing import Any, Sequence

from diffjev.images import ImageState
from diffjev.schema import Question, Schema, SchemaError
from diffjev.template import Template

WIDTH_STEP = 16
DEFAULT_MAX_WIDTH = 64
DRAW_SEED_STRIDE = 7919  # draw k of a read uses seed + 7919·k, as djev does
# Tokens kept free when cutting a state: the chat template may merge a token or two across the cut.
CUT_MARGIN_TOKENS = 8
# No token spans more characters than this: a state is cut to budget × this before it is tokenised, so a
# 10 MB item costs no more to cut than a short one.
MAX_CHARS_PER_TOKEN = 64

THOUGHT_BLOCK = "<|channel>thought\n<channel|>"
THOUGHT_LAYOUTS = ("prompt", "canvas")

PREAMBLE = (
    "You answer a fixed set of questions about the user's message. "
    "For each question, reply with exactly one of the labels listed under it."
)


@dataclass(frozen=True)
class ModelFormat:
    """What a model family puts on a canvas, read from its tokenizer rather than hard-coded."""

    noise: str  # "uniform": a random token per slot (uniform-state diffusion); "mask": the mask token
    vocab_size: int
    pad_id: int
    turn_close_id: int
    head_ids: tuple[int, ...] = ()
    mask_id: int | None = None

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, noise: str = "uniform", vocab_size: int | None = None) -> "ModelFormat":
        if noise not in ("uniform", "mask"):
            raise ValueError(f"noise must be 'uniform' or 'mask', not {noise!r}")
        unk = tokenizer.unk_token_id

        def token(text: str) -> int | None:
            tid = tokenizer.convert_tokens_to_ids(text)
            return None if tid is None or tid == unk else int(tid)

        # DiffusionGemma (Gemma 4 vocabulary) closes the empty thought block at the head of the canvas;
        # a vocabulary without those tokens (Gemma 3, ModernBERT) has no head.
        open_tag, close_tag = token("<|channel>"), token("<channel|>")
        head: tuple[int, ...] = ()
        if open_tag is not None and close_tag is not None:
            head = tuple(tokenizer(THOUGHT_BLOCK, add_special_tokens=False)["input_ids"])
            if head[0] != open_tag or head[-1] != close_tag:
                raise ValueError("the thought block's open and close tags do not tokenize apart")
        turn_close = token("<turn|>") or token("<end_of_turn>") or tokenizer.eos_token_id
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        mask = tokenizer.mask_token_id
        if noise == "mask" and mask is None:
            raise ValueError("a masked diffusion model needs a tokenizer with a mask token")
        return cls(
            noise,
            int(vocab_size or len(tokenizer)),
            int(pad),
            int(turn_close),
            head,
            None if mask is None else int(mask),
        )


@dataclass(frozen=True)
class Layout:
    """Where each answer goes on the canvas, resolved once per schema and tokenizer."""

    clear_ids: tuple[int, ...]  # head + template (slots at their first label) + turn close + padding
    slots: dict[str, int]  # question id -> canvas position
    label_ids: dict[str, tuple[int, ...]]  # question id -> token id of each label, in answer order
    width: int
    reply_tokens: int  # head + template + turn close: the positions a read must return


@dataclass(frozen=True)
class Canvas:
    """One read's input: prompt ids, canvas ids with noise in the slots, and where the answers are."""

    messages: tuple[dict[str, str], ...]
    prompt_ids: tuple[int, ...]
    ids: tuple[int, ...]
    slots: dict[str, int]
    label_ids: dict[str, tuple[int, ...]]
    seed: int
    reply_tokens: int  # the canvas positions that hold the reply; the rest is padding
    # Set when the state was cut to fit the model's context: its length and what was kept, in characters.
    truncated: dict[str, int] | None = None
    # The item's images, shown ahead of its text by an engine that reads images (diffjev.images.ImageData).
    images: tuple[Any, ...] = ()

    @property
    def width(self) -> int:
        return len(self.ids)

    @property
    def pinned(self) -> list[int]:
        """Every position but the slots: held at its seed value when a read takes more than one step."""
        slot_positions = set(self.slots.values())
        return [p for p in range(self.width) if p not in slot_positions]


def render_state(state: Any) -> str:
    """An item's state as the model reads it: text as is, anything else as JSON."""
    if isinstance(state, str):
        return state
    return json.dumps(state, ensure_ascii=False)


def draw_seed(seed: int, draw: int) -> int:
    return seed + DRAW_SEED_STRIDE * draw


def option_lines(question: Question, separator: str = ": ", describe: str = " ({})") -> list[str]:
    return question.type.option_lines(question, separator, describe)


def system_text(schema: Schema) -> str:
    parts = [PREAMBLE]
    if schema.instructions:
        parts.append(schema.instructions)
    for q in schema.questions:
        parts.append("\n".join([f"Question {q.id}: {q.instructions}"] + ["  " + line for line in option_lines(q)]))
    parts.append(
        "Reply in exactly this format, writing one label in place of each <question id>:\n" + schema.template.display()
    )
    return "\n\n".join(parts)


SINGLE_LABEL_PROBES = ("B", "A")


def resolve_layout(
    tokenizer: Any,
    fmt: ModelFormat,
    template: Template,
    questions: Sequence[Question],
    max_width: int,
    head_ids: Sequence[int] | None = None,
) -> Layout:
    """Find each question's slot: the one position where swapping its labels changes one token."""
    head = list(fmt.head_ids if head_ids is None else head_ids)

    def encode(fill: dict[str, str]) -> list[int]:
        return head + list(tokenizer(template.render(fill), add_special_tokens=False)["input_ids"])

    base_fill = {q.id: q.labels[0] for q in questions}
    base = encode(base_fill)
    slots: dict[str, int] = {}
    label_ids: dict[str, tuple[int, ...]] = {}
    for q in questions:
        position: int | None = None
        bad: list[str] = []
        ids: list[int | None] = [None] * len(q.labels)
        # A question of one answer (vLLM takes a one-option choice) finds its slot with a stand-in second label.
        swaps = q.labels[1:] or (next(p for p in SINGLE_LABEL_PROBES if p != q.labels[0]),)
        for i, label in enumerate(swaps, start=1):
            alt = encode({**base_fill, q.id: label})
            diff = [p for p, (a, b) in enumerate(zip(base, alt)) if a != b] if len(alt) == len(base) else []
            if len(diff) != 1 or (position is not None and diff[0] != position):
                bad.append(label)
                continue
            position = diff[0]
            if i < len(ids):
                ids[i] = alt[position]
        if bad or position is None:
            raise SchemaError(
                f"labels {', '.join(q.labels[:1] + tuple(bad))} do not each fill exactly one token at one slot "
                f"position in this template (the tokenizer merges them with the text around {{{q.id}}}); "
                f"put a space or punctuation on both sides of the slot",
                question=q.id,
                field="template",
            )
        ids[0] = base[position]
        if len(set(ids)) != len(ids):
            raise SchemaError(f"two labels share one token id in this template: {ids}", question=q.id, field="template")
        slots[q.id] = position
        label_ids[q.id] = tuple(int(t) for t in ids)  # type: ignore[arg-type]
    used = len(base) + 1  # the template plus the turn-close token
    width = WIDTH_STEP * math.ceil(used / WIDTH_STEP)
    if width > max_width:
        raise SchemaError(
            f"the reply needs {used} canvas tokens (head, template and turn close) but the served canvas "
            f"holds {max_width}; shorten the template or the labels' surrounding text, or serve a wider canvas",
            field="template",
        )
    clear = base + [fmt.turn_close_id] + [fmt.pad_id] * (width - used)
    return Layout(tuple(clear), slots, label_ids, width, used)


def fill_noise(layout: Layout, fmt: ModelFormat, seed: int) -> tuple[int, ...]:
    """The canvas with every slot set to noise: a seeded random token, or the mask token."""
    ids = list(layout.clear_ids)
    rng = random.Random(seed)
    for qid, position in layout.slots.items():
        if fmt.noise == "mask":
            ids[position] = fmt.mask_id  # type: ignore[assignment]
            continue
        token = rng.randrange(fmt.vocab_size)
        while token in layout.label_ids[qid]:  # noise that spells an answer would be a leak, not noise
            token = rng.randrange(fmt.vocab_size)
        ids[position] = token
    return tuple(ids)


def chat_flags(messages: Sequence[dict[str, Any]]) -> dict[str, bool]:
    """How a chat template renders `messages` for a read: a final assistant message is continued (vLLM's
    `continue_final_message`), else the generation prompt is added."""
    continued = bool(messages) and messages[-1].get("role") == "assistant"
    return {"continue_final_message": continued, "add_generation_prompt": not continued}


class CanvasBuilder:
    """Turns (schema, state) into canvases for one tokenizer and model family."""

    def __init__(
        self,
        tokenizer: Any,
        fmt: ModelFormat,
        max_width: int = DEFAULT_MAX_WIDTH,
        chat_template_kwargs: dict[str, Any] | None = None,
        max_prompt_tokens: int | None = None,
        thought: str = "prompt",
    ):
        if max_width < WIDTH_STEP or max_width % WIDTH_STEP:
            raise ValueError(f"the served canvas must be a multiple of {WIDTH_STEP} tokens, not {max_width}")
        if thought not in THOUGHT_LAYOUTS:
            raise ValueError(f"thought must be one of {', '.join(THOUGHT_LAYOUTS)}, not {thought!r}")
        self.tokenizer = tokenizer
        self.format = fmt
        self.max_width = max_width
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        # The most prompt tokens the model can take (its context less the canvas); None: no limit known.
        self.max_prompt_tokens = max_prompt_tokens
        self._layouts: dict[tuple, Layout] = {}
        self._systems: dict[Schema, str] = {}
        self._overheads: dict[Schema, int] = {}
        self._lock = threading.Lock()
        self.thought = thought
        self.thought_placement = self._place_thought(thought)

    def _place_thought(self, wanted: str) -> str:
        """Where the empty thought block goes: "none" (the vocabulary has none), "template" (the chat
        template's generation prompt closes it), "message" (a final assistant message, continued) or
        "canvas" (the canvas's head)."""
        head = tuple(self.format.head_ids)
        if not head:
            return "none"
        probe = ({"role": "system", "content": "x"}, {"role": "user", "content": "x"})
        try:
            if self.prompt_ids(probe)[-len(head) :] == head:
                return "template"
            if wanted == "prompt":
                continued = self.prompt_ids((*probe, {"role": "assistant", "content": THOUGHT_BLOCK}))
                if continued[-len(head) :] == head:
                    return "message"
        except Exception:  # noqa: BLE001 - a template that cannot render the probe reads as djev lays it out
            pass
        return "canvas"

    @property
    def canvas_head(self) -> tuple[int, ...]:
        """The ids the canvas starts with: the thought block where it is not in the prompt."""
        return tuple(self.format.head_ids) if self.thought_placement == "canvas" else ()

    def layout(self, schema: Schema) -> Layout:
        key = (schema.template, schema.questions)
        layout = self._layouts.get(key)
        if layout is None:
            layout = resolve_layout(
                self.tokenizer, self.format, schema.template, schema.questions, self.max_width, self.canvas_head
            )
            with self._lock:
                self._layouts[key] = layout
        return layout

    def check(self, schema: Schema) -> None:
        """Raise SchemaError if the joint canvas cannot hold the schema's slot questions (a schema of span
        questions alone has none to hold)."""
        part = schema.slot_part()
        if part is not None:
            self.layout(part)

    def messages(self, schema: Schema, state: Any) -> tuple[dict[str, str], ...]:
        system = self._systems.get(schema)
        if system is None:
            system = system_text(schema)
            with self._lock:
                self._systems[schema] = system
        return self.with_thought(
            ({"role": "system", "content": system}, {"role": "user", "content": render_state(state)})
        )

    def with_thought(self, turns: tuple[dict[str, str], ...]) -> tuple[dict[str, str], ...]:
        """The read's turns, with the thought block as a final assistant message where it goes there."""
        if self.thought_placement == "message":
            return (*turns, {"role": "assistant", "content": THOUGHT_BLOCK})
        return turns

    def prompt_ids(self, messages: Sequence[dict[str, str]]) -> tuple[int, ...]:
        return self.prompt_ids_many([messages])[0]

    def prompt_ids_many(self, conversations: Sequence[Sequence[dict[str, str]]]) -> list[tuple[int, ...]]:
        """Each conversation's prompt ids. The texts are tokenised in one call: a fast tokenizer encodes a
        batch on its own threads without holding the interpreter's lock, which a read's other steps need."""
        # Render then tokenize without special tokens: the rendered text already holds <bos>, and this
        # is how an OpenAI-compatible server turns chat messages into prompt ids. A final assistant
        # message is continued, as the client asks the server to (`continue_final_message`).
        texts = [
            self.tokenizer.apply_chat_template(
                list(messages), tokenize=False, **chat_flags(messages), **self.chat_template_kwargs
            )
            for messages in conversations
        ]
        if not texts:
            return []
        return [tuple(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def build(self, schema: Schema, state: Any, seed: int) -> Canvas:
        return self.build_many(schema, [state], seed)[0]

    def build_many(self, schema: Schema, states: Sequence[Any], seed: int) -> list[Canvas]:
        """A canvas per state, all with the noise of `seed` (drawn once: it depends on the seed alone)."""
        layout = self.layout(schema)
        noise = fill_noise(layout, self.format, seed)
        prepared = []
        for state in states:
            images = (state.image,) if isinstance(state, ImageState) else ()
            text, truncated = self.fit_state(schema, render_state(state.text if images else state))
            prepared.append((self.messages(schema, text), truncated, images))
        prompts = self.prompt_ids_many([messages for messages, _, _ in prepared])
        return [
            Canvas(
                messages, prompt, noise, layout.slots, layout.label_ids, seed, layout.reply_tokens, truncated, images
            )
            for (messages, truncated, images), prompt in zip(prepared, prompts)
        ]

    def fit_state(self, schema: Schema, text: str) -> tuple[str, dict[str, int] | None]:
        """The state's text cut to what the model's context holds beside the system prompt, and, when it
        was cut, how long it was and how much was kept. Attention costs memory quadratic in the prompt:
        an item past the context would fail the read, or take the host's memory, rather than be read."""
        if self.max_prompt_tokens is None:
            return text, None
        budget = self.max_prompt_tokens - self._overhead(schema) - CUT_MARGIN_TOKENS
        if budget < 1:
            raise SchemaError(
                f"the questions and instructions alone fill the model's context of "
                f"{self.max_prompt_tokens} prompt tokens; shorten them, or use a model with a "
                f"longer context",
                field="instructions",
            )
        if len(text.encode("utf-8")) <= budget:  # no tokenizer makes more tokens than UTF-8 bytes
            return text, None
        head = text[: budget * MAX_CHARS_PER_TOKEN]
        kept = self._prefix_chars(head, budget)
        if kept == len(text):
            return text, None
        return text[:kept], {"state_chars": len(text), "kept_chars": kept, "max_prompt_tokens": self.max_prompt_tokens}

    def _overhead(self, schema: Schema) -> int:
        """Prompt tokens a read of `schema` takes with an empty state."""
        overhead = self._overheads.get(schema)
        if overhead is None:
            overhead = len(self.prompt_ids(self.messages(schema, "")))
            with self._lock:
                self._overheads[schema] = overhead
        return overhead

    def _prefix_chars(self, text: str, tokens: int) -> int:
        """How many leading characters of `text` its first `tokens` tokens cover."""
        try:
            encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        except NotImplementedError:  # a slow tokenizer has no offsets: decode what fits instead
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            return len(text) if len(ids) <= tokens else len(self.tokenizer.decode(ids[:tokens]))
        offsets = encoded["offset_mapping"]
        return len(text) if len(offsets) <= tokens else offsets[tokens][0]
