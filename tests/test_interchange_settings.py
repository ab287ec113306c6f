"""An Argilla dataset's own settings come back from diffjev as they went in: its question titles,
descriptions, `required` flags and option texts, its fields and their titles, its metadata properties,
`allow_extra_metadata`, its name and guidelines; the records keep their extra fields and metadata."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from diffjev.formats.bundle import InterchangeError
from diffjev.services.interchange import export_file, import_file, project_bundle
from interchange_fixtures import comparable
from storage.db import Database

ARGILLA = Path(__file__).resolve().parent / "data" / "argilla" / "support_tickets"  # made by Argilla 2.8


def settings_of(folder: Path) -> dict:
    return json.loads((folder / ".argilla" / "settings.json").read_text())


def questions(settings: dict) -> dict:
    return {
        q["name"]: (q["title"], q["description"], q["required"], q["type"], q["settings"])
        for q in settings["questions"]
    }


def fields(settings: dict) -> list:
    return [(f["name"], f["title"], f["required"], f["settings"]) for f in settings["fields"]]


def test_an_argilla_dataset_keeps_its_settings_through_diffjev(tmp_path):
    db = Database(tmp_path / "tickets.db")
    import_file(db, "tickets", "argilla", ARGILLA, "importer")
    export_file(db, "tickets", "argilla", tmp_path / "out", "exporter", reviewed_only=False)
    given, back = settings_of(ARGILLA), settings_of(tmp_path / "out")
    assert questions(back) == questions(given)
    assert fields(back) == fields(given)
    assert back["metadata"] == given["metadata"]
    assert back["allow_extra_metadata"] is False
    assert back["guidelines"] == given["guidelines"]
    dataset = json.loads((tmp_path / "out" / ".argilla" / "dataset.json").read_text())
    assert (dataset["name"], dataset["guidelines"]) == ("support_tickets", given["guidelines"])
    mine = {r["id"]: r for r in json.loads((ARGILLA / "records.json").read_text())}
    for record in json.loads((tmp_path / "out" / "records.json").read_text()):
        assert record["fields"] == mine[record["id"]]["fields"]  # the agent's reply is a field again
        assert record["metadata"] == mine[record["id"]]["metadata"]  # only what the settings define
    again = Database(tmp_path / "again.db")
    import_file(again, "tickets", "argilla", tmp_path / "out", "importer")
    assert comparable(project_bundle(again, "tickets")) == comparable(project_bundle(db, "tickets"))


def test_settings_a_project_no_longer_fits_are_not_written(tmp_path):
    """A question the project asks differently now (its options changed) is written as diffjev has it."""
    db = Database(tmp_path / "tickets.db")
    import_file(db, "tickets", "argilla", ARGILLA, "importer")
    stored = json.loads((ARGILLA / ".argilla" / "settings.json").read_text())
    from storage import repo

    with db.session() as session:
        project = repo.get_project(session, "tickets")
        kept = dict(project.tool_settings)
        kept["argilla"]["settings"]["questions"][0]["settings"]["options"][0]["value"] = "elated"
        project.tool_settings = kept
    export_file(db, "tickets", "argilla", tmp_path / "out", "exporter", reviewed_only=False)
    sentiment = questions(settings_of(tmp_path / "out"))["sentiment"]
    assert [o["value"] for o in sentiment[4]["options"]] == ["positive", "neutral", "negative"]
    assert sentiment[0] == stored["questions"][0]["title"]  # the title still fits, and is kept


def spoiled(tmp_path: Path) -> Path:
    """The Argilla dataset with settings Argilla itself would refuse, one part at a time."""
    folder = tmp_path / "spoiled"
    shutil.copytree(ARGILLA, folder)
    settings = settings_of(folder)
    deep: list = []
    for _ in range(900):  # past the nesting any JSON column stores
        deep = [deep]
    settings["questions"][0]["title"] = {"nested": ["not", "text"]}
    settings["questions"][1]["required"] = "yes please"
    settings["questions"][2]["description"] = deep
    settings["questions"][3]["settings"]["visible_options"] = deep
    settings["fields"][1]["title"] = ["x"]
    settings["metadata"][0]["settings"] = "garbage"
    (folder / ".argilla" / "settings.json").write_text(json.dumps(settings))
    return folder


def test_settings_argilla_would_refuse_are_not_kept_and_the_import_says_which(tmp_path):
    db = Database(tmp_path / "tickets.db")
    report = import_file(db, "tickets", "argilla", spoiled(tmp_path), "importer")
    said = "\n".join(report.notes)
    for part in (
        "question 'sentiment': its title",
        "question 'topics': its required",
        "question 'urgency': its description",
        "question 'entities': its settings",
        "field 'reply': its title",
        "metadata property 'channel'",
    ):
        assert part in said, said
    export_file(db, "tickets", "argilla", tmp_path / "out", "exporter", reviewed_only=False)
    back = questions(settings_of(tmp_path / "out"))
    assert back["sentiment"][0] == "sentiment" and back["topics"][2] is False  # diffjev's own, not the spoiled
    assert back["urgency"][1] is None and back["entities"][4]["visible_options"] is None
    assert fields(settings_of(tmp_path / "out"))[1][1] == "reply"
    assert [m["name"] for m in settings_of(tmp_path / "out")["metadata"]] == ["priority"]
    assert questions(settings_of(tmp_path / "out"))["topics"][0] == "Which topics does the ticket raise?"


def with_sidecar(tmp_path: Path, change) -> Path:
    """The dataset exported with its settings kept (no extra metadata): its records' facts in the sidecar."""
    db = Database(tmp_path / "source.db")
    import_file(db, "tickets", "argilla", ARGILLA, "importer")
    folder = tmp_path / "out"
    export_file(db, "tickets", "argilla", folder, "exporter", reviewed_only=False)
    sidecar = folder / ".argilla" / "diffjev.json"
    data = json.loads(sidecar.read_text())
    assert data["records"]  # where the facts went
    change(data)
    sidecar.write_text(json.dumps(data))
    return folder


def spoil_predictions_key(data: dict) -> None:
    facts = data["records"]["ticket-1"]
    facts["predictions"]["run-elsewhere"] = next(iter(facts["predictions"].values()))


def spoil_skipped_question(data: dict) -> None:
    data["records"]["ticket-1"]["model_skipped"] = {
        next(iter(data["records"]["ticket-1"]["predictions"])): {"salary": {"because": "x", "was": None, "wanted": []}}
    }


def spoil_confidence(data: dict) -> None:
    next(iter(data["records"]["ticket-1"]["predictions"].values()))[0]["confidence"] = 7


@pytest.mark.parametrize(
    "change, field, said",
    [
        (lambda d: d.update(records=[1, 2, 3]), "records", "maps each record's id"),
        (spoil_predictions_key, "records.ticket-1.predictions.run-elsewhere", "no run of that key"),
        (spoil_skipped_question, "records.ticket-1.model_skipped", "'salary'"),
        (spoil_confidence, "records.ticket-1.predictions", "less than or equal to 1"),
    ],
)
def test_facts_beside_the_records_are_checked_and_named_where_they_are(tmp_path, change, field, said):
    folder = with_sidecar(tmp_path, change)
    with pytest.raises(InterchangeError) as refused:
        import_file(Database(tmp_path / "again.db"), "tickets", "argilla", folder, "importer")
    assert refused.value.file.endswith("diffjev.json"), str(refused.value)
    assert (refused.value.field or "").startswith(field) and said in str(refused.value), str(refused.value)
