"""Span answers in storage and the annotation service: a span suggestion is stored with its spans, a person's
span answer is checked against the item text (code point offsets, emoji, combining marks, CRLF) and stored
with its spans, and the export holds exact start, end and text per span in every format."""

import csv
import subprocess
import sys
import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from diffjev import Schema
from diffjev.decide import Decision
from diffjev.services import annotation
from diffjev.services.exporting import export_project
from diffjev.services.importing import import_items
from diffjev.spans import Span, SpanAnswer
from storage import repo
from storage.db import Database
from storage.models import Response, Suggestion

SCHEMA = {
    "questions": [
        {"id": "product", "type": "span", "instructions": "Which words name the product?"},
        {"id": "parts", "type": "spans", "instructions": "Which parts are broken?", "max_items": 2},
    ],
    "samples": 1,
}
TEXTS = [
    "Order 🙂🙂: the Acme Phone X arrived with a broken screen and a bent hinge.",
    "Line one\r\nThe Cafe\u0301 Deluxe kettle: lid cracked, handle loose.",
]


def span_of(text: str, words: str, confidence: float = 0.8) -> Span:
    start = text.index(words)
    return Span(start, start + len(words), words, confidence)


def store_span_suggestions(db: Database, project: str, by_item: dict[int, dict[str, tuple[Span, ...]]]) -> int:
    """A run whose reads are the given span answers, stored the way a pre-label run stores them."""
    with db.session() as session:
        p = repo.get_project(session, project)
        version = repo.latest_version(session, p.id)
        schema, rows = repo.version_schema(version)
        run = repo.create_run(session, p.id, version, "test", "none", None, {}, "owner")
        results = []
        for item_id, answers in by_item.items():
            decision = Decision(
                {
                    qid: SpanAnswer(qid, schema.question(qid).kind, spans, 0.7 if spans else 0.4, reads=1)
                    for qid, spans in answers.items()
                },
                schema,
                {"skipped": {}},
            )
            results.append((item_id, decision, None, 1, 5.0))
        repo.store_reads(session, run.id, rows, results)
        return run.id


@pytest.fixture
def db(db_url):
    database = Database(db_url)
    with database.session() as session:
        repo.create_project(session, "p", Schema.from_dict(SCHEMA), "owner")
    import_items(database, "p", pd.DataFrame({"id": ["a", "b"], "text": TEXTS}), id_field="id")
    return database


def card_of(db, item_id: int) -> annotation.ItemCard:
    """An item's card, as the item view loads it (an item with no suggestion is not in a run's queue)."""
    project_id, schema, rows, _ = annotation.project_schema(db, "p")
    return annotation.load_item_card(db, project_id, item_id, schema, rows, None, "ann")


def item_ids(db) -> list[int]:
    with db.read() as session:
        return list(session.scalars(select(repo.Item.id).order_by(repo.Item.id)))


def test_a_span_suggestion_is_stored_with_its_spans_and_shown_on_the_card(db):
    first, second = item_ids(db)
    product = span_of(TEXTS[0], "Acme Phone X", 0.9)
    parts = (span_of(TEXTS[0], "screen", 0.6), span_of(TEXTS[0], "hinge", 0.5))
    store_span_suggestions(db, "p", {first: {"product": (product,), "parts": parts}, second: {"product": ()}})
    with db.read() as session:
        rows = {(s.item_id, s.answer): s for s in session.scalars(select(Suggestion))}
    stored = rows[(first, f"{product.start}-{product.end}")]
    # offsets count code points: two emoji before the product are two characters, not four
    assert TEXTS[0][product.start : product.end] == "Acme Phone X" and product.start == 14
    assert stored.detail == {"spans": [{"start": 14, "end": 26, "text": "Acme Phone X", "confidence": 0.9}]}
    assert (stored.distribution, stored.entropy, stored.margin, stored.label_mass) == ({}, 0.0, 0.7, 1.0)
    assert stored.confidence == 0.7 and stored.value is None
    listed = rows[(first, ",".join(f"{s.start}-{s.end}" for s in parts))]
    assert [s["text"] for s in listed.detail["spans"]] == ["screen", "hinge"]
    nothing = rows[(second, "none")]
    assert nothing.detail == {"spans": []} and nothing.confidence == 0.4

    card = annotation.next_item_card(db, "p", "in_order", "ann")
    assert card.item_id == first
    entry = {e.question.id: e for e in card.asked}["product"]
    assert entry.preselected == "14-26" and entry.suggestion["detail"] == stored.detail


def test_a_person_corrects_and_accepts_spans_through_the_item_card(db):
    first, second = item_ids(db)
    store_span_suggestions(db, "p", {first: {"product": (span_of(TEXTS[0], "Acme Phone"),), "parts": ()}})
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    assert card.item_id == first
    screen, hinge = span_of(TEXTS[0], "screen"), span_of(TEXTS[0], "bent hinge")
    annotation.accept_item(
        db, card, "ann", {"product": "14-26", "parts": f"{hinge.start}-{hinge.end},{screen.start}-{screen.end}"}, 3.0
    )
    with db.read() as session:
        answers = {r.question_id: r for r in session.scalars(select(Response).where(Response.item_id == first))}
    by_key = {e.question.id: answers[e.row] for e in card.entries}
    assert (by_key["product"].value, by_key["product"].source) == ("14-26", "corrected")
    assert by_key["product"].detail == {"spans": [{"start": 14, "end": 26, "text": "Acme Phone X"}]}
    # the canonical answer name: sorted, so two people's answers compare as text
    assert by_key["parts"].value == f"{screen.start}-{screen.end},{hinge.start}-{hinge.end}"
    assert [s["text"] for s in by_key["parts"].detail["spans"]] == ["screen", "bent hinge"]

    # the second item has no suggestion: a span over CRLF and a combining mark, counted in code points
    card = card_of(db, second)
    cafe = span_of(TEXTS[1], "Cafe\u0301 Deluxe kettle")
    annotation.accept_item(db, card, "ann", {"product": f"{cafe.start}-{cafe.end}", "parts": "none"}, None)
    with db.read() as session:
        answers = {r.question_id: r for r in session.scalars(select(Response).where(Response.item_id == second))}
    stored = {e.question.id: answers[e.row] for e in card.entries}
    assert stored["product"].detail["spans"][0]["text"] == "Cafe\u0301 Deluxe kettle"
    assert stored["product"].source == "manual"
    assert (stored["parts"].value, stored["parts"].detail) == ("none", {"spans": []})


@pytest.mark.parametrize(
    ("choices", "message"),
    [
        ({"product": "14-26,30-35"}, "product: a span question takes one span"),
        ({"product": "60-600"}, "product: span 60-600 is outside the text"),
        ({"product": "Acme"}, "product: 'Acme' is not a span"),
        ({"product": 15}, "product: give the span as start-end"),
        ({"parts": "10-20,15-25"}, "parts: spans 10-20 and 15-25 overlap"),
        ({"parts": "0-3,4-6,7-9"}, "parts: 3 spans, but this question takes at most 2"),
    ],
)
def test_a_wrong_span_answer_is_refused_naming_the_question_and_nothing_is_stored(db, choices, message):
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    with pytest.raises(ValueError, match=message):
        annotation.accept_item(db, card, "ann", {"product": "14-26", "parts": "none", **choices}, None)
    with db.read() as session:
        assert session.scalar(select(Response.id)) is None


def test_the_one_question_view_accepts_the_suggested_span_and_checks_a_typed_one(db):
    first, _ = item_ids(db)
    store_span_suggestions(db, "p", {first: {"product": (span_of(TEXTS[0], "Acme Phone X"),), "parts": ()}})
    card = annotation.next_card(db, "p", "product", "least_confidence", "ann")
    assert card.suggestion["answer"] == "14-26"
    with pytest.raises(ValueError, match="product: span 3-300 is outside the text"):
        annotation.answer(db, card, "ann", "3-300", None)
    annotation.answer(db, card, "ann", card.suggestion["answer"], None)
    with db.read() as session:
        response = session.scalar(select(Response))
    assert (response.value, response.source) == ("14-26", "accepted")
    assert response.detail == {"spans": [{"start": 14, "end": 26, "text": "Acme Phone X"}]}


def test_undo_brings_back_the_spans_of_the_answer_before(db):
    first, _ = item_ids(db)
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    mark = annotation.undo_mark(db, card.project_id)
    annotation.accept_item(db, card, "ann", {"product": "14-26", "parts": "none"}, None)
    _, schema, rows, _ = annotation.project_schema(db, "p")
    again = annotation.load_item_card(db, card.project_id, first, schema, rows, None, "ann")
    annotation.accept_item(db, again, "ann", {"product": "14-18", "parts": "none"}, None)
    assert annotation.undo_last_item(db, card.project_id, "ann", mark) == (first, "submitted")
    with db.read() as session:
        product = session.scalar(select(Response).where(Response.question_id == rows["product"]))
    assert product.value == "14-26" and product.detail["spans"][0]["text"] == "Acme Phone X"


def answered_and_suggested(db) -> None:
    first, second = item_ids(db)
    screen, hinge = span_of(TEXTS[0], "screen"), span_of(TEXTS[0], "hinge")
    store_span_suggestions(db, "p", {first: {"product": (span_of(TEXTS[0], "Acme Phone"),), "parts": (screen,)}})
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    parts = f"{screen.start}-{screen.end},{hinge.start}-{hinge.end}"
    annotation.accept_item(db, card, "ann", {"product": "14-26", "parts": parts}, None)
    card = card_of(db, second)
    cafe = span_of(TEXTS[1], "Cafe\u0301 Deluxe")
    annotation.accept_item(db, card, "ann", {"product": f"{cafe.start}-{cafe.end}", "parts": "none"}, None)


def check_spans(records: list[dict]) -> None:
    """Every exported span slices its own text exactly, and the answers are the ones given."""
    for record in records:
        for column in ("product_spans", "parts_spans", "product_model_spans", "parts_model_spans"):
            for span in record[column] or []:
                assert record["text"][span["start"] : span["end"]] == span["text"]
    first, second = records
    assert [s["text"] for s in first["product_spans"]] == ["Acme Phone X"]
    assert [s["text"] for s in first["parts_spans"]] == ["screen", "hinge"]
    assert [s["text"] for s in first["product_model_spans"]] == ["Acme Phone"]
    assert first["product_confidence"] == 0.7
    assert [s["text"] for s in second["product_spans"]] == ["Cafe\u0301 Deluxe"]
    assert second["parts_spans"] == [] and second["product_model_spans"] is None
    assert "product_distribution" not in first


def test_export_round_trip_keeps_exact_spans_in_jsonl_parquet_hf_and_csv(db, tmp_path):
    answered_and_suggested(db)
    export_project(db, "p", tmp_path / "out.jsonl", "jsonl")
    check_spans([json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()])
    export_project(db, "p", tmp_path / "out.parquet", "parquet")
    check_spans(pq.read_table(tmp_path / "out.parquet").to_pylist())
    export_project(db, "p", tmp_path / "out.hf", "hf")
    import datasets

    check_spans(list(datasets.load_from_disk(str(tmp_path / "out.hf"))))
    # CSV: the spans as JSON text; the text itself is read back with its CRLF
    export_project(db, "p", tmp_path / "out.csv", "csv")
    with open(tmp_path / "out.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for column in ("product_spans", "parts_spans", "product_model_spans", "parts_model_spans"):
            row[column] = json.loads(row[column]) if row[column] else None
        row["product_confidence"] = float(row["product_confidence"]) if row["product_confidence"] else None
    check_spans(rows)


def test_the_cli_exports_spans_with_exact_offsets(tmp_path):
    path = tmp_path / "cli.db"
    database = Database(path)
    with database.session() as session:
        repo.create_project(session, "p", Schema.from_dict(SCHEMA), "owner")
    import_items(database, "p", pd.DataFrame({"id": ["a", "b"], "text": TEXTS}), id_field="id")
    answered_and_suggested(database)
    database.engine.dispose()
    done = subprocess.run(
        [sys.executable, "-m", "diffjev.cli", "export", "--db", str(path), "--project", "p"]
        + ["--format", "jsonl", "--out", str(tmp_path / "cli.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    check_spans([json.loads(line) for line in (tmp_path / "cli.jsonl").read_text(encoding="utf-8").splitlines()])
