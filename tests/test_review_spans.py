"""Span answers in Review's "Change an answer" and in Adjudicate, on a SQLite file and a private PostgreSQL
server and through the real studio's API: a span answer is checked against the item's text (a wrong one is
refused naming the question) and stored with its spans, the adjudication list shows span answers by their
words, and the export of an adjudicated span answer holds its spans."""

import html
import json

import pandas as pd
import pytest
from gradio_client import Client
from sqlalchemy import select

from diffjev import Schema
from diffjev.services import adjudication, annotation, review
from diffjev.services.exporting import export_project
from diffjev.services.importing import import_items
from storage import repo
from storage.db import Database
from storage.models import Adjudication, Response
from studio_fixtures import serve_studio, studio_db
from test_spanstudio_service import SCHEMA, TEXTS, card_of, item_ids, span_of

PRODUCT = span_of(TEXTS[0], "Acme Phone X")  # 14-26
SHORTER = span_of(TEXTS[0], "Acme Phone")  # 14-24
SCREEN, HINGE = span_of(TEXTS[0], "screen"), span_of(TEXTS[0], "bent hinge")


@pytest.fixture
def db(db_url):
    database = Database(db_url)
    with database.session() as session:
        repo.create_project(session, "p", Schema.from_dict(SCHEMA), "owner")
    import_items(database, "p", pd.DataFrame({"id": ["a", "b"], "text": TEXTS}), id_field="id")
    yield database
    database.dispose()


def offsets(*spans) -> str:
    return ",".join(f"{s.start}-{s.end}" for s in spans)


def disagreeing(db) -> None:
    """ann and bob give different spans for item a's product and parts."""
    first, _ = item_ids(db)
    for who, product, parts in (("ann", PRODUCT, (SCREEN,)), ("bob", SHORTER, (SCREEN, HINGE))):
        annotation.accept_item(db, card_of(db, first), who, {"product": offsets(product), "parts": offsets(*parts)}, 1)


def stored(db, annotator: str) -> dict[int, tuple]:
    with db.read() as session:
        rows = session.scalars(select(Response).where(Response.annotator == annotator))
        return {r.question_id: (r.value, r.detail) for r in rows}


def test_change_an_answer_takes_a_span_checks_it_and_keeps_its_spans(db):
    _, schema, rows, _ = annotation.project_schema(db, "p")
    review.reopen(db, "p", "a", "product", offsets(PRODUCT), "rita")
    review.reopen(db, "p", "a", "parts", offsets(HINGE, SCREEN), "rita")  # in any order: stored sorted
    assert stored(db, "rita") == {
        rows["product"]: ("14-26", {"spans": [{"start": 14, "end": 26, "text": "Acme Phone X"}]}),
        rows["parts"]: (
            offsets(SCREEN, HINGE),
            {"spans": [{"start": s.start, "end": s.end, "text": s.text} for s in (SCREEN, HINGE)]},
        ),
    }
    for question, value, says in (
        ("product", "60-600", "product: span 60-600 is outside the text"),
        ("product", "14-26,30-35", "product: a span question takes one span"),
        ("parts", "0-3,4-6,7-9", "parts: 3 spans, but this question takes at most 2"),
    ):
        with pytest.raises(ValueError, match=says):
            review.reopen(db, "p", "a", question, value, "sam")
    assert stored(db, "sam") == {}


def test_adjudicate_settles_a_span_lists_answers_by_their_words_and_exports_the_spans(db, tmp_path):
    disagreeing(db)
    cases = {c.question: c for c in adjudication.cases(db, "p")}
    assert set(cases) == {"product", "parts"}
    listed = adjudication.describe(cases["product"])
    assert listed["answers"] == "ann: “Acme Phone X” (14-26) · bob: “Acme Phone” (14-24)"
    assert adjudication.describe(cases["parts"])["answers"] == (
        f"ann: “screen” ({offsets(SCREEN)}) · bob: “screen”, “bent hinge” ({offsets(SCREEN, HINGE)})"
    )
    with pytest.raises(ValueError, match="product: span 60-600 is outside the text"):
        adjudication.adjudicate(db, "p", "a", "product", "60-600", "rita")
    settled = adjudication.adjudicate(db, "p", "a", "product", " 14-26 ", "rita", "the whole name")
    assert settled.value == "14-26"
    adjudication.adjudicate(db, "p", "a", "parts", offsets(HINGE, SCREEN), "rita")  # another answer than given
    [case] = [c for c in adjudication.cases(db, "p", settled_too=True) if c.question == "parts"]
    assert adjudication.describe(case)["adjudicated"] == f"“screen”, “bent hinge” ({offsets(SCREEN, HINGE)})"
    export_project(db, "p", tmp_path / "out.jsonl", "jsonl")
    first = json.loads((tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert (first["product"], first["product_source"]) == ("14-26", "adjudicated")
    assert first["product_spans"] == [{"start": 14, "end": 26, "text": "Acme Phone X"}]
    assert [s["text"] for s in first["parts_spans"]] == ["screen", "bent hinge"]


def test_the_studio_api_changes_and_settles_span_answers(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "spans.db", TEXTS, name="p", schema=SCHEMA)
    first, _ = item_ids(db)
    server, _ = serve_studio(db, dgemma_engine, name="p")
    with server:
        client = Client(server.url, verbose=False)
        said = html.unescape(client.predict("t0", "product", "14-26", api_name="/review_change"))
        assert said == "Item t0, product: changed to 14-26.", said
        wrong = html.unescape(client.predict("t0", "product", "60-600", api_name="/review_change"))
        assert wrong.startswith("⚠️ product: span 60-600 is outside the text"), wrong
        annotation.accept_item(db, card_of(db, first), "bob", {"product": "14-24", "parts": "none"}, 1)
        cases = client.predict("latest", False, False, api_name="/adjudicate_cases")
        assert "“Acme Phone X” (14-26)" in html.unescape(cases[1])  # the card shows the words
        said = client.predict("t0", "product", "14-24", "", "", "latest", False, False, api_name="/adjudicate")[0]
        said = html.unescape(said)
        assert "settled as **14-24**" in said, said
    with db.read() as session:
        [row] = session.scalars(select(Adjudication)).all()
    assert row.value == "14-24"


def test_agreement_between_annotators_counts_span_answers_as_they_match(db):
    disagreeing(db)  # item a: product and parts differ between ann and bob
    _, second = item_ids(db)
    same = {"product": offsets(span_of(TEXTS[1], TEXTS[1].split()[0])), "parts": "none"}
    for who in ("ann", "bob"):
        annotation.accept_item(db, card_of(db, second), who, same, 1)
    table, differing = review.agreement(db, "p")
    rows = {row["question"]: row for row in table}
    assert rows["product"]["items"] == 2 and rows["product"]["agreement"] == 0.5
    assert rows["parts"]["items"] == 2 and rows["parts"]["agreement"] == 0.5
    assert {(d["question"], d["ann"], d["bob"]) for d in differing} == {
        ("product", offsets(PRODUCT), offsets(SHORTER)),
        ("parts", offsets(SCREEN), offsets(SCREEN, HINGE)),
    }
