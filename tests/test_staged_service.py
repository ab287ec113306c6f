"""Staged questions in storage and the item view's service: the model's skip stores no suggestion and is
kept in the item read; a question the annotator's answers do not ask is not shown, and is stored as
`not_asked` with why; changing the earlier answer asks it, or drops it, at once."""

import pandas as pd
import pytest
from sqlalchemy import select

from diffjev import Schema
from diffjev.services import annotation
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database
from storage.models import ItemRead, Response, Suggestion

STAGED = {
    "questions": [
        {"id": "urgent", "type": "yes_no", "instructions": "Does the customer need a reply within the hour?"},
        {"id": "outage", "type": "yes_no", "instructions": "Is it an outage?", "ask_if": {"urgent": "yes"}},
        {"id": "calm", "type": "yes_no", "instructions": "Is the customer calm?", "ask_if": {"urgent": "no"}},
    ],
    "samples": 1,
}


def staged_db(url, engine, items=3):
    db = Database(url)
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(STAGED), "owner")
    import_items(db, "p", pd.DataFrame({"text": [f"Ticket {i}: the site is down" for i in range(items)]}))
    prelabel(db, "p", engine)
    return db


@pytest.fixture
def db(tmp_path, dgemma_engine):
    return staged_db(tmp_path / "staged.db", dgemma_engine)


def rows_of(db):
    with db.read() as session:
        return repo.version_schema(repo.latest_version(session, 1))[1]


def test_the_models_skip_stores_no_suggestion_and_says_why(db_url, dgemma_engine):
    db = staged_db(db_url, dgemma_engine, items=2)
    rows = rows_of(db)
    by_row = {row: qid for qid, row in rows.items()}
    with db.read() as session:
        for read in session.scalars(select(ItemRead)):
            suggested = {
                by_row[s.question_id]: s.answer
                for s in session.scalars(select(Suggestion).filter_by(item_id=read.item_id))
            }
            (skipped,) = read.diagnostics["skipped"]
            assert set(suggested) == {"urgent", "outage", "calm"} - {skipped}
            assert read.diagnostics["skipped"][skipped]["was"] == suggested["urgent"]


def test_an_answer_that_drops_a_question_stores_it_as_not_asked(db):
    rows = rows_of(db)
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    shown = {e.question.id for e in card.asked}
    assert shown == {"urgent", "outage" if card.entries[0].preselected == "yes" else "calm"}
    annotation.accept_item(db, card, "ann", {"urgent": "yes", "outage": "no"}, seconds=2.0)
    with db.read() as session:
        stored = {
            r.question_id: (r.value, r.status, r.detail)
            for r in session.scalars(select(Response).where(Response.item_id == card.item_id))
        }
    assert stored == {
        rows["urgent"]: ("yes", "submitted", None),
        rows["outage"]: ("no", "submitted", None),
        rows["calm"]: (None, "not_asked", {"skipped": {"because": "urgent", "was": "yes", "wanted": ["no"]}}),
    }
    # Every question of the item is settled: it leaves the queue.
    assert annotation.next_item_card(db, "p", "in_order", "ann").item_id != card.item_id


def test_changing_the_earlier_answer_asks_or_drops_at_once(db):
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    asks_yes = annotation.card_with_choices(card, {"urgent": "yes"})
    asks_no = annotation.card_with_choices(card, {"urgent": "no"})
    assert [e.question.id for e in asks_yes.asked] == ["urgent", "outage"]
    assert [e.question.id for e in asks_no.asked] == ["urgent", "calm"]
    assert asks_no.entries[1].not_asked == {"because": "urgent", "was": "no", "wanted": ["yes"]}
    # A question newly asked with no suggestion must be answered; nothing is stored until it is.
    newly = "calm" if card.entries[0].preselected == "yes" else "outage"
    flip = "no" if newly == "calm" else "yes"
    with pytest.raises(annotation.MissingAnswer, match=f"{newly} has no answer chosen"):
        annotation.accept_item(db, card, "ann", {"urgent": flip}, seconds=1.0)
    annotation.accept_item(db, card, "ann", {"urgent": flip, newly: "yes"}, seconds=1.0)
    with db.read() as session:
        statuses = sorted(r.status for r in session.scalars(select(Response).where(Response.item_id == card.item_id)))
    assert statuses == ["not_asked", "submitted", "submitted"]


def test_a_stored_not_asked_answer_is_replaced_when_the_question_applies_again(db):
    rows = rows_of(db)
    card = annotation.next_item_card(db, "p", "in_order", "ann")
    annotation.accept_item(db, card, "ann", {"urgent": "yes", "outage": "yes"}, seconds=1.0)
    again = annotation.load_item_card(db, card.project_id, card.item_id, *repo_schema(db), None, "ann")
    assert [e.question.id for e in again.asked] == ["urgent", "outage"]
    annotation.accept_item(db, again, "ann", {"urgent": "no", "calm": "no"}, seconds=1.0)
    with db.read() as session:
        stored = {
            r.question_id: (r.value, r.status)
            for r in session.scalars(select(Response).where(Response.item_id == card.item_id))
        }
    assert stored == {
        rows["urgent"]: ("no", "submitted"),
        rows["outage"]: (None, "not_asked"),
        rows["calm"]: ("no", "submitted"),
    }


def repo_schema(db):
    with db.read() as session:
        return repo.version_schema(repo.latest_version(session, 1))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "csv"])
def test_export_holds_the_skip_not_a_missing_label(db, tmp_path, fmt):
    from diffjev.services.exporting import export_project

    card = annotation.next_item_card(db, "p", "in_order", "ann")
    annotation.accept_item(db, card, "ann", {"urgent": "yes", "outage": "no"}, seconds=2.0)
    target = tmp_path / f"out.{fmt}"
    assert export_project(db, "p", target, fmt) == 1
    frame = {"jsonl": pd.read_json, "parquet": pd.read_parquet, "csv": pd.read_csv}[fmt](
        target, **({"lines": True} if fmt == "jsonl" else {})
    )
    row = frame.iloc[0]
    assert (row["urgent"], row["outage"]) == ("yes", "no") and pd.isna(row["calm"])
    skipped = row["calm_skipped"]
    if fmt == "csv":  # a nested value is JSON text in a CSV cell
        import json

        skipped = json.loads(skipped)
    assert {k: list(v) if k == "wanted" else v for k, v in dict(skipped).items()} == {
        "because": "urgent",
        "was": "yes",
        "wanted": ["no"],
    }
    assert pd.isna(row["outage_skipped"]) and "urgent_skipped" not in frame.columns
