"""Annotating, at the service: undo within one question and one session, skips that stay skipped (and a
queue that brings them back), a reason for every empty queue, and item fields hidden from the card."""

import json

import pandas as pd
import pytest
from sqlalchemy import select

from diffjev import Schema
from diffjev.errors import SchemaError
from diffjev.services import annotation
from diffjev.services.exporting import export_project
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database
from storage.models import Response
from conftest import TICKETS


@pytest.fixture
def db(tmp_path, dgemma_engine):
    database = Database(tmp_path / "annotate.db")
    with database.session() as session:
        repo.create_project(session, "p", Schema.from_dict({**TICKETS, "samples": 1}), "owner")
    import_items(database, "p", pd.DataFrame({"text": [f"Ticket {i}" for i in range(8)]}))
    prelabel(database, "p", dgemma_engine)
    return database


def answers(db, annotator="ann"):
    with db.read() as session:
        rows = session.scalars(select(Response).where(Response.annotator == annotator).order_by(Response.id))
        return [(r.item_id, r.question_id, r.value, r.status) for r in rows]


def test_undo_stays_within_the_question_and_the_session(db):
    earlier = []
    for value in ("billing", "account"):  # an earlier session, on another question
        card = annotation.next_card(db, "p", "team", "in_order", "ann")
        annotation.answer(db, card, "ann", value, seconds=1.0)
        earlier.append((card.item_id, card.question_row, value, "submitted"))
    project_id, _, rows, _ = annotation.project_schema(db, "p")
    mark = annotation.undo_mark(db, project_id)  # Start pressed on "tone"
    tone = []
    for value in ("calm", "annoyed", "furious"):
        card = annotation.next_card(db, "p", "tone", "in_order", "ann")
        annotation.answer(db, card, "ann", value, seconds=1.0)
        tone.append(card.item_id)
    undone = [annotation.undo_last(db, project_id, "ann", rows["tone"], mark) for _ in range(4)]
    assert undone == [(i, rows["tone"]) for i in reversed(tone)] + [None]
    assert answers(db) == earlier  # the team answers of the earlier session stand
    # another question's answers in the same session are not this question's to undo either
    card = annotation.next_card(db, "p", "urgent", "in_order", "ann")
    annotation.answer(db, card, "ann", "yes", seconds=1.0)
    assert annotation.undo_last(db, project_id, "ann", rows["tone"], mark) is None
    assert annotation.undo_last(db, project_id, "ann", rows["urgent"], mark) == (card.item_id, rows["urgent"])


def test_three_skips_in_a_row_serve_three_items_and_the_skipped_queue_brings_them_back(db):
    skipped = []
    card = annotation.next_card(db, "p", "team", "least_confidence", "ann")
    for _ in range(3):
        skipped.append(card.item_id)
        annotation.answer(db, card, "ann", None, seconds=1.0, status="skipped")
        card = annotation.next_card(db, "p", "team", "least_confidence", "ann", skip_item=card.item_id)
    assert len(set(skipped)) == 3 and card.item_id not in skipped
    # the skips stay out of this annotator's queues, but not out of anyone else's
    assert annotation.next_card(db, "p", "team", "in_order", "ann").item_id not in skipped
    theirs = annotation.next_card(db, "p", "team", "least_confidence", "bob")
    assert theirs.item_id == skipped[0]
    annotation.answer(db, theirs, "bob", "account", seconds=1.0)  # answered by someone else: not back for ann
    served = []
    while (again := annotation.next_card(db, "p", "team", "skipped", "ann")) is not None:
        served.append(again.item_id)
        annotation.answer(db, again, "ann", "billing", seconds=1.0)
    assert served == skipped[1:]  # the longest-skipped first; answered there, each leaves the Skipped queue
    reason = annotation.empty_queue_reason(db, "p", "team", "skipped", "ann")
    assert "no skipped items" in reason


def test_skipping_again_in_the_skipped_queue_sends_the_item_to_its_end(db):
    first = annotation.next_card(db, "p", "tone", "in_order", "ann")
    annotation.answer(db, first, "ann", None, seconds=1.0, status="skipped")
    second = annotation.next_card(db, "p", "tone", "in_order", "ann", skip_item=first.item_id)
    annotation.answer(db, second, "ann", None, seconds=1.0, status="skipped")
    card = annotation.next_card(db, "p", "tone", "skipped", "ann")
    assert card.item_id == first.item_id
    annotation.answer(db, card, "ann", None, seconds=1.0, status="skipped")
    assert annotation.next_card(db, "p", "tone", "skipped", "ann", skip_item=card.item_id).item_id == second.item_id


def test_a_queue_that_needs_a_second_run_or_annotator_says_so(db):
    reason = annotation.empty_queue_reason
    assert annotation.next_card(db, "p", "team", "run_disagreement", "ann") is None
    assert "compares the answers of the two latest pre-label runs; there is one" in reason(
        db, "p", "team", "run_disagreement", "ann"
    )
    assert "Pre-label" in reason(db, "p", "team", "run_disagreement", "ann")
    assert "newer pre-label run; there is one" in reason(db, "p", "team", "changed", "ann")
    assert annotation.next_card(db, "p", "team", "second_opinion", "ann") is None
    assert "needs a second annotator's answers" in reason(db, "p", "team", "second_opinion", "ann")
    assert annotation.next_card(db, "p", "team", "overlap", "ann") is None
    assert "needs a second annotator's answers" in reason(db, "p", "team", "overlap", "ann")


def test_every_answered_and_skipped_leftovers_are_explained(db):
    cards = []
    while (card := annotation.next_card(db, "p", "urgent", "least_confidence", "ann")) is not None:
        cards.append(card)
        status = "skipped" if len(cards) <= 2 else "submitted"
        annotation.answer(db, card, "ann", None if status == "skipped" else "no", seconds=1.0, status=status)
    reason = annotation.empty_queue_reason(db, "p", "urgent", "least_confidence", "ann")
    assert "Of the 2 items without an answer to urgent, you skipped 2" in reason and "'Skipped'" in reason
    for _ in range(2):
        card = annotation.next_card(db, "p", "urgent", "skipped", "ann")
        annotation.answer(db, card, "ann", "yes", seconds=1.0)
    assert "Every item has an answer to urgent" in annotation.empty_queue_reason(
        db, "p", "urgent", "least_confidence", "ann"
    )


def test_a_run_still_reading_says_how_far_it_is(db):
    with db.session() as session:
        project = repo.get_project(session, "p")
        repo.create_run(session, project.id, repo.latest_version(session, project.id), "t", "m", None, {}, "owner")
    reason = annotation.empty_queue_reason(db, "p", "team", "least_confidence", "ann")
    assert "Pre-labels are still being read: 0 of 8 items done" in reason


def test_a_project_without_items_says_to_import(tmp_path):
    db = Database(tmp_path / "empty.db")
    with db.session() as session:
        repo.create_project(session, "e", Schema.from_dict(TICKETS), "owner")
    assert annotation.next_card(db, "e", "team", "in_order", "ann") is None
    assert "no items yet: import some in the Import tab" in annotation.empty_queue_reason(
        db, "e", "team", "in_order", "ann"
    )


def test_hidden_fields_are_validated_and_round_trip():
    schema = Schema.from_dict({**TICKETS, "hidden_fields": ["expected_team"]})
    assert schema.hidden_fields == ("expected_team",)
    assert Schema.from_dict(json.loads(json.dumps(schema.to_dict()))) == schema
    assert "hidden_fields" not in Schema.from_dict(TICKETS).to_dict()
    for bad, says in (
        ("expected_team", "list the item fields"),
        ([""], "list the item fields"),
        (["a", "a"], "'a' is listed twice"),
    ):
        with pytest.raises(SchemaError, match=says) as caught:
            Schema.from_dict({**TICKETS, "hidden_fields": bad})
        assert caught.value.field == "hidden_fields"


def test_a_hidden_field_is_off_the_card_but_in_the_item_and_its_export(tmp_path):
    db = Database(tmp_path / "hidden.db")
    with db.session() as session:
        repo.create_project(session, "h", Schema.from_dict({**TICKETS, "hidden_fields": ["gold"]}), "owner")
    import_items(db, "h", pd.DataFrame({"text": ["The site is down"], "gold": ["technical"], "plan": ["pro"]}))
    card = annotation.next_card(db, "h", "team", "in_order", "ann")
    assert card.fields == {"plan": "pro"}
    annotation.answer(db, card, "ann", "technical", seconds=1.0)
    target = tmp_path / "out.jsonl"
    export_project(db, "h", target, "jsonl")
    [record] = [json.loads(line) for line in target.read_text().splitlines()]
    assert record["fields"] == {"gold": "technical", "plan": "pro"}


def test_the_demo_project_hides_its_gold_answer(tmp_path):
    from diffjev.ui.studio import DEMO_PROJECT, ensure_project

    db = Database(tmp_path / "demo.db")
    assert ensure_project(db) == (DEMO_PROJECT, True)
    card = annotation.next_card(db, DEMO_PROJECT, "team", "in_order", "ann")
    assert "expected_team" not in card.fields
    with db.read() as session:
        item = repo.project_item(session, card.project_id, card.item_id)
        assert item.fields["expected_team"] in ("billing", "technical", "account")
        assert item.fields["expected_urgent"] in ("yes", "no")
        assert item.fields["expected_tone"] in ("calm", "annoyed", "furious")
    # Every question's gold answer rides along in the item, and none of them is on any question's card.
    for question in ("urgent", "team", "tone"):
        card = annotation.next_card(db, DEMO_PROJECT, question, "in_order", "ann")
        assert not {"expected_urgent", "expected_team", "expected_tone"} & set(card.fields)
