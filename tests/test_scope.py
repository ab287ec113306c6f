"""One studio, many projects: every request acts on the project its page's address names (`?project=`),
checked against the user's membership and role on that request, over Gradio's HTTP API as any client sends it."""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy import select

from storage import repo
from storage.models import Item, Response
from studio_fixtures import serve_studio, studio_db

USERS = [("alice", "a-secret"), ("bob", "b-secret")]


def run_event(http: httpx.Client, api_name: str, data: list, project: str | None, session_hash: str) -> httpx.Response:
    """An event as the studio's page sends it: the page's query string on the address, its session's hash."""
    query = {"project": project} if project else {}
    return http.post(
        f"/gradio_api/run/{api_name}", params=query, json={"data": data, "session_hash": session_hash}, timeout=60
    )


def answers_in(db, project: str) -> list[tuple[str, str]]:
    with db.read() as session:
        project_id = repo.get_project(session, project).id
        rows = session.execute(
            select(Item.text, Response.value)
            .join(Response, Response.item_id == Item.id)
            .where(Item.project_id == project_id, Response.status == "submitted")
        )
        return [(text, value) for text, value in rows]


@pytest.fixture
def two_projects(tmp_path, dgemma_engine):
    """One database with two projects, each with its own items and run."""
    path = tmp_path / "two.db"
    db = studio_db(path, ["ALPHA one", "ALPHA two"], dgemma_engine, name="alpha")
    studio_db(path, ["BETA one", "BETA two"], dgemma_engine, name="beta")
    return db


def test_two_pages_on_two_projects_answer_each_in_its_own(two_projects, dgemma_engine):
    db = two_projects
    server, _ = serve_studio(db, dgemma_engine, name="alpha")
    with server, httpx.Client(base_url=server.url) as http:
        pages = {name: uuid.uuid4().hex[:11] for name in ("alpha", "beta")}
        for name, page in pages.items():  # both started before either answers, as two open tabs
            started = run_event(http, "annotate_start", ["team", "Unlabeled, in order"], name, page)
            assert started.status_code == 200, started.text
            assert name.upper() in str(started.json()["data"]), started.json()
        for name, page in pages.items():
            accepted = run_event(http, "accept", [None], name, page)
            assert accepted.status_code == 200, accepted.text
        alpha, beta = answers_in(db, "alpha"), answers_in(db, "beta")
        assert len(alpha) == 1 and alpha[0][0].startswith("ALPHA"), alpha
        assert len(beta) == 1 and beta[0][0].startswith("BETA"), beta
        # a page's session started on alpha cannot answer once its address names beta
        refused = run_event(http, "accept", [None], "beta", pages["alpha"])
        assert refused.status_code != 200 or "another project" in refused.text, refused.text
        assert len(answers_in(db, "alpha")) == 1 and len(answers_in(db, "beta")) == 1


def test_a_user_reaches_only_the_projects_they_are_members_of(two_projects, dgemma_engine):
    db = two_projects
    with db.session() as session:
        repo.set_members(session, "alpha", ["alice"], "owner")
        repo.set_members(session, "beta", ["bob"], "owner")
    server, _ = serve_studio(db, dgemma_engine, name="alpha", auth=USERS)
    try:
        with server, httpx.Client(base_url=server.url, timeout=60) as bob:
            assert bob.post("/login", data={"username": "bob", "password": "b-secret"}).status_code == 200
            page = uuid.uuid4().hex[:11]
            # his own project, named or not (the default is the first he may open)
            for project in ("beta", None):
                own = run_event(bob, "items_browse", ["", "All", 1], project, page)
                assert own.status_code == 200 and "BETA" in own.text and "ALPHA" not in own.text, own.text
            # alice's project, through the address, and through the API's own routes
            for api in ("annotate_start", "items_browse"):
                data = ["team", "Unlabeled, in order"] if api == "annotate_start" else ["", "All", 1]
                refused = run_event(bob, api, data, "alpha", page)
                assert refused.status_code == 403 and "ALPHA" not in refused.text, refused.text
                assert "no project named 'alpha' that bob can open" in refused.text
            started = bob.post("/gradio_api/call/items_browse?project=alpha", json={"data": ["", "All", 1]})
            assert started.status_code == 403 and "ALPHA" not in started.text
            # a project that does not exist reads the same as one he may not open
            missing = run_event(bob, "items_browse", ["", "All", 1], "no-such-project", page)
            assert missing.status_code == 403 and "no project named 'no-such-project' that bob can open" in missing.text
            page_html = bob.get("/", params={"project": "alpha"})
            assert page_html.status_code == 403 and "ALPHA" not in page_html.text
            # removed from beta: refused at the next request, with no restart
            with db.session() as session:
                repo.set_members(session, "beta", ["carol"], "owner")
            gone = run_event(bob, "items_browse", ["", "All", 1], "beta", page)
            assert gone.status_code == 403 and "BETA" not in gone.text, gone.text
    finally:
        with db.session() as session:
            repo.set_members(session, "alpha", None, "owner")
            repo.set_members(session, "beta", None, "owner")


def test_annotators_only_answer_where_reviewers_are_named(two_projects, dgemma_engine):
    db = two_projects
    with db.session() as session:
        repo.set_reviewers(session, "alpha", ["alice"], "owner")
    server, _ = serve_studio(db, dgemma_engine, name="alpha", auth=USERS)
    try:
        with server, httpx.Client(base_url=server.url, timeout=60) as bob:
            assert bob.post("/login", data={"username": "bob", "password": "b-secret"}).status_code == 200
            page = uuid.uuid4().hex[:11]
            started = run_event(bob, "annotate_start", ["team", "Unlabeled, in order"], "alpha", page)
            assert started.status_code == 200 and "ALPHA" in started.text, started.text
            for api, data in (
                ("save_schema", ['{"questions": [{"id": "q", "type": "yes_no", "instructions": "?"}]}', ""]),
                ("review_change", ["t0", "team", "billing"]),
                ("export", ["jsonl", True, ""]),
                ("items_delete", [[], True, True, "", "All", 1]),
            ):
                refused = bob.post(f"/gradio_api/call/{api}?project=alpha", json={"data": data})
                answer = bob.get(f"/gradio_api/call/{api}/{refused.json()['event_id']}").text
                assert "event: error" in answer and "reviewers and admins of alpha" in answer, (api, answer)
            # beta names no reviewers: every member of it runs it, as before roles
            schema = '{"questions": [{"id": "q", "type": "yes_no", "instructions": "Is it?"}]}'
            kept = bob.post("/gradio_api/call/save_schema?project=beta", json={"data": [schema, ""]})
            answer = bob.get(f"/gradio_api/call/save_schema/{kept.json()['event_id']}").text
            assert "Saved as schema version" in answer, answer
    finally:
        with db.session() as session:
            repo.set_reviewers(session, "alpha", None, "owner")


def test_the_command_line_names_a_projects_reviewers(tmp_path):
    import json
    import subprocess
    import sys

    from conftest import TICKETS
    from storage.db import Database

    def diffjev(*args):
        return subprocess.run(
            [sys.executable, "-m", "diffjev.cli", *args, "--db", str(tmp_path / "cli.db")],
            capture_output=True,
            text=True,
            timeout=120,
        )

    (tmp_path / "schema.json").write_text(json.dumps(TICKETS))
    assert diffjev("init", "--project", "p", "--schema", str(tmp_path / "schema.json")).returncode == 0
    named = diffjev("reviewers", "--project", "p", "alice, bob")
    assert named.returncode == 0 and "reviewers alice, bob; other members answer only" in named.stdout, named
    db = Database(tmp_path / "cli.db")
    with db.read() as session:
        assert repo.project_access(session, "p", "carol", admin=False).role == "annotator"
        assert repo.project_access(session, "p", "bob", admin=False).role == "reviewer"
    refused = diffjev("reviewers", "--project", "p")
    assert refused.returncode != 0 and "user1,user2, or --none" in refused.stderr
    cleared = diffjev("reviewers", "--project", "p", "--none")
    assert cleared.returncode == 0 and "every member runs it" in cleared.stdout
    with db.read() as session:
        assert repo.project_access(session, "p", "carol", admin=False).role == "reviewer"


def call(http: httpx.Client, api: str, data: list, project: str) -> str:
    """An event through Gradio's call API, as any client sends it: its answer as text."""
    started = http.post(f"/gradio_api/call/{api}", params={"project": project}, json={"data": data})
    if started.status_code != 200:
        return f"refused {started.status_code} {started.text}"
    return http.get(f"/gradio_api/call/{api}/{started.json()['event_id']}").text


def test_a_member_removed_from_a_restricted_project_loses_its_reviewer_rights_too(two_projects, dgemma_engine):
    db = two_projects
    with db.session() as session:
        repo.set_members(session, "alpha", ["alice", "bob"], "owner")
        repo.set_reviewers(session, "alpha", ["alice", "bob"], "owner")
    server, _ = serve_studio(db, dgemma_engine, name="alpha", auth=USERS)
    with server, httpx.Client(base_url=server.url, timeout=60) as bob:
        assert bob.post("/login", data={"username": "bob", "password": "b-secret"}).status_code == 200
        assert "Exported" in call(bob, "export", ["jsonl", False, ""], "alpha")
        with db.session() as session:
            repo.set_members(session, "alpha", ["alice"], "owner")  # bob is still named a reviewer
        said = call(bob, "export", ["jsonl", False, ""], "alpha")
        assert "Exported" not in said and "no project named 'alpha' that bob can open" in said, said
        with db.session() as session, pytest.raises(repo.Conflict, match="bob not among its members"):
            repo.set_reviewers(session, "alpha", ["alice", "bob"], "owner")


def test_an_archived_project_is_closed_to_its_members_where_it_names_no_reviewers(two_projects, dgemma_engine):
    from datetime import datetime, timezone

    db = two_projects
    with db.session() as session:
        repo.get_project(session, "alpha").archived_at = datetime.now(timezone.utc)
    with db.read() as session:
        assert repo.project_access(session, "alpha", "bob", admin=False) is None
        assert repo.project_access(session, "alpha", "alice", admin=True).role == "admin"
        assert repo.openable_projects(session, "bob", admin=False) == ["beta"]


def test_clearing_the_reviewers_says_that_every_member_now_runs_the_project(two_projects, dgemma_engine):
    db = two_projects
    server, _ = serve_studio(db, dgemma_engine, name="alpha")
    with server, httpx.Client(base_url=server.url, timeout=60) as http:
        said = call(http, "set_roles", ["", ""], "alpha")
        assert "every member runs this project" in said, said
        said = call(http, "set_roles", ["", "alice"], "alpha")
        assert "reviewers: alice; the other members answer only" in said, said


def test_a_card_of_a_deleted_project_never_answers_into_one_made_again_under_its_name(tmp_path, dgemma_engine):
    from diffjev.services import projects

    db = studio_db(tmp_path / "again.db", ["OLD item"], dgemma_engine, name="tmpdel")
    studio_db(tmp_path / "again.db", ["keeps the studio open"], name="other")
    server, _ = serve_studio(db, dgemma_engine, name="other")
    with server, httpx.Client(base_url=server.url, timeout=60) as http:
        page, item_page = uuid.uuid4().hex[:11], uuid.uuid4().hex[:11]
        started = run_event(http, "annotate_start", ["team", "Unlabeled, in order"], "tmpdel", page)
        assert "OLD item" in started.text, started.text
        item = run_event(http, "item_start", ["Unlabeled, in order"], "tmpdel", item_page)
        assert "OLD item" in item.text, item.text
        projects.delete_project(db, "tmpdel", "tmpdel", "owner")
        studio_db(tmp_path / "again.db", ["NEW item"], dgemma_engine, name="tmpdel")  # the same ids, on SQLite
        for api, session_of, data in (("accept", page, [None]), ("item_accept", item_page, [None, "{}"])):
            refused = run_event(http, api, data, "tmpdel", session_of)
            assert refused.status_code != 200 and "press Start" in refused.text, (api, refused.text)
        assert answers_in(db, "tmpdel") == []


def test_an_annotator_page_never_opens_a_tab_it_leaves_out(two_projects, dgemma_engine):
    db = two_projects
    with db.session() as session:
        repo.set_reviewers(session, "alpha", ["alice"], "owner")
    server, studio = serve_studio(db, dgemma_engine, name="alpha", auth=USERS)
    from diffjev.ui.projects import opening_tab

    class Request:  # what the page's load sends: its address's query, its signed-in user
        def __init__(self, user, tab):
            self.username, self.query_params = user, {"project": "alpha", "tab": tab}

    opened = opening_tab(studio)
    assert opened(Request("bob", "export")).selected is None
    assert opened(Request("bob", "items")).selected == "items"
    assert opened(Request("alice", "export")).selected == "export"


def test_choices_and_assignments_nested_past_the_parser_get_a_message(two_projects, dgemma_engine):
    from diffjev.services import projects

    db = two_projects
    deep = "[" * 200_000
    with pytest.raises(projects.ProjectInputError, match="assignments: nested too deeply"):
        projects.set_assignments(db, "alpha", deep, "owner")
    server, _ = serve_studio(db, dgemma_engine, name="alpha")
    with server, httpx.Client(base_url=server.url, timeout=60) as http:
        page = uuid.uuid4().hex[:11]
        assert run_event(http, "item_start", ["Unlabeled, in order"], "alpha", page).status_code == 200
        refused = run_event(http, "item_accept", [None, deep], "alpha", page)
        assert "not a JSON object of question id to answer" in refused.text, refused.text[:300]
    assert answers_in(db, "alpha") == []


def test_an_admin_signs_in_with_no_project_left_and_makes_one(tmp_path, dgemma_engine):
    from diffjev.services import projects

    db = studio_db(tmp_path / "none.db", ["only item"], name="only")
    projects.delete_project(db, "only", "only", "owner")
    server, _ = serve_studio(db, dgemma_engine, name="only", auth=USERS, admins=frozenset({"alice"}))
    with server, httpx.Client(base_url=server.url, timeout=60) as alice, httpx.Client(base_url=server.url) as bob:
        assert alice.post("/login", data={"username": "alice", "password": "a-secret"}).status_code == 200
        refused = bob.post("/login", data={"username": "bob", "password": "b-secret"})
        assert refused.status_code == 403 and "bob is not a member of any project" in refused.text
        schema = '{"questions": [{"id": "q", "type": "yes_no", "instructions": "Is it?"}]}'
        form = {"headers": ["id", "type", "instructions", "options or levels"], "data": [["", "yes_no", "", ""]]}
        made = call(alice, "create_project", ["fresh", "text", "JSON", "", form, schema, ""], "")
        assert "Created" in made and "fresh" in made, made
    with db.read() as session:
        assert repo.openable_projects(session, "alice", admin=True) == ["fresh"]
