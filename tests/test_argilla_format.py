"""Argilla 2.x datasets on disk: the fixture was written by Argilla's own serialisers
(scripts/interchange/make_argilla_dataset.py); a diffjev bundle goes out and comes back unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from diffjev.formats.argilla import read_argilla, write_argilla
from diffjev.formats.bundle import Bundle, HumanAnswer, InterchangeError, ModelAnswer, Record, RunInfo, SpanMark
from diffjev.schema import Schema

FIXTURE = Path(__file__).parent / "data" / "argilla" / "support_tickets"
ANNA = "5a6c2f6e-0000-4000-8000-00000000a001"
BORIS = "5a6c2f6e-0000-4000-8000-00000000b002"
AGENT = "distilbert-support-v3"


def answers_of(record, question):
    return {a.annotator: a for a in record.answers if a.question == question}


def test_argilla_dataset_imports_every_question_kind_with_answers_and_suggestions():
    bundle = read_argilla(FIXTURE)
    kinds = {q.id: (q.kind, q.part_of) for q in bundle.schema.questions}
    assert kinds == {
        "sentiment": ("choice", None),
        "topics.billing": ("yes_no", ("topics", "billing")),
        "topics.shipping": ("yes_no", ("topics", "shipping")),
        "topics.refund": ("yes_no", ("topics", "refund")),
        "urgency": ("score", None),
        "entities.PER": ("spans", ("entities", "PER")),
        "entities.ORG": ("spans", ("entities", "ORG")),
    }
    assert bundle.schema.question("urgency").names == ("1", "2", "3", "4", "5")
    assert bundle.schema.instructions == "Read the ticket and answer every question."
    first, second, third = bundle.records
    assert first.external_id == "ticket-1" and first.text.startswith("Maria from Acme")
    assert first.fields == {"reply": "We are refunding the second charge.", "channel": "email", "priority": 2}

    assert {k: a.value for k, a in answers_of(first, "sentiment").items()} == {ANNA: "negative", BORIS: "neutral"}
    assert answers_of(first, "topics.billing")[ANNA].value == "yes"
    assert answers_of(first, "topics.shipping")[ANNA].value == "no"
    assert answers_of(first, "urgency")[BORIS].value == "3"
    per = answers_of(first, "entities.PER")[ANNA]
    assert per.value == "0-5" and per.spans == (SpanMark(0, 5, "Maria"),)
    assert answers_of(second, "entities.PER")[ANNA].value == "none"
    discarded = answers_of(second, "sentiment")[BORIS]
    assert (discarded.status, discarded.value) == ("skipped", None)

    assert bundle.runs == {AGENT: RunInfo(AGENT, "argilla", AGENT)}
    suggested = {a.question: a for a in first.predictions[AGENT]}
    assert suggested["sentiment"].answer == "negative"
    assert suggested["sentiment"].distribution == pytest.approx({"positive": 0.09, "neutral": 0.09, "negative": 0.82})
    assert suggested["topics.refund"].distribution == pytest.approx({"yes": 0.77, "no": 0.23})
    shipping = suggested["topics.shipping"]  # a label left out: a "no" the suggestion gave no score
    assert (shipping.answer, shipping.distribution, shipping.confidence) == ("no", {}, None)
    assert suggested["urgency"].answer == "4" and suggested["urgency"].confidence == 0.6
    assert suggested["entities.ORG"].spans == (SpanMark(11, 15, "Acme", 0.88),)
    assert [a.question for a in third.predictions[AGENT]] == ["sentiment"] and third.answers == []


def copy_fixture(tmp_path: Path) -> Path:
    folder = tmp_path / "dataset"
    shutil.copytree(FIXTURE, folder)
    return folder


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(("kind", "words"), [("text", "TextQuestion"), ("ranking", "RankingQuestion")])
def test_a_question_kind_diffjev_cannot_hold_is_refused_by_name(tmp_path, kind, words):
    folder = copy_fixture(tmp_path)

    def add(settings):
        extra = dict(settings["questions"][0], name="comment", type=kind)
        extra["settings"] = {"type": kind}
        settings["questions"].append(extra)

    edit(folder / ".argilla" / "settings.json", add)
    with pytest.raises(InterchangeError) as err:
        read_argilla(folder)
    message = str(err.value)
    assert "settings.json: question 'comment': field 'type':" in message and words in message
    assert "\n" not in message


def test_a_span_question_over_another_field_is_refused(tmp_path):
    folder = copy_fixture(tmp_path)
    edit(folder / ".argilla" / "settings.json", lambda s: s["questions"][3]["settings"].update(field="reply"))
    with pytest.raises(InterchangeError, match=r"question 'entities': field 'settings.field': marks spans in 'reply'"):
        read_argilla(folder)


def test_settings_that_are_not_json_name_the_file(tmp_path):
    folder = copy_fixture(tmp_path)
    (folder / ".argilla" / "settings.json").write_text("{not json")
    with pytest.raises(InterchangeError, match=r"settings\.json: not JSON"):
        read_argilla(folder)


def test_a_span_outside_the_text_names_the_record_and_question(tmp_path):
    folder = copy_fixture(tmp_path)
    edit(folder / "records.json", lambda r: r[1]["responses"]["entities"][0]["value"][0].update(end=999))
    with pytest.raises(InterchangeError) as err:
        read_argilla(folder)
    assert "records.json: record 'ticket-2': field 'responses.entities': span 20-999 is outside the text" in str(
        err.value
    )


def test_a_response_value_not_among_the_labels_names_the_record_and_question(tmp_path):
    folder = copy_fixture(tmp_path)
    edit(folder / "records.json", lambda r: r[0]["responses"]["sentiment"][1].update(value="furious"))
    with pytest.raises(InterchangeError) as err:
        read_argilla(folder)
    assert "record 'ticket-1': field 'responses.sentiment': 'furious' is not one of its labels" in str(err.value)


def diffjev_bundle() -> Bundle:
    schema = Schema.from_dict(
        {
            "instructions": "Triage support mail.",
            "questions": [
                {"id": "urgent", "type": "yes_no", "instructions": "Does it need a reply within the hour?"},
                {"id": "team", "type": "choice", "instructions": "Which team?", "options": ["billing", "tech"]},
                {"id": "mood", "type": "score", "instructions": "Mood?", "levels": ["calm", "annoyed", "furious"]},
                {
                    "id": "why",
                    "type": "choice",
                    "instructions": "Why urgent?",
                    "options": ["outage", "money"],
                    "ask_if": {"urgent": "yes"},
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
                {
                    "id": "tags.a",
                    "type": "yes_no",
                    "instructions": "Does a apply?",
                    "part_of": {"question": "tags", "label": "a"},
                },
                {
                    "id": "tags.b",
                    "type": "yes_no",
                    "instructions": "Does b apply?",
                    "part_of": {"question": "tags", "label": "b"},
                },
            ],
        }
    )
    text = "Ada at Initech lost access."
    skip = {"because": "urgent", "was": "no", "wanted": ["yes"]}
    record = Record(
        text=text,
        external_id="m1",
        fields={"channel": "email"},
        answers=[
            HumanAnswer("urgent", "alice", "no", seconds=4.5),
            HumanAnswer("why", "alice", None, status="not_asked", skipped=skip),
            HumanAnswer("team", "alice", "tech", source="corrected"),
            HumanAnswer("mood", "alice", "annoyed"),
            HumanAnswer("team", "bob", None, status="skipped"),
            HumanAnswer("mood", "bob", "calm", status="draft"),
            HumanAnswer("ner.PER", "alice", "0-3", spans=(SpanMark(0, 3, "Ada"),)),
            HumanAnswer("ner.ORG", "alice", "7-14", spans=(SpanMark(7, 14, "Initech"),)),
            HumanAnswer("tags.a", "alice", "yes"),
            HumanAnswer("tags.b", "alice", "no"),
        ],
        predictions={
            "run-1": [
                ModelAnswer("urgent", "no", {"yes": 0.2, "no": 0.8}, 0.8),
                ModelAnswer("team", "tech", {"billing": 0.3, "tech": 0.7}, 0.7),
                ModelAnswer("mood", "annoyed", {"calm": 0.25, "annoyed": 0.6, "furious": 0.15}, 0.6),
                ModelAnswer("ner.PER", "0-3", {}, 0.9, (SpanMark(0, 3, "Ada", 0.9),)),
                ModelAnswer("ner.ORG", "none", {}, 0.7, ()),
                ModelAnswer("tags.a", "yes", {"yes": 0.65, "no": 0.35}, 0.65),
                ModelAnswer("tags.b", "no", {"yes": 0.1, "no": 0.9}, 0.9),
            ],
            "run-2": [ModelAnswer("urgent", "yes", {"yes": 0.55, "no": 0.45}, 0.55)],
        },
        model_skipped={"run-1": {"why": skip}},
        where="record 1",
    )
    plain = Record(text="Invoice question.", external_id=None, fields={})
    runs = {
        "run-1": RunInfo("run-1", "djev", "google/gemma-3-1b", "abc123"),
        "run-2": RunInfo("run-2", "djev", "google/gemma-3-4b"),
    }
    return Bundle(schema=schema, records=[record, plain], runs=runs, text_field="body", source="project triage")


def test_bundle_to_argilla_and_back_keeps_everything(tmp_path):
    bundle = diffjev_bundle()
    write_argilla(bundle, tmp_path / "out")
    back = read_argilla(tmp_path / "out")
    assert back.schema == bundle.schema
    assert back.runs == bundle.runs
    assert back.text_field == "body"
    for mine, theirs in zip(bundle.records, back.records):
        assert (theirs.text, theirs.external_id, theirs.fields) == (mine.text, mine.external_id, mine.fields)
        assert sorted(theirs.answers, key=repr) == sorted(mine.answers, key=repr)
        assert theirs.predictions == mine.predictions
        assert theirs.model_skipped == mine.model_skipped


def test_the_written_folder_is_argillas_form(tmp_path):
    write_argilla(diffjev_bundle(), tmp_path / "out")
    settings = json.loads((tmp_path / "out" / ".argilla" / "settings.json").read_text())
    assert [(q["name"], q["type"]) for q in settings["questions"]] == [
        ("urgent", "label_selection"),
        ("team", "label_selection"),
        ("mood", "rating"),
        ("why", "label_selection"),
        ("ner", "span"),
        ("tags", "multi_label_selection"),
    ]
    assert [o["value"] for o in settings["questions"][2]["settings"]["options"]] == [1, 2, 3]
    assert settings["questions"][1]["settings"]["visible_options"] is None  # Argilla refuses fewer than 3
    assert settings["allow_extra_metadata"] is True  # the record metadata carries diffjev's facts
    record = json.loads((tmp_path / "out" / "records.json").read_text())[0]
    # each question's suggestion is from the latest run that answered it, shown by its model
    assert record["suggestions"]["tags"] == {"value": ["a"], "score": [0.65], "agent": "google/gemma-3-1b@abc123"}
    assert record["suggestions"]["urgent"] == {"value": "yes", "score": 0.55, "agent": "google/gemma-3-4b"}
    assert record["suggestions"]["ner"]["value"] == [{"start": 0, "end": 3, "label": "PER"}]
    assert {r["value"] for r in record["responses"]["mood"]} == {2, 1}
    assert all(len(r["user_id"]) == 36 for rs in record["responses"].values() for r in rs)  # user ids are UUIDs
    assert "why" not in record["responses"]  # not asked: Argilla holds no response for it


def test_argilla_fixture_survives_a_round_trip(tmp_path):
    bundle = read_argilla(FIXTURE)
    write_argilla(bundle, tmp_path / "again")
    back = read_argilla(tmp_path / "again")
    assert back.schema == bundle.schema
    assert [r.answers for r in back.records] == [r.answers for r in bundle.records]
    assert [r.predictions for r in back.records] == [r.predictions for r in bundle.records]


def test_a_suggestion_scored_under_an_even_share_keeps_its_answer_and_score_and_is_never_outvoted(tmp_path):
    """Argilla keeps one score per suggestion. 'negative' at 0.3 over three answers, spread by the one
    rule (the rest shared evenly), gave the other two 0.35 each: the stored answer was not the likeliest."""
    from sqlalchemy import select

    from diffjev.services.interchange import import_bundle
    from storage.db import Database
    from storage.models import Question, Suggestion

    folder = tmp_path / "ds"
    shutil.copytree(FIXTURE, folder)
    edit(folder / "records.json", lambda r: r[0]["suggestions"]["sentiment"].update(value="negative", score=0.3))
    suggested = {a.question: a for a in read_argilla(folder).records[0].predictions[AGENT]}["sentiment"]
    assert (suggested.answer, suggested.confidence) == ("negative", 0.3)
    top = max(suggested.distribution.values())
    assert suggested.distribution["negative"] == top  # nothing outranks the suggested answer
    assert suggested.distribution == pytest.approx({"positive": 1 / 3, "neutral": 1 / 3, "negative": 1 / 3})
    db = Database(tmp_path / "p.db")
    import_bundle(db, "p", read_argilla(folder), "owner")
    with db.read() as session:
        stored = session.execute(
            select(Suggestion.answer, Suggestion.confidence, Suggestion.distribution)
            .join(Question, Question.id == Suggestion.question_id)
            .where(Question.key == "sentiment")
            .order_by(Suggestion.item_id)
        ).first()
    assert stored.answer == "negative" and stored.confidence == pytest.approx(0.3)  # the score as given
    assert max(stored.distribution.values()) == pytest.approx(stored.distribution["negative"])
