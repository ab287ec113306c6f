"""The item view, at the service: every question of an item answered in one transaction, undo of a whole
item, the per-item queue orders, leases between two annotators, and a question with no suggestion."""

from dataclasses import replace

import pandas as pd
import pytest
from sqlalchemy import delete, func, select

from diffjev import Schema
from diffjev.services import annotation
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database
from storage.models import Event, Response, Suggestion
from conftest import TICKETS


@pytest.fixture
def db(tmp_path, dgemma_engine):
    database = Database(tmp_path / "itemview.db")
    with database.session() as session:
        repo.create_project(session, "p", Schema.from_dict({**TICKETS, "samples": 1}), "owner")
    import_items(database, "p", pd.DataFrame({"text": [f"Ticket {i}" for i in range(6)]}))
    prelabel(database, "p", dgemma_engine)
    return database


def stored(db, annotator="ann"):
    with db.read() as session:
        rows = session.scalars(select(Response).where(Response.annotator == annotator).order_by(Response.id))
        return {(r.item_id, r.question_id): (r.value, r.status, r.source) for r in rows}


def test_accepting_an_item_stores_every_question_in_one_transaction(db):
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    assert [e.question.id for e in card.asked] == ["urgent", "team", "tone"]
    assert all(e.preselected == e.suggestion["answer"] for e in card.entries)
    other = next(n for n in card.entries[2].question.names if n != card.entries[2].preselected)
    with db.read() as session:
        events_before = session.scalar(select(func.count()).select_from(Event))
    annotation.accept_item(db, card, "ann", {"tone": other}, seconds=3.0)
    answers = stored(db)
    assert answers == {
        (card.item_id, card.entries[0].row): (card.entries[0].preselected, "submitted", "accepted"),
        (card.item_id, card.entries[1].row): (card.entries[1].preselected, "submitted", "accepted"),
        (card.item_id, card.entries[2].row): (other, "submitted", "corrected"),
    }
    with db.read() as session:
        seconds = session.scalars(select(Response.seconds).where(Response.annotator == "ann")).all()
        item_events = session.scalars(select(Event).where(Event.kind == "item.answered")).all()
        events_after = session.scalar(select(func.count()).select_from(Event))
    assert seconds == [1.0, 1.0, 1.0]  # the item's 3 s shared between its answers
    assert len(item_events) == 1 and len(item_events[0].payload["events"]) == 3
    assert events_after == events_before + 4
    # answered in full, the item leaves the queue; its leases are given back, so bob gets the next one
    assert annotation.next_item_card(db, "p", "in_order", "ann").item_id != card.item_id


def test_a_failing_answer_stores_none_of_the_item(db):
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    with pytest.raises(ValueError, match="'nonsense' is not an answer to urgent"):
        annotation.accept_item(db, card, "ann", {"urgent": "nonsense"}, seconds=1.0)
    assert stored(db) == {}
    # the last question's answer changed (in the one-question view, another tab) after the item was shown:
    # its write is refused, and the item's other two answers are rolled back with it
    tone = annotation.next_card(db, "p", "tone", "in_order", "ann")
    assert tone.item_id == card.item_id
    annotation.answer(db, tone, "ann", "calm", seconds=1.0)
    card = annotation.load_item_card(db, card.project_id, card.item_id, *_schema(db), None, "ann")
    annotation.answer(db, replace(tone, revision=1), "ann", "furious", seconds=1.0)
    with pytest.raises(repo.StaleWrite):
        annotation.accept_item(db, card, "ann", {}, seconds=1.0)
    assert stored(db) == {
        (card.item_id, card.entries[2].row): (
            "furious",
            "submitted",
            "corrected" if card.entries[2].suggestion["answer"] != "furious" else "accepted",
        )
    }


def _schema(db):
    _, schema, rows, _ = annotation.project_schema(db, "p")
    return schema, rows


def test_undo_takes_back_the_whole_last_item(db):
    project_id = annotation.project_schema(db, "p")[0]
    mark = annotation.undo_mark(db, project_id)
    first = annotation.next_item_card(db, "p", "in_order", "ann")
    annotation.accept_item(db, first, "ann", {}, seconds=1.0)
    second = annotation.next_item_card(db, "p", "in_order", "ann")
    annotation.skip_item(db, second, "ann", seconds=1.0)
    assert annotation.undo_last_item(db, project_id, "ann", mark) == (second.item_id, "skipped")
    assert {item for item, _ in stored(db)} == {first.item_id}
    assert annotation.undo_last_item(db, project_id, "ann", mark) == (first.item_id, "submitted")
    assert stored(db) == {}
    assert annotation.undo_last_item(db, project_id, "ann", mark) is None
    # undone, the first item is back at the head of the queue
    assert annotation.next_item_card(db, "p", "in_order", "ann").item_id == first.item_id


def test_the_least_confidence_queue_orders_items_by_their_least_confident_question(db):
    with db.read() as session:
        rows = session.execute(select(Suggestion.item_id, Suggestion.confidence).where(Suggestion.is_current))
        worst: dict[int, float] = {}
        for item_id, confidence in rows:
            worst[item_id] = min(worst.get(item_id, 1.0), confidence)
    expected = sorted(worst, key=lambda i: (worst[i], i))
    served = []
    while (card := annotation.next_item_card(db, "p", "least_confidence", "ann")) is not None:
        served.append(card.item_id)
        annotation.accept_item(db, card, "ann", {}, seconds=1.0)
    assert served == expected


def test_skipped_items_wait_in_the_skipped_queue_oldest_first(db):
    first = annotation.next_item_card(db, "p", "in_order", "ann")
    annotation.skip_item(db, first, "ann", seconds=1.0)
    second = annotation.next_item_card(db, "p", "in_order", "ann", skip_item=first.item_id)
    annotation.skip_item(db, second, "ann", seconds=1.0)
    assert annotation.next_item_card(db, "p", "in_order", "ann").item_id not in (first.item_id, second.item_id)
    again = annotation.next_item_card(db, "p", "skipped", "ann")
    assert again.item_id == first.item_id and all(e.skipped for e in again.entries)
    annotation.accept_item(db, again, "ann", {}, seconds=1.0)
    assert annotation.next_item_card(db, "p", "skipped", "ann").item_id == second.item_id


def test_leases_hold_the_whole_item_between_two_annotators(db):
    ann = annotation.next_item_card(db, "p", "in_order", "ann")
    bob = annotation.next_item_card(db, "p", "in_order", "bob")
    assert bob.item_id != ann.item_id
    # the one-question view leaves ann's item alone on every question too
    for key in ("team", "tone", "urgent"):
        assert annotation.next_card(db, "p", key, "in_order", "cay").item_id != ann.item_id
    # an item held for one question in the one-question view is not handed out by the item view
    held = annotation.next_card(db, "p", "urgent", "in_order", "dee").item_id
    served = {ann.item_id, bob.item_id}
    while (card := annotation.next_item_card(db, "p", "in_order", "eve")) is not None:
        served.add(card.item_id)
        annotation.accept_item(db, card, "eve", {}, seconds=1.0)
    assert held not in served - {ann.item_id, bob.item_id}


def test_a_question_without_a_suggestion_must_be_picked(db):
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    tone = card.entries[2].row
    with db.session() as session:
        session.execute(delete(Suggestion).where(Suggestion.item_id == card.item_id, Suggestion.question_id == tone))
    card = annotation.load_item_card(db, card.project_id, card.item_id, *_schema(db), None, "ann")
    assert card.entries[2].suggestion is None and card.entries[2].preselected is None
    with pytest.raises(annotation.MissingAnswer, match="tone has no answer chosen"):
        annotation.accept_item(db, card, "ann", {}, seconds=1.0)
    assert stored(db) == {}
    annotation.accept_item(db, card, "ann", {"tone": "calm"}, seconds=1.0)
    assert stored(db)[(card.item_id, tone)] == ("calm", "submitted", "manual")


def test_a_question_that_does_not_apply_is_neither_shown_nor_stored(db, monkeypatch):
    monkeypatch.setattr(annotation, "question_applies", lambda question, answers: question.id != "urgent")
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    assert [e.question.id for e in card.asked] == ["team", "tone"] and len(card.entries) == 3
    annotation.accept_item(db, card, "ann", {}, seconds=2.0)
    assert {q for _, q in stored(db)} == {card.entries[1].row, card.entries[2].row}


def test_the_item_view_asks_only_the_questions_and_items_assigned(db):
    with db.session() as session:
        repo.set_assignments(session, "p", [{"annotator": "ann", "questions": ["team"], "share": [0, 50]}], "owner")
    seen = []
    while (card := annotation.next_item_card(db, "p", "in_order", "ann")) is not None:
        assert [e.question.id for e in card.asked] == ["team"], card.asked
        assert card.item_id % 100 < 50
        annotation.accept_item(db, card, "ann", {}, seconds=1.0)
        seen.append(card.item_id)
    with db.read() as session:
        items = session.scalars(select(Response.item_id).where(Response.annotator == "ann")).all()
        questions = set(session.scalars(select(Response.question_id).where(Response.annotator == "ann")))
    assert seen and sorted(items) == sorted(seen) == [i for i in range(1, 7) if i % 100 < 50]
    assert questions == {_schema(db)[1]["team"]}
    # a colleague without assignments is asked every question of every item
    card = annotation.next_item_card(db, "p", "in_order", "bob")
    assert [e.question.id for e in card.asked] == ["urgent", "team", "tone"]
    # an annotator given a share that holds none of the items has an empty queue
    with db.session() as session:
        repo.set_assignments(session, "p", [{"annotator": "cy", "questions": ["team"], "share": [99, 100]}], "owner")
    assert annotation.next_item_card(db, "p", "in_order", "cy") is None


def test_the_skipped_queue_keeps_to_the_items_assigned(db):
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    annotation.skip_item(db, card, "ann", seconds=1.0)
    assert annotation.next_item_card(db, "p", "skipped", "ann").item_id == card.item_id
    outside = [card.item_id % 100 + 1, 100]  # a share that no longer holds the skipped item
    with db.session() as session:
        repo.set_assignments(session, "p", [{"annotator": "ann", "questions": None, "share": outside}], "owner")
    found = annotation.next_item_card(db, "p", "skipped", "ann")
    assert found is None or found.item_id != card.item_id


def test_an_answer_sent_empty_or_not_text_is_refused_not_taken_as_the_suggestion(db):
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    for sent in (None, "", 0, ["yes"]):
        with pytest.raises(ValueError, match="is not an answer to urgent"):
            annotation.accept_item(db, card, "ann", {"urgent": sent}, seconds=1.0)
    assert stored(db) == {}


def test_an_empty_item_queue_says_why(db):
    held = annotation.next_item_card(db, "p", "in_order", "bob")  # bob holds the first item
    while (card := annotation.next_item_card(db, "p", "in_order", "ann")) is not None:
        annotation.accept_item(db, card, "ann", {}, seconds=1.0)
    reason = annotation.empty_item_queue_reason(db, "p", "in_order", "ann")
    assert "1 is being answered by other annotators right now" in reason, reason
    annotation.accept_item(db, held, "bob", {}, seconds=1.0)
    assert annotation.empty_item_queue_reason(db, "p", "in_order", "ann") == (
        "Every item has an answer to each of your questions."
    )


def test_the_view_marks_the_models_answer_and_warns_where_the_model_only_guessed(db):
    from diffjev.ui.item_view import question_html

    card = annotation.next_item_card(db, "p", "in_order", "ann")
    entry = card.entries[1]
    model = entry.suggestion["answer"]
    shown = question_html(1, entry)
    assert f"{model} <small class='dj-model'>model</small>" in shown
    assert shown.count("dj-model") == 1
    sure = replace(entry, suggestion={**entry.suggestion, "label_mass": 0.9})
    unsure = replace(entry, suggestion={**entry.suggestion, "label_mass": 0.004})
    assert "treat this as a guess" not in question_html(1, sure)
    assert "The model put 0.4% of its probability on these answers" in question_html(1, unsure)
