"""The studio: the tabs, the header that names the engine, the Jev API on the same server, and start-up
(the database's location, a demo project on a first start, logins)."""

from __future__ import annotations

import html
import logging
import math
import os
import tempfile
from collections.abc import Callable
from typing import Any

import gradio as gr
import uvicorn
from fastapi import FastAPI, HTTPException
from sqlalchemy import select
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import HTTPConnection
from starlette.routing import Mount

from diffjev import passwords
from diffjev.api import BasicLogin, jev_router, password_matches
from diffjev.auth_throttle import ClientAddress, LoginThrottle, Throttled, current_address
from diffjev.demo import DEMO_PROJECT_SCHEMA, demo_tickets
from diffjev.engines.auto import EngineChoice, check_choice, choose_engine
from diffjev.engines.base import EngineError
from diffjev.engines.slot import EngineSlot
from diffjev.models import ModelLoadError
from diffjev.passwords import PasswordBook
from diffjev.schema import Schema
from diffjev.services.importing import import_items
from diffjev.services.annotation import run_model
from diffjev.services.prelabel import interrupt_stale_runs, latest_reading_run, prelabel_quick_first
from diffjev.settings import Listening, quiet_libraries, start_listening
from storage import repo
from storage.db import Database
from storage.models import Project
from diffjev.ui import adjudicate, annotate, data, item_view, items, playground, project, projects, review
from diffjev.ui.access import (
    REFUSED_EVENTS_JS,
    AccessGate,
    SignedOutSessions,
    LOCAL_HOST_NAMES,
    allowed_origins,
    byte_size,
    max_body,
    hub_sign_in_configured,
    hub_sign_in_refusal,
    signed_in_hub_user,
)
from diffjev.ui.context import NoProject, Studio, md_text, quiet_without_project

log = logging.getLogger("diffjev")
DEMO_PROJECT = "demo-support-tickets"
LOCAL_HOSTS = LOCAL_HOST_NAMES  # where the studio may listen, and the names it answers, with no login

# Two keyboard habits Gradio's controls break. Its Radio names each input apart (radio-1, radio-2), so the
# browser's arrow keys do not move within the group: ↑ ↓ ← → pick the previous or next choice, as in any
# radio group. A dropdown's list stays open when Tab takes the focus away (to another control, or to the page
# where none follows), covering the tabs and the keys line below it: it is closed as Escape closes it. Focus
# that leaves while a pointer is down is a click, on one of its options or elsewhere, which Gradio handles.
WIDGET_KEYS_JS = """
<script>
document.addEventListener("keydown", (e) => {
  const t = e.target;
  if (!t || t.type !== "radio" || e.ctrlKey || e.metaKey || e.altKey || e.shiftKey) return;
  const step = {ArrowDown: 1, ArrowRight: 1, ArrowUp: -1, ArrowLeft: -1}[e.key];
  const group = step && t.closest(".wrap");
  if (!group) return;
  const all = Array.from(group.querySelectorAll("input[type=radio]")).filter((r) => !r.disabled);
  if (all.length < 2 || all.every((r) => r.name === all[0].name)) return;  // one name: the browser moves itself
  e.preventDefault();
  e.stopPropagation();
  const next = all[(all.indexOf(t) + step + all.length) % all.length];
  next.focus();
  next.click();
}, true);
// Tab from a dropdown goes to the next control past it, its list closed: left to the browser, it may go into
// the list itself, which Gradio then redraws with the focus dropped on the page.
document.addEventListener("keydown", (e) => {
  const t = e.target;
  if (e.key !== "Tab" || !t || !t.getAttribute || t.getAttribute("role") !== "combobox") return;
  const block = t.closest(".block");
  if (!block) return;
  t.dispatchEvent(new KeyboardEvent("keydown", {key: "Escape", bubbles: true}));
  const focusable = "a[href], button, input, select, textarea, [tabindex]:not([tabindex='-1'])";
  const all = Array.from(document.querySelectorAll(focusable))
    .filter((el) => !el.disabled && el.offsetParent !== null && !block.contains(el));
  const next = e.shiftKey
    ? all.filter((el) => block.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_PRECEDING).pop()
    : all.find((el) => block.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING);
  e.stopPropagation();  // Gradio's own Tab handling would pick the highlighted option and keep the list
  if (next) { e.preventDefault(); next.focus(); }
}, true);
let pointing = false;
document.addEventListener("pointerdown", () => { pointing = true; }, true);
document.addEventListener("pointerup", () => { setTimeout(() => { pointing = false; }); }, true);
document.addEventListener("focusout", (e) => {
  const t = e.target, role = t && t.getAttribute && t.getAttribute("role");
  if ((role !== "combobox" && role !== "listbox") || pointing) return;  // Tab may pass through the list itself
  const block = t.closest(".block"), input = block && block.querySelector("input[role=combobox]");
  if (!input || (e.relatedTarget && block.contains(e.relatedTarget))) return;
  input.dispatchEvent(new KeyboardEvent("keydown", {key: "Escape", bubbles: true}));
}, true);
</script>
"""

CSS = """
.dj-item .dj-id { color: #6b7280; font-size: .85em; }
.dj-item .dj-text { white-space: pre-wrap; font-size: 1.15em; line-height: 1.5; }
.dj-fields th { text-align: left; padding-right: 1em; color: #6b7280; }
.dj-canvas { display: flex; flex-wrap: wrap; gap: 2px; font-family: monospace; }
.dj-tok { background: #f3f4f6; padding: 0 3px; white-space: pre; }
.dj-slot { background: #fde68a; padding: 0 3px; font-weight: bold; }
.dj-preview pre { white-space: pre-wrap; max-height: 20em; overflow: auto; }
"""
# Making a project is for admins (its handlers refuse anyone else): the form is not shown to others.
CSS += "body.dj-not-admin #new-project { display: none; }\n"
CSS += "body.dj-annotator button[role=tab]:is(%s) { display: none; }\n" % ", ".join(
    f"[data-tab-id={tab}]" for tab in projects.REVIEWERS_TABS
)


def default_db_location() -> str:
    """$DIFFJEV_DB, else /data/diffjev.db where /data is writable (Spaces' persistent storage), else ./diffjev.db."""
    if os.environ.get("DIFFJEV_DB"):
        return os.environ["DIFFJEV_DB"]
    if os.path.isdir("/data") and os.access("/data", os.W_OK):
        return "/data/diffjev.db"
    return "diffjev.db"


def ensure_project(db: Database, actor: str = "studio") -> tuple[str, bool]:
    """The project to open ($DIFFJEV_PROJECT, else the first), creating the demo on a first start.
    Returns (name, created)."""
    wanted = os.environ.get("DIFFJEV_PROJECT")
    with db.read() as session:
        names = list(session.scalars(select(Project.name).order_by(Project.id)))
    if wanted:
        if wanted not in names:
            raise repo.NotFound(
                f"DIFFJEV_PROJECT names {wanted!r}, which is not in the database; projects: "
                f"{', '.join(names) or 'none'}"
            )
        return wanted, False
    if names:
        return names[0], False
    with db.session() as session:
        repo.create_project(session, DEMO_PROJECT, Schema.from_dict(DEMO_PROJECT_SCHEMA), actor)
    import pandas as pd

    tickets = demo_tickets()
    label = f"the demo's {len(tickets)} tickets"
    import_items(db, DEMO_PROJECT, pd.DataFrame(tickets), id_field="id", actor=actor, label=label)
    return DEMO_PROJECT, True


def users_from_env() -> list[tuple[str, str]] | None:
    """DIFFJEV_USERS="alice:secret,bob:scrypt:32768:8:1$salt$hex" turns on the login: each user's plain
    password or its hash (`diffjev hash-password` prints one)."""
    raw = os.environ.get("DIFFJEV_USERS", "").strip()
    if not raw:
        return None
    pairs = []
    for entry in raw.split(","):
        name, sep, password = entry.strip().partition(":")
        if not sep or not name or not password:
            raise ValueError("DIFFJEV_USERS must be user:password pairs separated by commas")
        if passwords.is_hash(password):
            try:
                passwords.check_hash(password)
            except passwords.BadHash as exc:
                raise ValueError(f"DIFFJEV_USERS: the password of {name!r} {exc}") from None
        pairs.append((name, password))
    LoginThrottle.from_env()  # a wrong backoff setting is reported at start-up, with the logins
    return pairs


def members_note_text(studio: Studio, request: gr.Request) -> str:
    """On a Space with Hugging Face sign-in: who may annotate, and how to change it."""
    name = studio.scope(request).project
    with studio.db.read() as session:
        members = session.scalar(select(Project.members).where(Project.name == name))
    if members is None:
        return (
            f"Any signed-in Hugging Face user may annotate **{md_text(name)}**. To restrict it, "
            # a code span shows references as written; a project name holds no backtick (repo.PROJECT_NAME)
            f"run `diffjev members --project {name} user1,user2`."
        )
    return f"Members of **{md_text(name)}**: {md_text(', '.join(members))}."


def header_text(studio: Studio, project_name: str, latest_run: repo.RunRow | None = None) -> str:
    """The header: which model makes the pre-labels, or that it is still loading, or why there is none;
    and, where the project's latest run was made by another model (an imported project's, say), that the
    suggestions on screen are that run's."""
    slot, project = studio.slot, f" · project **{md_text(project_name)}**"
    if latest_run is not None:
        engine = slot.chosen.engine if slot.chosen is not None else None
        if engine is None or (latest_run.engine, latest_run.model) != (engine.name, engine.model_name):
            model = run_model(latest_run.engine, latest_run.model)
            project += f" · **Suggestions shown from:** run {latest_run.id}, {md_text(model)}"
    if slot.chosen is not None:
        warning = "⚠️ " if slot.chosen.fallback else ""
        return f"# diffjev\n{warning}**Pre-labels from:** {md_text(slot.chosen.description)}{project}"
    if slot.error is not None:
        return (
            f"# diffjev\n⚠️ **No model for pre-labels:** {md_text(slot.error)}. Annotating, import, review and "
            f"export work without one{project}"
        )
    return f"# diffjev\n⏳ **Loading the model …** pre-labels start when it is ready{project}"


def signed_in_line(request: gr.Request | None) -> str:
    """Who is signed in, and the way out; nothing where nobody signs in (the one local annotator)."""
    username = getattr(request, "username", None)
    if not username:
        return ""
    return f"  \nSigned in as **{md_text(username)}** · [Sign out](/logout)"


def header_update(studio: Studio, request: gr.Request) -> tuple[str, gr.Timer]:
    try:
        name = studio.scope(request).project
        text = header_text(studio, name, latest_reading_run(studio.db, name)) + signed_in_line(request)
    except NoProject as exc:  # said once, here, while every tab leaves its parts as they are
        text = f"# diffjev\n⚠️ {md_text(html.unescape(exc.message))}" + signed_in_line(request)
    return text, gr.Timer(active=not studio.slot.settled)


def build_blocks(studio: Studio) -> gr.Blocks:
    with gr.Blocks(title="diffjev") as blocks:
        # Filled when the page loads: the page served before a login names no project.
        banner = gr.Markdown("# diffjev", elem_id="engine-banner")
        # While the model loads, the header follows it without a page reload; the timer stops once it settled.
        header_timer = gr.Timer(1.0, active=not studio.slot.settled)

        def header(request: gr.Request) -> tuple[str, gr.Timer]:
            return header_update(studio, request)

        header_timer.tick(header, [], [banner, header_timer], api_visibility="private", show_progress="hidden")
        studio.on_load.append((header, [], [banner, header_timer]))
        if studio.hub_sign_in:  # a Space with `hf_oauth: true`: sign in with Hugging Face
            gr.LoginButton()
            members_note = gr.Markdown(elem_id="members-note")

            def members_note_shown(request: gr.Request) -> str:
                return members_note_text(studio, request)

            studio.on_load.append((members_note_shown, [], [members_note]))
        projects.build_picker(studio)
        with gr.Tabs() as tabs:
            with gr.Tab("Annotate", id="annotate"):
                item_view.build_tab(studio)
            with gr.Tab("Project", id="project"):
                project.build(studio)
            with gr.Tab("Import", id="import"):
                data.build_import(studio)
            with gr.Tab("Items", id="items"):
                items.build(studio)
            with gr.Tab("Pre-label", id="prelabel"):
                data.build_prelabel(studio)
            with gr.Tab("Review", id="review") as review_tab:
                review.build(studio, review_tab)
            with gr.Tab("Adjudicate", id="adjudicate") as adjudicate_tab:
                adjudicate.build(studio, adjudicate_tab)
            with gr.Tab("Export", id="export"):
                data.build_export(studio)
            with gr.Tab("Try a read", id="try"):
                playground.build(studio.slot)
            with gr.Tab("Manage", id="projects"):
                projects.build(studio)
        # An annotator's page shows the tabs for answering; the handlers of the others refuse them too. The
        # tabs are hidden by a class on the page: Gradio 6.31's pages ignore a Tab's `visible`.
        role = gr.Textbox(visible="hidden", elem_id="dj-role")

        def role_of(request: gr.Request) -> str:
            if studio.acting(request)[1]:  # an admin, even with no project left to open (to make one)
                return "admin"
            return studio.scope(request).role

        blocks.load(quiet_without_project(role_of, [role]), [], [role], api_visibility="private").then(
            None,
            [role],
            None,
            js="(role) => { document.body.classList.toggle('dj-annotator', role === 'annotator'); "
            "document.body.classList.toggle('dj-not-admin', role !== 'admin'); }",
        )
        studio.on_load.append((projects.opening_tab(studio), [], [tabs]))
        for handler, inputs, outputs in studio.on_load:
            blocks.load(quiet_without_project(handler, outputs), inputs, outputs, api_visibility="private")
    return blocks


def login_check(studio: Studio, users: list[tuple[str, str]], throttle: LoginThrottle | None = None):
    """Gradio's login: the password, and membership of at least one project (each request is then checked
    against the project it names). Failed attempts back off per user and per address (429 while refused)."""
    book = PasswordBook(users)
    throttle = throttle or LoginThrottle.from_env()

    def check(username: str, password: str) -> bool:
        try:
            ok = throttle.check(username, current_address(), lambda: password_matches(book, username, password))
        except Throttled as exc:
            raise HTTPException(429, str(exc), headers={"Retry-After": str(math.ceil(exc.seconds))}) from None
        if not ok:
            return False
        if studio.is_admin(username):  # an admin signs in even with no project left, to make one
            return True
        with studio.db.read() as session:
            member = repo.member_of_any(session, username)
        if not member:  # the right password: say why, not "incorrect credentials"
            log.warning("refused the login of %r: a member of no project", username)
            raise HTTPException(403, f"{username} is not a member of any project; ask an admin to add you to one")
        return True

    return check


def create_app(studio: Studio, auth: list[tuple[str, str]] | None = None) -> FastAPI:
    """The studio's server: the Jev API at /v1/systemone and the Gradio app at /, behind one gate that
    checks the signed-in user against the project's members on every request.

    Logins are passwords (`auth`) or, on a Space with OAuth and no passwords, Hugging Face sign-in."""
    hub_sign_in = auth is None and studio.hub_sign_in
    # With logins on, no route answers without one: the API's own docs and schema are closed too.
    closed = {"docs_url": None, "redoc_url": None, "openapi_url": None} if auth or hub_sign_in else {}
    app = FastAPI(title="diffjev studio", **closed)
    throttle = LoginThrottle.from_env()  # one backoff for the login page and the API
    app.add_middleware(ClientAddress)

    def may_use(user: str, project: str | None) -> bool:
        """The project a request names (its page's `?project=`), else any project: the user may open it."""
        if studio.is_admin(user):  # every project, and the page where none is left yet to open
            return True
        with studio.db.read() as session:
            if project is None:
                return repo.member_of_any(session, user)
            return repo.project_access(session, project, user, admin=False) is not None

    def may_read(user: str) -> bool:  # the Jev API holds no project's data: a member of any project may read
        return may_use(user, None)

    basic_login = BasicLogin(auth, throttle) if auth else None
    app.include_router(jev_router(lambda: studio.slot.engine, basic_login, may_read))
    if auth or hub_sign_in:  # the mounted Gradio app would serve its own OpenAPI schema here

        @app.get("/openapi.json", include_in_schema=False)
        def no_schema_without_a_login() -> None:
            raise HTTPException(404)

    blocks = build_blocks(studio)
    gr.mount_gradio_app(
        app,
        blocks,
        path="/",
        auth=login_check(studio, auth, throttle) if auth else None,
        auth_dependency=signed_in_hub_user if hub_sign_in else None,
        auth_message="Log in with your diffjev user and password.",
        css=CSS + playground.CSS + item_view.CSS,
        head=WIDGET_KEYS_JS + annotate.KEYS_JS + item_view.KEYS_JS + REFUSED_EVENTS_JS,
        max_file_size=studio.max_upload,
        # Only messages written for people (gr.Error) reach the page; anything else, such as
        # a database error with its SQL and parameters, stays in the server's log.
        show_error=False,
    )
    # Gradio refuses a file value outside its upload folder (a client can post any server path as a file)
    # only in an app it has launched; a mounted app never is, so the check would be skipped on every route.
    blocks.has_launched = True
    gradio_app = next(route.app for route in app.routes if isinstance(route, Mount))

    def password_user(connection: HTTPConnection) -> str | None:
        token = connection.cookies.get(f"access-token-{gradio_app.cookie_id}") or connection.cookies.get(
            f"access-token-unsecure-{gradio_app.cookie_id}"
        )
        return gradio_app.tokens.get(token) if token else None

    origins = allowed_origins()
    # Gradio's own CORS answers any origin with credentials once the host is not localhost; it stands aside
    # when the app it is mounted in configures CORS. So this one does: listed origins only (the gate has
    # refused every other site's request before it gets here).
    app.add_middleware(
        CORSMiddleware, allow_origins=sorted(origins), allow_credentials=True, allow_methods=["*"], allow_headers=["*"]
    )
    app.add_middleware(
        AccessGate,
        may_use=may_use,
        password_user=password_user if auth else None,
        api_user=basic_login.user if basic_login else None,
        hub_sign_in=hub_sign_in,
        signed_out=SignedOutSessions(studio.db),
        download_projects=studio.download_projects,
        origins=origins,
        # with no sign-in at all, only pages on this machine (DIFFJEV_ALLOW_ANONYMOUS=1 serves it open)
        hosts=frozenset(LOCAL_HOSTS) if not (auth or hub_sign_in or anonymous_on_purpose()) else None,
        max_body=max_body(),
        max_upload=byte_size("DIFFJEV_MAX_UPLOAD", studio.max_upload),
    )
    return app


def anonymous_on_purpose() -> bool:
    """DIFFJEV_ALLOW_ANONYMOUS=1: served with no login beyond this machine, on purpose."""
    return os.environ.get("DIFFJEV_ALLOW_ANONYMOUS") == "1"


def trusted_proxies() -> str | None:
    """DIFFJEV_TRUSTED_PROXIES: the addresses (comma-separated, or *) of reverse proxies whose
    X-Forwarded-For names the client; None: no proxy is believed, each request's own address counts.
    uvicorn believes one from 127.0.0.1 by default, so anyone on this machine could send a login failure
    from any address they name, or lock another's address out."""
    raw = os.environ.get("DIFFJEV_TRUSTED_PROXIES", "").strip()
    return raw or None


def server_config(app: FastAPI, host: str, port: int) -> uvicorn.Config:
    """How the studio's server runs: X-Forwarded-For believed from DIFFJEV_TRUSTED_PROXIES only."""
    proxies = trusted_proxies()
    return uvicorn.Config(
        app, host=host, port=port, log_level="warning", proxy_headers=proxies is not None, forwarded_allow_ips=proxies
    )


def listening_refusal(host: str, auth: list | None, hub_sign_in: bool) -> str | None:
    """Why the studio must not listen on `host`, or None. Beyond localhost, anyone who reaches it could
    read and write every item: that needs a login, or an explicit DIFFJEV_ALLOW_ANONYMOUS=1."""
    if auth or hub_sign_in or host in LOCAL_HOSTS or anonymous_on_purpose():
        return None
    return (
        f"refusing to listen on {host} with no login: anyone who can reach it could read and change every "
        f"item. Set DIFFJEV_USERS=user:password,... (or enable Hugging Face sign-in on a Space), or set "
        f"DIFFJEV_ALLOW_ANONYMOUS=1 to serve it open on purpose."
    )


def main(listening: Listening | None = None) -> None:
    """`python app.py`: the port is bound first (a taken one is said at once), the page serves within
    seconds, and the model loads in the background while the header says so."""
    listening = listening or start_listening()
    quiet_libraries()
    logging.basicConfig(level=logging.WARNING, format="diffjev: %(message)s")
    log.setLevel(logging.INFO)
    try:
        auth = users_from_env()
        refusal = listening_refusal(listening.host, auth, hub_sign_in_configured())  # before any slow work
        mocked_sign_in = hub_sign_in_refusal() if auth is None else None
        if mocked_sign_in and listening.host not in LOCAL_HOSTS:
            raise ValueError(mocked_sign_in)
        if refusal:
            raise ValueError(refusal)
        if mocked_sign_in:
            log.warning("Hugging Face sign-in is off: %s", mocked_sign_in)
        allowed_origins(), max_body()  # a malformed setting is said at start-up
        check_choice(EngineChoice())  # a wrong engine setting is said now, not after the page is up
        db = Database(default_db_location())
        name, created = ensure_project(db)
        # A run still marked running was left by a studio that stopped: say so in the run list, resumable.
        interrupted = interrupt_stale_runs(db)
    except (EngineError, ModelLoadError, repo.NotFound, ValueError) as exc:  # settings a person can fix
        raise SystemExit(f"diffjev: {exc}") from None
    log.info("database %s, project %s", db.url, name)
    if interrupted:
        log.info("runs %s were left running by a studio that stopped: marked interrupted", interrupted)
    # Gradio serves every file in its folder to anyone logged in to the app, and its default folder is one
    # per machine: a user of another studio (another project) could fetch this one's downloads and uploads
    # by their address. So each studio process keeps its files in a folder of its own.
    os.environ.setdefault("GRADIO_TEMP_DIR", tempfile.mkdtemp(prefix="diffjev-files-"))
    # On a first start there is something to label at once: the demo is pre-labeled as soon as the model is up.
    demo_prelabel = (lambda chosen: prelabel_quick_first(db, name, chosen.engine)) if created else None
    slot = EngineSlot.loading(lambda: choose_engine(EngineChoice()), then=demo_prelabel)
    studio = Studio(db, slot, name)
    if auth is None and listening.host not in LOCAL_HOSTS and not studio.hub_sign_in:
        log.warning(
            "listening on %s with no login (DIFFJEV_ALLOW_ANONYMOUS=1): anyone who can reach it can "
            "annotate as 'local'.",
            listening.host,
        )
    # The model loads once the page serves: loading it beside Gradio's start-up would slow both down.
    serve(create_app(studio, auth), listening, then=slot.start)


class AnnouncedServer(uvicorn.Server):
    """uvicorn's server, saying where it serves once it does, as Gradio says it, then running `then`."""

    def __init__(self, config: uvicorn.Config, url: str, then: Callable[[], Any]):
        super().__init__(config)
        self.url, self.then = url, then

    async def startup(self, sockets: list | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            print(f"Running on {self.url}", flush=True)
            self.then()


def serve(app: FastAPI, listening: Listening, then: Callable[[], Any] = lambda: None) -> None:
    """Serves on the socket bound at start-up until stopped; `then` runs once the server is up."""
    config = server_config(app, listening.host, listening.port)
    server = AnnouncedServer(config, listening.url, then)
    server.run(sockets=[listening.sock])
    if not server.started:
        # Nothing may go on pre-labeling in the background with no page to show it: the process ends here.
        raise SystemExit(f"diffjev: the server on {listening.url} did not start (see above)")


if __name__ == "__main__":
    main()
