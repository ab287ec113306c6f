"""Moving a project between tools from the command line, through storage: a Label Studio export and an
Argilla dataset made with those tools' own code import with answers and predictions intact; a diffjev
project exported for either tool and imported back keeps every answer, annotator, distribution, span and
skip; a file with one bad task in the middle stores nothing and says where in one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from diffjev.services.interchange import project_bundle
from interchange_fixtures import comparable, full_project
from storage.db import Database
from storage.models import Item, Response

DATA = Path(__file__).parent / "data"
LS_EXPORT = DATA / "labelstudio" / "export.json"
LS_CONFIG = DATA / "labelstudio" / "label_config.xml"
ARGILLA = DATA / "argilla" / "support_tickets"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diffjev.cli", *args], capture_output=True, text=True, timeout=600)


def import_labelstudio(db_path: Path, project: str, export: Path, config: Path) -> subprocess.CompletedProcess:
    return cli(
        "import-project",
        "--db",
        str(db_path),
        "--project",
        project,
        "--from",
        "labelstudio",
        str(export),
        "--config",
        str(config),
    )


def test_a_label_studio_export_imports_with_its_annotators_and_predictions(tmp_path):
    db_path = tmp_path / "ls.db"
    done = cli("import-project", "--db", str(db_path), "--project", "from-ls", "--from", "labelstudio")
    assert done.returncode == 2 and "source" in done.stderr  # the export is required
    done = cli(
        "import-project",
        "--db",
        str(db_path),
        "--project",
        "from-ls",
        "--from",
        "labelstudio",
        str(LS_EXPORT),
        "--config",
        str(LS_CONFIG),
    )
    assert done.returncode == 0, done.stderr
    assert "created project 'from-ls': 3 items" in done.stdout
    tasks = json.loads(LS_EXPORT.read_text())
    bundle = project_bundle(Database(db_path), "from-ls")
    assert {q.id for q in bundle.schema.questions} >= {"sentiment", "urgency"}
    by_task = {r.external_id: r for r in bundle.records}
    for task in tasks:
        record = by_task[str(task["id"])]
        assert record.text == task["data"]["text"]
        people = {a.annotator for a in record.answers}
        assert len(people) == len(task["annotations"])
        for annotation in task["annotations"]:
            for result in annotation["result"]:
                if result["from_name"] == "sentiment":
                    who = annotation["completed_by"]
                    name = who["email"] if isinstance(who, dict) else f"ls-user-{who}"
                    (given,) = [a for a in record.answers if a.question == "sentiment" and a.annotator == name]
                    assert given.value == result["value"]["choices"][0]
        versions = {p["model_version"] for p in task.get("predictions", [])}
        assert {bundle.runs[key].model for key in record.predictions} == versions
        for prediction in task.get("predictions", []):
            (key,) = [k for k in record.predictions if bundle.runs[k].model == prediction["model_version"]]
            for answer in record.predictions[key]:
                assert abs(sum(answer.distribution.values()) - 1) < 1e-6 or answer.spans is not None


def test_an_argilla_dataset_imports_with_its_responses_and_suggestions(tmp_path):
    db_path = tmp_path / "ar.db"
    done = cli("import-project", "--db", str(db_path), "--project", "from-argilla", "--from", "argilla", str(ARGILLA))
    assert done.returncode == 0, done.stderr
    records = json.loads((ARGILLA / "records.json").read_text())
    bundle = project_bundle(Database(db_path), "from-argilla")
    assert len(bundle.records) == len(records)
    answered = sum(len(r.get("responses") or {}) > 0 for r in records)
    assert sum(bool(r.answers) for r in bundle.records) == answered
    assert any(r.predictions for r in bundle.records)
    agents = {
        s["agent"]
        for r in records
        for s in (r.get("suggestions") or {}).values()
        if isinstance(s, dict) and s.get("agent")
    }
    assert {run.model for run in bundle.runs.values()} == agents


@pytest.mark.parametrize("fmt, out", [("labelstudio", "tasks.json"), ("argilla", "dataset")])
def test_a_project_exported_for_the_tool_and_imported_back_keeps_everything(tmp_path, dgemma_engine, fmt, out):
    source = tmp_path / "source.db"
    full_project(source, dgemma_engine).engine.dispose()
    target = tmp_path / out
    done = cli("export", "--db", str(source), "--project", "tickets", "--format", fmt, "--out", str(target), "--all")
    assert done.returncode == 0, done.stderr
    assert "wrote 3 items" in done.stdout
    back = tmp_path / "back.db"
    done = cli("import-project", "--db", str(back), "--project", "back", "--from", fmt, str(target))
    assert done.returncode == 0, done.stderr
    assert comparable(project_bundle(Database(back), "back")) == comparable(project_bundle(Database(source), "tickets"))


def test_one_bad_task_in_the_middle_of_a_large_export_stores_nothing_and_is_named(tmp_path):
    tasks = json.loads(LS_EXPORT.read_text())
    many = []
    for n in range(600):
        task = json.loads(json.dumps(tasks[n % len(tasks)]))
        task["id"] = 1000 + n
        many.append(task)
    many[300]["annotations"][0]["result"][0]["value"]["choices"] = ["furious"]
    spoiled = tmp_path / "big.json"
    spoiled.write_text(json.dumps(many))
    db_path = tmp_path / "big.db"
    done = cli(
        "import-project",
        "--db",
        str(db_path),
        "--project",
        "big",
        "--from",
        "labelstudio",
        str(spoiled),
        "--config",
        str(LS_CONFIG),
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "big.json" in line and "1300" in line and "furious" in line, line
    if db_path.exists():
        with Database(db_path).read() as session:
            assert session.scalar(select(func.count()).select_from(Item)) == 0
            assert session.scalar(select(func.count()).select_from(Response)) == 0


def test_an_export_made_by_a_running_label_studio_imports_every_answer_and_prediction(tmp_path):
    """tests/data/labelstudio/live/ was written by Label Studio 1.23.2 itself (scripts/interchange/
    make_labelstudio_export_live.py): two people's annotations, a skip, two model versions with scores."""
    live = DATA / "labelstudio" / "live"
    db_path = tmp_path / "live.db"
    done = cli(
        "import-project",
        "--db",
        str(db_path),
        "--project",
        "live",
        "--from",
        "labelstudio",
        str(live / "ls_export.json"),
        "--config",
        str(live / "label_config.xml"),
    )
    assert done.returncode == 0, done.stderr
    tasks = json.loads((live / "ls_export.json").read_text())
    bundle = project_bundle(Database(db_path), "live")
    by_task = {r.external_id: r for r in bundle.records}
    assert len(by_task) == len(tasks)
    for task in tasks:
        record = by_task[str(task["id"])]
        for annotation in task["annotations"]:
            person = annotation["completed_by"]["email"]
            given = {a.question: a for a in record.answers if a.annotator == person}
            if annotation["was_cancelled"]:
                assert given and {a.status for a in given.values()} == {"skipped"}
                continue
            for result in annotation["result"]:
                value, name = result["value"], result["from_name"]
                if name == "sentiment":
                    assert given["sentiment"].value == value["choices"][0]
                elif name == "urgency":
                    assert given["urgency"].value == str(value["rating"])
                elif name == "topics":
                    for label in ("billing", "shipping", "product"):
                        assert given[f"topics.{label}"].value == ("yes" if label in value["choices"] else "no")
                elif name == "ner":
                    (label,) = value["labels"]
                    marks = [(s.start, s.end, s.text) for s in given[f"ner.{label}"].spans]
                    assert (value["start"], value["end"], value["text"]) in marks
        for prediction in task["predictions"]:
            (key,) = [k for k, run in bundle.runs.items() if run.model == prediction["model_version"]]
            predicted = {m.question: m for m in record.predictions[key]}
            for result in prediction["result"]:
                if result["from_name"] == "sentiment":
                    chosen = predicted["sentiment"]
                    assert chosen.answer == result["value"]["choices"][0]
                    assert abs(chosen.confidence - result["score"]) < 1e-9  # the tool's own score, kept
    assert {run.model for run in bundle.runs.values()} == {
        p["model_version"] for task in tasks for p in task["predictions"]
    }


def test_the_export_buttons_quick_form_imports_its_answers_and_says_how_to_bring_the_predictions(tmp_path):
    """The Export button's JSON lists predictions by id only: the answers import, and the summary says what
    was not taken and how to export it in full (a second import adds only what is new)."""
    live = DATA / "labelstudio" / "live"
    db_path = tmp_path / "button.db"
    done = cli(
        "import-project",
        "--db",
        str(db_path),
        "--project",
        "button",
        "--from",
        "labelstudio",
        str(live / "ls_export_button.json"),
        "--config",
        str(live / "label_config.xml"),
    )
    assert done.returncode == 0, done.stderr
    tasks = json.loads((live / "ls_export_button.json").read_text())
    listed = sum(len(task["predictions"]) for task in tasks)
    assert f"note: {listed} predictions were listed by id only" in done.stdout and "only_id false" in done.stdout
    bundle = project_bundle(Database(db_path), "button")
    assert not bundle.runs
    people = {a.annotator for r in bundle.records for a in r.answers}
    assert people == {f"ls-user-{a['completed_by']}" for task in tasks for a in task["annotations"]}
    done = cli(
        "import-project",
        "--db",
        str(db_path),
        "--project",
        "button",
        "--from",
        "labelstudio",
        str(live / "ls_export.json"),
        "--config",
        str(live / "label_config.xml"),
    )
    assert done.returncode == 0, done.stderr
    assert "0 items (5 already there)" in done.stdout
    after = project_bundle(Database(db_path), "button")
    assert len(after.runs) == 2
    # one person is one annotator under both forms (id 1 in the quick form, id 1 and an email in the snapshot)
    answers = [(r.external_id, a.question, a.annotator) for r in after.records for a in r.answers]
    assert len(answers) == len(set(answers)) == len([a for r in bundle.records for a in r.answers])
    assert {who for _, _, who in answers} == {"alice@example.com", "bob@example.com"}


def test_a_snapshot_then_the_quick_form_adds_no_answer_twice(tmp_path):
    live = DATA / "labelstudio" / "live"
    db_path = tmp_path / "snapshot-first.db"
    counts = []
    for export in ("ls_export.json", "ls_export_button.json", "ls_export.json"):
        done = import_labelstudio(db_path, "p", live / export, live / "label_config.xml")
        assert done.returncode == 0, done.stderr
        bundle = project_bundle(Database(db_path), "p")
        counts.append(sum(len(r.answers) for r in bundle.records))
        assert {a.annotator for r in bundle.records for a in r.answers} == {"alice@example.com", "bob@example.com"}
    assert counts[0] > 0 and counts == [counts[0]] * 3


def test_argillas_hub_layout_is_refused_in_one_line_never_read_as_no_items(tmp_path):
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    hub = tmp_path / "tickets"
    shutil.copytree(ARGILLA / ".argilla", hub / ".argilla")  # the layout Dataset.to_hub writes: records in Parquet
    (hub / "data").mkdir()
    records = json.loads((ARGILLA / "records.json").read_text())
    rows = {"id": [r["id"] for r in records], "text": [next(iter(r["fields"].values())) for r in records]}
    pq.write_table(pa.table(rows), hub / "data" / "train-00000-of-00001.parquet")
    db_path = tmp_path / "hub.db"
    done = cli("import-project", "--db", str(db_path), "--project", "tickets", "--from", "argilla", str(hub))
    assert done.returncode != 0 and "created project" not in done.stdout, done.stdout
    said = done.stderr.strip().splitlines()
    assert len(said) == 1 and "Hub layout" in said[0] and "to_disk" in said[0], said
    (hub / "data" / "train-00000-of-00001.parquet").unlink()
    done = cli("import-project", "--db", str(db_path), "--project", "tickets", "--from", "argilla", str(hub))
    assert done.returncode != 0 and "records.json" in done.stderr and "Dataset.to_disk" in done.stderr


def test_a_label_studio_draft_is_counted_as_not_taken_never_dropped_silently(tmp_path):
    tasks = json.loads(LS_EXPORT.read_text())
    submitted = tasks[0]["annotations"][0]
    tasks[0]["drafts"] = [
        {
            "id": 91,
            "user": "carol@example.com",
            "result": submitted["result"],
            "lead_time": 12.5,
            "task": tasks[0]["id"],
        }
    ]
    export = tmp_path / "with-draft.json"
    export.write_text(json.dumps(tasks))
    db_path = tmp_path / "drafts.db"
    done = import_labelstudio(db_path, "p", export, LS_CONFIG)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "1 draft (answers saved in Label Studio but never submitted) was not imported" in said, said
    assert "submit them in Label Studio" in said
    people = {a.annotator for r in project_bundle(Database(db_path), "p").records for a in r.answers}
    assert "carol@example.com" not in people


def test_a_label_studio_export_credits_the_importer_unless_asked_for_user_ids(tmp_path):
    db_path = tmp_path / "people.db"
    done = import_labelstudio(db_path, "p", LS_EXPORT, LS_CONFIG)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out.json"

    def export(fmt: str, target: Path, *flags: str) -> subprocess.CompletedProcess:
        return cli("export", "--db", str(db_path), "--project", "p", "--format", fmt, "--out", str(target), *flags)

    done = export("labelstudio", out, "--all")
    assert done.returncode == 0, done.stderr
    tasks = json.loads(out.read_text())
    assert tasks and all("completed_by" not in a for t in tasks for a in t["annotations"])  # a fresh instance takes it
    done = export("labelstudio", out, "--all", "--ls-user-ids")
    assert done.returncode == 0, done.stderr
    assert all(isinstance(a["completed_by"], int) for t in json.loads(out.read_text()) for a in t["annotations"])
    done = export("csv", tmp_path / "x.csv", "--ls-user-ids")
    assert done.returncode != 0 and "--ls-user-ids is for the labelstudio format" in done.stderr
