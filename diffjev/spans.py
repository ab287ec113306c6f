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

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

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
