"""A Hugging Face export read back: project -> `export --format hf` -> read_diffjev_export gives every
annotator's answer (status, source, seconds, why a question was not asked, span offsets), the reviewer's
adjudication, the run's suggestions with their full distributions and span confidences, and the questions
the run's read skipped, as the database holds them. A dataset diffjev did not write is refused in one line."""

import datasets
import pytest
from sqlalchemy import select

from diffjev import Schema
from diffjev.formats.bundle import Adjudication, InterchangeError
from diffjev.formats.hub import read_diffjev_export
from diffjev.services.exporting import export_project
from diffjev.services.interchange import import_bundle, project_bundle
from hub_project import PRODUCT, SCHEMA, hub_project
from interchange_fixtures import TEXTS, comparable, full_project
from storage import repo
from storage.db import Database
from storage.models import Item, ItemRead, Question, Response, Suggestion


@pytest.fixture
def db(tmp_path, dgemma_engine):
    return hub_project(tmp_path / "hub.db", dgemma_engine)


def stored(db):
    """What the database holds, per item's external id: its answers, its suggestions, its read's skips."""
    with db.read() as session:
        key = dict(session.execute(select(Question.id, Question.key)).all())
        external = dict(session.execute(select(Item.id, Item.external_id)).all())
        answers, suggestions, skipped = {}, {}, {}
        for r in session.scalars(select(Response)):
            answers.setdefault(external[r.item_id], set()).add(
                (key[r.question_id], r.annotator, r.value, r.status, r.source, r.seconds, str(r.detail))
            )
        for s in session.scalars(select(Suggestion)):
            spans = tuple((m["start"], m["end"], m["text"], m["confidence"]) for m in (s.detail or {}).get("spans", ()))
            suggestions.setdefault((external[s.item_id], f"run-{s.run_id}"), set()).add(
                (key[s.question_id], s.answer, tuple(sorted(s.distribution.items())), s.confidence, spans)
            )
        for read in session.scalars(select(ItemRead)):
            skipped[(external[read.item_id], f"run-{read.run_id}")] = read.diagnostics.get("skipped", {})
    return answers, suggestions, skipped


def test_the_export_reads_back_with_every_answer_suggestion_span_and_skip(db, tmp_path):
    assert export_project(db, "p", tmp_path / "out", "hf", reviewed_only=False) == 3
    bundle = read_diffjev_export(tmp_path / "out")
    assert bundle.schema == Schema.from_dict(SCHEMA)
    assert bundle.runs["run-1"].engine == "transformers" and bundle.runs["run-1"].model
    answers, suggestions, skipped = stored(db)
    records = {r.external_id: r for r in bundle.records}
    assert set(records) == {"t0", "t1", "t2"}
    for external_id, record in records.items():
        # every person's answer, with its status, source, seconds and why it was not asked
        people = record.answers
        assert {(a.question, a.annotator, a.value, a.status, a.source, a.seconds) for a in people} == {
            row[:6] for row in answers[external_id]
        }
        for a in people:
            if a.status == "not_asked":
                assert str({"skipped": a.skipped}) in {row[6] for row in answers[external_id] if row[1] == a.annotator}
        # the run's suggestions: answer, full distribution, confidence, spans with their confidences
        (run,) = record.predictions
        assert {
            (
                m.question,
                m.answer,
                tuple(sorted(m.distribution.items())),
                m.confidence,
                tuple((s.start, s.end, s.text, s.confidence) for s in m.spans or ()),
            )
            for m in record.predictions[run]
        } == suggestions[(external_id, run)]
        assert record.model_skipped.get(run, {}) == skipped[(external_id, run)]
    # the span answer's offsets, as spans of the text
    (ann_product,) = [a for a in records["t0"].answers if (a.question, a.annotator) == ("product", "ann")]
    assert (ann_product.value, [(s.start, s.end, s.text) for s in ann_product.spans]) == (
        f"{PRODUCT[0]}-{PRODUCT[1]}",
        [(*PRODUCT, "Acme Phone X")],
    )
    # the reviewer's settled answer comes back as an adjudication, with their comment; carol gave no answer
    # of her own, so none is made up for her
    assert records["t0"].adjudications == [Adjudication("team", "carol", "technical", "the site is down")]
    assert "carol" not in {a.annotator for r in records.values() for a in r.answers}
    assert all(not r.adjudications for r in records.values() if r.external_id != "t0")
    # the skipped item: ann's skip of every question she was asked comes back as skips
    t2 = records["t2"].answers
    assert {a.status for a in t2} == {"skipped"} and {"urgent", "team", "product"} <= {a.question for a in t2}


def test_the_model_skip_comes_back(db, tmp_path):
    export_project(db, "p", tmp_path / "out", "hf", reviewed_only=False)
    bundle = read_diffjev_export(tmp_path / "out")
    for record in bundle.records:
        urgent = {m.question: m.answer for m in record.predictions["run-1"]}["urgent"]
        skipped_question = "calm" if urgent == "yes" else "outage"
        assert record.model_skipped["run-1"] == {
            skipped_question: {"because": "urgent", "was": urgent, "wanted": ["no" if urgent == "yes" else "yes"]}
        }


def test_a_dataset_diffjev_did_not_write_is_refused_in_one_line(tmp_path):
    datasets.Dataset.from_dict({"text": ["a"], "label": ["x"]}).save_to_disk(str(tmp_path / "plain"))
    with pytest.raises(InterchangeError) as raised:
        read_diffjev_export(tmp_path / "plain")
    message = str(raised.value)
    assert message == "plain: was not written by `diffjev export --format hf`: it has no README.md dataset card"
    (tmp_path / "plain" / "README.md").write_text("---\npretty_name: x\n---\n# x\n")
    with pytest.raises(InterchangeError, match=r"^plain: README.md: field 'diffjev': was not written by"):
        read_diffjev_export(tmp_path / "plain")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InterchangeError, match=r"^empty: not a dataset folder written by"):
        read_diffjev_export(tmp_path / "empty")


def test_a_card_whose_schema_does_not_load_names_the_field(db, tmp_path):
    export_project(db, "p", tmp_path / "out", "hf")
    card = tmp_path / "out" / "README.md"
    card.write_text(card.read_text().replace("type: choice", "type: rainbow"))
    with pytest.raises(InterchangeError) as raised:
        read_diffjev_export(tmp_path / "out")
    assert str(raised.value).startswith("out: README.md: field 'diffjev.schema': the schema does not load:")
    assert "\n" not in str(raised.value)


def test_a_hub_name_fails_fast_without_the_hub(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InterchangeError) as raised:
        read_diffjev_export("someone/tickets")
    assert str(raised.value) == (
        "someone/tickets: it is not a local folder, and the Hub cannot be reached: HF_HUB_OFFLINE is set"
    )


def test_a_project_through_the_hub_export_into_a_new_project_keeps_everything_the_export_holds(tmp_path, dgemma_engine):
    """project -> hf export -> read back -> a new project: every annotator's answer (drafts with their spans,
    skips, questions not asked and why), the reviewer's adjudication and comment, and the run's suggestions
    and skips. The export holds one run per item, the latest that read it: older runs are not in it, so the
    source is compared as that run alone shows it."""
    source = full_project(tmp_path / "source.db", dgemma_engine)
    with source.session() as session:  # erin leaves a span answer as a draft
        item_id = session.scalar(select(Item.id).where(Item.external_id == "t2"))
        question_id = session.scalar(select(Question.id).where(Question.key == "parts"))
        start = TEXTS[1].index("Pro plan")
        repo.respond(
            session,
            repo.ResponseInput(item_id, question_id, "erin", f"{start}-{start + 8}", "manual", status="draft"),
        )
    export_project(source, "tickets", tmp_path / "out", "hf", reviewed_only=False)
    bundle = read_diffjev_export(tmp_path / "out")
    target = Database(tmp_path / "back.db")
    report = import_bundle(target, "back", bundle, "importer")
    assert (report.created, report.items, report.runs) == (True, 3, 1)
    latest = max(int(key.removeprefix("run-")) for key in project_bundle(source, "tickets").runs)
    expected = comparable(project_bundle(source, "tickets", run_id=latest))
    assert comparable(project_bundle(target, "back")) == expected
    # what the comparison rests on is there: the adjudication with its markup, erin's draft with its span
    assert expected["t1"]["adjudications"] == [
        ("team", "dave", "tech", "the hinge is hardware <b>not</b> billing", "None")
    ]
    assert (
        "erin",
        "parts",
        f"{start}-{start + 8}",
        "draft",
        "manual",
        f"[({start}, {start + 8}, 'Pro plan')]",
        "None",
    ) in (expected["t2"]["answers"])
