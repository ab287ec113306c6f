"""The annotation service: leases, queues, answers, stale writes and undo, on a real SQLite file."""

import threading

import pandas as pd
import pytest
from sqlalchemy import select

from diffjev import Schema
from diffjev.services import annotation
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from diffjev.storage import repo
from diffjev.storage.db import Database
from diffjev.storage.models import Response, Suggestion
from conftest import TICKETS


@pytest.fixture
def db(tmp_path, dgemma_engine):
    database = Database(tmp_path / "annotate.db")
    with database.session() as session:
        repo.create_project(session, "p", Schema.from_dict({**TICKETS, "samples": 1}), "owner")
    import_items(database, "p", pd.DataFrame({"text": [f"Ticket {i}" for i in range(12)]}))
    prelabel(database, "p", dgemma_engine)
    return database


def test_two_annotators_never_hold_the_same_item(db):
    held = {}
    errors = []

    def work(name):
        try:
            held[name] = [annotation.next_card(db, "p", "team", "least_confidence", name).item_id for _ in range(3)]
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(f"a{k}",)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # Each annotator holds one lease at a time (the last card); the four last cards all differ.
    last = [ids[-1] for ids in held.values()]
    assert len(set(last)) == 4


def test_least_confidence_queue_serves_the_least_sure_first_and_answers_close_it(db):
    card = annotation.next_card(db, "p", "team", "least_confidence", "ann")
    with db.read() as session:
        lowest = session.scalar(select(Suggestion.item_id).where(Suggestion.question_id == card.question_row)
                                .order_by(Suggestion.confidence, Suggestion.item_id).limit(1))
    assert card.item_id == lowest and card.suggestion is not None and card.question.id == "team"
    annotation.answer(db, card, "ann", card.suggestion["answer"], seconds=1.5)
    other = next(n for n in card.question.names if n != card.suggestion["answer"])
    second = annotation.next_card(db, "p", "team", "least_confidence", "ann")
    assert second.item_id != card.item_id
    annotation.answer(db, second, "ann", other, seconds=2.0)
    with db.read() as session:
        rows = session.scalars(select(Response).order_by(Response.id)).all()
    assert [(r.source, r.suggestion_shown, r.seconds) for r in rows] == [("accepted", True, 1.5),
                                                                          ("corrected", True, 2.0)]
    assert annotation.progress(db, card.project_id, card.question_row) == (2, 12)


def test_blind_slice_hides_the_suggestion_and_records_it_unseen(db):
    card = annotation.next_card(db, "p", "urgent", "blind", "ann")
    assert card.blind and card.suggestion is None
    annotation.answer(db, card, "ann", "yes", seconds=3.0)
    with db.read() as session:
        row = session.scalar(select(Response))
    assert (row.source, row.suggestion_shown, row.suggestion_id) == ("manual", False, None)


def test_undo_takes_back_answers_in_reverse_order(db):
    first = annotation.next_card(db, "p", "tone", "in_order", "ann")
    annotation.answer(db, first, "ann", "calm", seconds=1.0)
    second = annotation.next_card(db, "p", "tone", "in_order", "ann")
    annotation.answer(db, second, "ann", "furious", seconds=1.0)
    assert annotation.undo_last(db, first.project_id, "ann") == (second.item_id, second.question_row)
    assert annotation.undo_last(db, first.project_id, "ann") == (first.item_id, first.question_row)
    assert annotation.undo_last(db, first.project_id, "ann") is None
    with db.read() as session:
        assert session.scalars(select(Response)).all() == []
        kinds = session.scalars(select(repo.Event.kind).where(repo.Event.actor == "ann")).all()
    assert kinds.count("response.undone") == 2
    again = annotation.next_card(db, "p", "tone", "in_order", "ann")
    assert again.item_id == first.item_id  # back in the queue


def test_a_stale_card_cannot_overwrite_a_newer_answer(db):
    card = annotation.next_card(db, "p", "team", "in_order", "ann")
    annotation.answer(db, card, "ann", "billing", seconds=1.0)
    fresh = annotation.load_card(db, card.project_id, card.item_id, card.question, card.question_row, None, "ann")
    annotation.answer(db, fresh, "ann", "account", seconds=1.0)
    with pytest.raises(repo.StaleWrite):
        annotation.answer(db, fresh, "ann", "technical", seconds=1.0)  # loaded before the last change
    with pytest.raises(ValueError, match="not an answer"):
        annotation.answer(db, card, "ann", "sales", seconds=1.0)
