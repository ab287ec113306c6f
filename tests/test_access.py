"""Access: with logins on, no route answers without one; projects restricted to named users; paths that
cannot leave their folder; uploads with a size limit; secrets that never reach a log, an export or a page."""

import html
import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import gradio
import httpx
import pandas as pd
import pytest
from gradio_client import Client, handle_file
from sqlalchemy import func, select, text

from diffjev import Schema

from diffjev.io import HubDataset, SourceError
from diffjev.services.importing import dataset_source, import_items
from storage import repo
from storage.db import Database
from storage.models import Event, Item, Response, Run
from conftest import SERVED_NAME, TICKETS, free_port
from studio_fixtures import serve_studio, studio_db

USERS = [("alice", "a-secret"), ("bob", "b-secret")]
MARK = "SECRET-ITEM-TEXT"
PROJECT = "vault-7"


@pytest.fixture(scope="module")
def studio(tmp_path_factory, dgemma_engine):
    folder = tmp_path_factory.mktemp("access")
    db = studio_db(
        folder / "access.db", [f"{MARK} {i}: the export is broken" for i in range(4)], dgemma_engine, name=PROJECT
    )
    server, context = serve_studio(db, dgemma_engine, name=PROJECT, auth=USERS)
    (context.export_dir / "labels.jsonl").write_text(f'{{"text": "{MARK}"}}\n')
    with server:
        yield server, context


def logged_in(server, user) -> httpx.Client:
    http = httpx.Client(base_url=server.url, timeout=30)
    response = http.post("/login", data={"username": user[0], "password": user[1]})
    assert response.status_code == 200, response.text
    return http


def routes(routes_, prefix=""):
    """Every (method, path) the studio's server answers: its own routes, the mounted Gradio app's, and
    the routers each includes."""
    for route in routes_:
        if hasattr(route, "original_router"):  # an included router (the Jev API, Gradio's API)
            context = getattr(route, "include_context", None)
            yield from routes(route.original_router.routes, prefix + (getattr(context, "prefix", "") or ""))
        elif route.__class__.__name__ == "Mount":
            yield from routes(route.routes, prefix + route.path)
        elif getattr(route, "methods", None):
            yield sorted(route.methods)[0], prefix + route.path


# What a browser needs before it has logged in: the login page (also served at /gradio_api/runs), its
# assets, the login itself, and Gradio's answers to "who is logged in" (null), "which token" (none) and
# "which app" (a number). None of them holds an item, a project or a setting; the sweep checks that.
OPEN = (
    "/",
    "/login",
    "/login/",
    "/logout",
    "/favicon.ico",
    "/theme.css",
    "/robots.txt",
    "/manifest.json",
    "/gradio_api/startup-events",
    "/gradio_api/theme.css",
    "/gradio_api/runs",
    "/gradio_api/runs/",
)
OPEN_PREFIXES = (
    "/svelte/",
    "/static/",
    "/assets/",
    "/pwa_icon",
    "/gradio_api/heartbeat/",
    "/gradio_api/user",
    "/gradio_api/token",
    "/gradio_api/app_id",
)
REFUSED = (401, 403, 404, 405, 422)  # 422: a request refused for its shape, before anything is read


def test_every_route_needs_a_login(studio):
    server, context = studio
    export = context.export_dir / "labels.jsonl"
    named = [
        ("GET", "/config"),
        ("GET", "/gradio_api/info"),
        ("POST", "/gradio_api/call/annotate_start"),
        ("POST", "/gradio_api/call/export"),
        ("POST", "/gradio_api/queue/join"),
        ("POST", "/gradio_api/upload"),
        ("POST", "/gradio_api/run/accept"),
        ("GET", f"/gradio_api/file={export}"),
        ("POST", "/v1/systemone"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
    ]
    found = list(routes(server.server.config.app.routes))
    assert len(found) > 40 and ("POST", "/v1/systemone") in found
    checked, answered = 0, []
    for method, path in named + found:
        url = path.replace("{path_or_url:path}", str(export)).replace("{", "").replace("}", "")
        try:
            response = httpx.request(
                method, server.url + url, timeout=3, json={"data": []} if method == "POST" else None
            )
        except httpx.ReadTimeout:  # an event stream that stays open: it sent nothing
            assert path.startswith(OPEN_PREFIXES), path
            continue
        checked += 1
        assert MARK not in response.text and PROJECT not in response.text, f"{method} {path} leaked"
        if path in OPEN or path.startswith(OPEN_PREFIXES):
            continue
        if response.status_code not in REFUSED:
            answered.append(f"{method} {path}: {response.status_code}")
    assert answered == [], "answered without a login: " + "; ".join(answered)
    assert checked > 40
    # and with a login, the same routes do answer
    alice = logged_in(server, USERS[0])
    assert alice.get("/config").status_code == 200 and alice.get("/gradio_api/info").status_code == 200


def test_a_non_member_cannot_open_a_restricted_project(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "members.db", [f"{MARK}: charged twice"], dgemma_engine, name="payroll")
    with db.session() as session:
        repo.set_members(session, "payroll", ["bob"], "owner")
    server, _ = serve_studio(db, dgemma_engine, name="payroll", auth=USERS)
    with server:
        refused = httpx.post(f"{server.url}/login", data={"username": "alice", "password": "a-secret"}, timeout=30)
        assert refused.status_code == 403 and MARK not in refused.text
        assert "alice is not a member of any project" in refused.text  # not "incorrect credentials"
        with pytest.raises(Exception):
            Client(server.url, auth=USERS[0], verbose=False)
        shown = Client(server.url, auth=USERS[1], verbose=False).predict(
            "team", "Least confidence first", api_name="/annotate_start"
        )
        assert MARK in shown[1]
        with db.session() as session:  # opened to every user: membership is read at each login
            repo.set_members(session, "payroll", None, "owner")
        assert (
            httpx.post(
                f"{server.url}/login", data={"username": "alice", "password": "a-secret"}, timeout=30
            ).status_code
            == 200
        )


def test_downloads_reach_no_server_file_by_its_path(studio):
    server, context = studio
    alice = logged_in(server, USERS[0])
    inside = context.export_dir / "labels.jsonl"  # the export folder itself is not served: downloads are handed out
    secret = context.export_dir.parent / "outside-the-export-folder.txt"
    secret.write_text(MARK)
    for escape in (
        str(inside),
        f"{context.export_dir}/../{secret.name}",
        f"{context.export_dir}/%2e%2e/{secret.name}",
        str(secret),
        "/etc/passwd",
    ):
        response = alice.get(f"/gradio_api/file={escape}")
        assert response.status_code in (403, 404) and MARK not in response.text, escape


@pytest.mark.parametrize(
    "name, says",
    [
        ("../../etc", "without '..'"),
        ("/etc", "relative to the import folder"),
        ("sub/../../x", "without '..'"),
        ("not a dataset!", "is neither a folder under the import folder"),
    ],
)
def test_import_names_cannot_leave_the_import_folder(tmp_path, name, says):
    with pytest.raises(SourceError, match=says.replace("(", r"\(")):
        dataset_source(name, tmp_path)


def test_import_folder_names_resolve_inside_it_and_links_out_are_refused(tmp_path):
    (tmp_path / "saved").mkdir()
    assert dataset_source("saved", tmp_path) == str((tmp_path / "saved").resolve())
    assert dataset_source("owner/name", tmp_path) == HubDataset("owner/name")  # a Hub name, never a local path
    os.symlink("/etc", tmp_path / "link")
    with pytest.raises(SourceError, match="leads outside the import folder"):
        dataset_source("link", tmp_path)


def test_the_studio_refuses_an_import_name_outside_its_folder(studio):
    server, _ = studio
    with pytest.raises(Exception, match="without '..'"):
        Client(server.url, auth=USERS[0], verbose=False).predict(None, "../../etc", api_name="/import_preview")


def test_an_import_refusal_never_says_where_the_server_keeps_the_import_folder(tmp_path, dgemma_engine):
    folder = tmp_path / "importdir"
    folder.mkdir()
    os.symlink("/etc", folder / "link")
    db = studio_db(tmp_path / "import.db", ["one"], dgemma_engine)
    server, _ = serve_studio(db, dgemma_engine, import_dir=folder)  # as an absolute DIFFJEV_IMPORT_DIR
    with server:
        client = Client(server.url, verbose=False)
        for name in ("../../etc", "/etc", "link", "not a dataset!"):
            with pytest.raises(Exception) as refused:
                client.predict(None, name, api_name="/import_preview")
            said = str(refused.value)
            assert "the import folder" in said, said
            assert str(tmp_path) not in said and str(tmp_path.resolve()) not in said, said


def test_uploads_above_the_limit_are_refused(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "upload.db", ["one"], dgemma_engine)
    server, _ = serve_studio(db, dgemma_engine, auth=USERS, max_upload="2kb")  # as DIFFJEV_MAX_UPLOAD=2kb
    small, large = tmp_path / "small.csv", tmp_path / "large.csv"
    small.write_text("text\nshort ticket\n")
    large.write_text("text\n" + "".join(f"ticket {i} with a long body of text\n" for i in range(400)))
    with server:
        alice = Client(server.url, auth=USERS[0], verbose=False)
        columns = alice.predict(handle_file(str(small)), "", api_name="/import_preview")
        assert "text" in str(columns)
        with pytest.raises(Exception, match="(?i)too large|exceeds|maximum"):
            alice.predict(handle_file(str(large)), "", api_name="/import_preview")


SECRET_KEY, SECRET_TOKEN, SECRET_PASSWORD = "sk-SECRET-KEY-123", "hf_SECRETTOKEN456", "SECRETPASSWORD789"


def test_secrets_never_reach_logs_exports_runs_or_the_page(tmp_path, vllm_server, tiny_model_folder, dgemma_engine):
    path = tmp_path / "secrets.db"
    db = studio_db(path, [f"Ticket {i}: the export is broken" for i in range(3)])
    host = vllm_server.url.split("//", 1)[1]
    url = f"http://operator:{SECRET_PASSWORD}@{host}"
    env = {**os.environ, "DIFFJEV_VLLM_API_KEY": SECRET_KEY, "HF_TOKEN": SECRET_TOKEN}
    cli = [sys.executable, "-m", "diffjev.cli"]
    said = []
    done = subprocess.run(
        cli
        + [
            "prelabel",
            "--db",
            str(path),
            "--project",
            "tickets",
            "--engine",
            "vllm",
            "--url",
            url,
            "--model",
            SERVED_NAME,
            "--tokenizer",
            str(tiny_model_folder),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0 and "completed: 3 read" in done.stdout, done.stderr[-2000:]
    said += [done.stdout, done.stderr]
    dead = subprocess.run(
        cli
        + [
            "prelabel",
            "--db",
            str(path),
            "--project",
            "tickets",
            "--engine",
            "vllm",
            "--url",
            "http://operator:" + SECRET_PASSWORD + "@127.0.0.1:9",
            "--model",
            SERVED_NAME,
            "--tokenizer",
            str(tiny_model_folder),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert "cannot reach the vLLM server at http://127.0.0.1:9" in dead.stdout + dead.stderr
    said += [dead.stdout, dead.stderr]
    out = tmp_path / "export"
    pushed = subprocess.run(
        cli
        + [
            "export",
            "--db",
            str(path),
            "--project",
            "tickets",
            "--format",
            "hf",
            "--all",
            "--out",
            str(out),
            "--push-to-hub",
            "someone/labels",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert pushed.returncode == 2, pushed.stderr[-2000:]
    said += [pushed.stdout, pushed.stderr]
    for name in ("x.jsonl", "x.csv"):
        assert (
            subprocess.run(
                cli
                + [
                    "export",
                    "--db",
                    str(path),
                    "--project",
                    "tickets",
                    "--format",
                    name[2:],
                    "--all",
                    "--out",
                    str(tmp_path / name),
                ],
                env=env,
                timeout=300,
            ).returncode
            == 0
        )
        said.append((tmp_path / name).read_text())
    with db.engine.connect() as conn:  # every table, every row
        tables = [r[0] for r in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))]
        said += [repr(conn.execute(text(f"SELECT * FROM {t}")).all()) for t in tables]
    for secret in (SECRET_KEY, SECRET_TOKEN, SECRET_PASSWORD):
        assert not any(secret in s for s in said), secret

    from diffjev.engines.auto import EngineChoice, choose_engine
    from diffjev.ui.context import Studio
    from diffjev.ui.studio import create_app
    from conftest import LocalServer

    chosen = choose_engine(
        EngineChoice(kind="vllm", url=url, model=SERVED_NAME, tokenizer=str(tiny_model_folder), api_key=SECRET_KEY)
    )
    with LocalServer(create_app(Studio(db, chosen, "tickets"))) as studio:
        page = httpx.get(studio.url + "/", timeout=30).text + httpx.get(studio.url + "/config", timeout=30).text
    chosen.engine.close()
    assert f"vLLM server at http://{host}" in as_shown(page)
    for secret in (SECRET_KEY, SECRET_TOKEN, SECRET_PASSWORD):
        assert secret not in page


# Files only through an upload; projects only through their members ------------------------------------------


def gradio_call(http: httpx.Client, api_name: str, *data) -> tuple[str, str]:
    """Call a studio event the way any HTTP client can, with a body it chose: (event, its data)."""
    started = http.post(f"/gradio_api/call/{api_name}", json={"data": list(data)})
    if started.status_code != 200:
        return "refused", f"{started.status_code} {started.text}"
    answer = http.get(f"/gradio_api/call/{api_name}/{started.json()['event_id']}").text
    event = answer.split("event: ", 1)[1].split("\n", 1)[0] if "event: " in answer else "none"
    return event, as_shown(answer)


def as_shown(answer: str) -> str:
    """An event's answer as a person reads it: messages write anyone's text as HTML character references."""
    data = answer.split("data: ", 1)[1] if "data: " in answer else answer
    try:
        data = json.dumps(json.loads(data), ensure_ascii=False)
    except ValueError:
        pass
    return html.unescape(data)


def a_server_file(path) -> dict:
    return {"path": str(path), "meta": {"_type": "gradio.FileData"}}


def test_import_takes_only_files_uploaded_through_the_page(studio, tmp_path):
    server, _ = studio
    alice = logged_in(server, USERS[0])
    secret = tmp_path / "credentials.csv"
    secret.write_text(f"text\n{MARK} password=hunter2\n")
    upload_folder = Path(gradio.utils.get_upload_folder())
    upload_folder.mkdir(parents=True, exist_ok=True)
    link = upload_folder / f"link-{os.getpid()}.csv"  # a link inside the upload folder that leads out of it
    link.unlink(missing_ok=True)
    os.symlink(secret, link)
    try:
        for posed in (secret, link, "/etc/passwd", f"{upload_folder}/../{secret.name}"):
            for api_name in ("import_preview", "import_items"):
                data = [a_server_file(posed), ""] + (["text", "", []] if api_name == "import_items" else [])
                event, said = gradio_call(alice, api_name, *data)
                assert event in ("error", "refused") and MARK not in said and "hunter2" not in said, (posed, said)
    finally:
        link.unlink()
    # a file the user does upload is read
    columns = Client(server.url, auth=USERS[0], verbose=False).predict(
        handle_file(str(secret)), "", api_name="/import_preview"
    )
    assert MARK in str(columns)


def test_a_dataset_name_is_a_hub_name_or_a_folder_in_the_import_folder(tmp_path, monkeypatch):
    from diffjev.io import HubDataset, peek

    monkeypatch.chdir(tmp_path)  # the server's working folder holds files a name must never reach
    (tmp_path / "secret.csv").write_text(f"text\n{MARK}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "file.csv").write_text(f"text\n{MARK}\n")
    (tmp_path / "owner" / "saved").mkdir(parents=True)
    imports = tmp_path / "imports"
    imports.mkdir()
    for name in ("secret.csv", "sub/file.csv", "owner/saved"):
        found = dataset_source(name, imports)
        assert found == HubDataset(name)  # not a path on the server
        with pytest.raises(SourceError) as refused:
            peek(found)
        assert MARK not in str(refused.value)


def test_the_studio_reads_no_working_folder_file_named_as_a_dataset(studio, tmp_path, monkeypatch):
    server, _ = studio
    monkeypatch.chdir(tmp_path)
    (tmp_path / "secret.csv").write_text(f"text\n{MARK}\n")
    alice = logged_in(server, USERS[0])
    for name in ("secret.csv", "./secret.csv"):
        event, said = gradio_call(alice, "import_preview", None, name)
        assert event == "error" and MARK not in said, said


def test_exports_are_not_served_from_a_path_anyone_can_guess(studio):
    server, context = studio
    alice = logged_in(server, USERS[0])
    event, said = gradio_call(alice, "export", "jsonl", False, "")
    assert event == "complete", said
    url = json.loads(said)[1]["value"]["url"]
    assert alice.get(url).status_code == 200 and MARK in alice.get(url).text
    assert re.search(r"/[0-9a-f]{64}/", url), url  # Gradio's download address: a keyed hash of the file
    written = [p for p in context.export_dir.rglob("*.jsonl") if p.name != "labels.jsonl"]
    assert written and all(len(p.parent.name) == 32 for p in written)  # one unguessable folder per export
    for path in written:  # where the studio wrote it is never served
        assert alice.get(f"/gradio_api/file={path}").status_code in (403, 404)
        assert MARK not in alice.get(f"/gradio_api/file={path}").text
    assert oct(context.export_dir.stat().st_mode & 0o777) == "0o700"


def test_an_export_downloads_only_for_members_of_its_project(tmp_path, dgemma_engine):
    """Gradio serves a download at an address with no ?project=: the studio knows which project each is of."""
    db = studio_db(tmp_path / "downloads.db", [f"{MARK} 1"], dgemma_engine, name=PROJECT)
    studio_db(tmp_path / "downloads.db", ["an open item"], dgemma_engine, name="open")
    with db.session() as session:
        repo.set_members(session, PROJECT, ["alice"], "owner")
    server, _ = serve_studio(db, dgemma_engine, name=PROJECT, auth=USERS)
    with server:
        alice, bob = logged_in(server, USERS[0]), logged_in(server, USERS[1])
        urls = []
        for fmt in ("csv", "labelstudio"):
            event, said = gradio_call(alice, "export", fmt, False, None)  # no annotator named: null, as "" is
            assert event == "complete", said
            urls.append(json.loads(said)[1]["value"]["url"])
        for url in urls:
            assert alice.get(url).status_code == 200
            refused = bob.get(url, params={"project": "open"})  # bob opens his own project, with alice's link
            assert refused.status_code == 403 and MARK not in refused.text
        with db.session() as session:
            repo.set_members(session, PROJECT, ["carol"], "owner")
        assert all(alice.get(url).status_code == 403 for url in urls)  # removed after exporting


@pytest.fixture(scope="module")
def two_projects(tmp_path_factory, dgemma_engine):
    """A studio on PROJECT, and in the same database another project with its own items, answers and run."""
    folder = tmp_path_factory.mktemp("two-projects")
    db = studio_db(folder / "two.db", [f"{MARK} {i}" for i in range(12)], dgemma_engine, name=PROJECT)
    other = studio_db(folder / "two.db", [f"OTHER-PROJECT {i}" for i in range(6)], dgemma_engine, name="other")
    with other.read() as session:
        other_id = repo.get_project(session, "other").id
        other_items = list(session.scalars(select(Item.id).where(Item.project_id == other_id)))
        other_run = session.scalar(select(Run.id).where(Run.project_id == other_id))
    server, context = serve_studio(db, dgemma_engine, name=PROJECT, auth=USERS)
    with server:
        yield server, db, other_id, other_items, other_run


def test_another_projects_ids_are_not_found_at_any_endpoint(two_projects):
    server, db, other_id, other_items, other_run = two_projects
    alice = logged_in(server, USERS[0])

    def other_project_log() -> int:
        with db.read() as session:
            return session.scalar(select(func.count()).select_from(Event).where(Event.project_id == other_id))

    def other_answers() -> int:
        with db.read() as session:
            return session.scalar(select(func.count()).select_from(Response).where(Response.item_id.in_(other_items)))

    before = (other_project_log(), other_answers())
    item = other_items[0]
    event, said = gradio_call(alice, "review_change", item, "team", "billing")
    assert f"no item {item} in this project" in said, said
    event, said = gradio_call(alice, "review_change", 10**9, "team", "billing")
    assert "no item 1000000000 in this project" in said and "IntegrityError" not in said, said
    event, said = gradio_call(alice, "review_change", 10**30, "team", "billing")  # past any database integer
    assert "no item 1000000000000000000000000000000 in this project" in said, said
    event, said = gradio_call(alice, "review_change", 1, "salary_band", "billing")
    assert "no question 'salary_band' in this project" in said, said
    event, said = gradio_call(alice, "calibrate", "team", other_run, 0.9)
    assert event == "error" and f"no run {other_run} in this project" in said, said
    event, said = gradio_call(alice, "keep_temperature", "team", other_run)
    assert f"no run {other_run} in this project" in said, said
    event, said = gradio_call(alice, "annotate_start", "salary_band", "Least confidence first")
    assert event == "error" and "no question 'salary_band' in this project" in said, said
    for queue in (
        "Double annotation (agreement share)",
        "Second opinion (model and first annotator disagree)",
        "Least confidence first",
        "Unlabeled, in order",
    ):
        event, said = gradio_call(alice, "annotate_start", "team", queue)
        assert "OTHER-PROJECT" not in said, queue
    assert (other_project_log(), other_answers()) == before


def test_storage_never_joins_an_item_and_a_question_of_two_projects(two_projects):
    _, db, other_id, other_items, _ = two_projects
    with db.read() as session:
        row = repo.version_schema(repo.latest_version(session, repo.get_project(session, PROJECT).id))[1]["team"]
    with pytest.raises(repo.NotFound, match=f"no item {other_items[1]} in this project"):
        db.write(
            lambda session: repo.respond(session, repo.ResponseInput(other_items[1], row, "alice", "billing", "manual"))
        )


def test_a_removed_member_is_refused_at_the_next_request(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "removed.db", [f"{MARK}: charged twice"], dgemma_engine, name="payroll")
    server, _ = serve_studio(db, dgemma_engine, name="payroll", auth=USERS)
    with server:
        alice = logged_in(server, USERS[0])
        event, said = gradio_call(alice, "annotate_start", "team", "Least confidence first")
        assert event == "complete" and MARK in said
        with db.session() as session:
            repo.set_members(session, "payroll", ["bob"], "owner")
        event, said = gradio_call(alice, "annotate_start", "team", "Least confidence first")
        assert event == "refused" and "alice is not a member of any project" in said and MARK not in said
        page = alice.get("/")
        assert page.status_code == 403 and "not a member" in page.text and MARK not in page.text
        assert alice.get("/config").status_code == 403
        assert alice.get("/logout", follow_redirects=False).status_code in (200, 302, 307)  # signing out still works
        bob = logged_in(server, USERS[1])
        assert gradio_call(bob, "annotate_start", "team", "Least confidence first")[0] == "complete"


def test_the_jev_api_answers_only_members_of_some_project(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "jev.db", ["one"], dgemma_engine, name="payroll")
    with db.session() as session:
        repo.set_members(session, "payroll", ["bob"], "owner")
    server, _ = serve_studio(db, dgemma_engine, name="payroll", auth=USERS)
    body = {"state": "The export is broken.", "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}}}
    with server:
        refused = httpx.post(f"{server.url}/v1/systemone", json=body, auth=USERS[0], timeout=60)
        assert refused.status_code == 403 and "alice is not a member of any project" in refused.text
        assert (
            httpx.post(f"{server.url}/v1/systemone", json=body, auth=("alice", "wrong"), timeout=60).status_code == 401
        )
        assert httpx.post(f"{server.url}/v1/systemone", json=body, auth=USERS[1], timeout=60).status_code == 200


def test_the_page_before_a_login_holds_none_of_the_projects_questions(tmp_path, dgemma_engine):
    schema = {
        "questions": [
            {
                "id": "salary_band",
                "type": "choice",
                "instructions": "Which band?",
                "options": [{"name": "band_low"}, {"name": "band_high"}],
            }
        ]
    }
    db = Database(tmp_path / "questions.db")
    with db.session() as session:
        repo.create_project(session, "hr", Schema.from_dict(schema), "owner")
    import_items(db, "hr", pd.DataFrame({"text": ["a review of pay"]}))
    server, _ = serve_studio(db, dgemma_engine, name="hr", auth=USERS)
    with server:
        page = httpx.get(server.url + "/", timeout=30)
        assert page.status_code == 200
        for secret in ("salary_band", "band_low", "Which band?", "hr"):
            assert f'"{secret}"' not in page.text and f'\\"{secret}\\"' not in page.text, secret
        alice = Client(server.url, auth=USERS[0], verbose=False)  # after a login, the questions are there
        shown = alice.predict("salary_band", "Unlabeled, in order", api_name="/annotate_start")
        assert "Which band?" in str(shown)


def hub_session_cookie(user: str, expires_in: float = 3600, **oauth_info) -> str:
    """The cookie Gradio's OAuth callback leaves after a Hugging Face sign-in, signed with the Space's key;
    `oauth_info` replaces its fields (None leaves one out)."""
    from base64 import b64encode

    from itsdangerous import TimestampSigner

    from diffjev.ui.access import hub_session_secret

    info = {
        "access_token": "hf_oauth_token",
        "expires_at": time.time() + expires_in,
        "userinfo": {"preferred_username": user, "name": user},
    }
    info = {k: v for k, v in {**info, **oauth_info}.items() if v is not None}
    session = {"oauth_info": info}
    return TimestampSigner(hub_session_secret()).sign(b64encode(json.dumps(session).encode())).decode()


@pytest.fixture
def hub_space(monkeypatch):
    """The settings a Space with `hf_oauth: true` runs with."""
    from gradio import oauth

    settings = {
        "OAUTH_CLIENT_ID": "client-id",
        "OAUTH_CLIENT_SECRET": "client-secret",
        "OAUTH_SCOPES": "openid profile",
        "OPENID_PROVIDER_URL": "http://127.0.0.1:9",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
        monkeypatch.setattr(oauth, name, value)
    monkeypatch.setenv("SYSTEM", "spaces")  # as on a Space: the real sign-in routes, not a local mock
    monkeypatch.setenv("SPACE_ID", "team/studio")


def test_hub_sign_in_is_required_everywhere_and_checked_against_members(tmp_path, dgemma_engine, hub_space):
    db = studio_db(tmp_path / "hub.db", [f"{MARK}: charged twice"], dgemma_engine, name="payroll")
    with db.session() as session:
        repo.set_members(session, "payroll", ["carol"], "owner")
    server, studio = serve_studio(db, dgemma_engine, name="payroll")
    assert studio.hub_sign_in
    with server:
        anonymous = httpx.Client(base_url=server.url, timeout=30)
        page = anonymous.get("/")
        assert page.status_code == 401 and "/login/huggingface" in page.text and MARK not in page.text
        for method, path in [
            ("GET", "/config"),
            ("GET", "/gradio_api/info"),
            ("POST", "/v1/systemone"),
            ("POST", "/gradio_api/call/annotate_start"),
            ("POST", "/gradio_api/upload"),
        ]:
            assert anonymous.request(method, path, json={"data": []}).status_code == 401, path
        assert gradio_call(anonymous, "annotate_start", "team", "Least confidence first")[0] == "refused"
        expired = httpx.Client(base_url=server.url, timeout=30, cookies={"session": hub_session_cookie("carol", -60)})
        assert expired.get("/config").status_code == 401
        forged = httpx.Client(
            base_url=server.url, timeout=30, cookies={"session": hub_session_cookie("carol")[:-4] + "AAAA"}
        )
        assert forged.get("/config").status_code == 401
        dave = httpx.Client(base_url=server.url, timeout=30, cookies={"session": hub_session_cookie("dave")})
        refused = dave.get("/")
        assert refused.status_code == 403 and "dave" in refused.text and "not a member" in refused.text
        assert MARK not in refused.text
        for malformed in (
            hub_session_cookie("carol", expires_at=None),  # no lifetime: refused, never kept for good
            hub_session_cookie("carol", expires_at="tomorrow"),  # a 500 before
            hub_session_cookie("carol", expires_at=[1]),
            hub_session_cookie("carol", userinfo="carol"),
        ):
            assert httpx.get(f"{server.url}/config", cookies={"session": malformed}).status_code == 401
        cookie = hub_session_cookie("carol")
        carol = httpx.Client(base_url=server.url, timeout=30, cookies={"session": cookie})
        assert carol.get("/").status_code == 200
        event, said = gradio_call(carol, "annotate_start", "team", "Least confidence first")
        assert event == "complete" and MARK in said, said
        assert gradio_call(carol, "review_change", "t0", "team", "billing")[0] == "complete"  # the card's id
        carol.get("/logout")
        copied = httpx.Client(base_url=server.url, timeout=30, cookies={"session": cookie})
        assert copied.get("/config").status_code == 401  # signing out revokes the cookie, copies included
        other = httpx.Client(base_url=server.url, timeout=30, cookies={"session": hub_session_cookie("carol")})
        assert other.get("/config").status_code == 200  # carol's other sign-ins are her own
    restarted, _ = serve_studio(db, dgemma_engine, name="payroll")
    with restarted:  # a sign-out outlives the studio that took it
        assert httpx.get(f"{restarted.url}/config", cookies={"session": cookie}).status_code == 401
        assert httpx.get(f"{restarted.url}/config", cookies={"session": hub_session_cookie("carol")}).status_code == 200
    with db.read() as session:  # the answer carries the Hub username
        assert session.scalars(select(Response.annotator)).all() == ["carol"]


def test_an_open_space_says_who_may_annotate(tmp_path, dgemma_engine, hub_space):
    from diffjev.ui.studio import members_note_text

    db = studio_db(tmp_path / "open.db", ["one"], name="demo-tickets.v2")
    _, studio = serve_studio(db, dgemma_engine, name="demo-tickets.v2")
    assert "Any signed-in Hugging Face user may annotate" in members_note_text(studio, None)
    assert "`diffjev members --project demo-tickets.v2 user1,user2`" in members_note_text(studio, None)


def app_beyond_localhost(tmp_path, **settings) -> subprocess.CompletedProcess:
    """`python app.py` on 0.0.0.0 with no login setting but `settings`, on a free port (refused before it
    is used, but bound first), with a database file that must not be made."""
    env = {
        **os.environ,
        "GRADIO_SERVER_NAME": "0.0.0.0",
        "PORT": str(free_port()),
        "DIFFJEV_DB": str(tmp_path / "x.db"),
    }
    unset = ("DIFFJEV_USERS", "OAUTH_CLIENT_ID", "SYSTEM", "SPACE_ID", "DIFFJEV_ALLOW_ANONYMOUS", "GRADIO_SERVER_PORT")
    env = {k: v for k, v in env.items() if k not in unset} | settings
    return subprocess.run(
        [sys.executable, "app.py"],
        cwd=Path(__file__).parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_studio_will_not_listen_beyond_localhost_without_a_login(tmp_path):
    done = app_beyond_localhost(tmp_path)
    assert done.returncode != 0 and "refusing to listen on 0.0.0.0 with no login" in done.stderr, done.stderr[-2000:]
    assert "DIFFJEV_ALLOW_ANONYMOUS=1" in done.stderr
    assert not (tmp_path / "x.db").exists()  # refused before anything was created
    from diffjev.ui.studio import listening_refusal

    assert listening_refusal("127.0.0.1", None, False) is None
    assert listening_refusal("0.0.0.0", [("a", "b")], False) is None
    assert listening_refusal("0.0.0.0", None, True) is None


def test_hub_sign_in_is_on_only_where_gradio_does_real_oauth(tmp_path):
    """Off a Space Gradio mocks the sign-in (its callback signs anyone in as the server's Hub user), and
    without OAUTH_CLIENT_SECRET the cookie's key is sha256("-v4"): neither may turn Hub sign-in on."""
    from diffjev.ui.access import hub_sign_in_configured, hub_sign_in_refusal

    space = {"OAUTH_CLIENT_ID": "id", "OAUTH_CLIENT_SECRET": "secret", "SYSTEM": "spaces", "SPACE_ID": "team/s"}
    assert hub_sign_in_configured(space) and hub_sign_in_refusal(space) is None
    assert not hub_sign_in_configured({}) and hub_sign_in_refusal({}) is None
    for missing, says in (
        ("SYSTEM", "only on a Space"),
        ("SPACE_ID", "only on a Space"),
        ("OAUTH_CLIENT_SECRET", "OAUTH_CLIENT_SECRET is not set"),
    ):
        env = {k: v for k, v in space.items() if k != missing}
        assert not hub_sign_in_configured(env) and says in hub_sign_in_refusal(env), missing
    done = app_beyond_localhost(tmp_path, OAUTH_CLIENT_ID="id")
    assert done.returncode != 0 and "Hugging Face sign-in works only on a Space" in done.stderr, done.stderr[-2000:]
    assert "DIFFJEV_USERS" in done.stderr and not (tmp_path / "x.db").exists()


def test_a_non_member_reaches_no_route_and_no_endpoint(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "sweep.db", [f"{MARK}: charged twice"], dgemma_engine, name="payroll")
    server, _ = serve_studio(db, dgemma_engine, name="payroll", auth=USERS)
    with server:
        alice = logged_in(server, USERS[0])
        endpoints = sorted(alice.get("/gradio_api/info").json()["named_endpoints"])
        assert len(endpoints) > 15 and "/review_change" in endpoints
        with db.session() as session:  # alice stays logged in, but is no longer a member
            repo.set_members(session, "payroll", ["bob"], "owner")
        found = [
            (m, p)
            for m, p in routes(server.server.config.app.routes)
            if not p.startswith(OPEN_PREFIXES) and p not in OPEN and "{" not in p
        ]
        asked = (
            [("POST", f"/gradio_api/call{name}") for name in endpoints]
            + [("POST", f"/gradio_api/run{name}") for name in endpoints]
            + found
        )
        answered = []
        for method, path in asked:
            response = alice.request(method, path, json={"data": [1, "team", "billing"]}, timeout=10)
            assert MARK not in response.text, path
            if response.status_code != 403:
                answered.append(f"{method} {path}: {response.status_code}")
        assert answered == [], "a non-member was answered: " + "; ".join(answered)


def test_a_database_error_reaches_the_page_as_no_sql(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "broken.db", [f"{MARK}: charged twice"], dgemma_engine, name="payroll")
    server, _ = serve_studio(db, dgemma_engine, name="payroll", auth=USERS)
    with server:
        alice = logged_in(server, USERS[0])
        with db.engine.begin() as conn:  # the database breaks under the running studio
            conn.execute(text("DROP TABLE leases"))
        event, said = gradio_call(alice, "annotate_start", "team", "Least confidence first")
        assert event == "error"
        for raw in ("leases", "SELECT", "DELETE", "INSERT", "sqlite3", "OperationalError", "Traceback"):
            assert raw not in said, raw


def test_two_studios_on_one_host_share_no_files(tmp_path, tiny_model_folder):
    """Each studio process keeps its uploads and downloads in a folder of its own: a user of one studio
    can neither download nor import what another studio (another project) handed out."""
    from diffjev.services.importing import import_items as load

    path = tmp_path / "two.db"
    db = studio_db(path, [f"{MARK} salary {i}" for i in range(3)], name="payroll")
    studio_db(path, ["public ticket"], name="public")
    with db.session() as session:
        repo.set_members(session, "payroll", ["alice"], "owner")
    load(db, "payroll", pd.DataFrame({"text": ["more"]}))
    users = "alice:a-secret,bob:b-secret"
    apps = []
    try:
        for project in ("payroll", "public"):
            port = free_port()
            env = {
                **os.environ,
                "DIFFJEV_DB": str(path),
                "DIFFJEV_PROJECT": project,
                "DIFFJEV_USERS": users,
                "PORT": str(port),
                "DIFFJEV_MODEL": str(tiny_model_folder),
                "HF_HUB_OFFLINE": "1",
            }
            env.pop("GRADIO_TEMP_DIR", None)
            proc = subprocess.Popen(
                [sys.executable, "app.py"],
                cwd=Path(__file__).parent.parent,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            apps.append((proc, f"http://127.0.0.1:{port}"))
        for proc, url in apps:
            deadline = time.monotonic() + 180
            while True:
                assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
                try:
                    if httpx.get(url + "/gradio_api/startup-events", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the studio did not start"
                time.sleep(0.5)
        payroll, public = (type("S", (), {"url": url})() for _, url in apps)
        alice = logged_in(payroll, ("alice", "a-secret"))
        event, said = gradio_call(alice, "export", "csv", False, "")
        assert event == "complete" and MARK in alice.get(json.loads(said)[1]["value"]["url"]).text
        exported = json.loads(said)[1]["value"]["path"]
        bob = logged_in(public, ("bob", "b-secret"))  # not a payroll member; a member of the open project
        refused = bob.get(f"/gradio_api/file={exported}")
        assert refused.status_code in (403, 404) and MARK not in refused.text
        event, said = gradio_call(bob, "import_preview", a_server_file(exported), "")
        assert event == "error" and MARK not in said
    finally:
        for proc, _ in apps:
            proc.terminate()
            proc.wait(timeout=30)


# Requests from other sites, bodies before sign-in ------------------------------------------------------------

STUDIO_HOST = "labels.example.org"  # as behind a reverse proxy or on a Space: a real host name, not localhost
FOREIGN = "https://attacker.example"


def every_route(server, export) -> list[tuple[str, str]]:
    found = [(m, p) for m, p in routes(server.server.config.app.routes) if "{" not in p or "path_or_url" in p]
    named = [("POST", "/gradio_api/queue/join"), ("POST", "/gradio_api/upload"), ("GET", "/config?project=x")]
    return [(m, p.replace("{path_or_url:path}", str(export))) for m, p in named + found]


def test_another_sites_page_is_refused_on_every_route_even_with_the_users_cookie(studio):
    server, context = studio
    alice = logged_in(server, USERS[0])
    alice.headers["Host"] = STUDIO_HOST
    asked, answered = 0, []
    for method, path in every_route(server, context.export_dir / "labels.jsonl"):
        for headers in (
            {"Origin": FOREIGN},
            {"Origin": "null"},  # a sandboxed frame or a file:// page
            {"Origin": f"https://{STUDIO_HOST}.attacker.example"},
            {"Referer": f"{FOREIGN}/page"} if method not in ("GET", "HEAD", "OPTIONS") else {"Origin": FOREIGN},
        ):
            response = alice.request(method, path, headers=headers, json={"data": []} if method == "POST" else None)
            asked += 1
            assert "access-control-allow-origin" not in response.headers, (method, path, headers)
            assert MARK not in response.text and PROJECT not in response.text, (method, path)
            if response.status_code != 403:
                answered.append(f"{method} {path} {headers}: {response.status_code}")
    assert asked > 150 and answered == [], "answered another site: " + "; ".join(answered[:10])
    preflight = alice.options(
        "/gradio_api/queue/join", headers={"Origin": FOREIGN, "Access-Control-Request-Method": "POST"}
    )
    assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers
    refused = alice.get("/config", headers={"Origin": FOREIGN})
    assert "another site" in refused.json()["detail"] and "DIFFJEV_ALLOWED_ORIGINS" in refused.json()["detail"]
    # the studio's own page, on whatever port it is served, and requests sent by no browser page
    for own in (f"https://{STUDIO_HOST}", f"http://{STUDIO_HOST}"):
        assert alice.get("/config", headers={"Origin": own}).status_code == 200, own
    assert alice.get("/config").status_code == 200
    own_event, said = gradio_call(alice, "annotate_start", "team", "Least confidence first")
    assert own_event == "complete" and MARK in said


def test_a_listed_origin_and_a_spaces_own_page_are_answered_and_no_other(
    tmp_path, dgemma_engine, hub_space, monkeypatch
):
    monkeypatch.setenv("DIFFJEV_ALLOWED_ORIGINS", "https://tools.example.org, http://localhost:3000")
    db = studio_db(tmp_path / "space.db", [f"{MARK}: charged twice"], dgemma_engine, name="payroll")
    with db.session() as session:
        repo.set_members(session, "payroll", ["carol"], "owner")
    server, _ = serve_studio(db, dgemma_engine, name="payroll")
    space_host = "team-studio.hf.space"
    cookie = hub_session_cookie("carol")
    with server:
        carol = httpx.Client(base_url=server.url, timeout=30, cookies={"session": cookie}, headers={"Host": space_host})
        upload = {"files": ("note.txt", b"hello", "text/plain")}
        for method, path, extra in [
            ("GET", "/config", {}),
            ("GET", "/gradio_api/info", {}),
            ("POST", "/gradio_api/upload", {"files": upload}),
            ("POST", "/v1/systemone", {"json": {}}),
        ]:
            refused = carol.request(method, path, headers={"Origin": FOREIGN}, **extra)
            assert refused.status_code == 403, (path, refused.status_code)
            assert (
                "access-control-allow-origin" not in refused.headers
                and "access-control-allow-credentials" not in refused.headers
            )
        # inside the Space's iframe the page is the Space's own origin
        assert carol.get("/config", headers={"Origin": f"https://{space_host}"}).status_code == 200
        stored = carol.post("/gradio_api/upload", files=upload, headers={"Origin": f"https://{space_host}"})
        assert stored.status_code == 200 and len(stored.json()) == 1
        listed = carol.get("/config", headers={"Origin": "https://tools.example.org"})
        assert listed.status_code == 200
        assert listed.headers["access-control-allow-origin"] == "https://tools.example.org"
        assert listed.headers["access-control-allow-credentials"] == "true"
        preflight = carol.options(
            "/gradio_api/info",
            headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "GET"},
            cookies={},
        )
        assert (
            preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "http://localhost:3000"
        )
        # a link or an image on another site signs nobody out, with a Referer or without one
        for sent in ({"Referer": f"{FOREIGN}/page"}, {"Sec-Fetch-Site": "cross-site"}):
            assert carol.get("/logout", headers=sent).status_code == 403, sent
        assert carol.get("/config").status_code == 200
        assert carol.get("/logout", headers={"Sec-Fetch-Site": "same-origin"}).status_code in (302, 307)
        assert carol.get("/config").status_code == 401


def test_allowed_origins_are_read_strictly():
    from diffjev.ui.access import allowed_origins

    assert allowed_origins({"DIFFJEV_ALLOWED_ORIGINS": "https://A.example.org:443/, http://h:8080"}) == {
        "https://a.example.org",
        "http://h:8080",
    }
    for bad in ("a.example.org", "https://a.example.org/path", "ftp://a.example.org"):
        with pytest.raises(ValueError, match="DIFFJEV_ALLOWED_ORIGINS.*is not an origin"):
            allowed_origins({"DIFFJEV_ALLOWED_ORIGINS": bad})


def raw_request(server, head: str, wait: float = 10, closed: list | None = None) -> bytes:
    """Sends a request's head and none of its body; the whole answer the server gives meanwhile (b'' if
    none comes within `wait` seconds: it waits for the body). `closed` gets whether the server then
    closed the connection, rather than keep reading a body."""
    import socket

    said = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=wait) as sock:
        sock.sendall(head.encode())
        try:
            while b"\r\n\r\n" not in said or len(said.partition(b"\r\n\r\n")[2]) < answer_length(said):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                said += chunk
            if closed is not None:
                sock.settimeout(3)
                try:
                    closed.append(sock.recv(1) == b"")
                except (TimeoutError, ConnectionResetError) as exc:
                    closed.append(isinstance(exc, ConnectionResetError))
        except TimeoutError:
            pass
    return said


def answer_length(said: bytes) -> int:
    found = re.search(rb"(?i)content-length: *(\d+)", said.partition(b"\r\n\r\n")[0])
    return int(found.group(1)) if found else 0


def test_a_body_is_not_read_before_the_sign_in_and_is_capped_per_route(studio):
    server, _ = studio
    big = 300 * 1024 * 1024
    for path in ("/gradio_api/queue/join", "/v1/systemone", "/gradio_api/upload", "/gradio_api/run/accept"):
        closed = []
        said = raw_request(
            server,
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {big}\r\n\r\n",
            closed=closed,
        )
        assert said.startswith(b"HTTP/1.1 401"), (path, said[:200])  # answered with 300 MB still unsent
        assert closed == [True], path  # and the connection ends: the unread body is never taken in
    wrong = raw_request(
        server,
        "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nAuthorization: Basic YWxpY2U6bm9wZQ==\r\n"  # alice:nope
        f"Content-Length: {big}\r\n\r\n",
    )
    assert wrong.startswith(b"HTTP/1.1 401") and b"wrong user or password" in wrong
    alice = logged_in(server, USERS[0])
    cookie = "; ".join(f"{k}={v}" for k, v in alice.cookies.items())
    for path in ("/gradio_api/queue/join", "/gradio_api/upload", "/login"):
        closed = []
        said = raw_request(
            server,
            f"POST {path} HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\nContent-Length: {big}\r\n\r\n",
            closed=closed,
        )
        assert said.startswith(b"HTTP/1.1 413") and b"DIFFJEV_MAX_BODY" in said, (path, said[:300])
        assert closed == [True], path
    # a GET with a body, which no route reads, is refused and its connection closed, with or without a login
    for head in ("", f"Cookie: {cookie}\r\n"):
        closed = []
        said = raw_request(
            server,
            f"GET /gradio_api/info HTTP/1.1\r\nHost: x\r\n{head}Transfer-Encoding: chunked\r\n\r\n",
            closed=closed,
        )
        assert said.startswith(b"HTTP/1.1 400") and closed == [True], said[:200]
    # a Gradio event's JSON becomes objects many times its size: 1 MB by default is what the largest needs
    two_mb = json.dumps({"data": [{}] * (1024 * 1024), "fn_index": 0, "session_hash": "x"})
    refused = alice.post("/gradio_api/queue/join", content=two_mb, headers={"Content-Type": "application/json"})
    assert refused.status_code == 413, refused.status_code
    basic = raw_request(
        server,
        "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nAuthorization: Basic YWxpY2U6YS1zZWNyZXQ=\r\n"  # a-secret
        f"Content-Length: {big}\r\n\r\n",
    )
    assert basic.startswith(b"HTTP/1.1 413"), basic[:300]
    # a body with no length, streamed past the cap, is cut off as it arrives, and its connection closed
    streamed = alice.post(
        "/gradio_api/queue/join",
        content=(b"x" * 1024 * 1024 for _ in range(20)),
        headers={"Content-Type": "application/json"},
    )
    assert streamed.status_code == 413 and "DIFFJEV_MAX_BODY" in streamed.json()["detail"]
    assert streamed.headers["connection"] == "close"
    assert alice.get("/config").status_code == 200  # and the studio goes on serving


def test_a_project_name_no_project_can_have_is_no_such_project_and_logged_cut(studio, caplog):
    server, _ = studio
    alice = logged_in(server, USERS[0])
    caplog.set_level(logging.WARNING, logger="diffjev")
    long_name = "p" * 5000
    for name in ("bad\x00name", long_name, "../etc"):
        refused = alice.get("/config", params={"project": name})
        assert refused.status_code == 403 and "that alice can open" in refused.json()["detail"], name
        assert len(refused.text) < 1000
    logged = [r.getMessage() for r in caplog.records if "may not open project" in r.getMessage()]
    assert len(logged) == 3 and all(len(line) < 400 for line in logged), [len(line) for line in logged]
    assert any("\\x00" in line for line in logged)


def test_a_nul_in_a_project_name_is_no_such_project_on_postgresql(postgres):
    import uuid

    import sqlalchemy as sa

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    db = Database(postgres.url.rsplit("/", 1)[0] + f"/{name}")
    with db.session() as session:
        repo.create_project(session, "payroll", Schema.from_dict({**TICKETS, "samples": 1}), "owner")
    with db.read() as session:
        assert repo.project_access(session, "payroll", "alice", admin=False) is not None
        assert repo.project_access(session, "pay\x00roll", "alice", admin=False) is None
        assert repo.project_access(session, "pay\x00roll", "alice", admin=True) is None
    db.engine.dispose()


def test_a_studio_with_no_login_answers_only_pages_on_this_machine(tmp_path, dgemma_engine):
    """With no login anyone who reaches it may do anything; a page on a host name whose DNS points at
    127.0.0.1 would be its own origin there (DNS rebinding) and read every item."""
    db = studio_db(tmp_path / "local.db", [f"{MARK}: charged twice"], dgemma_engine, name="payroll")
    server, _ = serve_studio(db, dgemma_engine, name="payroll")
    with server:
        rebound = f"rebind.attacker.example:{server.port}"
        refused = httpx.get(f"{server.url}/config", headers={"Host": rebound, "Origin": f"http://{rebound}"})
        assert refused.status_code == 403 and MARK not in refused.text
        assert "no login" in refused.json()["detail"] and "DIFFJEV_USERS" in refused.json()["detail"]
        page = httpx.get(f"{server.url}/", headers={"Host": rebound})  # a person opening it sees a page
        assert page.status_code == 403 and page.headers["content-type"].startswith("text/html")
        assert f"open it at http://127.0.0.1:{server.port}/" in page.text and MARK not in page.text
        asked = httpx.post(
            f"{server.url}/gradio_api/call/items_browse", headers={"Host": rebound}, json={"data": ["", "All", 1]}
        )
        assert asked.status_code == 403
        for odd in (f"evil.com@localhost:{server.port}", "localhost#.evil.com", f"localhost:{server.port} evil.com"):
            assert httpx.get(f"{server.url}/config", headers={"Host": odd}).status_code == 403, odd
        for own in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", f"[::1]:{server.port}"):
            assert httpx.get(f"{server.url}/config", headers={"Host": own}).status_code == 200, own
