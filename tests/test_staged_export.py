"""The export says why a staged question has no label in every case: a `not_asked` response stored by
the item view, the model's read that skipped it (no suggestion), or a person's answer to the earlier
question that no longer asks it; the record comes from the row's final answers (a person's label, else
the model's answer)."""

import json

import pandas as pd
import pytest

from diffjev.services import annotation
from diffjev.services.exporting import export_project
from test_staged_service import staged_db


@pytest.fixture
def db(tmp_path, dgemma_engine):
    return staged_db(tmp_path / "staged.db", dgemma_engine, items=2)


def exported(db, tmp_path, fmt, **options):
    target = tmp_path / f"out.{fmt}"
    export_project(db, "p", target, fmt, **options)
    if fmt == "jsonl":
        frame = pd.read_json(target, lines=True, dtype=False)
    else:
        frame = pd.read_csv(target, dtype=str, keep_default_na=False)
    return {int(row["item_id"]): row for _, row in frame.iterrows()}


def empty(cell) -> bool:
    return cell is None or (isinstance(cell, float) and pd.isna(cell)) or cell == ""


def record(cell):
    """A `<q>_skipped` cell as a dict (CSV holds it as JSON text), or None where it is empty."""
    if empty(cell):
        return None
    return json.loads(cell) if isinstance(cell, str) else dict(cell)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_the_models_skip_is_exported_with_why(db, tmp_path, fmt):
    rows = exported(db, tmp_path, fmt, reviewed_only=False)
    assert len(rows) == 2
    for row in rows.values():
        urgent = row["urgent_model"]
        dropped, other = ("calm", "outage") if urgent == "yes" else ("outage", "calm")
        assert empty(row[dropped]) and empty(row[f"{dropped}_model"])  # no label, no suggestion
        assert record(row[f"{dropped}_skipped"]) == {
            "because": "urgent",
            "was": urgent,
            "wanted": ["no" if urgent == "yes" else "yes"],
        }
        assert record(row[f"{other}_skipped"]) is None  # it applies: no label yet, and no skip


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_person_changing_the_earlier_answer_in_the_one_question_view_is_exported_with_why(db, tmp_path, fmt):
    card = annotation.next_card(db, "p", "urgent", "in_order", "ann")
    flipped = "no" if card.suggestion["answer"] == "yes" else "yes"
    annotation.answer(db, card, "ann", flipped, seconds=1.0)
    rows = exported(db, tmp_path, fmt)
    (row,) = rows.values()
    assert row["urgent"] == flipped
    # The model read the question the person's answer no longer asks: it is skipped, on the person's word.
    dropped, applies, wanted = ("calm", "outage", "no") if flipped == "yes" else ("outage", "calm", "yes")
    assert not empty(row[f"{dropped}_model"]) and empty(row[dropped])
    assert record(row[f"{dropped}_skipped"]) == {"because": "urgent", "was": flipped, "wanted": [wanted]}
    assert record(row[f"{applies}_skipped"]) is None
