"""Many projects, at the service: the list a user may open with its counts, a new project from the form or
JSON (bad input named), archive, delete with the name typed back and an audit event that outlives the
project, and assignments that narrow an annotator's queues, on SQLite and PostgreSQL."""

import json

import pandas as pd
import pytest
from sqlalchemy import func, select

from diffjev import Schema
from diffjev.services import annotation, projects
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database
from storage.models import Event, Item, Project, Question, Response, Run, Suggestion
from conftest import TICKETS


def make_project(db, name, n_items, members=None):
    with db.session() as session:
        repo.create_project(session, name, Schema.from_dict({**TICKETS, "samples": 1}), "owner")
        if members is not None:
            repo.set_members(session, name, members, "owner")
    if n_items:
        import_items(db, name, pd.DataFrame({"text": [f"{name} ticket {i}" for i in range(n_items)]}))


@pytest.fixture
def db(tmp_path):
    return Database(tmp_path / "projects.db")


def test_the_list_holds_the_projects_a_user_may_open_with_their_counts(db):
    make_project(db, "alpha", 4)
    make_project(db, "beta", 2, members=["carol"])
    make_project(db, "gamma", 0)
    card = annotation.next_card(db, "alpha", "urgent", "in_order", "bob")
    annotation.answer(db, card, "bob", "yes", seconds=1.0)

    listed = {p.name: p for p in projects.project_list(db, "bob", admin=False)}
    assert sorted(listed) == ["alpha", "gamma"]  # beta names its members, bob is not one
    assert (listed["alpha"].items, listed["alpha"].answered, listed["alpha"].answered_share) == (4, 1, 0.25)
    assert (listed["gamma"].items, listed["gamma"].answered_share) == (0, 0.0)
    assert listed["alpha"].last_activity >= listed["gamma"].last_activity
    assert "4 items · 25% answered" in listed["alpha"].label()
    assert [p.name for p in projects.project_list(db, "carol", admin=False)] == ["alpha", "beta", "gamma"]
    assert [p.name for p in projects.project_list(db, "root", admin=True)] == ["alpha", "beta", "gamma"]


def test_archived_projects_leave_the_list_unless_an_admin_asks(db):
    make_project(db, "alpha", 1)
    make_project(db, "old", 1)
    projects.set_archived(db, "old", True, "root")
    assert [p.name for p in projects.project_list(db, "bob", admin=False, include_archived=True)] == ["alpha"]
    assert [p.name for p in projects.project_list(db, "root", admin=True)] == ["alpha"]
    shown = projects.project_list(db, "root", admin=True, include_archived=True)
    assert [(p.name, p.archived) for p in shown] == [("alpha", False), ("old", True)]
    projects.set_archived(db, "old", False, "root")
    assert [p.name for p in projects.project_list(db, "bob", admin=False)] == ["alpha", "old"]
    with db.read() as session:
        kinds = session.scalars(select(Event.kind).where(Event.kind.like("project.%archived"))).all()
    assert kinds == ["project.archived", "project.unarchived"]


def test_a_project_from_the_form(db):
    rows = [
        ["urgent", "yes_no", "Reply within the hour?", ""],
        ["", "", "", ""],  # an empty row of the form is no question
        ["team", "choice", "Which team?", "billing\ntechnical: bugs, outages; account"],
        ["tone", "score", "How upset?", "calm\nannoyed\nfurious"],
    ]
    schema = projects.schema_from_form("Support tickets.", rows)
    name = projects.create_project(db, " new one ", schema, "root")
    assert name == "new one"
    with db.read() as session:
        stored, _ = repo.version_schema(repo.latest_version(session, repo.get_project(session, name).id))
    assert [q.id for q in stored.questions] == ["urgent", "team", "tone"]
    assert list(stored.question("team").names) == ["billing", "technical", "account"]
    assert stored.to_dict()["questions"][1]["options"][1] == {"name": "technical", "description": "bugs, outages"}
    assert list(stored.question("tone").names) == ["calm", "annoyed", "furious"]
    assert stored.instructions == "Support tickets."


@pytest.mark.parametrize(
    "rows, message",
    [
        ([["urgent", "yes-no", "Reply?", ""]], "question row 1, type: 'yes-no'; choose one of yes_no, choice, score"),
        ([["u", "yes_no", "?", ""], ["team", "choice", "Which?", ""]], "question row 2, options or levels: a choice"),
        ([["urgent", "yes_no", "Reply?", "a\nb"]], "question row 1, options or levels: a yes_no question has none"),
        ([["", "", "", ""]], "questions: add at least one question"),
        ([["", "yes_no", "Reply?", ""]], "question row 1, id: give the question an id"),
    ],
)
def test_bad_form_input_names_the_row_and_field(rows, message):
    with pytest.raises(projects.ProjectInputError) as caught:
        projects.schema_from_form("", rows)
    assert str(caught.value).startswith(message)


def test_a_project_from_json_and_bad_json_named(db):
    schema = projects.schema_from_json(json.dumps(TICKETS), template="Urgent: {urgent}\nTeam: {team}\nTone: {tone}")
    projects.create_project(db, "from-json", schema, "root")
    with pytest.raises(projects.ProjectInputError, match=r"^schema JSON: not valid JSON"):
        projects.schema_from_json("{questions: [")
    with pytest.raises(projects.ProjectInputError, match=r"^questions: .*at least one question"):
        projects.schema_from_json('{"questions": []}')
    with pytest.raises(projects.ProjectInputError, match=r"^name: a project named 'from-json' already exists"):
        projects.create_project(db, "from-json", schema, "root")
    with pytest.raises(projects.ProjectInputError, match=r"^name: project name '\.\./x'"):
        projects.create_project(db, "../x", schema, "root")
    with pytest.raises(projects.ProjectInputError, match=r"^name: give the project a name"):
        projects.create_project(db, "  ", schema, "root")


def counts_of(session, project_id):
    return {
        "items": session.scalar(select(func.count()).select_from(Item).where(Item.project_id == project_id)),
        "questions": session.scalar(
            select(func.count()).select_from(Question).where(Question.project_id == project_id)
        ),
        "runs": session.scalar(select(func.count()).select_from(Run).where(Run.project_id == project_id)),
        "events": session.scalar(select(func.count()).select_from(Event).where(Event.project_id == project_id)),
    }


def test_delete_takes_the_typed_name_removes_everything_and_the_event_outlives_it(db_url, dgemma_engine):
    db = Database(db_url)
    make_project(db, "doomed", 3)
    make_project(db, "kept", 2)
    prelabel(db, "doomed", dgemma_engine)
    card = annotation.next_card(db, "doomed", "urgent", "least_confidence", "bob")
    annotation.answer(db, card, "bob", "no", seconds=1.0)
    annotation.next_card(db, "doomed", "team", "in_order", "bob")  # a lease held
    with db.read() as session:
        doomed_id = repo.get_project(session, "doomed").id
        kept_id = repo.get_project(session, "kept").id
        kept_before = counts_of(session, kept_id)

    with pytest.raises(projects.ProjectInputError, match="type the project's name, doomed, to delete it"):
        projects.delete_project(db, "doomed", "Doomed", "root")
    assert [p.name for p in projects.project_list(db, "root", True)] == ["doomed", "kept"]

    removed = projects.delete_project(db, "doomed", "doomed", "root")
    assert removed == {"items": 3, "responses": 1, "runs": 1}
    with db.read() as session:
        assert session.scalar(select(Project.id).where(Project.name == "doomed")) is None
        assert counts_of(session, doomed_id) == {"items": 0, "questions": 0, "runs": 0, "events": 0}
        assert session.scalar(select(func.count()).select_from(Suggestion)) == 0  # kept has no run
        assert session.scalar(select(func.count()).select_from(Response)) == 0
        assert counts_of(session, kept_id) == kept_before
        event = session.scalars(select(Event).where(Event.kind == "project.deleted")).one()
    assert (event.actor, event.project_id) == ("root", None)
    assert event.payload == {"project": "doomed", "deleted_id": doomed_id, **removed}
    assert [p.name for p in projects.project_list(db, "root", True)] == ["kept"]


def test_assignments_narrow_the_queues_of_the_annotators_named(db_url, dgemma_engine):
    db = Database(db_url)
    make_project(db, "p", 12)
    with db.read() as session:
        item_ids = list(session.scalars(select(Item.id).order_by(Item.id)))
    projects.set_assignments(
        db,
        "p",
        json.dumps(
            [
                {"annotator": "bob", "questions": ["urgent"], "share": [0, 50]},
                {"annotator": "cat", "questions": None, "share": [50, 100]},
            ]
        ),
        "root",
    )

    def queue(question, annotator, strategy="in_order"):
        seen = []
        while (card := annotation.next_card(db, "p", question, strategy, annotator)) is not None:
            seen.append(card.item_id)
            annotation.answer(db, card, annotator, None, seconds=None, status="skipped")
        return seen

    low = [i for i in item_ids if i % 100 < 50]
    high = [i for i in item_ids if i % 100 >= 50]
    assert queue("urgent", "bob") == low  # with no run yet: unlabeled items in order
    assert queue("team", "bob") == []  # bob was given urgent only
    assert "team is not assigned to you" in annotation.empty_queue_reason(db, "p", "team", "in_order", "bob")
    assert queue("team", "dan") == item_ids  # no assignments of his: everything, as before
    prelabel(db, "p", dgemma_engine)
    assert sorted(queue("tone", "cat", "least_confidence")) == high  # the model's queues too


def test_bad_assignments_are_named_and_nothing_is_stored(db):
    make_project(db, "p", 1)
    cases = {
        '{"annotator": "bob"}': "assignments: give a JSON list",
        '[{"annotator": ""}]': "assignment #1: 'annotator' must name a user",
        '[{"annotator": "bob", "questions": ["nope"]}]': "assignment #1: no question 'nope' in this project",
        '[{"annotator": "b"}, {"annotator": "bob", "share": [50, 10]}]': "assignment #2: 'share' must be [from, to]",
        '[{"annotator": "bob", "shares": [0, 10]}]': "assignment #1: unknown field 'shares'",
        "[{annotator": "assignments: not valid JSON",
    }
    for text, message in cases.items():
        with pytest.raises(projects.ProjectInputError) as caught:
            projects.set_assignments(db, "p", text, "root")
        assert str(caught.value).startswith(message), text
    assert projects.roles_of(db, "p")[2] is None
    assert projects.set_assignments(db, "p", "[]", "root") is None  # an empty list: no assignments


def test_roles_set_members_and_reviewers_and_the_list_follows(db):
    make_project(db, "p", 1)
    # a restricted project's reviewers are among its members: removing a member removes a reviewer too
    with pytest.raises(repo.Conflict, match="dave not among its members"):
        projects.set_roles(db, "p", "bob, carol\ncarol", "dave", "root")
    assert projects.roles_of(db, "p")[:2] == (None, None)  # nothing of the refused change was stored
    assert projects.set_roles(db, "p", "bob, carol\ncarol, dave", "dave", "root") == (
        ["bob", "carol", "dave"],
        ["dave"],
    )
    assert projects.roles_of(db, "p")[:2] == (["bob", "carol", "dave"], ["dave"])
    assert [p.name for p in projects.project_list(db, "dave", admin=False)] == ["p"]  # a reviewer opens it
    assert projects.project_list(db, "erin", admin=False) == []
    assert projects.set_roles(db, "p", "", "", "root") == (None, [])  # open to everyone, no reviewers
    assert [p.name for p in projects.project_list(db, "erin", admin=False)] == ["p"]


def test_a_new_project_reads_its_text_from_the_column_named(db):
    schema = projects.schema_from_form("", [["urgent", "yes_no", "Reply within the hour?", ""]])
    projects.create_project(db, "bodies", schema, "root", text_field=" body ")
    with db.read() as session:
        assert repo.get_project(session, "bodies").text_field == "body"
    with pytest.raises(projects.ProjectInputError, match="text column: name the column"):
        projects.create_project(db, "no-text", schema, "root", text_field="  ")


def test_the_forms_rows_go_to_the_json_editor_and_an_empty_form_gives_an_example():
    import json

    from diffjev.services.projects import EXAMPLE_SCHEMA, form_as_json, schema_from_json

    rows = [
        ["urgent", "yes_no", "Reply within the hour?", ""],
        ["team", "choice", "Which team?", "billing; technical: bugs"],
    ]
    text = form_as_json(rows)
    schema = schema_from_json(text)  # what the editor holds is a schema the editor takes
    assert [q.id for q in schema.questions] == ["urgent", "team"]
    assert schema.question("team").names == ("billing", "technical")
    assert json.loads(form_as_json([["", "yes_no", "", ""]])) == EXAMPLE_SCHEMA
    assert json.loads(form_as_json([["", "maybe", "", ""]])) == EXAMPLE_SCHEMA  # a row that does not read
    assert [q.id for q in schema_from_json(json.dumps(EXAMPLE_SCHEMA)).questions] == ["urgent", "team"]
