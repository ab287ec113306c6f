"""Which run's suggestions the queues and exports use, on real databases (a SQLite file and the private
PostgreSQL server): a refused run is never created, a run still reading or stopped partway never hides
the suggestions already there, and a deleted run hands each item back to the run before it."""

import json
import time

import pandas as pd
import pytest
from sqlalchemy import func, select, text

from diffjev import Schema, SchemaError
from diffjev.engines import JevAPIEngine
from diffjev.services import annotation
from diffjev.services.exporting import export_project
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database
from storage.models import Event, Response, Run, Suggestion
from conftest import TICKETS
from faulty_servers import closed_port_url

ONE_DRAW = {**TICKETS, "samples": 1}
TEMPLATED = {**ONE_DRAW, "template": "Urgent: {urgent}\nTeam: {team}\nTone: {tone}"}
TEXTS = [f"Ticket {i}: I was charged twice for the invoice" for i in range(6)]


@pytest.fixture
def db(db_url):
    database = Database(db_url)
    yield database
    database.dispose()


def labelled(db, schema=ONE_DRAW, texts=TEXTS):
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(schema), "owner")
    import_items(db, "p", pd.DataFrame({"text": texts}))


def exported(db, tmp_path, **options):
    target = tmp_path / f"export-{len(list(tmp_path.iterdir()))}.jsonl"
    export_project(db, "p", target, "jsonl", reviewed_only=False, **options)
    return [json.loads(line) for line in target.read_text().splitlines()]


def test_a_refused_jev_run_is_never_created_and_the_queue_and_export_stay(db, tmp_path, dgemma_engine):
    labelled(db, TEMPLATED)
    first = prelabel(db, "p", dgemma_engine, batch_items=4)
    assert first.status == "completed"
    jev = JevAPIEngine(closed_port_url())  # refused before any request: no server needed
    with pytest.raises(SchemaError, match="custom template"):
        prelabel(db, "p", jev)
    jev.close()
    with db.read() as session:
        assert session.scalars(select(Run.id)).all() == [first.run_id]
    card = annotation.next_card(db, "p", "team", "least_confidence", "ann")
    assert card is not None and card.suggestion is not None
    rows = exported(db, tmp_path)
    assert len(rows) == len(TEXTS)
    assert all(r["team_model"] is not None and r["run_id"] == first.run_id for r in rows)


def test_a_run_still_reading_never_empties_the_queue_or_blanks_the_export(db, tmp_path, dgemma_engine):
    labelled(db)
    first = prelabel(db, "p", dgemma_engine, batch_items=4)
    seen = []

    def look(progress):  # after the new run's first batch is stored, while it is still reading
        if not seen:
            seen.append((progress.done, annotation.next_card(db, "p", "team", "least_confidence", "ann")))
            seen.append(exported(db, tmp_path))
            seen.append(annotation.next_card(db, "p", "team", "in_order", "bob"))

    second = prelabel(db, "p", dgemma_engine, batch_items=2, progress=look)
    (done, card), rows, in_order = seen
    # a run's first batch holds one item (batches grow 1, 2, ... up to batch_items)
    assert done == 1 and card is not None and card.suggestion is not None and in_order is not None
    # each item's model answer comes from the latest run that read it: one from the new run, the rest
    # from the first
    assert sorted(r["run_id"] for r in rows) == [first.run_id] * 5 + [second.run_id] * 1
    assert all(r["team_model"] is not None for r in rows)
    # a run picked by name still exports its own suggestions only
    picked = exported(db, tmp_path, run_id=first.run_id)
    assert {r["run_id"] for r in picked} == {first.run_id}


def test_a_resumed_older_run_does_not_take_the_newer_runs_items(db, tmp_path, dgemma_engine):
    labelled(db)
    import threading

    cancel = threading.Event()
    older = prelabel(db, "p", dgemma_engine, batch_items=2, cancel=cancel, progress=lambda p: cancel.set())
    assert (older.status, older.read) == ("cancelled", 1)  # the first batch holds one item
    newer = prelabel(db, "p", dgemma_engine, batch_items=4)
    prelabel(db, "p", dgemma_engine, run_id=older.run_id, batch_items=4)  # reads the other five items
    with db.read() as session:
        current = session.execute(
            select(Suggestion.run_id, func.count()).where(Suggestion.is_current).group_by(Suggestion.run_id)
        ).all()
    assert dict(current) == {newer.run_id: 3 * len(TEXTS)}
    assert {r["run_id"] for r in exported(db, tmp_path)} == {newer.run_id}


def test_deleting_a_run_keeps_answers_and_gives_items_back_to_the_run_before(db, tmp_path, dgemma_engine):
    labelled(db)
    first = prelabel(db, "p", dgemma_engine, batch_items=4)
    second = prelabel(db, "p", dgemma_engine, batch_items=4)
    card = annotation.next_card(db, "p", "team", "in_order", "ann")
    assert card.suggestion["run"] == second.run_id
    annotation.answer(db, card, "ann", "billing", seconds=1.0)
    with db.session() as session:
        project = repo.get_project(session, "p")
        counts = repo.delete_run(session, project.id, second.run_id, "owner")
    assert counts == {"ok": len(TEXTS)}
    with db.read() as session:
        assert session.scalars(select(Run.id)).all() == [first.run_id]
        assert session.scalar(select(func.count()).select_from(Suggestion).where(~Suggestion.is_current)) == 0
        answer = session.scalar(select(Response))
        assert (answer.value, answer.suggestion_id) == ("billing", None)
        event = session.scalar(select(Event).where(Event.kind == "run.deleted"))
        assert event.payload["run_id"] == second.run_id and event.payload["read"] == len(TEXTS)
    rows = exported(db, tmp_path)
    assert {r["run_id"] for r in rows} == {first.run_id}
    assert next(r for r in rows if r["item_id"] == card.item_id)["team"] == "billing"
    nxt = annotation.next_card(db, "p", "team", "in_order", "ann")
    assert nxt.suggestion["run"] == first.run_id and nxt.item_id != card.item_id
    with db.session() as session, pytest.raises(repo.NotFound, match="no run"):
        repo.delete_run(session, project.id, second.run_id, "owner")


def test_run_comparing_queues_skip_a_run_that_read_nothing(db, dgemma_engine):
    labelled(db)
    prelabel(db, "p", dgemma_engine, batch_items=4)
    prelabel(db, "p", dgemma_engine, batch_items=4)
    with db.session() as session:  # a run that failed before storing anything (as a refused run once did)
        project = repo.get_project(session, "p")
        version = repo.latest_version(session, project.id)
        empty = repo.create_run(session, project.id, version, "x", "x", None, {}, "owner")
        repo.finish_run(session, empty.id, "failed", "the server went away", "owner")
    _, _, _, latest = annotation.project_schema(db, "p")
    assert latest is not None and latest != empty.id
    with db.read() as session:
        assert repo.previous_run(session, project.id, empty.id) == latest


def test_the_current_queue_query_uses_its_partial_index(db):
    labelled(db, texts=["x"])
    with db.session() as session:
        project = repo.get_project(session, "p")
        _, rows = repo.version_schema(repo.latest_version(session, project.id))
        for order, index in (("least_confidence", "confidence"), ("margin", "margin"), ("in_order", "item")):
            query = (
                select(Suggestion.item_id)
                .where(Suggestion.is_current, Suggestion.question_id == rows["team"], Suggestion.is_open)
                .order_by(repo.QUEUE_ORDER[order], Suggestion.item_id)
                .limit(1)
            )
            sql = str(query.compile(db.engine, compile_kwargs={"literal_binds": True}))
            if db.engine.dialect.name == "sqlite":
                plan = " ".join(str(r) for r in session.execute(text(f"EXPLAIN QUERY PLAN {sql}")))
            else:
                session.execute(text("SET LOCAL enable_seqscan = off"))
                plan = " ".join(str(r) for r in session.execute(text(f"EXPLAIN {sql}")))
            assert f"ix_suggestions_current_{index}" in plan, plan


def test_a_run_smaller_than_one_batch_reports_progress_before_it_ends(tmp_path, dgemma_engine):
    from diffjev.engines.base import Engine

    class Slow(Engine):
        name, model_name = "slow", "tiny"

        def decide_many(self, schema, states, seed=42):
            for state in states:
                time.sleep(1.5)
                yield from dgemma_engine.decide_many(schema, [state], seed)

    db = Database(tmp_path / "small.db")
    labelled(db, texts=TEXTS[:3])
    seen = []
    report = prelabel(db, "p", Slow(), progress=lambda p: seen.append((p.done, p.total, p.line())))
    assert report.status == "completed" and report.read == 3
    assert seen[0][0] < 3 and seen[0][1] == 3  # before the end: not a spinner until the last item
    assert "items/s" in seen[0][2] and "ETA" in seen[0][2]


def test_a_run_left_running_by_a_stopped_studio_shows_interrupted_and_resumes(tmp_path, dgemma_engine):
    from diffjev.services import prelabel as runs

    db = Database(tmp_path / "left.db")
    labelled(db)
    run_id = runs.start_run(db, "p", dgemma_engine)  # what a killed studio leaves: a run marked running
    assert runs.run_table(db, "p")[0][3] == "running"
    assert runs.interrupt_stale_runs(db) == [run_id]
    assert runs.run_table(db, "p")[0][3] == "interrupted"
    resumed = prelabel(db, "p", dgemma_engine, run_id=run_id)
    assert (resumed.status, resumed.read) == ("completed", len(TEXTS))
