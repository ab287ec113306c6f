"""Staged questions when an earlier answer changes back: a later question that applies again is asked
again at once. The annotator's `not_asked` for it is removed (with an event saying so) when the earlier
answer changes in the one-question view, Undo of the answer that stored a `not_asked` takes it back too,
and the item view's Enter leaves no stale `not_asked` behind."""

from sqlalchemy import select

from diffjev.services import annotation
from storage.models import Event
from test_staged_queue import answer_next, stored, unread_db
from test_staged_service import rows_of

NOT_ASKED_BECAUSE_NO = (None, "not_asked", {"skipped": {"because": "urgent", "was": "no", "wanted": ["yes"]}})


def answer_again(db, item_id, question, value, annotator="ann"):
    """Answer a question of an item already answered, as the page does after going back to it."""
    rows = rows_of(db)
    schema = annotation.project_schema(db, "p")[1]
    card = annotation.load_card(
        db, 1, item_id, annotation.project_question(schema, question), rows[question], None, annotator
    )
    annotation.answer(db, card, annotator, value, seconds=1.0)


def queue_item(db, question, annotator="ann"):
    card = annotation.next_card(db, "p", question, "in_order", annotator)
    return card.item_id if card else None


def test_answering_the_earlier_question_again_asks_the_later_one_again(db_url):
    db = unread_db(db_url, 1)
    item = answer_next(db, "urgent", "no")
    assert stored(db, item)["outage"][1:] == NOT_ASKED_BECAUSE_NO
    assert queue_item(db, "outage") is None

    answer_again(db, item, "urgent", "yes")
    assert "outage" not in stored(db, item)  # asked again: nothing stored for it
    assert stored(db, item)["calm"][2] == "not_asked"  # and the question `yes` does not ask is dropped
    assert queue_item(db, "outage") == item
    # The removal is on the record, naming the answer that asked the question again.
    with db.read() as session:
        (reasked,) = session.scalars(select(Event).where(Event.kind == "response.reasked")).all()
    assert (reasked.actor, reasked.item_id, reasked.question_id) == ("ann", item, rows_of(db)["outage"])
    assert reasked.payload["before"]["status"] == "not_asked"


def test_undo_takes_back_the_not_asked_its_answer_stored(db_url):
    db = unread_db(db_url, 1)
    rows = rows_of(db)
    item = answer_next(db, "urgent", "no")
    assert stored(db, item)["outage"][1:] == NOT_ASKED_BECAUSE_NO

    assert annotation.undo_last(db, 1, "ann", rows["urgent"]) == (item, rows["urgent"])
    assert stored(db, item) == {}  # the answer and what it dropped
    assert queue_item(db, "urgent") == item
    assert queue_item(db, "outage") is None  # nobody says the item is urgent yet: outage waits, as before
    answer_again(db, item, "urgent", "yes")
    assert queue_item(db, "outage") == item


def test_undo_of_an_answer_that_asked_again_puts_the_not_asked_back(db_url):
    db = unread_db(db_url, 1)
    rows = rows_of(db)
    item = answer_next(db, "urgent", "no")
    answer_again(db, item, "urgent", "yes")
    assert queue_item(db, "outage") == item

    assert annotation.undo_last(db, 1, "ann", rows["urgent"]) == (item, rows["urgent"])
    after = stored(db, item)
    assert after["urgent"][1:3] == ("no", "submitted")
    assert after["outage"][1:] == NOT_ASKED_BECAUSE_NO
    assert "calm" not in after  # the `not_asked` the undone answer stored goes too
    assert queue_item(db, "outage") is None
    assert queue_item(db, "calm") == item

    # and the first answer's undo then clears the item, as if neither was given
    assert annotation.undo_last(db, 1, "ann", rows["urgent"]) == (item, rows["urgent"])
    assert stored(db, item) == {}
    assert queue_item(db, "urgent") == item


def test_enter_in_the_item_view_after_the_earlier_answer_changed_back_leaves_no_stale_not_asked(db_url):
    db = unread_db(db_url, 1)
    item = answer_next(db, "urgent", "no")  # the one-question view drops `outage`
    assert stored(db, item)["outage"][1:] == NOT_ASKED_BECAUSE_NO

    card = annotation.next_item_card(db, "p", "in_order", "ann")  # `calm` is still open
    assert card.item_id == item
    assert {e.question.id for e in card.asked} == {"urgent", "calm"}
    annotation.accept_item(db, card, "ann", {"urgent": "yes", "outage": "yes"}, seconds=2.0)
    after = stored(db, item)
    assert after["urgent"][1:3] == ("yes", "submitted")
    assert after["outage"][1:3] == ("yes", "submitted")
    assert after["calm"][2] == "not_asked"


def test_undo_in_the_item_view_takes_back_the_not_asked_its_enter_stored(db_url):
    db = unread_db(db_url, 1)
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    annotation.accept_item(db, card, "ann", {"urgent": "no", "calm": "yes"}, seconds=2.0)
    assert stored(db, card.item_id)["outage"][1:] == NOT_ASKED_BECAUSE_NO

    assert annotation.undo_last_item(db, 1, "ann") == (card.item_id, "submitted")
    assert stored(db, card.item_id) == {}
    answer_next(db, "urgent", "yes")
    assert queue_item(db, "outage") == card.item_id


def test_undo_keeps_an_answer_given_since_to_the_question_asked_again(db_url):
    db = unread_db(db_url, 1)
    rows = rows_of(db)
    item = answer_next(db, "urgent", "no")
    answer_again(db, item, "urgent", "yes")
    assert answer_next(db, "outage", "yes") == item

    assert annotation.undo_last(db, 1, "ann", rows["urgent"]) == (item, rows["urgent"])
    after = stored(db, item)
    assert after["urgent"][1:3] == ("no", "submitted")
    assert after["outage"][1:3] == ("yes", "submitted")  # the newer answer stands; no `not_asked` over it
    assert "calm" not in after
