"""Span answers as the pages show them: the item text with the chosen spans marked, and their words."""

from __future__ import annotations

import html

from diffjev.spans import parse_span_value


def span_segments_html(text: str, value: str | None, kind: str) -> str:
    """The item text cut where a chosen span starts or ends, each piece with its code point offset (data-o)
    and the chosen pieces marked, as the item view's KEYS_JS paints it too. A carriage return is left out
    (the HTML parser would fold CRLF into one character), a lone one shown as a line break."""
    try:
        spans = parse_span_value(value, text, kind) if value else ()
    except ValueError:  # a stored answer that no longer fits the text: show the text unmarked
        spans = ()
    cuts = {0, len(text)} | {s.start for s in spans} | {s.end for s in spans}
    cuts |= {i for i, c in enumerate(text) if c == "\r"} | {i + 1 for i, c in enumerate(text) if c == "\r"}
    at = sorted(cuts)
    pieces = []
    for a, b in zip(at, at[1:]):
        piece = text[a:b]
        if piece == "\r":
            piece = "" if text[b : b + 1] == "\n" else "\n"
        marked = " dj-mark" if any(s.start <= a and b <= s.end for s in spans) else ""
        pieces.append(f"<span data-o='{a}' class='dj-seg{marked}'>{html.escape(piece)}</span>")
    return "".join(pieces)


def span_words_with_confidence(spans: list[dict]) -> str:
    """A suggestion's spans (its detail's "spans"), each as its words and the model's confidence in it."""
    return " · ".join(f"“{s['text']}” {float(s.get('confidence', 0)) * 100:.0f}%" for s in spans)


def span_suggestion_line(suggestion: dict | None) -> str:
    """What the model suggested for a span question: each span's text and confidence, or that none fits."""
    if not suggestion:
        return "No suggestion: select the words in the text."
    spans = (suggestion.get("detail") or {}).get("spans") or []
    if not spans:
        return f"Model: nothing fits ({suggestion['confidence'] * 100:.0f}%)."
    return f"Model: {span_words_with_confidence(spans)} (confidence {suggestion['confidence'] * 100:.0f}%)."


def chosen_text(text: str, value: str | None, kind: str) -> str:
    """The chosen spans' words, as the page shows them beside the text."""
    try:
        spans = parse_span_value(value, text, kind) if value else None
    except ValueError:
        spans = None
    if spans is None:
        return ""
    return " · ".join(f"“{s.text}”" for s in spans) if spans else "none"
