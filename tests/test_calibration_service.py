"""Calibration and run comparison from a real database: crafted suggestions and human answers."""

import pytest
from sqlalchemy import insert, select

from diffjev import Schema
from diffjev import calibration as cal
from diffjev.services import calibration as service
from storage import repo
from storage.db import Database
from storage.models import Item, ItemRead, Response, Suggestion, utcnow

SCHEMA = {
    "questions": [
        {"id": "team", "type": "choice", "instructions": "Team?", "options": ["billing", "technical", "account"]}
    ],
    "samples": 1,
}


def seeded(tmp_path, n_items, blind_every=0):
    """n items; run 1 is right on even items, run 2 on multiples of three; humans answer 'billing'."""
    db = Database(tmp_path / "cal.db")
    now = utcnow()
    with db.session() as session:
        project = repo.create_project(session, "p", Schema.from_dict(SCHEMA), "owner")
        version = repo.latest_version(session, project.id)
        _, rows = repo.version_schema(version)
        runs = [
            repo.create_run(session, project.id, version, engine, "m", None, {}, "owner").id
            for engine in ("diffusion", "autoregressive-sequential")
        ]
        session.execute(
            insert(Item),
            [
                {
                    "project_id": project.id,
                    "external_id": f"i{i}",
                    "content_hash": f"h{i}",
                    "text": f"t{i}",
                    "fields": {},
                    "created_at": now,
                }
                for i in range(n_items)
            ],
        )
        items = list(session.scalars(select(Item.id).order_by(Item.id)))
        for run_id, right, passes in ((runs[0], lambda i: i % 2 == 0, 1), (runs[1], lambda i: i % 3 == 0, 3)):
            for k, item in enumerate(items):
                top = 0.7 + 0.2 * (k % 2)
                dist = (
                    {"billing": top, "technical": 1 - top, "account": 0.0}
                    if right(k)
                    else {"billing": 1 - top, "technical": top, "account": 0.0}
                )
                session.add(
                    Suggestion(
                        run_id=run_id,
                        item_id=item,
                        question_id=rows["team"],
                        answer=max(dist, key=dist.get),
                        distribution=dist,
                        confidence=top,
                        full_vocab_confidence=top,
                        entropy=0.5,
                        margin=0.1,
                        label_mass=1.0,
                        stderr=None,
                        agreement=None,
                        draws=1,
                        value=None,
                        latency_ms=10.0 * passes,
                    )
                )
                session.add(
                    ItemRead(
                        run_id=run_id,
                        item_id=item,
                        status="ok",
                        attempts=1,
                        latency_ms=10.0 * passes,
                        diagnostics={"model_passes": passes},
                    )
                )
        for k, item in enumerate(items):
            session.add(
                Response(
                    item_id=item,
                    question_id=rows["team"],
                    annotator="ann",
                    value="billing",
                    source="manual",
                    suggestion_shown=not (blind_every and k % blind_every == 0),
                    status="submitted",
                    revision=1,
                )
            )
    return db, runs


def expected(n, right):
    probs, labels = [], []
    for k in range(n):
        top = 0.7 + 0.2 * (k % 2)
        probs.append([top, 1 - top, 0.0] if right(k) else [1 - top, top, 0.0])
        labels.append(0)
    return probs, labels


def test_calibration_from_the_database_matches_the_metrics(tmp_path):
    db, runs = seeded(tmp_path, 30)
    found = service.calibrate(db, "p", runs[0], "team")
    probs, labels = expected(30, lambda i: i % 2 == 0)
    assert (found.n, found.answers_used, found.blind_n) == (30, "all", 0)
    assert found.accuracy == pytest.approx(0.5)
    assert found.ece == pytest.approx(cal.ece(probs, labels))
    assert found.brier == pytest.approx(cal.brier(probs, labels))
    assert [b.count for b in found.bins] == [b.count for b in cal.reliability_bins(probs, labels)]
    assert found.temperature is not None and found.calibrated["ece"] >= 0


def test_blind_answers_are_preferred_when_there_are_enough(tmp_path):
    db, runs = seeded(tmp_path, 60, blind_every=2)  # 30 blind answers
    found = service.calibrate(db, "p", runs[0], "team")
    assert (found.answers_used, found.n, found.blind_n) == ("blind", 30, 30)
    # the blind items are the even ones, where run 1 is right
    assert found.accuracy == pytest.approx(1.0)


def test_the_comparison_table_sets_runs_side_by_side(tmp_path):
    db, runs = seeded(tmp_path, 12)
    table = service.compare_runs(db, "p")
    assert [(r["run"], r["engine"]) for r in table] == [(runs[0], "diffusion"), (runs[1], "autoregressive-sequential")]
    first, second = table
    assert first["accuracy"] == pytest.approx(0.5) and second["accuracy"] == pytest.approx(4 / 12, abs=1e-3)
    assert (first["passes / item"], second["passes / item"]) == (1, 3)
    assert (first["mean latency ms / item"], second["mean latency ms / item"]) == (10.0, 30.0)
    assert first["answered"] == 12 and first["items read"] == 12


def test_a_kept_temperature_shows_as_calibrated_confidence_on_the_card(tmp_path):
    from diffjev.services import annotation

    db, runs = seeded(tmp_path, 12)
    project_id, schema, rows, _ = annotation.project_schema(db, "p")
    question = schema.question("team")
    with db.read() as session:
        item = session.scalar(select(Item.id).order_by(Item.id))
    before = annotation.load_card(db, project_id, item, question, rows["team"], runs[0], "ann")
    assert before.suggestion["calibrated"] is None
    service.store_temperature(db, project_id, runs[0], rows["team"], 2.0, fitted_on=12, actor="reviewer")
    after = annotation.load_card(db, project_id, item, question, rows["team"], runs[0], "ann")
    dist = after.suggestion["distribution"]
    expected_top = cal.scale([[dist["billing"], dist["technical"], dist["account"]]], 2.0)[0].max()
    assert after.suggestion["calibrated"] == pytest.approx(expected_top)
    assert after.suggestion["calibrated"] < after.suggestion["confidence"]  # T > 1 softens an overconfident top
    other_run = annotation.load_card(db, project_id, item, question, rows["team"], runs[1], "ann")
    assert other_run.suggestion["calibrated"] is None  # kept for run 1 only


def test_a_new_run_of_the_same_engine_inherits_the_kept_temperature(tmp_path, dgemma_engine):
    import pandas as pd

    from diffjev.services.importing import import_items
    from diffjev.services.prelabel import prelabel, start_run

    db = Database(tmp_path / "inherit.db")
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(SCHEMA), "owner")
    import_items(db, "p", pd.DataFrame({"text": ["a", "b"]}))
    first = prelabel(db, "p", dgemma_engine).run_id
    with db.read() as session:
        project_id = repo.get_project(session, "p").id
        row = repo.version_schema(repo.latest_version(session, project_id))[1]["team"]
    service.store_temperature(db, project_id, first, row, 1.7, fitted_on=30, actor="reviewer")
    second = start_run(db, "p", dgemma_engine, only_unlabeled=True)
    with db.read() as session:
        assert repo.kept_temperature(session, second, row) == pytest.approx(1.7)


def test_runs_compare_on_a_project_with_span_questions(tmp_path, dgemma_engine):
    """A span answer has no distribution over answer names: the comparison of runs leaves span questions
    out and compares the others (it failed on every project with a span question)."""
    from diffjev.services.calibration import calibrate, compare_runs
    from interchange_fixtures import SCHEMA, full_project

    db = full_project(tmp_path / "spans.db", dgemma_engine)
    table = compare_runs(db, "tickets")
    spans = {q["id"] for q in SCHEMA["questions"] if q["type"] in ("span", "spans")}
    assert {row["question"] for row in table} == {q["id"] for q in SCHEMA["questions"]} - spans
    assert next(row for row in table if row["question"] == "urgent")["answered"] == 2
    assert calibrate(db, "tickets", table[0]["run"], "product") is None
