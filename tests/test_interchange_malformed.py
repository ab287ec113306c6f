"""A Label Studio export or an Argilla dataset that does not parse or has a wrong shape is refused with one
line naming the file, the task or record, and the field (a dotted path into what diffjev wrote, such as
meta.diffjev.runs.<key>.model), with the fix: never a traceback, and never a value silently bent into shape
(a score clamped, an offset rounded, an object's str() taken as an id)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from sqlalchemy import select

from diffjev.formats.argilla import read_argilla, write_argilla
from diffjev.formats.bundle import InterchangeError
from diffjev.formats.labelstudio import read_labelstudio, schema_from_config, write_labelstudio
from diffjev.io import atomic_path
from storage.db import Database
from storage.models import Item

DATA = Path(__file__).parent / "data"
LS_EXPORT = DATA / "labelstudio" / "export.json"
LS_CONFIG = DATA / "labelstudio" / "label_config.xml"
ARGILLA = DATA / "argilla" / "support_tickets"
TASKS = json.loads(LS_EXPORT.read_text(encoding="utf-8"))
RECORDS = json.loads((ARGILLA / "records.json").read_text(encoding="utf-8"))
SETTINGS = json.loads((ARGILLA / ".argilla" / "settings.json").read_text(encoding="utf-8"))


# --- Label Studio ------------------------------------------------------------------------------------------------


def ls_export(tmp_path: Path, spoil: Callable[[list[dict[str, Any]]], Any]) -> Path:
    """The fixture export with the first task (id 101) spoiled, its config beside it."""
    tasks = copy.deepcopy(TASKS)
    spoil(tasks)
    out = tmp_path / "export.json"
    out.write_text(json.dumps(tasks), encoding="utf-8")  # json writes NaN/Infinity and escapes a lone surrogate
    shutil.copy(LS_CONFIG, tmp_path / "export.label_config.xml")
    return out


def ls_refusal(tmp_path: Path, spoil: Callable[[list[dict[str, Any]]], Any]) -> tuple[Path, str]:
    out = ls_export(tmp_path, spoil)
    with pytest.raises(InterchangeError) as raised:
        read_labelstudio(out)
    message = str(raised.value)
    assert "\n" not in message
    return out, message


def meta(**ours: Any) -> Callable[[list[dict[str, Any]]], None]:
    def spoil(tasks: list[dict[str, Any]]) -> None:
        tasks[0]["meta"] = {"diffjev": ours}

    return spoil


def both_annotations(**kept: Any) -> Callable[[list[dict[str, Any]]], None]:
    """meta.diffjev.annotations as diffjev writes it: one entry per annotation of the task (it has two)."""
    return meta(annotations=[{"annotator": "alice@example.com", **kept}, {"annotator": "bob@example.com"}])


def run_answer(**answer: Any) -> Callable[[list[dict[str, Any]]], None]:
    return meta(predictions={"gemma-v1": {"answers": {"sentiment": {"answer": "negative", **answer}}}})


def result(task: dict[str, Any], kind: str, n: int, name: str) -> dict[str, Any]:
    """Annotation (kind "annotations") or prediction n's result for the control `name`."""
    return next(r for r in task[kind][n]["result"] if r["from_name"] == name)


ANSWERS = "meta.diffjev.annotations.0.answers"
RUN = "meta.diffjev.predictions.gemma-v1"

LS_META_CASES = [
    ("runs as a list", meta(runs=[1]), "meta.diffjev.runs", "valid dictionary"),
    ("a run without model", meta(runs={"gemma-v1": {"engine": "x"}}), "meta.diffjev.runs.gemma-v1.model", "required"),
    ("predictions as a list", meta(predictions=[1]), "meta.diffjev.predictions", "valid dictionary"),
    ("a run's answers as a list", meta(predictions={"gemma-v1": {"answers": [1]}}), f"{RUN}.answers", "dictionary"),
    (
        "a run's answer as a string",
        meta(predictions={"gemma-v1": {"answers": {"sentiment": "x"}}}),
        f"{RUN}.answers.sentiment",
        "'x'",
    ),
    ("confidence 'high'", run_answer(confidence="high"), f"{RUN}.answers.sentiment.confidence", "'high'"),
    ("confidence 1.5", run_answer(confidence=1.5), f"{RUN}.answers.sentiment.confidence", "less than or equal to 1"),
    (
        "a distribution of text",
        run_answer(confidence=0.9, distribution={"negative": "most"}),
        f"{RUN}.answers.sentiment.distribution.negative",
        "'most'",
    ),
    (
        "spans [1]",
        meta(predictions={"gemma-v1": {"answers": {"ner.ORG": {"answer": "11-15", "confidence": 0.5, "spans": [1]}}}}),
        f"{RUN}.answers.ner.ORG.spans.0",
        "valid dictionary",
    ),
    (
        "a span of 3 items",
        both_annotations(answers={"ner.PER": {"value": "0-5", "spans": [[0, 5, "Alice"]]}}),
        f"{ANSWERS}.ner.PER.spans.0",
        "[start, end, text, confidence], not 3 items",
    ),
    (
        "a span offset of 0.5",
        both_annotations(answers={"ner.PER": {"value": "0-5", "spans": [[0.5, 5, "Alice", None]]}}),
        f"{ANSWERS}.ner.PER.spans.0.start",
        "0.5",
    ),
    ("external_id a list", meta(external_id=["a", "b"]), "meta.diffjev.external_id", "text or a whole number"),
    ("external_id an object", meta(external_id={"a": 1}), "meta.diffjev.external_id", "text or a whole number"),
    ("external_id true", meta(external_id=True), "meta.diffjev.external_id", "text or a whole number"),
    ("annotation answers as a list", both_annotations(answers=[1]), ANSWERS, "valid dictionary"),
    ("an annotation answer as a string", both_annotations(answers={"sentiment": "x"}), f"{ANSWERS}.sentiment", "'x'"),
    (
        "seconds 'abc'",
        both_annotations(answers={"sentiment": {"value": "negative", "seconds": "abc"}}),
        f"{ANSWERS}.sentiment.seconds",
        "'abc'",
    ),
    (
        "negative seconds",
        both_annotations(answers={"sentiment": {"value": "negative", "seconds": -1}}),
        f"{ANSWERS}.sentiment.seconds",
        "greater than or equal to 0",
    ),
    (
        "skipped 'yes'",
        both_annotations(answers={"sentiment": {"value": None, "status": "not_asked", "skipped": "yes"}}),
        f"{ANSWERS}.sentiment.skipped",
        "'yes'",
    ),
    (
        "a status diffjev does not keep",
        both_annotations(answers={"sentiment": {"value": "negative", "status": "done"}}),
        f"{ANSWERS}.sentiment.status",
        "'done'",
    ),
    (
        "an annotator that is an object",
        both_annotations(annotator={"x": 1}),
        "meta.diffjev.annotations.0.annotator",
        "",
    ),
    ("a run's skipped 'yes'", meta(predictions={"gemma-v1": {"skipped": "yes"}}), f"{RUN}.skipped", "'yes'"),
    (
        "a run's skip as a string",
        meta(predictions={"gemma-v1": {"skipped": {"sentiment": "why"}}}),
        f"{RUN}.skipped.sentiment",
        "'why'",
    ),
    ("meta.diffjev a list", lambda tasks: tasks[0].update(meta={"diffjev": [1]}), "meta.diffjev", "valid dictionary"),
]


@pytest.mark.parametrize("case, spoil, field, said", LS_META_CASES, ids=[c[0] for c in LS_META_CASES])
def test_a_wrong_shape_in_label_studio_meta_is_one_line_naming_its_path(tmp_path, case, spoil, field, said):
    out, message = ls_refusal(tmp_path, spoil)
    assert message.startswith(f"{out}: task 101: field {field!r}: "), message
    assert said in message
    assert message.endswith("remove meta.diffjev from the task to import what Label Studio's own fields hold")


def test_an_external_id_that_is_a_whole_number_names_the_item(tmp_path):
    out = ls_export(tmp_path, meta(external_id=7))
    assert [r.external_id for r in read_labelstudio(out).records] == ["7", "102", "103"]


def set_offsets(start: Any, end: Any) -> Callable[[list[dict[str, Any]]], None]:
    def spoil(tasks: list[dict[str, Any]]) -> None:
        result(tasks[0], "annotations", 0, "ner")["value"].update(start=start, end=end)

    return spoil


def set_result(kind: str, name: str, **fields: Any) -> Callable[[list[dict[str, Any]]], None]:
    def spoil(tasks: list[dict[str, Any]]) -> None:
        result(tasks[0], kind, 0, name).update(fields)

    return spoil


def set_prediction(**fields: Any) -> Callable[[list[dict[str, Any]]], None]:
    return lambda tasks: tasks[0]["predictions"][0].update(fields)


LS_VALUE_CASES = [
    ("offsets 0.5 and 3.7", set_offsets(0.5, 3.7), "ner", "whole-number start and end offsets, not 0.5 and 3.7"),
    ("offsets 0.0 and 5.0", set_offsets(0.0, 5.0), "ner", "not 0.0 and 5.0"),
    ("offsets '0' and '3'", set_offsets("0", "3"), "ner", "not '0' and '3'"),
    ("offsets false and true", set_offsets(False, True), "ner", "not False and True"),
    ("an end of Infinity", set_offsets(0, float("inf")), "ner", "not 0 and inf"),
    ("a rating of Infinity", set_result("annotations", "urgency", value={"rating": float("inf")}), "urgency", "inf"),
    ("a rating of 2.5", set_result("annotations", "urgency", value={"rating": 2.5}), "urgency", "2.5"),
    ("a result score of -3", set_result("predictions", "sentiment", score=-3), "sentiment", "score -3 is not a prob"),
    ("a result score of NaN", set_result("predictions", "sentiment", score=float("nan")), "sentiment", "score nan"),
    (
        "a span's own score of 7 beside a valid meta.confidence",
        set_result("predictions", "ner", score=7, meta={"confidence": 0.5}),
        "ner",
        "the region's score 7 is not a probability from 0 to 1",
    ),
    (
        "a distribution that is not probabilities",
        set_result("predictions", "sentiment", score=None, meta={"distribution": {"negative": 2, "positive": 1}}),
        "sentiment",
        "meta.distribution {'negative': 2, 'positive': 1} is not probabilities",
    ),
    (
        "a multiple choice's P(yes) of 1.5",
        set_result("predictions", "topics", meta={"distribution": {"billing": 1.5}}),
        "topics",
        "meta.distribution for 'billing' 1.5 is not a probability",
    ),
    ("a prediction score of 1.5", set_prediction(score=1.5), "predictions.0.score", "score 1.5 is not a probability"),
    ("a prediction score as text", set_prediction(score="0.8"), "predictions.0.score", "score '0.8' is not"),
    ("a model_version object", set_prediction(model_version={"x": 1}), "predictions.0.model_version", "{'x': 1}"),
    (
        "a negative lead_time",
        lambda tasks: tasks[0]["annotations"][0].update(lead_time=-4),
        "annotations.0.lead_time",
        "-4 is not seconds spent",
    ),
    (
        "a lead_time as text",
        lambda tasks: tasks[0]["annotations"][1].update(lead_time="soon"),
        "annotations.1.lead_time",
        "'soon'",
    ),
    ("a task id that is an object", lambda tasks: tasks[0].update(id={"x": 1}), "id", "is no task id"),
]


@pytest.mark.parametrize("case, spoil, field, said", LS_VALUE_CASES, ids=[c[0] for c in LS_VALUE_CASES])
def test_a_label_studio_value_out_of_range_or_of_the_wrong_type_is_refused(tmp_path, case, spoil, field, said):
    out, message = ls_refusal(tmp_path, spoil)
    assert f"field {field!r}: " in message and said in message, message
    assert message.startswith(f"{out}: task ")


def test_a_lone_surrogate_in_a_task_text_is_refused_naming_the_task_and_its_data_field(tmp_path):
    out, message = ls_refusal(tmp_path, lambda tasks: tasks[1]["data"].update(text="Bob \ud800 Ann"))
    assert message.startswith(f"{out}: task 102: field 'data.text': a lone surrogate escape (such as \\ud800)")
    assert "write the whole surrogate pair or remove it" in message


def test_a_lone_surrogate_anywhere_in_a_task_is_refused_naming_its_path(tmp_path):
    def spoil(tasks: list[dict[str, Any]]) -> None:
        tasks[0]["annotations"][0]["completed_by"]["email"] = "alice\ud800@example.com"

    out, message = ls_refusal(tmp_path, spoil)
    assert message == (
        f"{out}: task 101: field 'annotations.0.completed_by.email': a lone surrogate escape (such as \\ud800) is "
        "not valid Unicode; write the whole surrogate pair or remove it"
    )


def test_json_nested_thousands_deep_is_one_line_in_either_format(tmp_path):
    deep = "[" * 5_000 + "]" * 5_000
    out = ls_export(tmp_path, lambda tasks: None)
    out.write_text(deep, encoding="utf-8")
    with pytest.raises(InterchangeError, match=r"export\.json: nests lists or objects thousands deep"):
        read_labelstudio(out)
    folder = argilla_folder(tmp_path)
    (folder / "records.json").write_text(deep, encoding="utf-8")
    with pytest.raises(InterchangeError, match=r"records\.json: nests lists or objects thousands deep"):
        read_argilla(folder)


def test_a_config_nested_thousands_deep_is_refused_in_one_line():
    body = '<Text name="text" value="$text"/><Choices name="c" toName="text"><Choice value="a"/><Choice value="b"/>'
    deep = "<View>" * 5000 + body + "</Choices>" + "</View>" * 5000
    with pytest.raises(InterchangeError) as raised:
        schema_from_config(deep, "deep.xml")
    assert str(raised.value) == (
        "deep.xml: the config nests tags more than 100 deep; a labeling config needs a few levels of <View>, "
        "so flatten it"
    )
    shallow = "<View>" * 20 + body + "</Choices>" + "</View>" * 20
    assert [q.id for q in schema_from_config(shallow).schema.questions] == ["c"]


# --- Argilla -----------------------------------------------------------------------------------------------------


def argilla_folder(
    tmp_path: Path, spoil_records: Callable[[list[dict[str, Any]]], Any] | None = None, spoil_settings=None
) -> Path:
    folder = tmp_path / "ds"
    shutil.copytree(ARGILLA, folder)
    if spoil_records is not None:
        records = copy.deepcopy(RECORDS)
        spoil_records(records)
        (folder / "records.json").write_text(json.dumps(records), encoding="utf-8")
    if spoil_settings is not None:
        settings = copy.deepcopy(SETTINGS)
        spoil_settings(settings)
        (folder / ".argilla" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    return folder


def argilla_refusal(folder: Path) -> str:
    with pytest.raises(InterchangeError) as raised:
        read_argilla(folder)
    message = str(raised.value)
    assert "\n" not in message
    return message


def second(**fields: Any) -> Callable[[list[dict[str, Any]]], None]:
    return lambda records: records[1].update(fields)


def extras(**ours: Any) -> Callable[[list[dict[str, Any]]], None]:
    return lambda records: records[1]["metadata"].update(diffjev=ours)


def suggestion(**fields: Any) -> Callable[[list[dict[str, Any]]], None]:
    return lambda records: records[1]["suggestions"]["sentiment"].update(fields)


ARGILLA_CASES = [
    ("metadata as a list", second(metadata=[1, 2]), "metadata", "the metadata is an object"),
    ("responses as a list", second(responses=[1]), "responses", "map each question's name"),
    ("a response entry that is a number", second(responses={"sentiment": [5]}), "responses.sentiment", "a list of"),
    ("an agent that is an object", suggestion(agent={"a": 1}), "suggestions.sentiment.agent", "{'a': 1} is no agent"),
    ("a score ['x']", suggestion(score=["x"]), "suggestions.sentiment.score", "['x'] is not a probability"),
    ("a score of true", suggestion(score=True), "suggestions.sentiment.score", "True is not a probability"),
    ("annotators as a list", extras(annotators=[1]), "metadata.diffjev.annotators", "valid dictionary"),
    ("answers [1]", extras(answers=[1]), "metadata.diffjev.answers.0", "valid dictionary"),
    (
        "an answer without annotator",
        extras(answers=[{"question": "sentiment"}]),
        "metadata.diffjev.answers.0.annotator",
        "field required",
    ),
    ("a run without engine", extras(runs={"x": {"model": "m"}}), "metadata.diffjev.runs.x.engine", "field required"),
    (
        "a prediction without answer",
        extras(predictions={"x": [{"question": "sentiment", "confidence": 0.5}]}),
        "metadata.diffjev.predictions.x.0.answer",
        "field required",
    ),
    (
        "a prediction's confidence of 2",
        extras(predictions={"x": [{"question": "sentiment", "answer": "negative", "confidence": 2}]}),
        "metadata.diffjev.predictions.x.0.confidence",
        "less than or equal to 1",
    ),
    ("model_skipped 'x'", extras(model_skipped="x"), "metadata.diffjev.model_skipped", "'x'"),
    (
        "span offsets true and 3",
        second(responses={"entities": [{"value": [{"start": True, "end": 3, "label": "ORG"}], "user_id": "u"}]}),
        "responses.entities",
        "is not a span",
    ),
]


@pytest.mark.parametrize("case, spoil, field, said", ARGILLA_CASES, ids=[c[0] for c in ARGILLA_CASES])
def test_a_wrong_shape_in_an_argilla_record_is_one_line_naming_its_path(tmp_path, case, spoil, field, said):
    folder = argilla_folder(tmp_path, spoil)
    message = argilla_refusal(folder)
    assert message.startswith(f"{folder / 'records.json'}: record 'ticket-2': field {field!r}: "), message
    assert said in message


def test_an_argilla_record_id_that_is_an_object_is_refused_not_turned_into_text(tmp_path):
    folder = argilla_folder(tmp_path, second(id={"x": 1}))
    message = argilla_refusal(folder)
    assert message == (
        f"{folder / 'records.json'}: record #2: field 'id': {{'x': 1}} is no record id; give text or a whole number"
    )


def test_a_lone_surrogate_in_an_argilla_text_is_refused(tmp_path):
    folder = argilla_folder(tmp_path, lambda records: records[0]["fields"].update(text="a \ud800 b"))
    assert argilla_refusal(folder).startswith(
        f"{folder / 'records.json'}: record 'ticket-1': field 'fields.text': a lone surrogate escape"
    )


def test_a_lone_surrogate_in_an_argilla_metadata_value_is_refused_naming_its_path(tmp_path):
    folder = argilla_folder(tmp_path, lambda records: records[1]["metadata"].update(channel="chat \udc00"))
    assert argilla_refusal(folder).startswith(
        f"{folder / 'records.json'}: record 'ticket-2': field 'metadata.channel': a lone surrogate escape"
    )


def test_option_values_that_are_objects_and_fields_named_twice_are_refused(tmp_path):
    def weird(settings: dict[str, Any]) -> None:
        settings["questions"][0]["settings"]["options"] = [{"value": {"a": 1}}, {"value": [1]}]

    folder = argilla_folder(tmp_path / "options", spoil_settings=weird)
    assert argilla_refusal(folder) == (
        f"{folder / '.argilla' / 'settings.json'}: question 'sentiment': field 'settings.options': the option value "
        "{'a': 1} is not a label (text) or a number"
    )

    def twice(settings: dict[str, Any]) -> None:
        settings["fields"] = [{"name": "text", "settings": {"type": "text"}}] * 2

    folder = argilla_folder(tmp_path / "fields", spoil_settings=twice)
    assert argilla_refusal(folder) == (
        f"{folder / '.argilla' / 'settings.json'}: field 'fields': two fields are named 'text'; give each its own name"
    )


def test_records_json_that_is_a_folder_is_one_line(tmp_path):
    folder = argilla_folder(tmp_path)
    (folder / "records.json").unlink()
    (folder / "records.json").mkdir()
    message = argilla_refusal(folder)
    assert message.startswith(f"{folder / 'records.json'}: cannot read it (Is a directory)")


# --- through the command line: nothing stored, no traceback -----------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diffjev.cli", *args], capture_output=True, text=True, timeout=600)


def test_the_import_command_says_one_line_and_stores_nothing(tmp_path):
    db_path = tmp_path / "x.db"
    (tmp_path / "bad").mkdir()
    (tmp_path / "good").mkdir()
    out = ls_export(tmp_path / "bad", meta(runs=[1]))
    done = cli("import-project", "--db", str(db_path), "--project", "p", "--from", "labelstudio", str(out))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"diffjev import-project: {out}: task 101: field 'meta.diffjev.runs': [1]: input should be a valid "
        "dictionary; fix it, or remove meta.diffjev from the task to import what Label Studio's own fields hold"
    ]
    folder = argilla_folder(tmp_path, extras(runs={"x": {}}))
    done = cli("import-project", "--db", str(db_path), "--project", "p", "--from", "argilla", str(folder))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "'metadata.diffjev.runs.x.engine'" in done.stderr
    with Database(db_path).session() as session:
        assert session.scalars(select(Item)).all() == []

    # a whole-number external id in meta names the item, as a plain import's id column would
    out = ls_export(tmp_path / "good", meta(external_id=7))
    done = cli("import-project", "--db", str(db_path), "--project", "p", "--from", "labelstudio", str(out))
    assert done.returncode == 0, done.stderr
    with Database(db_path).session() as session:
        assert sorted(session.scalars(select(Item.external_id))) == ["102", "103", "7"]


# --- written folders and files have the modes any written file has -----------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_exports_are_written_with_the_ordinary_modes_not_private_ones(tmp_path, umask):
    bundle = read_argilla(ARGILLA)
    old = os.umask(umask)
    try:
        write_argilla(bundle, tmp_path / "ds")
        write_labelstudio(bundle, tmp_path / "tasks.json")
        with atomic_path(tmp_path / "plain.txt") as temp:
            temp.write_text("x", encoding="utf-8")
    finally:
        os.umask(old)

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(tmp_path / "ds") == 0o777 & ~umask
    assert mode(tmp_path / "ds" / "records.json") == 0o666 & ~umask
    assert mode(tmp_path / "tasks.json") == mode(tmp_path / "plain.txt") == 0o666 & ~umask
    assert not list(tmp_path.glob("*.partial"))
