"""The one-question view with staged questions: a staged question's queue leaves out the items it does
not apply to given their current answers (this annotator's answer to the earlier question, else the
model's), and an answer there that no longer asks a later question stores it as `not_asked`, as the item
view does."""

import pandas as pd
from sqlalchemy import select

from diffjev import Schema
from diffjev.services import annotation
from diffjev.services.importing import import_items
from storage import repo
from storage.db import Database
from storage.models import Response, Suggestion
from test_staged_service import STAGED, rows_of, staged_db


def unread_db(url, items):
    db = Database(url)
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(STAGED), "owner")
    import_items(db, "p", pd.DataFrame({"text": [f"Ticket {i}: the site is down" for i in range(items)]}))
    return db


def answer_next(db, question, value, annotator="ann"):
    card = annotation.next_card(db, "p", question, "in_order", annotator)
    annotation.answer(db, card, annotator, value, seconds=1.0)
    return card.item_id


def stored(db, item_id):
    by_row = {row: qid for qid, row in rows_of(db).items()}
    with db.read() as session:
        return {
            by_row[r.question_id]: (r.annotator, r.value, r.status, r.detail)
            for r in session.scalars(select(Response).where(Response.item_id == item_id))
        }


def test_a_staged_questions_queue_holds_only_the_items_it_applies_to(db_url):
    db = unread_db(db_url, 3)
    # Nobody answered `urgent` and no run read anything: `outage` applies to no item yet.
    assert annotation.next_card(db, "p", "outage", "in_order", "ann") is None
    first, second, third = (answer_next(db, "urgent", value) for value in ("no", "yes", "no"))
    card = annotation.next_card(db, "p", "outage", "in_order", "ann")
    assert card.item_id == second
    annotation.answer(db, card, "ann", "yes", seconds=1.0)
    assert annotation.next_card(db, "p", "outage", "in_order", "ann") is None
    assert annotation.next_card(db, "p", "calm", "in_order", "ann").item_id == first


def test_an_answer_in_the_one_question_view_that_drops_a_later_question_stores_it_as_not_asked(db_url, dgemma_engine):
    db = staged_db(db_url, dgemma_engine, items=2)
    rows = rows_of(db)
    with db.read() as session:
        model = {
            s.item_id: s.answer
            for s in session.scalars(select(Suggestion).where(Suggestion.question_id == rows["urgent"]))
        }
    card = annotation.next_card(db, "p", "urgent", "in_order", "ann")
    said = model[card.item_id]
    flipped = "no" if said == "yes" else "yes"
    read_by_model = "outage" if said == "yes" else "calm"  # the question the model's answer asked
    annotation.answer(db, card, "ann", flipped, seconds=1.0)
    assert stored(db, card.item_id)[read_by_model] == (
        "ann",
        None,
        "not_asked",
        {"skipped": {"because": "urgent", "was": flipped, "wanted": [said]}},
    )
    # The question is settled for the item: its queue goes on to the other item, or has none left.
    others = [item for item in model if item != card.item_id and model[item] == said]
    following = annotation.next_card(db, "p", read_by_model, "in_order", "bob")
    assert (following.item_id if following else None) == (others[0] if others else None)


def test_an_answer_that_keeps_a_later_question_asked_stores_nothing_for_it(db_url):
    db = unread_db(db_url, 1)
    item = answer_next(db, "urgent", "yes")
    assert set(stored(db, item)) == {"urgent", "calm"}  # `calm` is not asked, `outage` still is
    assert stored(db, item)["calm"][2:] == (
        "not_asked",
        {"skipped": {"because": "urgent", "was": "yes", "wanted": ["no"]}},
    )
    assert annotation.next_card(db, "p", "outage", "in_order", "ann").item_id == item
