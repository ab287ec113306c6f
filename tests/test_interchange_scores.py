"""Scores pass through diffjev as the tools gave them: a score a file gives is written back where the other
tool keeps one, and a score no file gave is neither written nor averaged into another (a Label Studio
prediction's one score, a region's score, an Argilla suggestion's score)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diffjev.services.interchange import export_file, import_file
from storage.db import Database

CONFIG = """<View>
  <Text name="text" value="$text"/>
  <Labels name="parts" toName="text">
    <Label value="Error"/>
    <Label value="Product"/>
  </Labels>
  <Choices name="urgent" toName="text" choice="single">
    <Choice value="yes"/><Choice value="no"/>
  </Choices>
</View>"""


def region(start: int, end: int, text: str, label: str, **extra) -> dict:
    return {
        "id": f"r{start}",
        "from_name": "parts",
        "to_name": "text",
        "type": "labels",
        "value": {"start": start, "end": end, "text": text, "labels": [label]},
        **extra,
    }


def urgent(choice: str, **extra) -> dict:
    return {"id": "u", "from_name": "urgent", "to_name": "text", "type": "choices", "value": {"choices": [choice]}}


TASKS = [
    # the prediction's one score is the region's score
    {"id": 1, "data": {"text": "The Widget broke"}, "predictions": [
        {"model_version": "m1", "score": 0.55, "result": [region(4, 10, "Widget", "Product")]}
    ]},
    # each region scored, and the choice; the prediction itself has no score
    {"id": 2, "data": {"text": "A Gadget broke"}, "predictions": [
        {"model_version": "m1", "result": [
            region(2, 8, "Gadget", "Product", score=0.55),
            {**urgent("yes"), "score": 0.45},
        ]}
    ]},
    # no score anywhere
    {"id": 3, "data": {"text": "The Sprocket broke"}, "predictions": [
        {"model_version": "m1", "result": [region(4, 12, "Sprocket", "Product"), urgent("no")]}
    ]},
]  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Database:
    (tmp_path / "ls.json").write_text(json.dumps(TASKS))
    (tmp_path / "ls.label_config.xml").write_text(CONFIG)
    db = Database(tmp_path / "scores.db")
    import_file(db, "scores", "labelstudio", tmp_path / "ls.json", "importer")
    return db


def suggestions(folder: Path) -> list[dict]:
    return [r["suggestions"] for r in json.loads((folder / "records.json").read_text())]


def test_label_studio_scores_reach_argilla_as_given_and_none_is_invented(project, tmp_path):
    export_file(project, "scores", "argilla", tmp_path / "argilla", "exporter", reviewed_only=False)
    first, second, third = suggestions(tmp_path / "argilla")
    assert first["parts"]["score"] == [0.55]  # the prediction's score, not 1.0
    assert second["parts"]["score"] == [0.55]
    assert second["urgent"]["value"] == "yes" and second["urgent"]["score"] == 0.45  # as given, not 0.5
    assert third["parts"]["value"] == [{"start": 4, "end": 12, "label": "Product"}]
    assert third["urgent"]["value"] == "no"
    assert "score" not in third["parts"] and "score" not in third["urgent"]  # none was given


def test_a_prediction_score_is_the_mean_of_the_scores_given(project, tmp_path):
    export_file(project, "scores", "argilla", tmp_path / "argilla", "exporter", reviewed_only=False)
    again = Database(tmp_path / "again.db")
    import_file(again, "scores", "argilla", tmp_path / "argilla", "importer")
    export_file(again, "scores", "labelstudio", tmp_path / "back.json", "exporter", reviewed_only=False)
    tasks = {t["data"]["text"]: t for t in json.loads((tmp_path / "back.json").read_text())}
    (first,) = tasks["The Widget broke"]["predictions"]
    assert first["score"] == pytest.approx(0.55)
    assert [r["score"] for r in first["result"]] == [pytest.approx(0.55)]
    (second,) = tasks["A Gadget broke"]["predictions"]
    assert second["score"] == pytest.approx(0.5)  # (0.55 + 0.45) / 2: no "Error: none" at 1.0 averaged in
    (third,) = tasks["The Sprocket broke"]["predictions"]
    assert third.get("score") is None
    assert all("score" not in r for r in third["result"])
    assert {r["from_name"] for r in third["result"]} == {"parts", "urgent"}


def test_label_studio_round_trip_keeps_unscored_answers_unscored(project, tmp_path):
    export_file(project, "scores", "labelstudio", tmp_path / "out.json", "exporter", reviewed_only=False)
    again = Database(tmp_path / "again.db")
    (tmp_path / "out.label_config.xml").write_text(CONFIG)
    import_file(again, "scores", "labelstudio", tmp_path / "out.json", "importer")
    export_file(again, "scores", "labelstudio", tmp_path / "twice.json", "exporter", reviewed_only=False)
    twice = {t["data"]["text"]: t for t in json.loads((tmp_path / "twice.json").read_text())}
    (third,) = twice["The Sprocket broke"]["predictions"]
    assert third.get("score") is None and all("score" not in r for r in third["result"])
    (second,) = twice["A Gadget broke"]["predictions"]
    assert second["score"] == pytest.approx(0.5)


def test_a_label_an_argilla_suggestion_leaves_out_has_no_score_of_its_own(tmp_path):
    argilla = Path(__file__).resolve().parent / "data" / "argilla" / "support_tickets"
    db = Database(tmp_path / "argilla.db")
    import_file(db, "tickets", "argilla", argilla, "importer")
    export_file(db, "tickets", "labelstudio", tmp_path / "ls.json", "exporter", reviewed_only=False)
    task = next(t for t in json.loads((tmp_path / "ls.json").read_text()) if t["data"]["text"].startswith("Maria"))
    (prediction,) = task["predictions"]
    topics = next(r for r in prediction["result"] if r["from_name"] == "topics")
    assert topics["value"]["choices"] == ["billing", "refund"]
    assert topics["score"] == pytest.approx((0.91 + 0.77) / 2)  # shipping was left out, not scored 1
    assert topics["meta"]["confidence"] == {"billing": 0.91, "refund": 0.77}
    assert prediction["score"] == pytest.approx((0.82 + 0.91 + 0.77 + 0.6 + 0.95 + 0.88) / 6)
