"""Adjudication on real databases (a SQLite file and a private PostgreSQL server): the cases where
annotators disagree, each with every annotator's answer, seconds and the model's distribution; settling
one (the reviewer's own answer kept), replacing it, refusing an answer the question does not have; the
export marks the settled answer as the label with every answer beside it, and calibration takes it as
the human truth."""

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from diffjev import Schema
from diffjev.services import adjudication, review
from diffjev.services.calibration import calibrate
from diffjev.services.exporting import export_project
from diffjev.services.importing import import_items
from storage import repo
from storage.db import Database
from storage.models import Adjudication, Event, Item, ItemRead, Response, Suggestion

TEAM = {
    "questions": [
        {"id": "team", "type": "choice", "instructions": "Team?", "options": ["billing", "technical", "account"]},
        {"id": "urgent", "type": "yes_no", "instructions": "Urgent?"},
    ],
    "samples": 1,
}
# The model's read of each item: team technical at 0.9 on every one
READ = {"billing": 0.05, "technical": 0.9, "account": 0.05}


@pytest.fixture
def db(db_url):
    database = Database(db_url)
    yield database
    database.dispose()


def project(db, items: int = 4) -> dict[str, int]:
    """Project "p" with items t0..t{n-1}, one run that read `team` on each (READ); returns the item row ids
    by the id their cards show, and the question rows under "team" / "urgent" / "run"."""
    with db.session() as session:
        project_id = repo.create_project(session, "p", Schema.from_dict(TEAM), "owner").id
    texts = pd.DataFrame({"id": [f"t{k}" for k in range(items)], "text": [f"ticket {k}" for k in range(items)]})
    import_items(db, "p", texts, id_field="id")
    with db.session() as session:
        version = repo.latest_version(session, project_id)
        rows = repo.version_schema(version)[1]
        run = repo.create_run(session, project_id, version, "diffusion", "m", None, {}, "owner").id
        ids = {i.external_id: i.id for i in session.scalars(select(Item).where(Item.project_id == project_id))}
        for item in ids.values():
            session.add(ItemRead(run_id=run, item_id=item, status="ok"))
            session.add(
                Suggestion(
                    run_id=run,
                    item_id=item,
                    question_id=rows["team"],
                    answer="technical",
                    distribution=READ,
                    confidence=0.9,
                    full_vocab_confidence=0.9,
                    entropy=0.4,
                    margin=0.85,
                    label_mass=1.0,
                    stderr=None,
                    agreement=None,
                    draws=1,
                    value=None,
                    latency_ms=1.0,
                )
            )
    return {**ids, **rows, "run": run}


def answer(db, ids, item: str, who: str, value: str, seconds: float, question: str = "team", shown: bool = True):
    with db.session() as session:
        repo.respond(
            session,
            repo.ResponseInput(ids[item], ids[question], who, value, "manual", seconds=seconds, suggestion_shown=shown),
        )


def disagreeing(db):
    """alice and bob differ on t0, agree on t1; only alice answered t2; nobody t3."""
    ids = project(db)
    answer(db, ids, "t0", "alice", "billing", 3.5)
    answer(db, ids, "t0", "bob", "technical", 7.0)
    answer(db, ids, "t1", "alice", "billing", 2.0)
    answer(db, ids, "t1", "bob", "billing", 4.0)
    answer(db, ids, "t2", "alice", "account", 1.0)
    return ids


def test_disagreements_are_listed_with_every_annotator_their_seconds_and_the_model(db):
    ids = disagreeing(db)
    answer(db, ids, "t0", "carol", "account", 9.25)  # a third annotator on the same item: every one shown
    answer(db, ids, "t1", "alice", "yes", 1.0, question="urgent")
    answer(db, ids, "t1", "bob", "no", 1.0, question="urgent")  # a disagreement on another question
    found = adjudication.cases(db, "p")
    assert [(c.item, c.question) for c in found] == [("t0", "team"), ("t1", "urgent")]
    t0 = found[0]
    assert [(a.annotator, a.value, a.seconds) for a in t0.answers] == [
        ("alice", "billing", 3.5),
        ("bob", "technical", 7.0),
        ("carol", "account", 9.25),
    ]
    assert t0.given() == ["billing", "technical", "account"]
    assert t0.text == "ticket 0"
    assert (t0.model_answer, t0.distribution, t0.run_id) == ("technical", READ, ids["run"])
    assert found[1].distribution is None  # the run read no `urgent`: no distribution, not a made-up one
    # On request, every answered item (t3 has no answer: never a case)
    every = adjudication.cases(db, "p", any_answered=True)
    assert [(c.item, c.question) for c in every] == [("t0", "team"), ("t1", "team"), ("t1", "urgent"), ("t2", "team")]
    with pytest.raises(repo.NotFound, match="no run 999 in this project"):
        adjudication.cases(db, "p", run=999)


def test_adjudicating_stores_its_own_source_keeps_the_reviewers_answer_and_logs_it(db):
    ids = disagreeing(db)
    # bob annotated t0 and adjudicates it against his own answer: his answer stays as he gave it
    settled = adjudication.adjudicate(db, "p", "t0", "team", "billing", "bob", "  the invoice line decides  ")
    assert (settled.value, settled.reviewer, settled.comment, settled.revision) == (
        "billing",
        "bob",
        "the invoice line decides",
        1,
    )
    with db.read() as session:
        responses = session.execute(
            select(Response.annotator, Response.value).where(Response.item_id == ids["t0"]).order_by(Response.id)
        ).all()
        events = session.scalars(select(Event).where(Event.kind == "response.adjudicated")).all()
    assert [tuple(r) for r in responses] == [("alice", "billing"), ("bob", "technical")]
    assert len(events) == 1 and events[0].actor == "bob" and events[0].item_id == ids["t0"]
    assert events[0].payload["value"] == "billing" and events[0].payload["source"] == "adjudicated"
    assert events[0].payload["comment"] == "the invoice line decides" and events[0].payload["before"] is None
    # The next disagreement follows: t0 is settled, nothing else disagrees on team
    assert adjudication.cases(db, "p") == []
    [again] = adjudication.cases(db, "p", settled_too=True)
    assert again.item == "t0" and again.settled.value == "billing" and again.settled.reviewer == "bob"
    # The adjudication is no annotator: agreement still sets alice against bob alone
    table, _ = review.agreement(db, "p")
    assert [row["annotators"] for row in table] == ["alice / bob"]
    assert adjudication.progress(db, "p") == {"open": 0, "settled": 1, "answered": 3}  # t0, t1, t2


def test_a_second_adjudication_replaces_the_first_and_the_trail_keeps_both(db):
    ids = disagreeing(db)
    adjudication.adjudicate(db, "p", "t0", "team", "billing", "bob", "first look")
    # another answer than either annotator gave, one of the question's answers
    settled = adjudication.adjudicate(db, "p", "t0", "team", "account", "carol")
    assert (settled.value, settled.reviewer, settled.comment, settled.revision) == ("account", "carol", None, 2)
    with db.read() as session:
        rows = session.scalars(select(Adjudication).where(Adjudication.item_id == ids["t0"])).all()
        events = session.scalars(select(Event).where(Event.kind == "response.adjudicated").order_by(Event.id)).all()
    assert [(r.value, r.reviewer, r.revision) for r in rows] == [("account", "carol", 2)]
    assert [e.payload["value"] for e in events] == ["billing", "account"]
    assert events[1].payload["before"] == {"value": "billing", "reviewer": "bob", "comment": "first look"}


def test_an_answer_the_question_does_not_have_is_refused_and_nothing_is_stored(db):
    disagreeing(db)
    with pytest.raises(ValueError, match=r"'yes' is not an answer to team; .*billing, technical, account"):
        adjudication.adjudicate(db, "p", "t0", "team", "yes", "bob")
    with pytest.raises(ValueError, match="team: pick one of the given answers or write another"):
        adjudication.adjudicate(db, "p", "t0", "team", "  ", "bob")
    with pytest.raises(repo.NotFound, match="item t3 has no answer to team yet"):
        adjudication.adjudicate(db, "p", "t3", "team", "billing", "bob")
    with pytest.raises(repo.NotFound, match="no item t404 in this project"):
        adjudication.adjudicate(db, "p", "t404", "team", "billing", "bob")
    with pytest.raises(repo.NotFound, match="no question 'tone' in this project"):
        adjudication.adjudicate(db, "p", "t0", "tone", "billing", "bob")
    with pytest.raises(ValueError, match="shorten it to at most 2000"):
        adjudication.adjudicate(db, "p", "t0", "team", "billing", "bob", "x" * 2001)
    with db.read() as session:
        assert session.scalars(select(Adjudication)).all() == []
        assert session.scalars(select(Event).where(Event.kind == "response.adjudicated")).all() == []


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_the_export_holds_the_adjudicated_label_and_every_answer_beside_it(db, tmp_path, fmt):
    disagreeing(db)
    adjudication.adjudicate(db, "p", "t0", "team", "billing", "carol", "invoice")
    target = tmp_path / f"out.{fmt}"
    assert export_project(db, "p", target, fmt) == 3
    if fmt == "jsonl":
        rows = [json.loads(line) for line in target.read_text().splitlines()]
    elif fmt == "csv":
        rows = pd.read_csv(target, keep_default_na=False).to_dict("records")
        for row in rows:
            row["team_answers"] = json.loads(row["team_answers"])
    else:
        rows = pq.read_table(target).to_pylist()
    by_item = {row["id"]: row for row in rows}
    t0, t1 = by_item["t0"], by_item["t1"]
    # t0 settled: the label is the adjudicated answer, marked so, with who settled it and why
    assert (t0["team"], t0["team_source"], t0["team_annotator"]) == ("billing", "adjudicated", "carol")
    assert (t0["team_adjudicated_by"], t0["team_comment"]) == ("carol", "invoice")
    assert t0["team_annotations"] == 2
    assert [{k: a[k] for k in ("annotator", "value", "source", "status", "skipped")} for a in t0["team_answers"]] == [
        {"annotator": "alice", "value": "billing", "source": "manual", "status": "submitted", "skipped": None},
        {"annotator": "bob", "value": "technical", "source": "manual", "status": "submitted", "skipped": None},
    ]
    # t1 not adjudicated: the columns mean what they meant (the latest answer), nothing marked
    assert (t1["team"], t1["team_source"], t1["team_annotator"]) == ("billing", "manual", "bob")
    assert t1["team_adjudicated_by"] in (None, "") and t1["team_comment"] in (None, "")
    assert [a["annotator"] for a in t1["team_answers"]] == ["alice", "bob"]


def test_calibration_takes_the_adjudicated_answer_as_the_human_truth(db):
    ids = disagreeing(db)  # the model says technical everywhere; the first answers: billing, billing, account
    before = calibrate(db, "p", ids["run"], "team", full=False)
    assert (before.n, before.accuracy) == (3, 0.0)
    # t0's first answer was alice's billing; settled as technical, the model is right on it
    adjudication.adjudicate(db, "p", "t0", "team", "technical", "carol")
    after = calibrate(db, "p", ids["run"], "team", full=False)
    assert after.n == 3 and after.accuracy == pytest.approx(1 / 3)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_the_export_marks_an_unsettled_disagreement_as_disputed(db, tmp_path, fmt):
    disagreeing(db)

    def disputed() -> dict[str, bool]:
        target = tmp_path / f"out.{fmt}"
        export_project(db, "p", target, fmt)
        if fmt == "jsonl":
            rows = [json.loads(line) for line in target.read_text().splitlines()]
        elif fmt == "csv":
            rows = pd.read_csv(target, keep_default_na=False).to_dict("records")
        else:
            rows = pq.read_table(target).to_pylist()
        return {row["id"]: row["team_disputed"] for row in rows}

    # t0: alice and bob differ, nobody settled it; t1 agreed; t2 one answer
    assert disputed() == {"t0": True, "t1": False, "t2": False}
    adjudication.adjudicate(db, "p", "t0", "team", "billing", "carol")
    assert disputed() == {"t0": False, "t1": False, "t2": False}
