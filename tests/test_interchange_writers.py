"""What the Label Studio and Argilla writers put where the tool shows it: which run's suggestion Argilla
keeps, the names runs are shown under, the ids annotators get, and the multi-label suggestions of a run that
left labels unanswered. Each file is read back too: the names are for people, the round trip still keeps
every run apart."""

from __future__ import annotations

import json
from pathlib import Path

from diffjev.formats.argilla import read_argilla, write_argilla
from diffjev.formats.bundle import Bundle, HumanAnswer, ModelAnswer, Record, RunInfo
from diffjev.formats.labelstudio import read_labelstudio, write_labelstudio
from diffjev.schema import Schema

TEXT = "My modem at Acme drops every hour."


def schema() -> Schema:
    return Schema.from_dict(
        {
            "questions": [
                {"id": "intent", "type": "choice", "instructions": "Why write?", "options": ["fault", "billing"]},
                *(
                    {
                        "id": f"products.{p}",
                        "type": "yes_no",
                        "instructions": f"Does {p} apply?",
                        "part_of": {"question": "products", "label": p},
                    }
                    for p in ("phone", "modem")
                ),
                {
                    "id": "ner.ORG",
                    "type": "spans",
                    "instructions": "Mark every ORG.",
                    "part_of": {"question": "ner", "label": "ORG"},
                },
            ]
        }
    )


def intent(answer: str, p: float) -> ModelAnswer:
    other = "billing" if answer == "fault" else "fault"
    return ModelAnswer("intent", answer, {answer: p, other: round(1 - p, 6)}, p)


def argilla_records(bundle: Bundle, tmp_path: Path) -> list[dict]:
    write_argilla(bundle, tmp_path / "dataset")
    return json.loads((tmp_path / "dataset" / "records.json").read_text(encoding="utf-8"))


def labelstudio_tasks(bundle: Bundle, tmp_path: Path, user_ids: bool = False) -> list[dict]:
    write_labelstudio(bundle, tmp_path / "tasks.json", user_ids=user_ids)
    return json.loads((tmp_path / "tasks.json").read_text(encoding="utf-8"))


def assert_same_runs(back: Bundle, bundle: Bundle) -> None:
    assert back.runs == bundle.runs
    for mine, theirs in zip(bundle.records, back.records, strict=True):
        assert theirs.predictions == mine.predictions


# 1. Argilla's one suggestion per question is the latest run's ------------------------------------------------


def two_runs_of_one_model() -> Bundle:
    org = ModelAnswer("ner.ORG", "12-16", {}, 0.9, ())
    older = [intent("billing", 0.6), org]
    newer = [intent("fault", 0.8)]
    # the record lists the newer run first: which run is the latest is the bundle's order
    record = Record(TEXT, "t1", predictions={"run-7": newer, "run-3": older}, where="item t1")
    runs = {
        "run-3": RunInfo("run-3", "djev", "ticket-bert-v1"),
        "run-7": RunInfo("run-7", "djev", "ticket-bert-v1"),
    }
    return Bundle(schema(), [record], runs, source="project tickets")


def test_argillas_suggestion_is_the_latest_run_that_answered_each_question(tmp_path):
    bundle = two_runs_of_one_model()
    (record,) = argilla_records(bundle, tmp_path)
    suggestions = record["suggestions"]
    assert suggestions["intent"] == {"value": "fault", "score": 0.8, "agent": "ticket-bert-v1 (run 7)"}
    # only the older run marked organisations: its suggestion stays
    assert suggestions["ner"]["agent"] == "ticket-bert-v1 (run 3)"
    assert set(record["metadata"]["diffjev"]["predictions"]) == {"run-3", "run-7"}
    assert_same_runs(read_argilla(tmp_path / "dataset"), bundle)


def test_an_imported_dataset_keeps_each_agents_suggestion(tmp_path):
    """A dataset whose entity suggestions came from one agent and its labels from another: both written."""
    ner = ModelAnswer("ner.ORG", "12-16", {}, 0.88, ())
    record = Record(
        TEXT, "t1", predictions={"ner-spacy-lg": [ner], "intent-roberta-v4": [intent("fault", 0.7)]}, where="t1"
    )
    runs = {key: RunInfo(key, "argilla", key) for key in ("ner-spacy-lg", "intent-roberta-v4")}
    bundle = Bundle(schema(), [record], runs, source="support")
    (written,) = argilla_records(bundle, tmp_path)
    assert {name: s["agent"] for name, s in written["suggestions"].items()} == {
        "intent": "intent-roberta-v4",
        "ner": "ner-spacy-lg",
    }
    assert_same_runs(read_argilla(tmp_path / "dataset"), bundle)


# 2. Runs are shown under their model's name ---------------------------------------------------------------


def named_runs() -> Bundle:
    record = Record(
        TEXT,
        "t1",
        predictions={"run-7": [intent("fault", 0.8)], "run-9": [intent("billing", 0.55)]},
        where="item t1",
    )
    runs = {
        "run-7": RunInfo("run-7", "djev", "ticket-bert-v1"),
        "run-9": RunInfo("run-9", "djev", "google/gemma-3-1b", "abc123"),
    }
    return Bundle(schema(), [record], runs, source="project tickets")


def test_label_studio_shows_a_run_by_its_model_and_version(tmp_path):
    bundle = named_runs()
    (task,) = labelstudio_tasks(bundle, tmp_path)
    # one token each, as the ML backend names diffjev's predictions (Label Studio lists and filters by it)
    versions = [p["model_version"] for p in task["predictions"]]
    assert versions == ["diffjev-djev-ticket-bert-v1", "diffjev-djev-google-gemma-3-1b-abc123"]
    assert_same_runs(read_labelstudio(tmp_path / "tasks.json"), bundle)


def test_argilla_shows_a_run_by_its_model_and_version(tmp_path):
    bundle = named_runs()
    (record,) = argilla_records(bundle, tmp_path)
    assert record["suggestions"]["intent"]["agent"] == "google/gemma-3-1b@abc123"
    assert_same_runs(read_argilla(tmp_path / "dataset"), bundle)


def test_a_version_that_only_repeats_the_model_is_not_written_twice(tmp_path):
    """Label Studio's runs come back with the model_version as both model and version."""
    record = Record(TEXT, "t1", predictions={"run-2": [intent("fault", 0.8)]}, where="item t1")
    runs = {"run-2": RunInfo("run-2", "labelstudio", "ticket-bert-v1", "ticket-bert-v1")}
    (task,) = labelstudio_tasks(Bundle(schema(), [record], runs), tmp_path)
    assert task["predictions"][0]["model_version"] == "ticket-bert-v1"


def test_two_runs_of_one_model_are_told_apart_by_their_run(tmp_path):
    bundle = two_runs_of_one_model()
    (task,) = labelstudio_tasks(bundle, tmp_path)
    versions = [p["model_version"] for p in task["predictions"]]
    assert versions == ["diffjev-djev-ticket-bert-v1-run-3", "diffjev-djev-ticket-bert-v1-run-7"]
    assert_same_runs(read_labelstudio(tmp_path / "tasks.json"), bundle)


# 3. One person has one Label Studio id in every task -----------------------------------------------------------


def people_bundle(*tasks: tuple[str, ...]) -> Bundle:
    records = [
        Record(TEXT, f"t{n}", answers=[HumanAnswer("intent", who, "fault") for who in people], where=f"item t{n}")
        for n, people in enumerate(tasks, start=1)
    ]
    return Bundle(schema(), records, source="project tickets")


def ids_by_person(tasks: list[dict]) -> list[dict[str, int]]:
    return [
        {
            kept["annotator"]: annotation["completed_by"]
            for annotation, kept in zip(task["annotations"], task["meta"]["diffjev"]["annotations"], strict=True)
        }
        for task in tasks
    ]


def test_by_default_label_studio_credits_the_importer_and_the_names_travel_in_meta(tmp_path):
    """A user id Label Studio does not know fails its whole import ("completed_by=2 is not a valid
    annotator's email or ID"), and a fresh instance knows only user 1: so no completed_by is written."""
    bundle = people_bundle(("alice", "bob"), ("carol", "alice"))
    tasks = labelstudio_tasks(bundle, tmp_path)
    assert all("completed_by" not in a for task in tasks for a in task["annotations"])
    back = read_labelstudio(tmp_path / "tasks.json")
    assert [sorted(a.annotator for a in r.answers) for r in back.records] == [["alice", "bob"], ["alice", "carol"]]


def test_annotators_are_numbered_once_for_the_whole_export(tmp_path):
    bundle = people_bundle(("alice", "bob"), ("carol", "alice"), ("bob",))
    tasks = labelstudio_tasks(bundle, tmp_path, user_ids=True)
    assert ids_by_person(tasks) == [{"alice": 1, "bob": 2}, {"carol": 3, "alice": 1}, {"bob": 2}]
    back = read_labelstudio(tmp_path / "tasks.json")
    assert [sorted(a.annotator for a in r.answers) for r in back.records] == [
        ["alice", "bob"],
        ["alice", "carol"],
        ["bob"],
    ]


def test_label_studios_own_user_ids_are_written_back(tmp_path):
    bundle = people_bundle(("alice", "ls-user-12"), ("ls-user-1", "ls-user-12", "bob"))
    tasks = labelstudio_tasks(bundle, tmp_path, user_ids=True)
    # the ids Label Studio gave stay; the others take the lowest numbers no one holds
    assert ids_by_person(tasks) == [{"alice": 2, "ls-user-12": 12}, {"ls-user-1": 1, "ls-user-12": 12, "bob": 3}]
    back = read_labelstudio(tmp_path / "tasks.json")
    assert {a.annotator for r in back.records for a in r.answers} == {"alice", "bob", "ls-user-1", "ls-user-12"}


# 4. A label the run never answered is no suggested "no" ----------------------------------------------------------


def test_a_label_the_run_did_not_answer_gets_no_invented_answer(tmp_path):
    phone = ModelAnswer("products.phone", "yes", {"yes": 0.8, "no": 0.2}, 0.8)
    record = Record(TEXT, "t1", predictions={"run-1": [phone]}, where="item t1")
    bundle = Bundle(schema(), [record], {"run-1": RunInfo("run-1", "djev", "ticket-bert-v1")})
    (written,) = argilla_records(bundle, tmp_path)
    assert written["suggestions"]["products"] == {"value": ["phone"], "score": [0.8], "agent": "ticket-bert-v1"}
    (back,) = read_argilla(tmp_path / "dataset").records
    assert back.predictions == {"run-1": [phone]}  # nothing said of the modem


def test_a_label_the_run_answered_no_is_kept_out_of_the_chosen_labels_and_scores(tmp_path):
    phone = ModelAnswer("products.phone", "yes", {"yes": 0.8, "no": 0.2}, 0.8)
    modem = ModelAnswer("products.modem", "no", {"yes": 0.3, "no": 0.7}, 0.7)
    record = Record(TEXT, "t1", predictions={"run-1": [phone, modem]}, where="item t1")
    bundle = Bundle(schema(), [record], {"run-1": RunInfo("run-1", "djev", "ticket-bert-v1")})
    (written,) = argilla_records(bundle, tmp_path)
    assert written["suggestions"]["products"] == {"value": ["phone"], "score": [0.8], "agent": "ticket-bert-v1"}
    assert read_argilla(tmp_path / "dataset").records[0].predictions == {"run-1": [phone, modem]}
