"""The "Try a read" tab of the studio on localhost, driven through gradio_client."""

import html
import json

import pytest
from gradio_client import Client

from diffjev.ui.playground import DEMO_SCHEMA
from studio_fixtures import serve_studio, studio_db


@pytest.fixture(scope="module")
def playground(tmp_path_factory, dgemma_engine):
    db = studio_db(tmp_path_factory.mktemp("try") / "try.db", ["x"])
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        yield Client(server.url, verbose=False)


def test_a_read_draws_each_questions_distribution(playground):
    bars, jev, status = playground.predict(json.dumps(DEMO_SCHEMA), "Everything is down.", api_name="/read")
    for name in ("urgent", "team", "tone", "billing", "technical", "annoyed"):
        assert name in bars
    assert set(jev) == {"urgent", "team", "tone"} and jev["team"]["type"] == "choice"
    assert "draw" in status


def test_markup_in_schema_and_item_is_shown_as_text(playground):
    schema = {
        "questions": [
            {
                "id": "q",
                "type": "choice",
                "instructions": "Which?",
                "options": ["<script>alert(1)</script>", "<b>bold</b>"],
            }
        ]
    }
    bars, _, _ = playground.predict(json.dumps(schema), "<img src=x onerror=alert(1)>", api_name="/read")
    assert "<script>" not in bars and "&lt;script&gt;alert(1)&lt;/script&gt;" in bars
    assert "<b>bold</b>" not in bars


@pytest.mark.parametrize(
    "schema_text, says",
    [
        ("{not json", "Schema"),
        (
            json.dumps({"questions": [{"id": "q", "type": "choice", "instructions": "?", "options": ["a"]}]}),
            "question 'q', field 'options': a choice question needs at least 2 options",
        ),
    ],
)
def test_bad_schemas_get_a_message_not_a_traceback(playground, schema_text, says):
    bars, jev, status = playground.predict(schema_text, "x", api_name="/read")
    shown = html.unescape(status)  # the message writes the schema's text as character references
    assert bars == "" and says in shown and "Traceback" not in shown


def test_a_read_of_span_and_staged_questions_shows_each_answer_and_each_skip(playground):
    schema = {
        "questions": [
            {"id": "urgent", "type": "yes_no", "instructions": "Urgent?"},
            {"id": "who", "type": "span", "instructions": "Who is named?", "max_tokens": 4},
            {"id": "why", "type": "yes_no", "instructions": "Outage?", "ask_if": {"urgent": ["yes", "no"]}},
        ]
    }
    text = "Alice <b>paid</b> Bob."
    bars, jev, status = playground.predict(json.dumps(schema), text, api_name="/read")
    assert "draw" in status and "Read failed" not in status
    assert jev["who"]["type"] == "span" and set(jev) == {"urgent", "who", "why"}
    assert "<b>who</b>" in bars and "<b>paid</b>" not in bars  # the item's markup is shown as text
    if jev["who"]["found"]:
        assert html.escape(f"“{jev['who']['text']}”") in bars
    else:
        assert "none" in bars
    span_only = {"questions": [{"id": "who", "type": "span", "instructions": "Who is named?", "max_tokens": 4}]}
    bars, jev, status = playground.predict(json.dumps(span_only), text, api_name="/read")
    assert "Read failed" not in status and "<b>who</b>" in bars


def test_a_question_whose_condition_fails_is_shown_as_not_asked(playground):
    urgent = {"id": "urgent", "type": "yes_no", "instructions": "Urgent?"}
    _, jev, _ = playground.predict(json.dumps({"questions": [urgent]}), "Everything is down.", api_name="/read")
    was = "yes" if jev["urgent"]["noul"] >= 0.5 else "no"
    other = "no" if was == "yes" else "yes"
    staged = {
        "questions": [urgent, {"id": "why", "type": "yes_no", "instructions": "Outage?", "ask_if": {"urgent": other}}]
    }
    bars, jev, status = playground.predict(json.dumps(staged), "Everything is down.", api_name="/read")
    assert jev["why"] is None
    assert html.unescape(bars).count("not asked (urgent was " + was + "; asked when it is " + other + ")") == 1
