"""A reviewer's adjudication through the tool formats: Label Studio's and Argilla's files carry it (with its
comment, markup and all) in diffjev's meta; a Label Studio export made without diffjev settles an answer where
a ground-truth annotation stands beside another annotator's; a malformed adjudication is one line naming the
task or record and the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from diffjev.formats.argilla import read_argilla, write_argilla
from diffjev.formats.bundle import Adjudication, Bundle, HumanAnswer, InterchangeError, Record, SpanMark
from diffjev.formats.labelstudio import read_labelstudio, write_labelstudio
from diffjev.schema import Schema

DATA = Path(__file__).parent / "data" / "labelstudio"
TEXT = "Acme Phone X broke; the Acme Kettle too."
SCHEMA = Schema.from_dict(
    {
        "questions": [
            {"id": "team", "type": "choice", "instructions": "Which team?", "options": ["billing", "tech"]},
            {"id": "product", "type": "spans", "instructions": "Which products?"},
        ]
    }
)
PHONE = SpanMark(0, 12, "Acme Phone X")
KETTLE = SpanMark(24, 35, "Acme Kettle")


def settled_bundle() -> Bundle:
    """Two annotators who disagree on both questions, and a reviewer who settles both: the span one with the
    spans neither gave alone, the choice with a comment holding markup and a line break."""
    answers = [
        HumanAnswer("team", "ann", "billing"),
        HumanAnswer("product", "ann", "0-12", spans=(PHONE,)),
        HumanAnswer("team", "bob", "tech", source="corrected"),
        HumanAnswer("product", "bob", "24-35", status="draft", spans=(KETTLE,)),
    ]
    settled = [
        Adjudication("team", "carol", "tech", "a <b>hardware</b> fault,\nnot billing"),
        Adjudication("product", "carol", "0-12,24-35", None, (PHONE, KETTLE)),
    ]
    return Bundle(
        SCHEMA, [Record(TEXT, "t1", {}, answers, adjudications=settled, where="record 1")], {}, "text", "p.json"
    )


def test_label_studio_tasks_carry_the_adjudications_and_read_them_back(tmp_path):
    out = tmp_path / "tasks.json"
    write_labelstudio(settled_bundle(), out)
    (task,) = json.loads(out.read_text(encoding="utf-8"))
    assert [a["reviewer"] for a in task["meta"]["diffjev"]["adjudications"]] == ["carol", "carol"]
    assert not any(a["ground_truth"] for a in task["annotations"])  # diffjev marks no ground truth
    (back,) = read_labelstudio(out).records
    assert back.adjudications == settled_bundle().records[0].adjudications
    # bob's draft comes back a draft, with its span
    assert HumanAnswer("product", "bob", "24-35", status="draft", spans=(KETTLE,)) in back.answers


def test_argilla_records_carry_the_adjudications_and_read_them_back(tmp_path):
    write_argilla(settled_bundle(), tmp_path / "ds")
    (raw,) = json.loads((tmp_path / "ds" / "records.json").read_text(encoding="utf-8"))
    assert raw["metadata"]["diffjev"]["adjudications"][0]["comment"] == "a <b>hardware</b> fault,\nnot billing"
    (back,) = read_argilla(tmp_path / "ds").records
    assert back.adjudications == settled_bundle().records[0].adjudications
    assert HumanAnswer("product", "bob", "24-35", status="draft", spans=(KETTLE,)) in back.answers


def ls_export(tmp_path: Path, edit) -> Path:
    """Label Studio's own export (the fixture made with its SDK), edited by `edit`, with its config beside it."""
    tasks = json.loads((DATA / "export.json").read_text(encoding="utf-8"))
    edit(tasks)
    out = tmp_path / "export.json"
    out.write_text(json.dumps(tasks), encoding="utf-8")
    shutil.copy(DATA / "label_config.xml", tmp_path / "export.label_config.xml")
    return out


def test_a_ground_truth_annotation_settles_what_another_annotator_answered(tmp_path):
    def mark(tasks):
        tasks[0]["annotations"][0]["ground_truth"] = True  # alice's, beside ls-user-2's on task 101
        tasks[1]["annotations"][0]["ground_truth"] = True  # the only annotation of task 102

    first, second, _ = read_labelstudio(ls_export(tmp_path, mark)).records
    settled = {a.question: a for a in first.adjudications}
    # alice and ls-user-2 both answered sentiment, topics, urgency and the PER/ORG spans; only alice the team
    assert set(settled) == {
        "sentiment",
        "topics.billing",
        "topics.shipping",
        "topics.account",
        "urgency",
        "ner.PER",
        "ner.ORG",
    }
    assert {a.reviewer for a in settled.values()} == {"alice@example.com"}
    assert (settled["urgency"].value, settled["topics.account"].value) == ("3", "no")
    assert settled["ner.PER"].spans == (SpanMark(0, 5, "Alice"),)
    # alice's answers stay hers too; a ground truth with nobody beside it settles nothing
    assert {a.question for a in first.answers if a.annotator == "alice@example.com"} >= set(settled) | {"team"}
    assert second.adjudications == []


def test_a_ground_truth_answer_does_not_replace_an_adjudication_diffjev_wrote(tmp_path):
    out = tmp_path / "tasks.json"
    write_labelstudio(settled_bundle(), out)
    tasks = json.loads(out.read_text(encoding="utf-8"))
    tasks[0]["annotations"][0]["ground_truth"] = True  # ann's: billing, the phone
    out.write_text(json.dumps(tasks), encoding="utf-8")
    (back,) = read_labelstudio(out).records
    assert back.adjudications == settled_bundle().records[0].adjudications


@pytest.mark.parametrize(
    "spoil, said",
    [
        (lambda a: a.pop("reviewer"), "each adjudication is an object with question, reviewer and value"),
        (lambda a: a.update(question="colour"), "'colour'"),
        (lambda a: a.update(spans=[[0]]), "the spans of carol's adjudication"),
    ],
)
def test_a_malformed_adjudication_is_one_line_naming_the_task_or_record(tmp_path, spoil, said):
    out = tmp_path / "tasks.json"
    write_labelstudio(settled_bundle(), out)
    tasks = json.loads(out.read_text(encoding="utf-8"))
    spoil(tasks[0]["meta"]["diffjev"]["adjudications"][1])
    out.write_text(json.dumps(tasks), encoding="utf-8")
    with pytest.raises(InterchangeError) as raised:
        read_labelstudio(out)
    message = str(raised.value)
    assert message.startswith(f"{out}: task #1: field 'meta.diffjev.adjudications': ") and said in message
    assert "\n" not in message

    write_argilla(settled_bundle(), tmp_path / "ds")
    records = tmp_path / "ds" / "records.json"
    raw = json.loads(records.read_text(encoding="utf-8"))
    spoil(raw[0]["metadata"]["diffjev"]["adjudications"][1])
    records.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(InterchangeError) as raised:
        read_argilla(tmp_path / "ds")
    message = str(raised.value)
    assert message.startswith(f"{records}: record 't1': field 'metadata.diffjev.adjudications': ")
    assert said in message and "\n" not in message
