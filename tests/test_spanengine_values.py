"""Span answers' stored names and a person's span answers checked against the item text."""

import pytest

from diffjev.spans import Span, SpanAnswer, parse_span_value, span_value, spans_detail, spans_from_detail

TEXT = "Order #12 for the Blue Kettle 🫖 arrived broken."


def test_span_value_is_canonical_and_sorted():
    a = Span(18, 29, TEXT[18:29], 0.9)
    b = Span(0, 5, TEXT[0:5], 0.4)
    assert span_value([a, b]) == "0-5,18-29"
    assert span_value([]) == "none"


def test_span_value_stays_within_the_answer_column():
    spans = [Span(i * 10, i * 10 + 5, "x", 1.0) for i in range(200)]
    value = span_value(spans)
    assert len(value) <= 500
    assert value.startswith("0-5,10-15,") and not value.endswith(",")


def test_parse_round_trips_the_value():
    spans = parse_span_value("18-29", TEXT, "span")
    assert spans == (Span(18, 29, "Blue Kettle", 1.0),)
    assert span_value(spans) == "18-29"
    assert parse_span_value(" none ", TEXT, "spans") == ()
    both = parse_span_value("30-31, 0-5", TEXT, "spans")
    assert [s.text for s in both] == ["Order", "🫖"]


@pytest.mark.parametrize(
    "value, kind, says",
    [
        ("", "span", "start-end"),
        ("12..18", "span", "'12..18' is not a span"),
        ("5-3", "span", "outside the text or empty"),
        ("0-999", "span", f"has {len(TEXT)} characters"),
        ("0-5,18-29", "span", "takes one span"),
        ("0-10,5-12", "spans", "overlap"),
        ("0-5", "choice", "span or spans question"),
    ],
)
def test_parse_names_the_fix(value, kind, says):
    with pytest.raises(ValueError) as caught:
        parse_span_value(value, TEXT, kind)
    assert says in str(caught.value)


def test_span_answer_jev_shapes():
    kettle = Span(18, 29, "Blue Kettle", 0.8, 0.9)
    one = SpanAnswer("product", "span", (kettle,), 0.8, reads=2, windows=3)
    assert one.found and one.answer == "18-29"
    assert one.to_jev(None) == {
        "type": "span",
        "found": True,
        "text": "Blue Kettle",
        "start": 18,
        "end": 29,
        "confidence": 0.8,
        "coverage": 0.9,
        "reads": 2,
        "windows": 3,
    }
    none = SpanAnswer("product", "span", (), 0.7, reads=1)
    assert none.to_jev(None)["found"] is False and none.to_jev(None)["text"] is None and none.answer == "none"
    many = SpanAnswer("things", "spans", (kettle,), 0.8, reads=1)
    assert many.to_jev(None) == {
        "type": "spans",
        "found": True,
        "items": [{"text": "Blue Kettle", "start": 18, "end": 29, "confidence": 0.8, "coverage": 0.9}],
        "reads": 1,
    }


def test_detail_round_trip_and_stale_detail():
    kettle = Span(18, 29, "Blue Kettle", 0.8)
    detail = spans_detail([kettle])
    assert detail == {"spans": [{"start": 18, "end": 29, "text": "Blue Kettle", "confidence": 0.8}]}
    assert spans_from_detail(detail, TEXT) == (kettle,)
    with pytest.raises(ValueError, match="no longer matches"):
        spans_from_detail(detail, "A different text entirely, long enough")
