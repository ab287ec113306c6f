"""Label Studio's labeling config and JSON export <-> diffjev (diffjev.formats.labelstudio). The export
fixture under tests/data/labelstudio/ is made by scripts/interchange/make_labelstudio_export.py with Label
Studio's own SDK."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from diffjev.formats.bundle import Bundle, HumanAnswer, InterchangeError, ModelAnswer, Record, RunInfo, SpanMark
from diffjev.formats.labelstudio import (
    config_from_schema,
    read_labelstudio,
    schema_from_config,
    task_predictions,
    write_labelstudio,
)
from diffjev.schema import Schema

DATA = Path(__file__).parent / "data" / "labelstudio"


def view(body: str) -> str:
    return f'<View><Text name="text" value="$text"/>{body}</View>'


# --- the config ------------------------------------------------------------------------------------------------


def test_single_choices_become_a_choice_question_with_the_header_as_instructions():
    config = schema_from_config(
        view(
            '<Header value="How does the customer feel?"/><Choices name="sentiment" toName="text">'
            '<Choice value="pos" hint="Pleased"/><Choice value="Negative" alias="neg"/><Choice value="yes"/></Choices>'
        )
    )
    (q,) = config.schema.questions
    assert (q.id, q.kind, q.names) == ("sentiment", "choice", ("pos", "neg", "yes"))
    assert q.instructions == "How does the customer feel?"
    assert [a.description for a in q.alternatives] == ["Pleased", "Negative", None]
    assert config.text_field == "text" and config.text_name == "text"


def test_two_choices_stay_a_choice_never_yes_no():
    config = schema_from_config(
        view('<Choices name="ok" toName="text"><Choice value="yes"/><Choice value="no"/></Choices>')
    )
    assert config.schema.questions[0].kind == "choice"


def test_multiple_choices_become_one_yes_no_question_per_label():
    config = schema_from_config(
        view(
            '<Header value="Which topics?"/><Choices name="topics" toName="text" choice="multiple">'
            '<Choice value="billing"/><Choice value="tech support"/></Choices>'
        )
    )
    qs = config.schema.questions
    assert [q.id for q in qs] == ["topics.billing", "topics.tech_support"]
    assert all(q.kind == "yes_no" for q in qs)
    assert qs[0].instructions == "Does billing apply? Which topics?"
    assert qs[1].part_of == ("topics", "tech support")


def test_rating_becomes_a_score_with_levels_one_to_max():
    config = schema_from_config(view('<Rating name="stars" toName="text" maxRating="3" hint="How good?"/>'))
    (q,) = config.schema.questions
    assert (q.kind, q.names, q.instructions) == ("score", ("1", "2", "3"), "How good?")
    default = schema_from_config(view('<Rating name="stars" toName="text"/>')).schema.questions[0]
    assert default.names == ("1", "2", "3", "4", "5")


def test_labels_become_one_spans_question_per_label():
    config = schema_from_config(
        view('<Labels name="ner" toName="text"><Label value="PER"/><Label value="ORG" hint="Companies"/></Labels>')
    )
    per, org = config.schema.questions
    assert (per.id, per.kind, per.part_of, per.instructions) == (
        "ner.PER",
        "spans",
        ("ner", "PER"),
        "Mark every PER in the text.",
    )
    assert org.instructions == "Companies"


def test_flat_taxonomy_is_a_choice_and_a_nested_or_multiple_one_is_refused():
    flat = schema_from_config(
        view('<Taxonomy name="team" toName="text"><Choice value="A"/><Choice value="B"/></Taxonomy>')
    )
    assert flat.schema.questions[0].kind == "choice"
    nested = view('<Taxonomy name="team" toName="text"><Choice value="A"><Choice value="A1"/></Choice></Taxonomy>')
    with pytest.raises(InterchangeError, match="Taxonomy name=team.*nested taxonomy"):
        schema_from_config(nested, "cfg.xml")
    several = view(
        '<Taxonomy name="team" toName="text" maxUsages="3"><Choice value="A"/><Choice value="B"/></Taxonomy>'
    )
    with pytest.raises(InterchangeError, match="Taxonomy name=team.*several choices"):
        schema_from_config(several, "cfg.xml")


@pytest.mark.parametrize(
    "tag",
    [
        '<TextArea name="comment" toName="text"/>',
        '<Number name="count" toName="text"/>',
        '<DateTime name="when" toName="text"/>',
        '<RectangleLabels name="box" toName="text"><Label value="a"/></RectangleLabels>',
        '<Relations><Relation value="works_for"/></Relations>',
        '<Pairwise name="pick" toName="text,text"/>',
    ],
)
def test_a_control_diffjev_cannot_hold_is_refused_by_tag_and_name(tag):
    with pytest.raises(InterchangeError) as caught:
        schema_from_config(view(tag), "label_config.xml")
    message = str(caught.value)
    assert message.startswith("label_config.xml: field '")
    element = tag[1:].split(" ")[0].split(">")[0]
    assert element in message and "remove it" in message and "\n" not in message


def test_a_config_that_is_not_xml_or_declares_entities_is_refused():
    with pytest.raises(InterchangeError, match=r"^cfg.xml: the config is not XML"):
        schema_from_config("<View><Text", "cfg.xml")
    bomb = '<!DOCTYPE v [<!ENTITY a "aaaa">]><View><Text name="t" value="$t"/>&a;</View>'
    with pytest.raises(InterchangeError, match="DTD or entities"):
        schema_from_config(bomb, "cfg.xml")


def test_an_object_diffjev_cannot_read_and_a_control_on_an_image_are_refused():
    with pytest.raises(InterchangeError, match="Audio name=clip"):
        schema_from_config('<View><Audio name="clip" value="$audio"/></View>', "cfg.xml")
    on_image = (
        '<View><Image name="img" value="$image"/>'
        '<Choices name="c" toName="img"><Choice value="a"/><Choice value="b"/></Choices></View>'
    )
    with pytest.raises(InterchangeError, match="Choices name=c.*not the <Image>"):
        schema_from_config(on_image, "cfg.xml")


def test_config_from_schema_joins_part_of_questions_and_reads_back_to_the_same_schema():
    schema = Schema.from_dict(
        {
            "questions": [
                {
                    "id": "urgent",
                    "type": "yes_no",
                    "instructions": "Is it urgent?",
                    "criteria": {"true": "within a day"},
                },
                {
                    "id": "team",
                    "type": "choice",
                    "instructions": "Who?",
                    "options": ["sales", {"name": "ops", "description": "Operations"}],
                },
                {
                    "id": "mood",
                    "type": "score",
                    "instructions": "Mood?",
                    "levels": ["calm", "annoyed", "furious"],
                    "ask_if": {"urgent": "yes"},
                },
                {"id": "stars", "type": "score", "instructions": "Stars?", "levels": ["1", "2", "3"]},
                {
                    "id": "topics.a",
                    "type": "yes_no",
                    "instructions": "Does a apply?",
                    "part_of": {"question": "topics", "label": "a"},
                },
                {
                    "id": "topics.b",
                    "type": "yes_no",
                    "instructions": "Does b apply?",
                    "part_of": {"question": "topics", "label": "b"},
                },
                {
                    "id": "ner.PER",
                    "type": "spans",
                    "instructions": "Mark every PER in the text.",
                    "part_of": {"question": "ner", "label": "PER"},
                },
                {"id": "product", "type": "span", "instructions": "Which product?"},
            ]
        }
    )
    xml_text = config_from_schema(schema, text_field="body")
    assert '<Choices name="topics" toName="text" choice="multiple">' in xml_text
    assert '<Rating name="stars" toName="text" maxRating="3"' in xml_text
    config = schema_from_config(xml_text)
    assert config.schema == schema
    assert config.text_field == "body"
    # an edited config (a choice added) no longer matches the comment: the tags win
    edited = xml_text.replace('<Choice value="ops"', '<Choice value="hr" /><Choice value="ops"')
    team = schema_from_config(edited).schema.question("team")
    assert team.names == ("sales", "hr", "ops")
    assert schema_from_config(edited).schema.question("urgent").kind == "choice"


# --- reading an export -----------------------------------------------------------------------------------------


def read_fixture() -> Bundle:
    return read_labelstudio(DATA / "export.json", DATA / "label_config.xml")


def test_an_sdk_made_export_reads_with_annotators_answers_and_spans():
    bundle = read_fixture()
    first, second, cancelled = bundle.records
    assert (first.external_id, first.fields, first.where) == ("101", {"channel": "email"}, "task 101")
    by = {(a.annotator, a.question): a for a in first.answers}
    assert by[("alice@example.com", "sentiment")].value == "negative"
    assert by[("alice@example.com", "urgency")].value == "3"
    assert by[("alice@example.com", "team")].value == "Sales"
    assert by[("alice@example.com", "topics.billing")].value == "yes"
    assert by[("alice@example.com", "topics.account")].value == "no"
    assert by[("ls-user-2", "topics.account")].value == "yes"
    assert by[("ls-user-2", "urgency")].seconds == 30.0
    per = by[("alice@example.com", "ner.PER")]
    assert per.value == "0-5" and per.spans == (SpanMark(0, 5, "Alice"),)
    assert first.text[11:15] == "Acme" and by[("alice@example.com", "ner.ORG")].value == "11-15"
    # a person who marked no ORG answered "none"; one who left the team unanswered did not answer it
    assert by[("ls-user-2", "ner.ORG")].value == "none"
    assert ("ls-user-2", "team") not in by
    assert {a.status for a in cancelled.answers} == {"skipped"}
    assert len(cancelled.answers) == len(bundle.schema.questions)


def test_predictions_become_runs_with_score_derived_distributions():
    bundle = read_fixture()
    assert set(bundle.runs) == {"gemma-v1", "gemma-v2"}
    assert bundle.runs["gemma-v1"] == RunInfo("gemma-v1", "labelstudio", "gemma-v1", "gemma-v1")
    first = {a.question: a for a in bundle.records[0].predictions["gemma-v1"]}
    sentiment = first["sentiment"]  # the result's own score (0.9) over the prediction's (0.8)
    assert sentiment.answer == "negative" and sentiment.confidence == pytest.approx(0.9)
    assert sentiment.distribution == pytest.approx({"positive": 0.05, "negative": 0.9, "neutral": 0.05})
    assert first["topics.billing"].distribution == pytest.approx({"yes": 0.8, "no": 0.2})
    assert first["topics.shipping"].distribution == pytest.approx({"yes": 0.2, "no": 0.8})
    assert first["ner.ORG"].answer == "11-15" and first["ner.PER"].answer == "none"
    urgency = {a.question: a for a in bundle.records[1].predictions["gemma-v2"]}["urgency"]
    assert urgency.answer == "4" and urgency.distribution["4"] == pytest.approx(0.95)


def write_export(tmp_path: Path, tasks) -> Path:
    shutil.copy(DATA / "label_config.xml", tmp_path / "export.label_config.xml")
    path = tmp_path / "export.json"
    path.write_text(tasks if isinstance(tasks, str) else json.dumps(tasks), encoding="utf-8")
    return path


def fixture_tasks() -> list:
    return json.loads((DATA / "export.json").read_text(encoding="utf-8"))


def test_the_config_beside_the_export_is_found_and_its_absence_is_named(tmp_path):
    path = write_export(tmp_path, fixture_tasks())
    assert len(read_labelstudio(path).records) == 3
    (tmp_path / "export.label_config.xml").unlink()
    with pytest.raises(InterchangeError, match="does not carry the labeling config"):
        read_labelstudio(path)


def test_an_export_that_is_not_json_is_refused_naming_the_file(tmp_path):
    path = write_export(tmp_path, "[{not json")
    with pytest.raises(InterchangeError, match=r"export.json: not JSON"):
        read_labelstudio(path)


def test_a_task_without_the_text_field_is_refused_naming_task_and_field(tmp_path):
    tasks = fixture_tasks()
    del tasks[1]["data"]["text"]
    with pytest.raises(InterchangeError) as caught:
        read_labelstudio(write_export(tmp_path, tasks))
    assert str(caught.value).startswith(f"{tmp_path / 'export.json'}: task 102: field 'data.text': ")


def test_a_span_whose_text_does_not_match_is_refused(tmp_path):
    tasks = fixture_tasks()
    region = next(r for r in tasks[0]["annotations"][0]["result"] if r["from_name"] == "ner")
    region["value"]["text"] = "Alicia"
    with pytest.raises(InterchangeError, match=r"task 101: field 'ner': region 0-5 says 'Alicia'"):
        read_labelstudio(write_export(tmp_path, tasks))


@pytest.mark.parametrize(
    "tag, bad_value, expected",
    [
        ("ner", {"start": 0, "end": 5, "text": "Alice", "labels": ["LOC"]}, "'LOC' is not a <Label>"),
        ("sentiment", {"choices": ["angry"]}, "'angry' is not a <Choice>"),
        ("urgency", {"rating": 9}, "rating 9 is not one of 1..4"),
    ],
)
def test_an_unknown_label_is_refused_naming_task_and_control(tmp_path, tag, bad_value, expected):
    tasks = fixture_tasks()
    region = next(r for r in tasks[0]["annotations"][0]["result"] if r["from_name"] == tag)
    region["value"] = bad_value
    with pytest.raises(InterchangeError) as caught:
        read_labelstudio(write_export(tmp_path, tasks))
    assert f"task 101: field '{tag}': " in str(caught.value) and expected in str(caught.value)


# --- writing, and the round trip -------------------------------------------------------------------------------

TEXT = "Alice from Acme wants a refund for the Acme Phone X."


def round_trip_bundle() -> Bundle:
    schema = Schema.from_dict(
        {
            "questions": [
                {"id": "urgent", "type": "yes_no", "instructions": "Is it urgent?"},
                {
                    "id": "team",
                    "type": "choice",
                    "instructions": "Who?",
                    "options": ["sales", "ops"],
                    "ask_if": {"urgent": "yes"},
                },
                {"id": "stars", "type": "score", "instructions": "Stars?", "levels": ["1", "2", "3"]},
                {
                    "id": "topics.a",
                    "type": "yes_no",
                    "instructions": "Does a apply?",
                    "part_of": {"question": "topics", "label": "a"},
                },
                {
                    "id": "topics.b",
                    "type": "yes_no",
                    "instructions": "Does b apply?",
                    "part_of": {"question": "topics", "label": "b"},
                },
                {
                    "id": "ner.PER",
                    "type": "spans",
                    "instructions": "Mark every PER.",
                    "part_of": {"question": "ner", "label": "PER"},
                },
                {
                    "id": "ner.ORG",
                    "type": "spans",
                    "instructions": "Mark every ORG.",
                    "part_of": {"question": "ner", "label": "ORG"},
                },
            ]
        }
    )
    acme = (SpanMark(11, 15, "Acme"), SpanMark(39, 43, "Acme"))
    skip = {"because": "urgent", "was": "no", "wanted": ["yes"]}
    answers = [
        HumanAnswer("urgent", "ann", "no", seconds=4.0),
        HumanAnswer("team", "ann", None, status="not_asked", skipped=skip),
        HumanAnswer("stars", "ann", "2", source="corrected", seconds=4.0),
        HumanAnswer("topics.a", "ann", "no", seconds=4.0),
        HumanAnswer("topics.b", "ann", "no", seconds=4.0),
        HumanAnswer("ner.PER", "ann", "0-5", spans=(SpanMark(0, 5, "Alice"),), seconds=4.0),
        HumanAnswer("ner.ORG", "ann", "none", spans=(), seconds=4.0),
        HumanAnswer("urgent", "bo", None, status="skipped"),
        HumanAnswer("stars", "bo", "3", seconds=9.5),
        HumanAnswer("ner.ORG", "bo", "11-15,39-43", spans=acme, seconds=9.5),
        HumanAnswer("urgent", "cy", None, status="skipped", seconds=1.0),
    ]
    predictions = [
        ModelAnswer("urgent", "no", {"yes": 0.3, "no": 0.7}, 0.7),
        ModelAnswer("stars", "2", {"1": 0.2, "2": 0.5, "3": 0.3}, 0.5),
        ModelAnswer("topics.a", "yes", {"yes": 0.8, "no": 0.2}, 0.8),
        ModelAnswer("topics.b", "no", {"yes": 0.1, "no": 0.9}, 0.9),
        ModelAnswer("ner.PER", "0-5", {}, 0.6, (SpanMark(0, 5, "Alice", 0.6),)),
        ModelAnswer("ner.ORG", "none", {}, 0.75, ()),
    ]
    record = Record(
        TEXT,
        "ticket-7",
        {"channel": "email", "priority": 2},
        answers,
        predictions={"run-3": predictions},
        model_skipped={"run-3": {"team": skip}},
        where="record 1",
    )
    plain = Record("Nothing to see.", "8", {"channel": "chat", "priority": 1}, where="record 2")
    runs = {"run-3": RunInfo("run-3", "dgemma", "tiny-gemma", "abc123")}
    return Bundle(schema, [record, plain], runs, "body", "project.json")


def sort_answers(record: Record) -> list:
    return sorted(record.answers, key=lambda a: (a.annotator, a.question))


def test_bundle_to_labelstudio_and_back_keeps_everything(tmp_path):
    bundle = round_trip_bundle()
    out = tmp_path / "ls" / "tasks.json"
    write_labelstudio(bundle, out)
    assert (tmp_path / "ls" / "tasks.label_config.xml").exists()
    back = read_labelstudio(out)
    assert back.schema == bundle.schema
    assert back.text_field == "body" and back.runs == bundle.runs
    for mine, theirs in zip(bundle.records, back.records):
        assert (theirs.text, theirs.external_id, theirs.fields) == (mine.text, mine.external_id, mine.fields)
        assert sort_answers(theirs) == sort_answers(mine)
        assert theirs.predictions == mine.predictions
        assert theirs.model_skipped == mine.model_skipped
    assert len(back.records) == 2


def test_a_written_export_reread_after_label_studio_renumbered_it_keeps_the_annotators(tmp_path):
    """Label Studio assigns its own ids and annotator on import; the task meta it keeps names the people."""
    out = tmp_path / "tasks.json"
    write_labelstudio(round_trip_bundle(), out)
    tasks = json.loads(out.read_text(encoding="utf-8"))
    for n, task in enumerate(tasks, start=500):
        task.update(id=n, inner_id=n, project=3, drafts=[], comment_authors=[])
        for annotation in task["annotations"]:
            annotation.update(id=n, completed_by={"id": 1, "email": "admin@example.com"}, task=n)
        for prediction in task["predictions"]:
            prediction.update(id=n, created_ago="1 minute", task=n, model_run=None)
    out.write_text(json.dumps(tasks), encoding="utf-8")
    back = read_labelstudio(out)
    assert sort_answers(back.records[0]) == sort_answers(round_trip_bundle().records[0])
    assert back.records[0].external_id == "ticket-7"


def test_written_tasks_are_label_studio_shaped(tmp_path):
    out = tmp_path / "tasks.json"
    write_labelstudio(round_trip_bundle(), out, user_ids=True)
    task = json.loads(out.read_text(encoding="utf-8"))[0]
    assert task["data"] == {"body": TEXT, "channel": "email", "priority": 2}
    ann, bo, cy = task["annotations"]
    assert (ann["completed_by"], ann["was_cancelled"], ann["lead_time"]) == (1, False, 4.0)
    assert cy["was_cancelled"] is True and cy["result"] == []
    regions = {(r["from_name"], r["type"]) for r in bo["result"]}
    assert regions == {("stars", "rating"), ("ner", "labels")}
    (prediction,) = task["predictions"]
    assert prediction["model_version"] == "diffjev-dgemma-tiny-gemma-abc123"  # one token; its key in meta
    assert task["meta"]["diffjev"]["runs"]["run-3"]["name"] == "diffjev-dgemma-tiny-gemma-abc123"
    assert prediction["score"] == pytest.approx((0.7 + 0.5 + 0.8 + 0.9 + 0.6 + 0.75) / 6)
    topics = next(r for r in prediction["result"] if r["from_name"] == "topics")
    assert topics["value"] == {"choices": ["a"]}
    assert topics["meta"]["distribution"] == {"a": 0.8, "b": 0.1}
    stars = next(r for r in prediction["result"] if r["from_name"] == "stars")
    assert stars["value"] == {"rating": 2} and stars["meta"]["distribution"] == {"1": 0.2, "2": 0.5, "3": 0.3}
    assert task["meta"]["diffjev"]["annotations"][0]["annotator"] == "ann"


def test_a_refused_write_leaves_the_previous_files_untouched(tmp_path):
    out = tmp_path / "tasks.json"
    write_labelstudio(round_trip_bundle(), out)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    bundle = round_trip_bundle()
    bundle.records[1].answers.append(HumanAnswer("missing", "ann", "x"))
    with pytest.raises(InterchangeError) as caught:
        write_labelstudio(bundle, out)
    assert str(caught.value).startswith("project.json: record 2: field 'missing': ")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_task_predictions_carries_distribution_and_spans():
    schema = round_trip_bundle().schema
    config = schema_from_config(config_from_schema(schema))
    answers = round_trip_bundle().records[0].predictions["run-3"]
    prediction = task_predictions(config, answers, "run-3", TEXT)
    assert prediction["model_version"] == "run-3"
    urgent = next(r for r in prediction["result"] if r["from_name"] == "urgent")
    assert urgent["value"] == {"choices": ["no"]} and urgent["meta"]["distribution"] == {"yes": 0.3, "no": 0.7}
    per = next(r for r in prediction["result"] if r["from_name"] == "ner")
    assert per["value"] == {"start": 0, "end": 5, "text": "Alice", "labels": ["PER"]} and per["score"] == 0.6
