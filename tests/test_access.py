"""Access: with logins on, no route answers without one; projects restricted to named users; paths that
cannot leave their folder; uploads with a size limit; secrets that never reach a log, an export or a page."""

import os
import subprocess
import sys

import httpx
import pytest
from gradio_client import Client, handle_file
from sqlalchemy import text

from diffjev.io import SourceError
from diffjev.services.importing import dataset_source
from diffjev.storage import repo
from conftest import SERVED_NAME
from studio_fixtures import serve_studio, studio_db

USERS = [("alice", "a-secret"), ("bob", "b-secret")]
MARK = "SECRET-ITEM-TEXT"
PROJECT = "vault-7"


@pytest.fixture(scope="module")
def studio(tmp_path_factory, dgemma_engine):
    folder = tmp_path_factory.mktemp("access")
    db = studio_db(folder / "access.db", [f"{MARK} {i}: the export is broken" for i in range(4)], dgemma_engine,
                   name=PROJECT)
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
OPEN = ("/", "/login", "/login/", "/logout", "/favicon.ico", "/theme.css", "/robots.txt", "/manifest.json",
        "/gradio_api/startup-events", "/gradio_api/theme.css", "/gradio_api/runs", "/gradio_api/runs/")
OPEN_PREFIXES = ("/svelte/", "/static/", "/assets/", "/pwa_icon", "/gradio_api/heartbeat/", "/gradio_api/user",
                 "/gradio_api/token", "/gradio_api/app_id")
REFUSED = (401, 403, 404, 405, 422)  # 422: a request refused for its shape, before anything is read


def test_every_route_needs_a_login(studio):
    server, context = studio
    export = context.export_dir / "labels.jsonl"
    named = [("GET", "/config"), ("GET", "/gradio_api/info"), ("POST", "/gradio_api/call/annotate_start"),
             ("POST", "/gradio_api/call/export"), ("POST", "/gradio_api/queue/join"), ("POST", "/gradio_api/upload"),
             ("POST", "/gradio_api/run/accept"), ("GET", f"/gradio_api/file={export}"),
             ("POST", "/v1/systemone"), ("GET", "/openapi.json"), ("GET", "/docs")]
    found = list(routes(server.server.config.app.routes))
    assert len(found) > 40 and ("POST", "/v1/systemone") in found
    checked, answered = 0, []
    for method, path in named + found:
        url = path.replace("{path_or_url:path}", str(export)).replace("{", "").replace("}", "")
        try:
            response = httpx.request(method, server.url + url, timeout=3, json={"data": []} if method == "POST" else None)
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
    assert alice.get("/config").status_code == 200
    assert MARK in alice.get(f"/gradio_api/file={export}").text


def test_a_non_member_cannot_open_a_restricted_project(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "members.db", [f"{MARK}: charged twice"], dgemma_engine, name="payroll")
    with db.session() as session:
        repo.set_members(session, "payroll", ["bob"], "owner")
    server, _ = serve_studio(db, dgemma_engine, name="payroll", auth=USERS)
    with server:
        refused = httpx.post(f"{server.url}/login", data={"username": "alice", "password": "a-secret"}, timeout=30)
        assert refused.status_code != 200 and MARK not in refused.text
        with pytest.raises(Exception):
            Client(server.url, auth=USERS[0], verbose=False)
        shown = Client(server.url, auth=USERS[1], verbose=False).predict("team", "Least confidence first",
                                                                          api_name="/annotate_start")
        assert MARK in shown[1]
        with db.session() as session:  # opened to every user: membership is read at each login
            repo.set_members(session, "payroll", None, "owner")
        assert httpx.post(f"{server.url}/login", data={"username": "alice", "password": "a-secret"},
                          timeout=30).status_code == 200


def test_downloads_cannot_leave_the_export_folder(studio):
    server, context = studio
    alice = logged_in(server, USERS[0])
    inside = context.export_dir / "labels.jsonl"
    assert alice.get(f"/gradio_api/file={inside}").status_code == 200
    secret = context.export_dir.parent / "outside-the-export-folder.txt"
    secret.write_text(MARK)
    for escape in (f"{context.export_dir}/../{secret.name}", f"{context.export_dir}/%2e%2e/{secret.name}",
                   str(secret), "/etc/passwd"):
        response = alice.get(f"/gradio_api/file={escape}")
        assert response.status_code in (403, 404) and MARK not in response.text, escape


@pytest.mark.parametrize("name, says", [
    ("../../etc", "without '..'"),
    ("/etc", "relative to the import folder"),
    ("sub/../../x", "without '..'"),
    ("not a dataset!", "is neither a folder under the import folder"),
])
def test_import_names_cannot_leave_the_import_folder(tmp_path, name, says):
    with pytest.raises(SourceError, match=says.replace("(", r"\(")):
        dataset_source(name, tmp_path)


def test_import_folder_names_resolve_inside_it_and_links_out_are_refused(tmp_path):
    (tmp_path / "saved").mkdir()
    assert dataset_source("saved", tmp_path) == str((tmp_path / "saved").resolve())
    assert dataset_source("owner/name", tmp_path) == "owner/name"  # a Hub name
    os.symlink("/etc", tmp_path / "link")
    with pytest.raises(SourceError, match="leads outside the import folder"):
        dataset_source("link", tmp_path)


def test_the_studio_refuses_an_import_name_outside_its_folder(studio):
    server, _ = studio
    with pytest.raises(Exception, match="without '..'"):
        Client(server.url, auth=USERS[0], verbose=False).predict(None, "../../etc", api_name="/import_preview")


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
    done = subprocess.run(cli + ["prelabel", "--db", str(path), "--project", "tickets", "--engine", "vllm", "--url",
                                 url, "--model", SERVED_NAME, "--tokenizer", str(tiny_model_folder)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and "completed: 3 read" in done.stdout, done.stderr[-2000:]
    said += [done.stdout, done.stderr]
    dead = subprocess.run(cli + ["prelabel", "--db", str(path), "--project", "tickets", "--engine", "vllm", "--url",
                                 "http://operator:" + SECRET_PASSWORD + "@127.0.0.1:9", "--model", SERVED_NAME,
                                 "--tokenizer", str(tiny_model_folder)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert "cannot reach the vLLM server at http://127.0.0.1:9" in dead.stdout + dead.stderr
    said += [dead.stdout, dead.stderr]
    out = tmp_path / "export"
    pushed = subprocess.run(cli + ["export", "--db", str(path), "--project", "tickets", "--format", "hf", "--all",
                                   "--out", str(out), "--push-to-hub", "someone/labels"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert pushed.returncode == 2, pushed.stderr[-2000:]
    said += [pushed.stdout, pushed.stderr]
    for name in ("x.jsonl", "x.csv"):
        assert subprocess.run(cli + ["export", "--db", str(path), "--project", "tickets", "--format", name[2:],
                                     "--all", "--out", str(tmp_path / name)], env=env, timeout=300).returncode == 0
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

    chosen = choose_engine(EngineChoice(kind="vllm", url=url, model=SERVED_NAME, tokenizer=str(tiny_model_folder),
                                        api_key=SECRET_KEY))
    with LocalServer(create_app(Studio(db, chosen, "tickets"))) as studio:
        page = httpx.get(studio.url + "/", timeout=30).text + httpx.get(studio.url + "/config", timeout=30).text
    chosen.engine.close()
    assert f"vLLM server at http://{host}" in page
    for secret in (SECRET_KEY, SECRET_TOKEN, SECRET_PASSWORD):
        assert secret not in page
