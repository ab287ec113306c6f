"""What diffjev writes for Label Studio and Argilla, checked by those tools' own code: Label Studio's SDK
(LabelInterface parses the config, validate_prediction checks every annotation and prediction) and Argilla's
client (DatasetModel, Settings.from_json, Record.from_dict) with the rules its server applies on import.
Both run in .venv-interchange, which scripts/check-interchange builds with pinned versions outside diffjev's
install (a minute or two the first time, reused after). A pip failure fails these tests with pip's error."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from diffjev.formats.labelstudio import read_labelstudio, write_labelstudio
from diffjev.services.interchange import export_file, import_bundle, import_file, project_bundle
from interchange_fixtures import full_project
from storage.db import Database

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "scripts" / "check-interchange"
LIVE = ROOT / "tests" / "data" / "labelstudio" / "live"  # made by Label Studio 1.23.2 itself
ARGILLA = ROOT / "tests" / "data" / "argilla" / "support_tickets"  # made by Argilla 2.8's serialisers


def check(*paths: Path | str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CHECK), *map(str, paths)], capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def tools():
    built = check()
    assert built.returncode == 0, f"scripts/check-interchange could not build .venv-interchange:\n{built.stderr}"


@pytest.fixture(scope="module")
def source(tmp_path_factory, dgemma_engine):
    return full_project(tmp_path_factory.mktemp("interchange") / "source.db", dgemma_engine)


def passes(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_files_label_studio_and_argilla_made_pass_their_own_checks(tools):
    out = passes(check(LIVE / "label_config.xml", LIVE / "ls_export.json", ARGILLA))
    assert "5 tasks, 10 annotations and 10 predictions" in out
    assert "3 records, 8 suggestions and 10 responses" in out


def test_a_project_exported_for_label_studio_passes_its_sdk(tools, source, tmp_path):
    out = tmp_path / "tickets.json"
    written = export_file(source, "tickets", "labelstudio", out, "owner", reviewed_only=False)
    assert written == 3
    config = out.with_name("tickets.label_config.xml")
    said = passes(check(config, out))
    assert "3 tasks, 4 annotations and 3 predictions valid against tickets.label_config.xml" in said
    tasks = json.loads(out.read_text())
    assert all(p["model_version"] and 0 <= p["score"] <= 1 for task in tasks for p in task["predictions"])


def test_a_project_exported_for_argilla_passes_its_classes_and_server_rules(tools, source, tmp_path):
    folder = tmp_path / "tickets"
    export_file(source, "tickets", "argilla", folder, "owner", reviewed_only=False)
    said = passes(check(folder))
    assert "3 records" in said and "valid for Argilla 2.x" in said


def test_label_studios_own_export_moved_through_diffjev_still_passes_its_sdk(tools, tmp_path):
    bundle = read_labelstudio(LIVE / "ls_export.json", LIVE / "label_config.xml")
    db = Database(tmp_path / "moved.db")
    import_bundle(db, "moved", bundle, "importer")
    out = tmp_path / "moved.json"
    write_labelstudio(project_bundle(db, "moved"), out)
    said = passes(check(out.with_name("moved.label_config.xml"), out))
    assert "5 tasks" in said and "10 annotations and 10 predictions" in said


def test_the_export_buttons_form_is_named_for_what_it_lacks(tools):
    done = check(LIVE / "ls_export_button.json", "--config", LIVE / "label_config.xml")
    assert done.returncode == 1
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 10  # two predictions on each of five tasks, each listed by id only
    assert all("field 'predictions[" in line and "an id only" in line for line in lines)


def test_a_spoiled_label_studio_export_fails_with_one_line_per_problem(tools, tmp_path):
    tasks = json.loads((LIVE / "ls_export.json").read_text())
    first = tasks[0]
    first["annotations"][0]["result"][0]["value"]["choices"] = ["furious"]  # not a choice of the config
    span = next(r for r in first["annotations"][1]["result"] if r["type"] == "labels")
    span["value"]["start"] += 1  # the offsets no longer hold the words
    first["predictions"][0]["score"] = 1.5
    export = tmp_path / "spoiled.json"
    export.write_text(json.dumps(tasks))
    shutil.copy(LIVE / "label_config.xml", tmp_path / "spoiled.label_config.xml")
    done = check(export)
    assert done.returncode == 1
    lines = done.stdout.strip().splitlines()
    where = f"{export}: task {first['id']}: "
    assert len(lines) == 3 and all(line.startswith(where) for line in lines), lines
    assert "field 'annotations[1]'" in lines[0] and "Invalid value for control 'sentiment'" in lines[0]
    assert "field 'annotations[2].result.ner'" in lines[1] and "'Maria Lopez'" in lines[1]
    assert "field 'predictions[1]'" in lines[2] and "Score must be between" in lines[2]


def test_a_spoiled_argilla_folder_fails_naming_the_record_and_field(tools, tmp_path):
    folder = tmp_path / "tickets"
    shutil.copytree(ARGILLA, folder)
    records = json.loads((folder / "records.json").read_text())
    records[0]["responses"]["sentiment"][0]["value"] = "furious"
    records[0]["suggestions"]["topics"]["score"] = 0.5  # a list value needs a score per label
    del records[1]["fields"]["text"]
    records[2]["metadata"]["source"] = "crm"  # the settings define channel and priority, and allow no other
    (folder / "records.json").write_text(json.dumps(records))
    done = check(folder)
    assert done.returncode == 1
    lines = done.stdout.strip().splitlines()
    assert any(
        f"record {records[0]['id']}: field 'responses.sentiment" in line and "'furious' is not one of" in line
        for line in lines
    ), lines
    assert any(f"record {records[0]['id']}: field 'suggestions.topics'" in line for line in lines), lines
    assert any(f"record {records[1]['id']}: field 'fields.text'" in line for line in lines), lines
    assert any(f"record {records[2]['id']}: field 'metadata.source'" in line for line in lines), lines


def test_a_config_label_studio_refuses_is_one_line(tools, tmp_path):
    config = tmp_path / "broken.xml"
    config.write_text(
        '<View><Text name="text" value="$text"/><Choices name="c" toName="nowhere"><Choice value="a"/></Choices></View>'
    )
    done = check(config)
    assert done.returncode == 1
    (line,) = done.stdout.strip().splitlines()
    assert line.startswith(f"{config}: Label Studio does not take this labeling config") and "nowhere" in line


def test_argillas_own_dataset_moved_through_diffjev_keeps_its_settings_and_passes(tools, tmp_path):
    db = Database(tmp_path / "moved.db")
    import_file(db, "moved", "argilla", ARGILLA, "importer")
    folder = tmp_path / "moved"
    export_file(db, "moved", "argilla", folder, "owner", reviewed_only=False)
    settings = json.loads((folder / ".argilla" / "settings.json").read_text())
    assert settings["allow_extra_metadata"] is False and [m["name"] for m in settings["metadata"]] == [
        "channel",
        "priority",
    ]
    said = passes(check(folder))  # no metadata the settings do not define: diffjev's rides beside the records
    assert "3 records, 8 suggestions and 10 responses" in said


def test_argilla_settings_argilla_would_refuse_are_written_as_diffjevs_own(tools, tmp_path):
    from test_interchange_settings import spoiled

    db = Database(tmp_path / "spoiled.db")
    import_file(db, "spoiled", "argilla", spoiled(tmp_path), "importer")
    folder = tmp_path / "out"
    export_file(db, "spoiled", "argilla", folder, "owner", reviewed_only=False)
    assert "3 records, 8 suggestions and 10 responses" in passes(check(folder))
