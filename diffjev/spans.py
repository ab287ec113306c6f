"""Span answers: substrings of the item's own text, with exact character offsets.

A `span` question's answer is one substring of the item text (or none); a `spans` question's answer is
a list of them, in text order, never overlapping. Offsets are Python `str` indices (code points) into the
item's stored text, end exclusive, as Label Studio and spaCy count: `text == item_text[start:end]` holds
for every span this module hands out, whatever the text holds (emoji, combining marks, CRLF).

The stored answer name of a span answer is `span_value(spans)`: "12-18", "12-18,30-35" or "none". It is
canonical (sorted, no spaces), so two people's answers compare as strings, and short enough for the
answer column; the spans themselves (with their text and confidence) go in the row's `detail`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from diffjev.errors import SchemaError
from diffjev.question_types import Question, QuestionType, register

SPAN_KINDS = ("span", "spans")
NONE_VALUE = "none"
MAX_VALUE_CHARS = 500  # the answer column's width
_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")


@dataclass(frozen=True)
class Span:
    """One substring of the item text: `text == item_text[start:end]` (code points, end exclusive)."""

    start: int
    end: int
    text: str
    confidence: float
    coverage: float = 1.0  # share of the read's answer tokens the span accounts for

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "text": self.text,
            "confidence": self.confidence,
            "coverage": self.coverage,
        }


@dataclass(frozen=True)
class SpanAnswer:
    """The answer to a span or spans question for one item."""

    question_id: str
    kind: str  # "span" | "spans"
    spans: tuple[Span, ...]  # () when nothing fits ("none")
    confidence: float  # span: its span's; spans: the mean, or the none-confidence when empty
    reads: int  # reads taken (1 + re-reads)
    windows: int = 1
    diagnostics: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def found(self) -> bool:
        return bool(self.spans)

    @property
    def answer(self) -> str:
        """The stored answer name."""
        return span_value(self.spans)

    @property
    def label_mass(self) -> float:
        """Span reads renormalise over the item's own ids: there is no label set to lose mass to."""
        return 1.0

    @property
    def argmax_is_label(self) -> None:
        return None

    @property
    def value(self) -> None:
        """Span answers have no number to rank by (label answers' `value` is P(yes) or a level)."""
        return None

    def detail(self) -> dict[str, Any]:
        """What a suggestion's or response's `detail` column holds."""
        return spans_detail(self.spans)

    def to_dict(self) -> dict[str, Any]:
        return {
            "question_id": self.question_id,
            "kind": self.kind,
            "answer": self.answer,
            "found": self.found,
            "spans": [s.to_dict() for s in self.spans],
            "confidence": self.confidence,
            "reads": self.reads,
            "windows": self.windows,
        }

    def to_jev(self, question: Any = None) -> dict[str, Any]:
        """The Jev API's span/spans answer shapes (reference section 5)."""
        if self.kind == "spans":
            return {
                "type": "spans",
                "found": self.found,
                "items": [
                    {"text": s.text, "start": s.start, "end": s.end, "confidence": s.confidence, "coverage": s.coverage}
                    for s in self.spans
                ],
                "reads": self.reads,
            }
        best = self.spans[0] if self.spans else None
        out: dict[str, Any] = {
            "type": "span",
            "found": best is not None,
            "text": best.text if best else None,
            "start": best.start if best else None,
            "end": best.end if best else None,
            "confidence": self.confidence,
            "coverage": best.coverage if best else 0.0,
            "reads": self.reads,
        }
        if self.windows > 1:
            out["windows"] = self.windows
        return out


def span_value(spans: Iterable[Span]) -> str:
    """The canonical answer name: "12-18", "12-18,30-35" (sorted by start) or "none".

    It is kept within the answer column's width: a list too long for it keeps the spans that fit, in
    order; the full list always travels in `detail`."""
    ordered = sorted(spans, key=lambda s: (s.start, s.end))
    if not ordered:
        return NONE_VALUE
    parts: list[str] = []
    used = 0
    for s in ordered:
        part = f"{s.start}-{s.end}"
        cost = len(part) + (1 if parts else 0)
        if used + cost > MAX_VALUE_CHARS:
            break
        parts.append(part)
        used += cost
    return ",".join(parts)


def spans_detail(spans: Iterable[Span]) -> dict[str, Any]:
    """The `detail` JSON of a span suggestion or response: `{"spans": [{start, end, text, confidence}]}`."""
    return {
        "spans": [{"start": s.start, "end": s.end, "text": s.text, "confidence": s.confidence} for s in spans],
    }


def parse_span_value(value: str, text: str, kind: str) -> tuple[Span, ...]:
    """A person's span answer ("12-18", "12-18,30-35" or "none") checked against the item text.

    Raises ValueError saying what is wrong and how to write it instead."""
    if kind not in SPAN_KINDS:
        raise ValueError(f"a span answer belongs to a span or spans question, not a {kind!r} question")
    if not isinstance(value, str) or not value.strip():
        raise ValueError('give the span as start-end character offsets, e.g. "12-18", or "none" when nothing fits')
    if value.strip().lower() == NONE_VALUE:
        return ()
    spans: list[Span] = []
    for part in value.split(","):
        match = _RANGE.match(part)
        if match is None:
            raise ValueError(
                f'{part.strip()!r} is not a span; write start-end character offsets such as "12-18", '
                'several joined by commas, or "none"'
            )
        start, end = int(match.group(1)), int(match.group(2))
        if not start < end <= len(text):
            raise ValueError(
                f"span {start}-{end} is outside the text or empty; the text has {len(text)} characters, "
                "so use 0 <= start < end <= that"
            )
        spans.append(Span(start, end, text[start:end], 1.0))
    spans.sort(key=lambda s: s.start)
    if kind == "span" and len(spans) > 1:
        raise ValueError(f"a span question takes one span, not {len(spans)}; use a spans question for several")
    for left, right in zip(spans, spans[1:]):
        if right.start < left.end:
            raise ValueError(
                f"spans {left.start}-{left.end} and {right.start}-{right.end} overlap; join them into one or "
                "split them where they meet"
            )
    return tuple(spans)


def span_words(value: str, text: str, kind: str) -> str:
    """A stored span answer as a person reads it: its words, each quoted, then the offsets that name them
    ("“Acme Phone X” (14-26)"), or "none"; a value that does not fit the text (any more) as it is."""
    try:
        spans = parse_span_value(value, text, kind)
    except ValueError:
        return value
    if not spans:
        return NONE_VALUE
    return ", ".join(f"“{s.text}”" for s in spans) + f" ({span_value(spans)})"


def spans_from_detail(detail: Mapping[str, Any] | None, text: str) -> tuple[Span, ...]:
    """The spans a stored `detail` holds, each checked against the item text (ValueError when one does
    not match it: the text changed since, or the row was written by hand)."""
    out: list[Span] = []
    for n, raw in enumerate((detail or {}).get("spans") or []):
        start, end = int(raw["start"]), int(raw["end"])
        if not 0 <= start < end <= len(text) or text[start:end] != raw.get("text", text[start:end]):
            raise ValueError(f"stored span #{n + 1} ({start}-{end}) no longer matches the item text")
        out.append(Span(start, end, text[start:end], float(raw.get("confidence", 1.0))))
    return tuple(out)


# The read ---------------------------------------------------------------------------------------------
#
# A span question gets its own canvas: the model family's head, an "answer:" head, then a blank of
# `max_tokens` noise positions, the turn-close token and padding. Every position but the blank is pinned,
# so a multi-step read can only rewrite the blank. The read returns, at each blank position, the logprobs
# of the item's own token ids (and the end, separator and "none" tokens); a walk over the item's token
# positions then finds the substring (or list of substrings) the blank most likely spells, so the answer
# is an exact substring by construction, with offsets from the tokenizer's offset mapping.

DEFAULT_MAX_TOKENS = {"span": 24, "spans": 64}
DEFAULT_SPAN_STEPS = 4
REREAD_BELOW = 0.3
MAX_READS = 3
MAX_ITEM_IDS = 128  # vLLM's cap on logprob_token_ids
QUESTION_SEED_STRIDE = 104729  # span question i reads with seed + 104729·(i+1), as djev
REREAD_SEED_STRIDE = 7919
ANSWER_HEAD = "answer:"
NONE_WORD = " none"
SEPARATOR = "\n"
MISSING_GAP = 5.0  # an id the read did not return sits this far below the lowest one it did

SPAN_PREAMBLE = (
    "You copy words from the user's message. Answer the question below with the exact words of the "
    "message that answer it, copied character for character, after '{head}'. Write '{head}{none}' when "
    "nothing in the message answers it."
)
SPANS_LINE = "Write each answer on its own line, in the order they appear in the message."

_SENTENCE_END = re.compile(r"(?<=[.!?…。！？])\s+|\n+")


@dataclass(frozen=True)
class TextTokens:
    """A window of the item text as the tokenizer splits it: ids and character offsets into the window."""

    text: str
    ids: tuple[int, ...]
    offsets: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class SpanCanvas:
    """One span read's input."""

    question_id: str
    messages: tuple[dict[str, str], ...]
    prompt_ids: tuple[int, ...]
    ids: tuple[int, ...]
    blank: tuple[int, ...]  # canvas positions the answer is written in
    request_ids: tuple[int, ...]  # the token ids whose logprobs the read returns (<= 128)
    seed: int
    steps: int
    reply_tokens: int

    @property
    def width(self) -> int:
        return len(self.ids)

    @property
    def pinned(self) -> list[int]:
        open_positions = set(self.blank)
        return [p for p in range(self.width) if p not in open_positions]


@dataclass(frozen=True)
class Walk:
    """What the walk over one read found: spans in window offsets, the answer's confidence, and the
    none-path's posterior."""

    spans: tuple[Span, ...]
    confidence: float


def tokenize_text(tokenizer: Any, text: str) -> TextTokens:
    """The text's token ids and each token's character offsets (code points, end exclusive)."""
    try:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except NotImplementedError:
        raise ValueError(
            "span questions need a fast tokenizer, one that gives each token's character offsets"
        ) from None
    return TextTokens(text, tuple(encoded["input_ids"]), tuple(tuple(o) for o in encoded["offset_mapping"]))


def sentence_windows(tokens: TextTokens, max_tokens: int, max_ids: int) -> list[tuple[int, int]]:
    """Character ranges covering the text, each at most `max_tokens` tokens with at most `max_ids`
    distinct ids, cut between sentences where a sentence fits and between tokens where one does not.
    Windows touch end to end, so every character is in exactly one window and a span never needs two."""
    text, n = tokens.text, len(tokens.ids)
    if n == 0:
        return [(0, len(text))]
    cuts = sorted({m.start() for m in _SENTENCE_END.finditer(text)} | {len(text)})
    # Token index at which each sentence ends (the first token starting at or after the cut).
    sentence_ends: list[int] = []
    t = 0
    for cut in cuts:
        while t < n and tokens.offsets[t][0] < cut:
            t += 1
        if not sentence_ends or t > sentence_ends[-1]:
            sentence_ends.append(t)
    if sentence_ends[-1] != n:
        sentence_ends.append(n)
    windows: list[tuple[int, int]] = []  # token ranges
    start = 0
    while start < n:
        end = _window_end(tokens.ids, start, sentence_ends, max_tokens, max_ids)
        windows.append((start, end))
        start = end
    chars = []
    for i, (a, b) in enumerate(windows):
        begin = 0 if i == 0 else chars[-1][1]
        finish = len(text) if b == n else tokens.offsets[b][0]
        chars.append((begin, max(begin, finish)))
    return [c for c in chars if c[1] > c[0]] or [(0, len(text))]


def _window_end(ids: Sequence[int], start: int, sentence_ends: Sequence[int], max_tokens: int, max_ids: int) -> int:
    def fits(end: int) -> bool:
        return end - start <= max_tokens and len(set(ids[start:end])) <= max_ids

    best = None
    for end in sentence_ends:
        if end <= start:
            continue
        if not fits(end):
            break
        best = end
    if best is not None:
        return best
    end = start + 1  # no whole sentence fits: as many tokens as do
    while end < len(ids) and fits(end + 1):
        end += 1
    return end


def span_system_text(question: Any) -> str:
    lines = [SPAN_PREAMBLE.format(head=ANSWER_HEAD, none=NONE_WORD)]
    if question.kind == "spans":
        lines.append(SPANS_LINE)
    lines.append(f"Question {question.id}: {question.instructions}")
    return "\n\n".join(lines)


def question_max_tokens(question: Any) -> int:
    return getattr(question, "max_tokens", None) or DEFAULT_MAX_TOKENS[question.kind]


def question_max_items(question: Any) -> int | None:
    return getattr(question, "max_items", None)


class SpanCanvasBuilder:
    """Span canvases for one tokenizer and model family, beside the label CanvasBuilder it wraps."""

    def __init__(self, builder: Any, steps: int = DEFAULT_SPAN_STEPS):
        self.builder = builder
        self.tokenizer = builder.tokenizer
        self.format = builder.format
        self.steps = steps
        self.head_ids = tuple(builder.canvas_head) + tuple(self._ids(ANSWER_HEAD))
        self.none_ids = tuple(self._ids(NONE_WORD))
        sep = self._ids(SEPARATOR)
        self.separator_id = sep[0] if len(sep) == 1 else None
        self.end_ids = tuple(sorted({self.format.turn_close_id, self.format.pad_id}))

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def blank_length(self, question: Any) -> int:
        """The blank: the question's max_tokens, less whatever the served canvas cannot hold."""
        room = self.builder.max_width - len(self.head_ids) - 1
        return max(1, min(question_max_tokens(question), room))

    def extra_ids(self, question: Any) -> set[int]:
        extra = set(self.end_ids) | set(self.none_ids)
        if question.kind == "spans" and self.separator_id is not None:
            extra.add(self.separator_id)
        return extra

    def window_limits(self, question: Any) -> tuple[int, int]:
        """Most tokens and most distinct ids a window may hold: the canvas width, and what is left of the
        128 requested ids after the end, separator and none tokens."""
        return self.builder.max_width, MAX_ITEM_IDS - len(self.extra_ids(question))

    def build(self, question: Any, window: TextTokens, seed: int) -> SpanCanvas:
        from diffjev.canvas import WIDTH_STEP

        blank_len = self.blank_length(question)
        used = len(self.head_ids) + blank_len + 1
        width = min(self.builder.max_width, WIDTH_STEP * -(-used // WIDTH_STEP))
        rng = random.Random(seed)
        if self.format.noise == "mask":
            noise = [self.format.mask_id] * blank_len
        else:
            noise = [rng.randrange(self.format.vocab_size) for _ in range(blank_len)]
        ids = list(self.head_ids) + noise + [self.format.turn_close_id]
        ids += [self.format.pad_id] * (width - len(ids))
        messages = self.builder.with_thought(
            ({"role": "system", "content": span_system_text(question)}, {"role": "user", "content": window.text})
        )
        requested = sorted(set(window.ids) | self.extra_ids(question))[:MAX_ITEM_IDS]
        return SpanCanvas(
            question.id,
            messages,
            self.builder.prompt_ids(messages),
            tuple(ids),
            tuple(range(len(self.head_ids), len(self.head_ids) + blank_len)),
            tuple(requested),
            seed,
            self.steps,
            used,
        )


def _rows_matrix(rows: Sequence[Mapping[int, float]], columns: Sequence[int]) -> "Any":
    """Per blank row, log-probabilities over `columns` renormalised over them (the item's ids plus the
    end, separator and none tokens); an id a row lacks sits MISSING_GAP below that row's lowest."""
    import numpy as np

    out = np.empty((len(rows), len(columns)))
    for j, row in enumerate(rows):
        floor = (min(row.values()) if row else 0.0) - MISSING_GAP
        out[j] = [row.get(c, floor) for c in columns]
    return out - np.logaddexp.reduce(out, axis=1, keepdims=True)


def walk_spans(
    rows: Sequence[Mapping[int, float]],
    window: TextTokens,
    kind: str,
    *,
    end_ids: Sequence[int],
    none_ids: Sequence[int],
    separator_id: int | None = None,
    max_items: int | None = None,
) -> Walk:
    """The substring (span) or substrings (spans, in text order) the blank rows most likely spell.

    Dynamic programming over (blank row, item token): a row either continues the item token run of the
    row before, or starts a new run (at the first row, or after a separator row, at or after where the
    last run ended); a run ends with an end token, or where the blank ends. The best path (max) gives the
    answer; the sum over all paths, the "none" path included, normalises its confidence."""
    import numpy as np

    n, blank = len(window.ids), len(rows)
    columns = sorted(set(window.ids) | set(end_ids) | set(none_ids) | ({separator_id} - {None}))
    col = {c: i for i, c in enumerate(columns)}
    lp = _rows_matrix(rows, columns)
    none_score = _none_score(lp, col, none_ids, end_ids, blank)
    if n == 0:
        return Walk((), 1.0)
    token = lp[:, [col[t] for t in window.ids]]  # (blank, n): row j spelling item token a
    end = np.append(np.logaddexp.reduce(lp[:, [col[e] for e in end_ids]], axis=1), 0.0)  # row == blank: full
    sep = lp[:, col[separator_id]] if kind == "spans" and separator_id is not None else None
    edge = np.array([_is_edge_token(window, a) for a in range(n)])

    best_path, best_score = _best_path(token, end, sep, edge)
    log_z = np.logaddexp(_all_paths(token, end, sep, edge), none_score)
    if best_path is None or none_score >= best_score:
        return Walk((), float(np.exp(none_score - log_z)))
    spans = _without_overlaps(window.text, [_span_of(window, run, token, rows_at) for run, rows_at in best_path])
    if max_items is not None:
        spans = spans[:max_items]
    if kind == "span":
        posterior = float(np.exp(best_score - log_z))
        spans = [Span(s.start, s.end, s.text, posterior, s.coverage) for s in spans[:1]]
        return Walk(tuple(spans), posterior)
    return Walk(tuple(spans), float(np.mean([s.confidence for s in spans])))


def _none_score(lp: Any, col: Mapping[int, int], none_ids: Sequence[int], end_ids: Sequence[int], blank: int) -> float:
    import numpy as np

    if len(none_ids) > blank:
        return -np.inf
    score = sum(lp[i, col[t]] for i, t in enumerate(none_ids))
    if len(none_ids) < blank:
        score += np.logaddexp.reduce(lp[len(none_ids), [col[e] for e in end_ids]])
    return float(score)


def _is_edge_token(window: TextTokens, a: int) -> bool:
    """Whether token `a` may begin or end a run: it holds something besides white space."""
    start, end = window.offsets[a]
    return bool(window.text[start:end].strip())


def _best_path(token: Any, end: Any, sep: Any, edge: Any) -> tuple[list | None, float]:
    """Viterbi over the walk: the best list of runs [(first token, rows)] and its score."""
    import numpy as np

    blank, n = token.shape
    neg = -np.inf
    opened = np.full((blank + 1, n + 1), neg)  # opened[j, k]: a run may start at row j, at token >= k
    opened[0, 0] = 0.0
    inside = np.full((blank, n), neg)
    came = np.zeros((blank, n), dtype=int)  # -1: continued the run; k >= 0: started after opened[j, k]
    best, best_end = neg, None
    for j in range(blank):
        prefix = np.maximum.accumulate(opened[j, :n])
        where = _prefix_argmax(opened[j, :n])
        start = np.where(edge, prefix, neg)
        cont = np.full(n, neg)
        if j:
            cont[1:] = inside[j - 1, :-1]
        take_start = start >= cont
        inside[j] = token[j] + np.where(take_start, start, cont)
        came[j] = np.where(take_start, where, -1)
        closing = np.where(edge, inside[j], neg)
        finish = closing + end[j + 1]
        a = int(np.argmax(finish))
        if finish[a] > best:
            best, best_end = float(finish[a]), (j, a)
        if sep is not None and j + 2 <= blank:
            after = closing + sep[j + 1]
            opened[j + 2, 1:] = np.maximum(opened[j + 2, 1:], after)
    if best_end is None:
        return None, neg
    runs: list[tuple[int, list[int]]] = []
    j, a = best_end
    last_token = a
    while True:
        k = came[j, a]
        if k == -1:
            j, a = j - 1, a - 1
            continue
        runs.append(((a, last_token), list(range(j, j + last_token - a + 1))))
        if j == 0:
            break
        # opened[j, k] came from a run ending at token k - 1, row j - 2
        j, a = j - 2, k - 1
        last_token = a
    return [((first, last), rows) for (first, last), rows in reversed(runs)], best


def _prefix_argmax(values: Any) -> Any:
    import numpy as np

    idx = np.arange(len(values))
    best = np.where(values == np.maximum.accumulate(values), idx, 0)
    return np.maximum.accumulate(best)


def _all_paths(token: Any, end: Any, sep: Any, edge: Any) -> float:
    """The forward pass of the same walk: log of the summed probability of every path."""
    import numpy as np

    blank, n = token.shape
    neg = -np.inf
    opened = np.full((blank + 1, n + 1), neg)
    opened[0, 0] = 0.0
    inside_prev = np.full(n, neg)
    total = neg
    for j in range(blank):
        start = np.where(edge, np.logaddexp.accumulate(opened[j, :n]), neg)
        cont = np.full(n, neg)
        if j:
            cont[1:] = inside_prev[:-1]
        inside = token[j] + np.logaddexp(start, cont)
        closing = np.where(edge, inside, neg)
        total = np.logaddexp(total, np.logaddexp.reduce(closing + end[j + 1]))
        if sep is not None and j + 2 <= blank:
            opened[j + 2, 1:] = np.logaddexp(opened[j + 2, 1:], closing + sep[j + 1])
        inside_prev = inside
    return float(total)


def _span_of(window: TextTokens, run: tuple[int, int], token: Any, rows: Sequence[int]) -> Span:
    """The run of tokens `run` (first, last) as a Span in window offsets, trimmed of white space and
    widened to whole characters' marks, with its confidence (geometric mean of its rows' probabilities)
    and coverage (share of its rows whose likeliest item token is the one it spells)."""
    import numpy as np

    first, last = run
    start, end = snap_to_text(window.text, window.offsets[first][0], window.offsets[last][1])
    spelled = [token[row, first + i] for i, row in enumerate(rows)]
    hits = [token[row, first + i] >= token[row].max() for i, row in enumerate(rows)]
    return Span(start, end, window.text[start:end], float(np.exp(np.mean(spelled))), float(np.mean(hits)))


_JOINERS = {"\u200d", "\ufe0e", "\ufe0f"}


def _is_mark(ch: str) -> bool:
    import unicodedata

    return bool(unicodedata.combining(ch)) or ch in _JOINERS or "\U0001f3fb" <= ch <= "\U0001f3ff"


def snap_to_text(text: str, start: int, end: int) -> tuple[int, int]:
    """A character range trimmed of surrounding white space and never cutting a character from its
    combining marks, variation selectors or joined emoji: what a person would select."""
    start, end = max(0, start), min(len(text), end)
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    while start > 0 and start < end and (_is_mark(text[start]) or text[start - 1] == "\u200d"):
        start -= 1
    while end < len(text) and (_is_mark(text[end]) or text[end - 1] == "\u200d"):
        end += 1
    return start, end


def _without_overlaps(text: str, spans: list[Span]) -> list[Span]:
    """Runs that snapping to whole characters made touch the same character become one span."""
    out: list[Span] = []
    for s in spans:
        if out and s.start < out[-1].end:
            prev = out.pop()
            start, end = prev.start, max(prev.end, s.end)
            s = Span(start, end, text[start:end], min(prev.confidence, s.confidence), prev.coverage)
        out.append(s)
    return out


# Windows and re-reads -----------------------------------------------------------------------------------


def read_span_answer(
    question: Any,
    text: str,
    seed: int,
    builder: SpanCanvasBuilder,
    read_blanks: Any,
    *,
    threshold: float = REREAD_BELOW,
    max_reads: int = MAX_READS,
) -> SpanAnswer:
    """One span question read over one item text: each sentence window read, re-read with a new seed
    while its answer's confidence is below `threshold` (at most `max_reads` reads in all), the best
    window's answer kept (span) or every window's spans joined in text order (spans).

    `read_blanks(canvases)` returns, per canvas, one {token id: logprob} map per blank position."""
    full = tokenize_text(builder.tokenizer, text)
    max_tokens, max_ids = builder.window_limits(question)
    windows = sentence_windows(full, max_tokens, max_ids)
    pieces = [tokenize_text(builder.tokenizer, text[a:b]) for a, b in windows]
    results = _read_windows(question, pieces, seed, builder, read_blanks, threshold, max_reads)
    reads = max(r for _, r in results)
    shifted = [
        Walk(tuple(_shift(s, text, a) for s in walk.spans), walk.confidence)
        for (walk, _), (a, _) in zip(results, windows)
    ]
    diagnostics = {
        "windows": [list(w) for w in windows],
        "window_reads": [r for _, r in results],
        "window_confidence": [w.confidence for w in shifted],
        "blank": builder.blank_length(question),
        "steps": builder.steps,
    }
    if question.kind == "span":
        found = [w for w in shifted if w.spans]
        if found:
            best = max(found, key=lambda w: w.confidence)
            return SpanAnswer(question.id, "span", best.spans, best.confidence, reads, len(windows), diagnostics)
        none = min(shifted, key=lambda w: w.confidence)  # "none" only as sure as the least sure window
        return SpanAnswer(question.id, "span", (), none.confidence, reads, len(windows), diagnostics)
    spans = [s for w in shifted for s in w.spans]
    limit = question_max_items(question)
    if limit is not None:
        spans = sorted(sorted(spans, key=lambda s: -s.confidence)[:limit], key=lambda s: s.start)
    if spans:
        confidence = sum(s.confidence for s in spans) / len(spans)
    else:
        confidence = min(w.confidence for w in shifted)
    return SpanAnswer(question.id, "spans", tuple(spans), confidence, reads, len(windows), diagnostics)


def _shift(span: Span, text: str, offset: int) -> Span:
    start, end = span.start + offset, span.end + offset
    return Span(start, end, text[start:end], span.confidence, span.coverage)


def _read_windows(
    question: Any,
    pieces: Sequence[TextTokens],
    seed: int,
    builder: SpanCanvasBuilder,
    read_blanks: Any,
    threshold: float,
    max_reads: int,
) -> list[tuple[Walk, int]]:
    """Every window read once (all in one batch), then the unsure ones again with new seeds."""
    best: list[Walk | None] = [None] * len(pieces)
    reads = [0] * len(pieces)
    todo = list(range(len(pieces)))
    for attempt in range(max_reads):
        if not todo:
            break
        canvases = [builder.build(question, pieces[i], reread_seed(seed, attempt)) for i in todo]
        for i, canvas, rows in zip(todo, canvases, read_blanks(canvases)):
            walk = walk_spans(
                rows,
                pieces[i],
                question.kind,
                end_ids=builder.end_ids,
                none_ids=builder.none_ids,
                separator_id=builder.separator_id,
                max_items=question_max_items(question),
            )
            reads[i] += 1
            if best[i] is None or walk.confidence > best[i].confidence:
                best[i] = walk
        todo = [i for i in todo if best[i].confidence < threshold]
    return [(w, r) for w, r in zip(best, reads)]  # type: ignore[misc]


def reread_seed(seed: int, attempt: int) -> int:
    return seed + REREAD_SEED_STRIDE * attempt


def question_seed(seed: int, index: int) -> int:
    """The seed of the index-th span question of a schema: apart from the label read's and each other's."""
    return seed + QUESTION_SEED_STRIDE * (index + 1)


# The registry entries ------------------------------------------------------------------------------------

MAX_BLANK_TOKENS = 256


class SpanType(QuestionType):
    """One substring of the item text, or none."""

    name = "span"
    jev_type = "span"
    reads = "span"
    widget = "span"
    answer_word = "span"
    reply_instruction = "Answer with the exact words from the message, or none."
    fields = frozenset({"max_tokens", "max_items", "criteria"})
    takes_items = False

    def parse(self, qid, spec, written, jev_form):
        if "options" in spec or "levels" in spec:
            raise SchemaError(
                f"a {written} question's answer is words from the item text; it has no options or levels",
                question=qid,
                field="options" if "options" in spec else "levels",
            )
        limits = dict(spec)
        if "criteria" in spec:
            criteria = spec["criteria"]
            if not isinstance(criteria, Mapping) or set(criteria) - {"max_tokens", "max_items"}:
                raise SchemaError(
                    f'criteria of a {written} question is {{"max_tokens": n, "max_items": n}}',
                    question=qid,
                    field="criteria",
                )
            limits.update(criteria)
        max_tokens = _positive(qid, limits.get("max_tokens"), "max_tokens", MAX_BLANK_TOKENS)
        max_items = _positive(qid, limits.get("max_items"), "max_items", 64)
        if max_items is not None and not self.takes_items:
            raise SchemaError(
                "a span question has one answer; use type 'spans' for a list", question=qid, field="max_items"
            )
        return Question(qid, self.name, "", (), max_tokens=max_tokens, max_items=max_items)

    def to_dict(self, q):
        return {k: v for k, v in (("max_tokens", q.max_tokens), ("max_items", q.max_items)) if v is not None}

    def to_jev_spec(self, q):
        criteria = self.to_dict(q)
        return {**super().to_jev_spec(q), **({"criteria": criteria} if criteria else {})}

    def option_lines(self, q, separator=": ", describe=" ({})"):
        return []

    def to_jev(self, answer, q):
        return answer.to_jev(q)

    def jev_probabilities(self, q, shape):
        return []

    def human_value(self, q, value, text=""):
        spans = parse_span_value(value, text, self.name)
        stored = span_value(spans)
        if spans and stored.count(",") + 1 < len(spans):  # the answer column would cut the list: refuse, never cut
            raise ValueError(
                f"{q.id}: {len(spans)} spans are more than one answer holds ({stored.count(',') + 1} fit); "
                "join neighbouring spans or split the question"
            )
        return stored

    def export_categories(self, q):
        return None


class SpansType(SpanType):
    """A list of substrings of the item text, in text order, or none."""

    name = "spans"
    jev_type = "spans"
    widget = "spans"
    reply_instruction = "Answer with the exact words from the message, one answer per line, or none."
    takes_items = True


def _positive(qid: str, value: Any, field_name: str, most: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise SchemaError(f"{field_name} is a whole number from 1 to {most}", question=qid, field=field_name)
    return value


for _type in (SpanType(), SpansType()):
    register(_type)


def span_answer_from_jev(question: Any, shape: Mapping[str, Any], text: str) -> SpanAnswer:
    """A `/v1/systemone` span or spans answer back to a SpanAnswer, every span checked against the text
    (ValueError when a span's offsets do not slice out its text)."""
    if question.kind == "spans":
        items = shape.get("items") or []
    else:
        items = [shape] if shape.get("found") else []
    spans = []
    for item in items:
        start, end = int(item["start"]), int(item["end"])
        if not 0 <= start < end <= len(text) or text[start:end] != item.get("text"):
            raise ValueError(f"span {start}-{end} does not match the item text")
        spans.append(
            Span(start, end, text[start:end], float(item.get("confidence", 0.0)), float(item.get("coverage", 1.0)))
        )
    confidence = shape.get("confidence")
    if confidence is None:
        confidence = sum(s.confidence for s in spans) / len(spans) if spans else 0.0
    return SpanAnswer(
        question.id,
        question.kind,
        tuple(spans),
        float(confidence),
        int(shape.get("reads", 1)),
        int(shape.get("windows", 1)),
    )
