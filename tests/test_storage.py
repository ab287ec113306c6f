"""Storage on real databases (a SQLite file and a private PostgreSQL server, through the same code):
migrations, the whole round trip, schema versions, queues, stale writes and the dialect-specific
statements."""

import json

import datasets
import pandas as pd
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import func, inspect, select, text
from sqlalchemy.exc import IntegrityError

from diffjev import Schema
from diffjev.services.exporting import export_project
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database
from storage.models import Base, Item, ItemRead, Response, Suggestion
from conftest import TICKETS

ONE_DRAW = {**TICKETS, "samples": 1}


@pytest.fixture
def db(db_url):
    database = Database(db_url)
    yield database
    database.dispose()


def test_migrations_build_exactly_the_models(db):
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []
    assert "alembic_version" in inspect(db.engine).get_table_names()


def test_sqlite_runs_in_wal_with_foreign_keys_and_a_busy_timeout(tmp_path):
    db = Database(tmp_path / "s.db")
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


def blank_to_none(value):
    """CSV writes a missing answer as an empty cell, pandas reads Parquet's null as NaN."""
    return None if value is None or value == "" or (isinstance(value, float) and value != value) else value


def make_project(db, name="tickets", schema=ONE_DRAW):
    with db.session() as session:
        repo.create_project(session, name, Schema.from_dict(schema), "owner")


def test_round_trip_import_prelabel_respond_export(db, dgemma_engine, tmp_path):
    make_project(db)
    frame = pd.DataFrame(
        {
            "id": ["a", "b", "c", "d"],
            "text": ["Site down!", "Refund please", "Hi", "Password?"],
            "plan": ["pro", "free", "pro", "team"],
            "seats": [40, 1, 3, 12],
        }
    )
    report = import_items(db, "tickets", frame, id_field="id")
    assert (report.imported, report.duplicates, report.rejected) == (4, 0, 0)
    run = prelabel(db, "tickets", dgemma_engine)
    assert (run.status, run.read, run.failed) == ("completed", 4, 0)
    with db.session() as session:
        project = repo.get_project(session, "tickets")
        schema, rows = repo.version_schema(repo.latest_version(session, project.id))
        items = {i.external_id: i.id for i in session.scalars(select(Item))}
        suggestion = session.scalar(
            select(Suggestion).where(Suggestion.item_id == items["a"], Suggestion.question_id == rows["team"])
        )
        repo.respond(
            session,
            repo.ResponseInput(
                items["a"],
                rows["team"],
                "ann",
                suggestion.answer,
                "accepted",
                suggestion_id=suggestion.id,
                suggestion_shown=True,
                seconds=2.5,
            ),
        )
        repo.respond(session, repo.ResponseInput(items["a"], rows["urgent"], "ann", "yes", "manual", seconds=1.0))
        repo.respond(session, repo.ResponseInput(items["c"], rows["tone"], "bob", "calm", "corrected", seconds=4.0))
    expected = {
        "a": {"team": (suggestion.answer, "ann", "accepted"), "urgent": ("yes", "ann", "manual")},
        "c": {"tone": ("calm", "bob", "corrected")},
    }
    for fmt, name in (("jsonl", "out.jsonl"), ("csv", "out.csv"), ("parquet", "out.parquet"), ("hf", "out_hf")):
        target = tmp_path / name
        assert export_project(db, "tickets", target, fmt) == 2  # only reviewed items
        if fmt == "jsonl":
            records = [json.loads(line) for line in target.read_text().splitlines()]
        elif fmt == "csv":
            records = pd.read_csv(target, keep_default_na=False).to_dict("records")
        elif fmt == "parquet":
            records = pd.read_parquet(target).to_dict("records")
        else:
            records = datasets.load_from_disk(str(target)).to_list()
        assert "external_id" not in records[0]  # the import's own id column comes back under its own name
        by_id = {r["id"]: r for r in records}
        assert set(by_id) == {"a", "c"}
        for ext, answers in expected.items():
            r = by_id[ext]
            assert r["text"] == frame.set_index("id").loc[ext, "text"]
            fields = r["fields"] if fmt == "jsonl" else json.loads(r["fields"])
            assert fields == {
                "plan": frame.set_index("id").loc[ext, "plan"],
                "seats": int(frame.set_index("id").loc[ext, "seats"]),
            }
            assert r["run_id"] == run.run_id and r["engine"] == "transformers"
            for q in ("urgent", "team", "tone"):
                human = answers.get(q)
                got = tuple(blank_to_none(r[f"{q}{suffix}"]) for suffix in ("", "_annotator", "_source"))
                assert got == (human if human else (None, None, None))
                assert int(r[f"{q}_annotations"]) == (1 if human else 0)
                with db.read() as session:
                    s = session.scalar(
                        select(Suggestion).where(Suggestion.item_id == items[ext], Suggestion.question_id == rows[q])
                    )
                assert r[f"{q}_model"] == s.answer
                assert float(r[f"{q}_confidence"]) == pytest.approx(s.confidence)
                dist = json.loads(r[f"{q}_distribution"]) if fmt == "csv" else r[f"{q}_distribution"]
                assert {k: float(v) for k, v in dist.items()} == pytest.approx(s.distribution)
                assert list(dist) == list(schema.question(q).names)
    # Filters: one annotator; every item.
    assert export_project(db, "tickets", tmp_path / "bob.jsonl", "jsonl", annotator="bob") == 1
    assert export_project(db, "tickets", tmp_path / "all.jsonl", "jsonl", reviewed_only=False) == 4


def test_suggestions_store_the_whole_read(db, dgemma_engine):
    make_project(db)
    import_items(db, "tickets", pd.DataFrame({"text": ["Everything is down."]}))
    run = prelabel(db, "tickets", dgemma_engine)
    with db.read() as session:
        read_row = session.scalar(select(ItemRead))
        assert read_row.status == "ok" and read_row.attempts == 1 and read_row.latency_ms > 0
        d = read_row.diagnostics
        assert d["engine"] == "transformers" and d["prompt_ids"] and set(d["slots"]) == {"urgent", "team", "tone"}
        rows = session.scalars(select(Suggestion).where(Suggestion.run_id == run.run_id)).all()
        assert len(rows) == 3
        for s in rows:
            assert sum(s.distribution.values()) == pytest.approx(1.0)
            assert s.confidence == pytest.approx(max(s.distribution.values()))
            assert 0 < s.label_mass <= 1 and s.entropy > 0 and s.draws == 1 and s.is_open


def test_a_missing_read_or_detail_is_stored_as_sql_null(db, dgemma_engine):
    """Reads are stored in bulk, statement by statement: a failed read's diagnostics and a label answer's
    detail are SQL NULL, as a row added one by one stores them, never the JSON text 'null'."""
    make_project(db)
    import_items(db, "tickets", pd.DataFrame({"text": ["Everything is down.", "Billing is wrong."]}))
    run = prelabel(db, "tickets", dgemma_engine)
    with db.read() as session:
        first, second = session.scalars(select(Item.id).order_by(Item.id)).all()
        question_rows = repo.version_schema(repo.latest_version(session, repo.get_project(session, "tickets").id))[1]
    db.write(lambda s: s.execute(text("DELETE FROM item_reads WHERE item_id = :i"), {"i": second}))
    db.write(lambda s: repo.store_reads(s, run.run_id, question_rows, [(second, None, "EngineError: down", 3, None)]))
    with db.read() as session:
        raw = dict(session.execute(text("SELECT item_id, diagnostics IS NULL FROM item_reads")).tuples().all())
        assert raw == {first: 0, second: 1}
        assert session.scalar(text("SELECT count(*) FROM suggestions WHERE detail IS NULL")) == 6
        assert session.scalar(select(func.count()).select_from(Suggestion).where(Suggestion.detail.is_(None))) == 6


def test_a_changed_schema_is_a_new_version_and_old_answers_keep_theirs(db):
    make_project(db)
    import_items(db, "tickets", pd.DataFrame({"text": ["x"]}))
    with db.session() as session:
        project = repo.get_project(session, "tickets")
        _, v1 = repo.version_schema(repo.latest_version(session, project.id))
        item = session.scalar(select(Item.id))
        repo.respond(session, repo.ResponseInput(item, v1["team"], "ann", "billing", "manual"))
        assert repo.save_schema(session, project, Schema.from_dict(ONE_DRAW), "owner").version == 1  # no change
        changed = json.loads(json.dumps(ONE_DRAW))
        changed["questions"][1]["options"].append({"name": "sales"})
        v2 = repo.save_schema(session, project, Schema.from_dict(changed), "owner")
        _, rows2 = repo.version_schema(v2)
    assert v2.version == 2
    assert rows2["urgent"] == v1["urgent"] and rows2["tone"] == v1["tone"]  # unchanged: same rows
    assert rows2["team"] != v1["team"]  # changed: a new row; the old answer stays on the old one
    with db.read() as session:
        answer = session.scalar(select(Response))
        assert (answer.question_id, answer.value) == (v1["team"], "billing")


def test_queues_follow_the_strategy_and_skip_answered_items(db):
    make_project(db)
    import_items(db, "tickets", pd.DataFrame({"text": [f"t{i}" for i in range(4)]}))
    with db.session() as session:
        project = repo.get_project(session, "tickets")
        version = repo.latest_version(session, project.id)
        schema, rows = repo.version_schema(version)
        run = repo.create_run(session, project.id, version, "crafted", "none", None, {}, "owner")
        items = session.scalars(select(Item.id).order_by(Item.id)).all()
        # confidence / margin / entropy chosen so that the three orders differ
        crafted = [(0.40, 0.05, 1.05), (0.50, 0.30, 0.90), (0.45, 0.02, 1.00), (0.90, 0.85, 0.30)]
        for item, (conf, margin, ent) in zip(items, crafted):
            session.add(
                Suggestion(
                    run_id=run.id,
                    item_id=item,
                    question_id=rows["team"],
                    answer="billing",
                    distribution={},
                    confidence=conf,
                    full_vocab_confidence=conf,
                    entropy=ent,
                    margin=margin,
                    label_mass=1.0,
                    stderr=None,
                    agreement=None,
                    draws=1,
                    value=None,
                    latency_ms=1.0,
                )
            )
        session.flush()

        def order(strategy):
            return repo.next_in_queue(session, run.id, rows["team"], strategy)

        assert order("least_confidence") == items[0]
        assert order("margin") == items[2]
        assert order("entropy") == items[0]
        assert repo.next_in_queue(session, run.id, rows["team"], "least_confidence", exclude=[items[0]]) == items[2]
        repo.respond(session, repo.ResponseInput(items[0], rows["team"], "ann", "billing", "accepted"))
        assert order("least_confidence") == items[2]
        repo.respond(session, repo.ResponseInput(items[0], rows["team"], "ann", None, "manual", status="skipped"))
        assert order("least_confidence") == items[0]  # a skip reopens it


def test_a_stale_write_never_overwrites_a_newer_answer(db):
    make_project(db)
    import_items(db, "tickets", pd.DataFrame({"text": ["x"]}))
    with db.session() as session:
        project = repo.get_project(session, "tickets")
        _, rows = repo.version_schema(repo.latest_version(session, project.id))
        item = session.scalar(select(Item.id))
        first = repo.respond(session, repo.ResponseInput(item, rows["team"], "ann", "billing", "manual"))
        loaded = first.revision
        repo.respond(
            session, repo.ResponseInput(item, rows["team"], "ann", "account", "manual"), expected_revision=loaded
        )
        with pytest.raises(repo.StaleWrite):
            repo.respond(
                session, repo.ResponseInput(item, rows["team"], "ann", "technical", "manual"), expected_revision=loaded
            )
    with db.read() as session:
        assert session.scalar(select(Response.value)) == "account"
        kinds = session.scalars(select(repo.Event.kind).order_by(repo.Event.id)).all()
    assert kinds.count("response.submitted") == 2


def test_the_partial_unique_index_holds_on_each_database(db):
    make_project(db)
    with db.session() as session:
        project_id = repo.get_project(session, "tickets").id
        repo.insert_items(
            session,
            project_id,
            [
                {"external_id": None, "content_hash": "h", "text": "a", "fields": {}},
                {"external_id": "x1", "content_hash": "h", "text": "a", "fields": {}},
            ],
        )
    with pytest.raises(IntegrityError):
        with db.session() as session:
            repo.insert_items(
                session, project_id, [{"external_id": None, "content_hash": "h", "text": "a", "fields": {}}]
            )
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(Item)) == 2


def test_the_queue_query_uses_its_partial_index(db):
    make_project(db)
    with db.session() as session:
        project = repo.get_project(session, "tickets")
        version = repo.latest_version(session, project.id)
        _, rows = repo.version_schema(version)
        run = repo.create_run(session, project.id, version, "x", "x", None, {}, "owner")
        query = (
            select(Suggestion.item_id)
            .where(Suggestion.run_id == run.id, Suggestion.question_id == rows["team"], Suggestion.is_open)
            .order_by(Suggestion.confidence.asc(), Suggestion.item_id)
            .limit(1)
        )
        sql = str(query.compile(db.engine, compile_kwargs={"literal_binds": True}))
        if db.engine.dialect.name == "sqlite":
            plan = " ".join(str(r) for r in session.execute(text(f"EXPLAIN QUERY PLAN {sql}")))
        else:
            session.execute(text("SET LOCAL enable_seqscan = off"))
            plan = " ".join(str(r) for r in session.execute(text(f"EXPLAIN {sql}")))
    assert "ix_suggestions_queue_confidence" in plan


def test_push_to_hub_without_the_hub_keeps_the_local_export_and_says_why(tmp_path):
    db = Database(tmp_path / "hub.db")
    make_project(db)
    import_items(db, "tickets", pd.DataFrame({"text": ["x"]}))
    from diffjev.io import SourceError

    with pytest.raises(SourceError, match="cannot be pushed to me/labels"):
        export_project(
            db, "tickets", tmp_path / "ds", "hf", reviewed_only=False, push_to_hub="me/labels", token="hf_secret"
        )
    assert datasets.load_from_disk(str(tmp_path / "ds")).num_rows == 1
    with pytest.raises(SourceError, match="needs a Hugging Face token"):
        export_project(db, "tickets", tmp_path / "ds2", "hf", reviewed_only=False, push_to_hub="me/labels")
    assert not (tmp_path / "ds2").exists()  # refused before any work
