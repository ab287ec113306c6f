"""A whole project moved out and in through diffjev's own Bundle: every annotator's answer (with its status,
source, spans and skip record), every run's distributions and skips, in one transaction per file; a file
that does not fit is refused whole, naming the record and the field."""

import dataclasses
import shutil

import pytest
from sqlalchemy import Integer, func, select

from diffjev.formats.bundle import HumanAnswer, InterchangeError, ModelAnswer, SpanMark
from diffjev.services.interchange import import_bundle, project_bundle
from interchange_fixtures import TEXTS, comparable, full_project
from storage import repo
from storage.db import Database
from storage.models import Event, Item, Response, Run, Suggestion


@pytest.fixture(scope="module")
def built(tmp_path_factory, dgemma_engine):
    """The source project, built once (a pre-label run and two annotators: 15 s on this machine)."""
    path = tmp_path_factory.mktemp("interchange-store") / "source.db"
    full_project(path, dgemma_engine).dispose()  # the last connection closed: its WAL is in the file
    return path


@pytest.fixture
def source(built, tmp_path):
    """A copy of the source project for each test: some tests import into it."""
    shutil.copyfile(built, tmp_path / "source.db")
    return Database(tmp_path / "source.db")


def counts(db):
    with db.read() as session:
        return tuple(session.scalar(select(func.count()).select_from(t)) for t in (Item, Response, Suggestion, Run))


def test_a_project_read_out_holds_every_answer_run_span_and_skip(source):
    bundle = project_bundle(source, "tickets")
    assert [r.external_id for r in bundle.records] == ["t1", "t2", "t3"]
    first = bundle.records[0]
    assert first.fields == {"channel": "mail"}
    by = {(a.annotator, a.question): a for a in first.answers}
    assert by["alice", "urgent"].value == "yes" and by["bob", "urgent"].value == "no"
    assert by["alice", "calm"].status == "not_asked" and by["alice", "calm"].skipped["because"] == "urgent"
    assert [(s.start, s.end, s.text) for s in by["alice", "parts"].spans] == [
        (TEXTS[0].index("screen"), TEXTS[0].index("screen") + 6, "screen"),
        (TEXTS[0].index("hinge"), TEXTS[0].index("hinge") + 5, "hinge"),
    ]
    assert {a.status for a in bundle.records[2].answers if a.annotator == "carol"} == {"skipped"}
    (run,) = bundle.runs
    predicted = {m.question: m for m in first.predictions[run]}
    assert abs(sum(predicted["team"].distribution.values()) - 1) < 1e-6
    assert predicted["product"].distribution == {} and predicted["product"].spans is not None
    assert first.model_skipped[run]  # the tiny model answered urgent one way: one of outage/calm was not read


def test_a_bundle_stored_in_a_new_project_reads_back_the_same(source, tmp_path):
    bundle = project_bundle(source, "tickets")
    target = Database(tmp_path / "target.db")
    report = import_bundle(target, "moved", bundle, "importer")
    assert (report.created, report.items, report.duplicates, report.runs) == (True, 3, 0, 1)
    assert comparable(project_bundle(target, "moved")) == comparable(bundle)
    again = import_bundle(target, "moved", bundle, "importer")  # the same file twice adds nothing
    assert (again.created, again.items, again.duplicates) == (False, 0, 3)
    assert counts(target) == counts(target) and comparable(project_bundle(target, "moved")) == comparable(bundle)
    with target.read() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 1


def test_one_bad_record_in_the_middle_stores_nothing_and_names_it(source, tmp_path):
    bundle = project_bundle(source, "tickets")
    bundle.source = "export.json"
    bad = bundle.records[1]
    bad.where = "task 2"
    bad.answers.append(HumanAnswer("team", "dave", "legal"))
    target = Database(tmp_path / "target.db")
    with pytest.raises(InterchangeError) as refused:
        import_bundle(target, "moved", bundle, "importer")
    message = str(refused.value)
    assert message.startswith("export.json: task 2: field 'team':") and "'legal'" in message and "billing" in message
    assert "\n" not in message
    with target.read() as session:
        assert session.scalar(select(func.count()).select_from(Item)) == 0
        assert session.scalar(select(func.count()).select_from(Response)) == 0


@pytest.mark.parametrize(
    "spoil, field, said",
    [
        (
            lambda r: r.answers.append(HumanAnswer("parts", "dave", None, spans=(SpanMark(0, 3, "xyz"),))),
            "parts",
            "is not that text",
        ),
        (lambda r: r.answers.append(HumanAnswer("nope", "dave", "yes")), "nope", "no such question"),
        (
            lambda r: r.predictions.setdefault("m", []).append(
                ModelAnswer("team", "tech", {"tech": 0.5, "hr": 0.5}, 0.5)
            ),
            "team",
            "'hr'",
        ),
        (
            lambda r: r.predictions.setdefault("m", []).append(ModelAnswer("urgent", "yes", {"yes": 1.0}, 1.7)),
            "urgent",
            "confidence",
        ),
        (lambda r: setattr(r, "text", "  "), "text", "no text"),
    ],
)
def test_each_kind_of_bad_record_is_one_line_naming_the_field(source, tmp_path, spoil, field, said):
    bundle = project_bundle(source, "tickets")
    bundle.source = "f.json"
    spoil(bundle.records[2])
    with pytest.raises(InterchangeError) as refused:
        import_bundle(Database(tmp_path / "t.db"), "moved", bundle, "importer")
    assert refused.value.field == field and said in str(refused.value) and "\n" not in str(refused.value)


def test_an_existing_project_takes_a_file_only_with_its_own_questions(source, tmp_path):
    bundle = project_bundle(source, "tickets")
    target = Database(tmp_path / "target.db")
    import_bundle(target, "moved", bundle, "importer")
    changed = dataclasses.replace(bundle.schema.questions[3], alternatives=bundle.schema.questions[3].alternatives[:2])
    bundle.schema = dataclasses.replace(
        bundle.schema, questions=(*bundle.schema.questions[:3], changed, *bundle.schema.questions[4:])
    )
    with pytest.raises(InterchangeError, match="field 'team': project 'moved' asks it as a choice question"):
        import_bundle(target, "moved", bundle, "importer")


def test_a_record_whose_id_is_an_item_with_another_text_is_refused_naming_it(source, tmp_path):
    """Answers (and span offsets) belong to the text they were given on: a task id that names a stored item
    of another text must not hang its answers on that item."""
    bundle = project_bundle(source, "tickets")
    bundle.source = "second.json"
    bundle.records[0].text = "Completely different text from Zed"
    bundle.records[0].where = "task 1"
    bundle.records[0].answers = [
        HumanAnswer("parts", "zoe", None, spans=(SpanMark(31, 34, "Zed"),)),
    ]
    bundle.records[0].predictions = {}
    bundle.records[0].adjudications = []
    before = counts(source)
    with pytest.raises(InterchangeError) as refused:
        import_bundle(source, "tickets", bundle, "importer")
    message = str(refused.value)
    assert message.startswith("second.json: task 1:") and "'t1'" in message and "another text" in message, message
    assert counts(source) == before


def test_importing_what_the_project_already_holds_adds_and_rewrites_nothing(source, tmp_path):
    """Exported and imported back into the project it came from, or the same file from another path: no run,
    suggestion, answer or revision is added."""
    bundle = project_bundle(source, "tickets")
    before = counts(source)
    with source.read() as session:
        revisions = sorted(session.scalars(select(Response.revision)))
    for name in ("export.json", "../elsewhere/export.json"):
        bundle.source = name
        report = import_bundle(source, "tickets", bundle, "importer")
        assert (report.items, report.answers, report.suggestions) == (0, 0, 0), report.summary()
    assert counts(source) == before
    with source.read() as session:
        assert sorted(session.scalars(select(Response.revision))) == revisions


def test_the_same_model_run_from_two_paths_is_one_run(source, tmp_path):
    bundle = project_bundle(source, "tickets")
    target = Database(tmp_path / "target.db")
    for name in ("x/export.json", "/abs/x/export.json"):
        bundle.source = name
        import_bundle(target, "moved", bundle, "importer")
    with target.read() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 1


@pytest.mark.parametrize(
    "spoil, field, said",
    [
        (lambda r: setattr(r, "text", "x" * 100_001), "text", "over the limit"),
        (lambda r: setattr(r, "text", "a\x00b"), "text", "NUL"),
        (lambda r: setattr(r, "text", "a\ud800b"), "text", "surrogate"),
        (lambda r: setattr(r, "external_id", "i" * 501), "id", "over the limit"),
        (lambda r: setattr(r, "external_id", "a\x00"), "id", "NUL"),
        (lambda r: r.answers.append(HumanAnswer("urgent", "z" * 201, "yes")), "urgent", "200 characters"),
        (lambda r: r.answers.append(HumanAnswer("urgent", "bad\nname", "yes")), "urgent", "control character"),
        (lambda r: r.answers.append(HumanAnswer("urgent", "nul\x00", "yes")), "urgent", "control character"),
        (lambda r: r.answers.append(HumanAnswer("urgent", "ok", "yes", seconds=-3.0)), "urgent", "seconds"),
    ],
)
def test_items_and_people_meet_the_checks_a_plain_import_makes(source, tmp_path, spoil, field, said):
    bundle = project_bundle(source, "tickets")
    bundle.source = "f.json"
    spoil(bundle.records[1])
    target = Database(tmp_path / "t.db")
    with pytest.raises(InterchangeError) as refused:
        import_bundle(target, "moved", bundle, "importer")
    assert refused.value.field == field and said in str(refused.value) and "\n" not in str(refused.value), str(
        refused.value
    )


def test_an_answer_given_beside_a_prediction_in_the_file_is_not_a_blind_one(source, tmp_path):
    """Label Studio and Argilla show their predictions to the annotator: an imported answer to a question the
    file predicted must stay out of calibration's blind slice; one with no prediction beside it may be in it."""
    bundle = project_bundle(source, "tickets")
    first, second = bundle.records[0], bundle.records[1]
    second.predictions = {}
    second.model_skipped = {}
    target = Database(tmp_path / "target.db")
    import_bundle(target, "moved", bundle, "importer")
    with target.read() as session:
        shown = dict(
            session.execute(
                select(Item.external_id, func.max(Response.suggestion_shown.cast(Integer)))
                .join(Item, Item.id == Response.item_id)
                .where(Response.status == "submitted")
                .group_by(Item.external_id)
            ).all()
        )
    assert first.predictions and shown["t1"] == 1
    assert shown["t2"] == 0


@pytest.mark.parametrize("same_text", [False, True])
def test_one_id_twice_in_a_file_is_refused_naming_both_records(source, tmp_path, same_text):
    """Two records under one id would put both records' answers (and spans, given on different texts) on
    one item, or meet twice in one run's reads: the file is refused whole."""
    bundle = project_bundle(source, "tickets")
    bundle.source = "dup.json"
    bundle.records[0].where, bundle.records[1].where = "task 101", "task 102"
    bundle.records[1].external_id = bundle.records[0].external_id
    if same_text:
        bundle.records[1].text = bundle.records[0].text
    target = Database(tmp_path / "t.db")
    with pytest.raises(InterchangeError) as refused:
        import_bundle(target, "moved", bundle, "importer")
    message = str(refused.value)
    assert message.startswith("dup.json: task 102: field 'id':") and "task 101" in message, message
    with target.read() as session:
        assert session.scalar(select(func.count()).select_from(Item)) == 0


def test_a_project_made_from_a_file_is_refused_where_the_name_was_taken_meanwhile(source, tmp_path):
    """The studio makes a new project from a file: checked in the import's own transaction, a name taken
    while the file was read is refused, never added to."""
    bundle = project_bundle(source, "tickets")
    with pytest.raises(repo.Conflict, match="already exists"):
        import_bundle(source, "tickets", bundle, "importer", new_project=True)


def test_a_tool_made_export_imports_the_same_on_sqlite_and_postgresql(db_url):
    """The answers of a new project are stored together (one insert with its events); the same SQL must hold
    on PostgreSQL."""
    from diffjev.services.interchange import import_file
    from interchange_fixtures import DATA

    live = DATA / "labelstudio" / "live"
    db = Database(db_url)
    report = import_file(db, "live", "labelstudio", live / "ls_export.json", "importer", live / "label_config.xml")
    assert report.created and report.items == 5 and report.answers > 0
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(Response)) == report.answers
        events = session.scalar(select(func.count()).select_from(Event).where(Event.kind.like("response.%")))
        assert events == report.answers  # one event per answer, as the studio logs them
    again = import_file(db, "live", "labelstudio", live / "ls_export.json", "importer", live / "label_config.xml")
    assert (again.items, again.answers, again.suggestions) == (0, 0, 0)
