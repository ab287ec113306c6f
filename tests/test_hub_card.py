"""The dataset card of a Hugging Face export: written into the export folder as README.md with the Hub's own
card library, its YAML metadata holds the schema, the label counts of the exported rows, the agreement between
annotators, each run's calibration against the human labels and the run itself, as the project's own
review and calibration services compute them; the card's text shows them as tables."""

import pytest
from huggingface_hub import DatasetCard

from diffjev import Schema
from diffjev.services.calibration import calibrate
from diffjev.services.exporting import export_project
from diffjev.services.review import agreement
from hub_project import SCHEMA, hub_project


@pytest.fixture
def db(tmp_path, dgemma_engine):
    return hub_project(tmp_path / "hub.db", dgemma_engine)


def test_the_card_holds_the_schema_counts_agreement_calibration_and_run(db, tmp_path):
    export_project(db, "p", tmp_path / "out", "hf")
    card = DatasetCard.load(tmp_path / "out" / "README.md")
    data = card.data.to_dict()
    assert data["pretty_name"] == "p" and "diffjev" in data["tags"]
    assert data["task_categories"] == ["text-classification", "token-classification"]
    meta = data["diffjev"]
    assert Schema.from_dict(meta["schema"]) == Schema.from_dict(SCHEMA)
    assert meta["items"] == 2  # reviewed only: t2 was skipped, never answered
    # the labels of the exported rows: t0's team is carol's adjudicated answer, not bob's latest
    assert meta["label_counts"] == {
        "urgent": {"no": 1, "yes": 1},
        "outage": {"yes": 1},
        "calm": {"no": 1, "yes": 1},
        "team": {"billing": 1, "technical": 1},
        "product": {"none": 2},
    }
    expected_agreement, _ = agreement(db, "p")
    assert meta["agreement"] == expected_agreement
    assert {(r["question"], r["annotators"], r["items"]) for r in meta["agreement"]} >= {
        ("urgent", "ann / bob", 2),
        ("team", "ann / bob", 2),
    }
    (run,) = meta["runs"]
    assert (run["id"], run["engine"], run["status"], run["read"]) == (1, "transformers", "completed", 3)
    assert run["model"] and run["started_at"] and run["finished_at"]
    # calibration of the run per label question that has model answers beside human labels (a span question
    # has no distribution to calibrate; a staged one the model's reads all skipped has no pairs)
    found = [calibrate(db, "p", 1, q, full=False) for q in ("urgent", "outage", "calm", "team")]
    assert meta["calibration"] == [c.summary() for c in found if c is not None]
    assert {"urgent", "team"} <= {r["question"] for r in meta["calibration"]}
    # the text a reader sees on the Hub: the same figures as tables, a pipe in the instructions escaped
    assert "| team | choice | Which team \\| desk? | billing, technical |" in card.text
    assert "| team | technical | 1 |" in card.text
    assert f"| 1 | transformers | {run['model']} |" in card.text
    team = next(r for r in meta["calibration"] if r["question"] == "team")
    assert f"| team | 1 | {team['items']} | {team['accuracy']} | {team['ECE']} | {team['Brier']} |" in card.text


def test_the_card_of_a_project_without_labels_or_runs_says_so(tmp_path):
    import pandas as pd

    from diffjev.services.importing import import_items
    from storage import repo
    from storage.db import Database

    db = Database(tmp_path / "bare.db")
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(SCHEMA), "owner")
    import_items(db, "p", pd.DataFrame({"text": ["one", "two"]}))
    assert export_project(db, "p", tmp_path / "out", "hf", reviewed_only=False) == 2
    card = DatasetCard.load(tmp_path / "out" / "README.md")
    meta = card.data.to_dict()["diffjev"]
    assert (meta["items"], meta["runs"], meta["agreement"], meta["calibration"]) == (2, [], [], [])
    assert all(not counts for counts in meta["label_counts"].values())
    assert "No item has a human label yet." in card.text
    assert "No model run read these items." in card.text
    assert card.data.to_dict()["size_categories"] == ["n<1K"]
