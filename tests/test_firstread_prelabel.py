"""A quick first read: small first batches stored as they arrive, and one draw per item on the first pass
with more draws later only where the "auto" policy asks (through the real prelabel service and a real
SQLite file, with the tiny DiffusionGemma)."""

from __future__ import annotations

import pandas as pd
import pytest
from sqlalchemy import select

from diffjev import Schema
from diffjev.engines.base import growing_chunks
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel, prelabel_quick_first
from storage import repo
from storage.db import Database
from storage.models import Item, Run, Suggestion
from conftest import TICKETS

TEXTS = [
    f"{opening} {problem}."
    for opening in ("Hi,", "URGENT:", "Hello team,")
    for problem in (
        "the dashboard is down",
        "I was charged twice",
        "my password reset link expired",
        "please add two seats",
        "the API returns 500 errors",
        "our refund never arrived",
    )
]


def project_db(path, schema: dict, texts=TEXTS) -> Database:
    db = Database(path)
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(schema), "owner")
    import_items(db, "p", pd.DataFrame({"id": [f"t{i}" for i in range(len(texts))], "text": texts}), id_field="id")
    return db


class CountingReads:
    """Wraps an engine's read() and keeps the number of canvases of each call."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []
        self._read = engine.read

    def __enter__(self):
        def read(canvases):
            self.calls.append(len(canvases))
            return self._read(canvases)

        self.engine.read = read
        return self

    def __exit__(self, *exc):
        del self.engine.read  # the class's own method again


def test_chunks_grow_from_one_item_to_the_engine_batch():
    sizes = growing_chunks(8)
    assert [next(sizes) for _ in range(6)] == [1, 2, 4, 8, 8, 8]
    assert next(growing_chunks(0)) == 1  # a batch size of nothing still reads


def test_a_runs_first_stored_batch_holds_one_item_and_batches_grow(tmp_path, dgemma_engine):
    db = project_db(tmp_path / "s.db", {**TICKETS, "samples": 1})
    stored: list[tuple[int, int]] = []  # (items done, suggestions in the database) at each progress

    def look(progress):
        with db.read() as session:
            stored.append((progress.done, session.query(Suggestion).count()))

    with CountingReads(dgemma_engine) as reads:
        report = prelabel(db, "p", dgemma_engine, progress=look)
    assert report.status == "completed" and report.read == len(TEXTS)
    # The engine reads 1, 2, 4 items, then whole batches of its size (8), never more.
    assert reads.calls[:4] == [1, 2, 4, 8] and max(reads.calls) == dgemma_engine.batch_size
    assert sum(reads.calls) == len(TEXTS)
    # The first item's suggestions are in the database when the first progress comes, before anything else.
    assert stored[0] == (1, len(Schema.from_dict(TICKETS).questions))
    done = [d for d, _ in stored]
    assert done[:3] == [1, 3, 7] and done[-1] == len(TEXTS)


def item_entropies(db: Database, run_id: int) -> dict[int, float]:
    """Each item's worst (highest) entropy over its questions in one run."""
    with db.read() as session:
        rows = session.execute(select(Suggestion.item_id, Suggestion.entropy).where(Suggestion.run_id == run_id))
        worst: dict[int, float] = {}
        for item_id, entropy in rows:
            worst[item_id] = max(worst.get(item_id, 0.0), entropy)
    return worst


def suggestions(db: Database, run_id: int) -> dict[tuple[int, int], Suggestion]:
    with db.read() as session:
        return {
            (s.item_id, s.question_id): s
            for s in session.scalars(select(Suggestion).where(Suggestion.run_id == run_id))
        }


@pytest.fixture
def split_threshold(tmp_path, dgemma_engine) -> float:
    """An entropy threshold that leaves some of the items sure and some unsure on the tiny model's first
    read: the midpoint between the two middle items' worst entropies."""
    db = project_db(tmp_path / "probe.db", {**TICKETS, "samples": 1})
    worst = sorted(item_entropies(db, prelabel(db, "p", dgemma_engine).run_id).values())
    middle = len(worst) // 2
    assert worst[middle - 1] < worst[middle], "the tiny model's items need distinct entropies"
    return (worst[middle - 1] + worst[middle]) / 2


def test_one_draw_first_then_the_auto_draws_only_for_unsure_items(tmp_path, dgemma_engine, split_threshold):
    schema = {**TICKETS, "samples": "auto", "auto_threshold": split_threshold, "auto_max": 3}
    db = project_db(tmp_path / "q.db", schema)
    with CountingReads(dgemma_engine) as reads:
        first, second = prelabel_quick_first(db, "p", dgemma_engine)
    assert first.status == second.status == "completed"

    # The first pass: every item, one draw each, one canvas per item.
    assert first.read == len(TEXTS)
    first_rows = suggestions(db, first.run_id)
    assert {s.draws for s in first_rows.values()} == {1} and {s.stderr for s in first_rows.values()} == {None}
    assert sum(reads.calls) == len(TEXTS) + 3 * second.read

    # The second pass: exactly the items the auto policy finds unsure, each with its three draws.
    unsure = {item for item, worst in item_entropies(db, first.run_id).items() if worst > split_threshold}
    assert 0 < len(unsure) < len(TEXTS) and second.read == len(unsure)
    second_rows = suggestions(db, second.run_id)
    assert {item for item, _ in second_rows} == unsure
    assert {s.draws for s in second_rows.values()} == {3}
    assert all(s.stderr is not None for s in second_rows.values())
    with db.read() as session:
        runs = {r.id: r.params for r in session.scalars(select(Run))}
    assert runs[first.run_id]["samples"] == 1 and runs[second.run_id]["refines"] == first.run_id

    # What annotators see: the second run's suggestion for an unsure item, the first's for a sure one; the
    # first run's suggestion of an unsure item is kept (an answer may point at it), no longer current.
    for key, s in first_rows.items():
        assert s.is_current == (key[0] not in unsure)
    assert all(s.is_current for s in second_rows.values())

    # The second run stores what one single-pass "auto" read of the item gives.
    single = project_db(tmp_path / "single.db", schema)
    whole = suggestions(single, prelabel(single, "p", dgemma_engine).run_id)
    by_text = {}
    for db_, rows in ((db, second_rows), (single, whole)):
        with db_.read() as session:
            texts = {i.id: i.text for i in session.scalars(select(Item))}
        for (item, question), s in rows.items():
            by_text.setdefault((texts[item], question), []).append(s)
    for (text, _), pair in by_text.items():
        if len(pair) == 2:
            assert pair[0].draws == pair[1].draws
            assert pair[0].distribution == pytest.approx(pair[1].distribution, abs=1e-4)


def test_no_second_pass_where_the_schema_fixes_the_draws(tmp_path, dgemma_engine):
    db = project_db(tmp_path / "n.db", {**TICKETS, "samples": 2}, texts=TEXTS[:3])
    first, second = prelabel_quick_first(db, "p", dgemma_engine)
    assert second is None and first.read == 3
    assert {s.draws for s in suggestions(db, first.run_id).values()} == {2}
