"""Review's "Change an answer" and Adjudicate on staged questions, on a SQLite file and a private PostgreSQL
server and through the real studio's API: a later question is changed or settled only where the item's
answers (adjudicated, else the annotators' latest, else the model's) ask it; the refusal names the question,
the earlier question and the answers it is asked under, and stores nothing, so the export keeps the skip."""

import html

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
from storage.models import Adjudication, Item, ItemRead, Response, Suggestion
from studio_fixtures import serve_studio
from test_staged_service import STAGED

REFUSED = "outage is asked only when urgent is yes; the item's urgent is no: change urgent first"


def staged_project(db: Database) -> None:
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(STAGED), "owner")
    texts = pd.DataFrame({"id": ["p1", "p2"], "text": ["The site is down again", "Refund please"]})
    import_items(db, "p", texts, id_field="id")


@pytest.fixture
def db(db_url):
    database = Database(db_url)
    staged_project(database)
    yield database
    database.dispose()


def answer_item(db: Database, item: str, annotator: str, choices: dict[str, str]) -> None:
    """Answer every question of an item in the item view, as an annotator does."""
    project_id, schema, rows, _ = annotation.project_schema(db, "p")
    with db.read() as session:
        item_id = review.shown_item(session, project_id, item)
    card = annotation.load_item_card(db, project_id, item_id, schema, rows, None, annotator)
    annotation.accept_item(db, card, annotator, choices, seconds=1.0)


def outage_rows(db: Database) -> list[tuple[str, str | None, str]]:
    with db.read() as session:
        rows = repo.version_schema(repo.latest_version(session, 1))[1]
        found = session.execute(
            select(Response.annotator, Response.value, Response.status)
            .where(Response.question_id == rows["outage"])
            .order_by(Response.id)
        )
        return [tuple(r) for r in found]


def exported(db: Database, tmp_path) -> dict:
    target = tmp_path / "out.jsonl"
    export_project(db, "p", target, "jsonl")
    frame = pd.read_json(target, lines=True)
    return frame.set_index("id").loc["p1"].to_dict()


def test_change_an_answer_refuses_a_question_the_items_answers_do_not_ask(db, tmp_path):
    answer_item(db, "p1", "bob", {"urgent": "no", "calm": "yes"})
    assert outage_rows(db) == [("bob", None, "not_asked")]
    with pytest.raises(ValueError, match=REFUSED):
        review.reopen(db, "p", "p1", "outage", "yes", "alice")
    assert outage_rows(db) == [("bob", None, "not_asked")]  # nothing stored
    row = exported(db, tmp_path)
    assert pd.isna(row["outage"])
    assert row["outage_skipped"] == {"because": "urgent", "was": "no", "wanted": ["yes"]}
    # Changing the earlier question first makes the later one apply: then it can be changed.
    review.reopen(db, "p", "p1", "urgent", "yes", "alice")
    review.reopen(db, "p", "p1", "outage", "yes", "alice")
    assert outage_rows(db) == [("bob", None, "not_asked"), ("alice", "yes", "submitted")]


def test_adjudicate_refuses_a_question_the_items_answers_do_not_ask(db, tmp_path):
    answer_item(db, "p1", "alice", {"urgent": "yes", "outage": "yes"})
    answer_item(db, "p1", "bob", {"urgent": "no", "calm": "yes"})  # the latest answer to urgent: no
    with pytest.raises(ValueError, match=REFUSED):
        adjudication.adjudicate(db, "p", "p1", "outage", "yes", "rita")
    with db.read() as session:
        assert session.scalars(select(Adjudication)).all() == []
    # Settling urgent as yes asks outage again: now it can be settled.
    adjudication.adjudicate(db, "p", "p1", "urgent", "yes", "rita")
    assert adjudication.adjudicate(db, "p", "p1", "outage", "yes", "rita").value == "yes"
    row = exported(db, tmp_path)
    assert (row["urgent"], row["outage"], row["outage_source"]) == ("yes", "yes", "adjudicated")
    # An adjudicated earlier answer outweighs any annotator's (alice's urgent is now the latest): settled
    # as no, outage no longer applies and is refused again.
    answer_item(db, "p1", "alice", {"urgent": "yes", "outage": "yes"})
    adjudication.adjudicate(db, "p", "p1", "urgent", "no", "rita")
    with pytest.raises(ValueError, match=REFUSED):
        adjudication.adjudicate(db, "p", "p1", "outage", "no", "rita")


def test_with_no_human_answer_to_the_earlier_question_the_models_counts(db):
    """The model read urgent = no on p1 and only alice answered outage (an answer kept from before)."""
    with db.session() as session:
        version = repo.latest_version(session, 1)
        rows = repo.version_schema(version)[1]
        run = repo.create_run(session, 1, version, "diffusion", "m", None, {}, "owner").id
        p1 = session.scalar(select(Item.id).where(Item.external_id == "p1"))
        session.add(ItemRead(run_id=run, item_id=p1, status="ok"))
        session.add(
            Suggestion(
                run_id=run, item_id=p1, question_id=rows["urgent"], answer="no", distribution={"yes": 0.2, "no": 0.8},
                confidence=0.8, full_vocab_confidence=0.8, entropy=0.5, margin=0.6, label_mass=1.0, stderr=None,
                agreement=None, draws=1, value=0.2, latency_ms=1.0,
            )
        )  # fmt: skip
    with pytest.raises(ValueError, match=REFUSED):
        review.reopen(db, "p", "p1", "outage", "yes", "alice")
    # An answer to urgent outweighs the model's read.
    review.reopen(db, "p", "p1", "urgent", "yes", "bob")
    review.reopen(db, "p", "p1", "outage", "yes", "alice")
    assert outage_rows(db) == [("alice", "yes", "submitted")]


def test_the_studio_api_refuses_both_with_the_message(tmp_path, dgemma_engine):
    db = Database(tmp_path / "staged-api.db")
    staged_project(db)
    answer_item(db, "p1", "bob", {"urgent": "no", "calm": "yes"})
    server, _ = serve_studio(db, dgemma_engine, name="p")
    with server:
        client = Client(server.url, verbose=False)
        said = html.unescape(client.predict("p1", "outage", "yes", api_name="/review_change"))
        assert said == f"⚠️ {REFUSED}", said
        answer_item(db, "p1", "alice", {"urgent": "yes", "outage": "yes"})
        answer_item(db, "p1", "bob", {"urgent": "no", "calm": "yes"})  # bob's urgent is the latest again
        said = html.unescape(
            client.predict("p1", "outage", "yes", "", "", "latest", True, False, api_name="/adjudicate")[0]
        )
        assert said == f"⚠️ {REFUSED}", said
    with db.read() as session:
        assert session.scalars(select(Adjudication)).all() == []
    assert outage_rows(db) == [("bob", None, "not_asked"), ("alice", "yes", "submitted")]
