"""Bad input, generated: schemathesis against the OpenAPI of the studio's `POST /v1/systemone` (no 500
for any body), and fuzzed item texts (control characters, very long texts, right-to-left text, HTML)
that are stored exactly and shown as text."""

import html
import re

import pandas as pd
import pytest
import schemathesis
from schemathesis import GenerationMode
from gradio_client import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from diffjev.services.importing import import_items
from storage.models import Item
from diffjev.ui.annotate import item_html
from conftest import LocalServer
from studio_fixtures import serve_studio, studio_db


@pytest.fixture(scope="module")
def jev_api(dgemma_engine):
    """The studio's own Jev API (no logins, so its OpenAPI schema is served), on localhost."""
    from diffjev.engines.auto import ChosenEngine
    from storage.db import Database
    from diffjev.ui.context import Studio
    from diffjev.ui.studio import create_app

    import tempfile
    from pathlib import Path

    db = studio_db(Path(tempfile.mkdtemp(prefix="diffjev-fuzz-")) / "fuzz.db", ["one ticket"])
    assert isinstance(db, Database)
    with LocalServer(create_app(Studio(db, ChosenEngine(dgemma_engine, "tiny"), "tickets"))) as server:
        schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
        schema.config.update(base_url=server.url)
        yield schema


def test_systemone_never_answers_500(jev_api):
    operation = jev_api["/v1/systemone"]["POST"]
    answered = []

    # schemathesis generates the bodies from the OpenAPI schema (valid ones and ones that break it);
    # hypothesis runs them, as schemathesis's own pytest plugin would.
    bodies = st.one_of(operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE))

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=bodies)
    def no_500(case):
        response = case.call(timeout=60)
        assert response.status_code < 500, (case.body, response.text[:500])
        if response.status_code == 400:  # a refused body is vLLM's ErrorResponse, saying what is wrong
            error = response.json().get("error")
            assert error and error["code"] == 400 and error["message"], (case.body, case.headers, response.text[:500])
        answered.append(response.status_code)

    no_500()
    # The schema says less than the validation does (at least two answers to a choice, say), so most
    # generated bodies are refused; each refusal was a 4xx naming where, never a 500.
    assert len(answered) >= 100 and set(answered) <= {200, 400}


CONTROL = "".join(chr(c) for c in range(1, 32)) + "\x7f\u200b\u200e\u200f\u202e\u2066"
nasty_text = st.one_of(
    st.text(alphabet=st.sampled_from(CONTROL + "ab <>&\"'"), min_size=1, max_size=80),
    st.text(min_size=1, max_size=200),
    st.builds(lambda t, n: (t or "x") * n, st.text(max_size=20), st.integers(1, 20)),
    st.sampled_from(
        [
            "<script>alert(1)</script>",
            "<img src=x onerror=alert(1)>",
            "שלום עולם مرحبا بالعالم",
            "\u202eevil.exe\u202c",
            "&lt;already escaped&gt;",
            "]]><!--",
            "{{7*7}} ${7*7}",
        ]
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(nasty_text, min_size=1, max_size=6))
def test_fuzzed_item_texts_are_stored_exactly_or_rejected_by_line_and_shown_as_text(tmp_path_factory, texts):
    db = studio_db(tmp_path_factory.mktemp("texts") / "t.db", ["seed item"])
    report = import_items(db, "tickets", pd.DataFrame({"text": texts}))
    # the refusals, each reported with its line: a blank text, and a NUL (no database column holds one)
    refused = {
        i + 1: "empty text" if not t.strip() else "NUL" for i, t in enumerate(texts) if not t.strip() or "\x00" in t
    }
    kept = [t for i, t in enumerate(texts) if i + 1 not in refused]
    assert {r.line: r.reason for r in report.rejects}.keys() == refused.keys()
    assert all(refused[r.line] in r.reason for r in report.rejects)
    with db.read() as session:
        stored = set(session.scalars(select(Item.text).where(Item.text != "seed item")))
    assert stored == set(kept)
    for text in kept:
        card = type("Card", (), {"fields": {"note": text}, "external_id": text[:30], "item_id": 1, "text": text})
        shown = item_html(card)
        body = re.search(r"<div class='dj-text'>(.*?)</div>", shown, re.S).group(1)
        assert html.unescape(body) == text and "<" not in body  # the text, with no markup of its own


def test_a_very_long_item_with_markup_reaches_the_annotator_as_text(tmp_path, dgemma_engine):
    # just under the import cap on item text (DIFFJEV_MAX_ITEM_CHARS, 100,000 characters by default)
    long_text = "<b>bold?</b> \u202eright-to-left\u202c שלום " + "x" * 99_900 + " \x07\x1b[31m end"
    db = studio_db(tmp_path / "long.db", [long_text], dgemma_engine)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        card = Client(server.url, verbose=False).predict("team", "Least confidence first", api_name="/annotate_start")
    body = re.search(r"<div class='dj-text'>(.*?)</div>", card[1], re.S).group(1)
    assert html.unescape(body) == long_text and "<b>" not in body
