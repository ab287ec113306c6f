"""What every tab of the studio shares: the database, the engine, and, for each request, the project it acts
on and who is acting in which role (the Scope)."""

from __future__ import annotations

import functools
import html
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import gradio as gr

from diffjev.engines.auto import ChosenEngine
from diffjev.engines.base import Engine, EngineError
from diffjev.engines.slot import EngineSlot
from diffjev.schema import Schema
from diffjev.services.engine_access import configured_engine_urls, default_model_dir
from diffjev.services.annotation import project_schema
from storage.db import Database
from diffjev.ui.access import hub_sign_in_configured
from storage import repo

LOCAL_ANNOTATOR = "local"
# Every character Markdown or HTML could read as markup, as an HTML character reference: CommonMark shows
# a reference as its character and never reads it as syntax. ':' and '.' too, so no text becomes an
# autolink, inside which a reference (or a backslash escape) would be shown as written.
MARKUP = re.compile(r"[\\`*_{}\[\]()#+\-!|<>~&\"':.]")


def md_text(value: Any) -> str:
    """Text from anyone (an item's field, a file's column, a server's name, an error about them) placed
    inside a Markdown component, shown literally: `![x](http://...)` or `<img src=...>` in it is shown,
    never rendered, so no annotator's browser fetches anything because of it."""
    return MARKUP.sub(lambda m: f"&#{ord(m.group())};", str(value))


def refusal(message: Any) -> gr.Error:
    """An error for the page whose message may hold anyone's text: Gradio shows a message as HTML, so it is
    escaped, and an `<img>` in a dataset name or a column is shown, never loaded."""
    return gr.Error(html.escape(str(message), quote=False))  # quotes are plain text outside a tag


def admins_from_env() -> frozenset[str] | None:
    """$DIFFJEV_ADMINS: the users who may create, archive and delete projects and act as a reviewer of every
    project; None where it is not set."""
    raw = os.environ.get("DIFFJEV_ADMINS")
    if raw is None or not raw.strip():
        return None
    return frozenset(name.strip() for name in raw.split(",") if name.strip())


class NoProject(gr.Error):
    """The request names no project its user may open, or the user may open none yet."""


@dataclass(frozen=True)
class Scope:
    """One request's project and user, checked against the database when it was made: every handler acts
    through one, so another project's ids are simply not found, and a removed member is refused at once."""

    project: str
    project_id: int
    user: str
    role: str  # "admin", "reviewer" or "annotator"
    project_created: datetime | None = None

    @property
    def key(self) -> tuple:
        """The project itself, not only its name: one deleted and made again under that name is another."""
        return self.project, self.project_id, self.project_created

    def may_review(self) -> bool:
        return self.role in ("admin", "reviewer")

    def require_reviewer(self, doing: str) -> None:
        if not self.may_review():
            raise refusal(
                f"{doing} is for the reviewers and admins of {self.project}; {self.user} annotates it "
                f"(ask an admin to make you a reviewer)"
            )

    def require_admin(self, doing: str) -> None:
        if self.role != "admin":
            raise refusal(f"{doing} is for the studio's admins (DIFFJEV_ADMINS); {self.user} is not one")


def quiet_without_project(handler: Callable, outputs: list) -> Callable:
    """A page-load or timer handler that leaves its parts as they are where the page opened no project the
    user may open (or no longer may): the header says why, once, rather than every tab and every tick
    raising the same error."""

    @functools.wraps(handler)  # Gradio reads the handler's signature (its request parameter) through it
    def load(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except NoProject:
            skipped = tuple(gr.skip() for _ in outputs)
            return skipped[0] if len(skipped) == 1 else skipped

    return load


def project_param(request: gr.Request | None) -> str | None:
    """The project the page's address names (`?project=NAME`): Gradio's page sends its query string with
    every event, so each request carries the project of the tab it came from."""
    params = getattr(request, "query_params", None)
    if params is None:
        return None
    name = params.get("project")
    return name if isinstance(name, str) and name else None


@dataclass
class Studio:
    db: Database
    # The engine, loaded in the background so the page serves at once; a ChosenEngine is held as loaded.
    slot: EngineSlot | ChosenEngine
    # The project a page opens when its address names none (DIFFJEV_PROJECT, else the first).
    default_project: str
    # Exports are written here (a folder only this process's user can open) and handed to the browser as
    # Gradio downloads, at an unguessable address; the folder itself is never served.
    export_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="diffjev-exports-")))
    # Saved datasets a user may import by folder name; nothing outside it ($DIFFJEV_IMPORT_DIR).
    import_dir: Path = field(default_factory=lambda: Path(os.environ.get("DIFFJEV_IMPORT_DIR", "imports")))
    # The largest upload the studio accepts ($DIFFJEV_MAX_UPLOAD, Gradio's size syntax: "200mb", "1gb").
    max_upload: str = field(default_factory=lambda: os.environ.get("DIFFJEV_MAX_UPLOAD", "200mb"))
    hub_sign_in: bool = field(default_factory=hub_sign_in_configured)
    admins: frozenset[str] | None = field(default_factory=admins_from_env)
    # Engine servers a user may name in the Pre-label tab, besides $DIFFJEV_VLLM_URL ($DIFFJEV_ENGINE_URLS).
    engine_urls: tuple[str, ...] = field(default_factory=configured_engine_urls)
    # Model folders a user may name in the Pre-label tab; nothing outside it ($DIFFJEV_MODEL_DIR).
    model_dir: Path = field(default_factory=default_model_dir)
    cancels: dict[str, threading.Event] = field(default_factory=dict)
    # The run each page picked in a tab's run list, by (page session, tab): kept here rather than passed
    # to the tab's API events, whose inputs clients already send (none picked: each item's latest read).
    picked_runs: dict[tuple[str, str], int | None] = field(default_factory=dict)
    # What an import that made a project brought in (BundleReport.summary), by (user, project): the page
    # jumps to the new project's Annotate tab, which shows it to the one who imported until they dismiss it.
    import_notices: dict[tuple[str, str], str] = field(default_factory=dict)
    # (handler, inputs, outputs) that fill a tab when the page loads
    on_load: list[tuple[Any, list, list]] = field(default_factory=list)
    # (handler, inputs, outputs) that refresh what an import or its undo changed: the picker's item counts
    on_items_changed: list[tuple[Any, list, list]] = field(default_factory=list)
    # (handler, inputs, outputs) that refresh what an answer, a skip or an undo changed: the picker's share
    # answered
    on_answers_changed: list[tuple[Any, list, list]] = field(default_factory=list)
    # The file names of the downloads offered (offer_download), with the projects they are of
    _downloads: dict[str, set[str]] = field(default_factory=dict)
    _downloads_lock: threading.Lock = field(default_factory=threading.Lock)

    def after_answers(self, event: Any) -> Any:
        """Chain the on_answers_changed refreshes after an event that stores or takes back answers."""
        for handler, inputs, outputs in self.on_answers_changed:
            event = event.then(handler, inputs, outputs, queue=False, show_progress="hidden", api_visibility="private")
        return event

    def __post_init__(self) -> None:
        if isinstance(self.slot, ChosenEngine):
            self.slot = EngineSlot.holding(self.slot)

    def engine(self) -> Engine:
        """The studio's engine, or a page error: the model is still loading, or why there is none."""
        try:
            return self.slot.engine
        except EngineError as exc:
            raise refusal(exc) from None

    def schema(self, scope: Scope) -> tuple[int, Schema, dict[str, int], int | None]:
        return project_schema(self.db, scope.project)

    def is_admin(self, username: str | None) -> bool:
        """Whether a user runs the studio (creates, archives and deletes projects, opens every one): with no
        logins, the one local user; else those DIFFJEV_ADMINS names; with it unset, on a Space with Hugging
        Face sign-in, the Space's owner, and with password logins nobody."""
        if username is None:
            return True
        if self.admins is not None:
            return username in self.admins
        return self.hub_sign_in and username == os.environ.get("SPACE_AUTHOR_NAME")

    def acting(self, request: gr.Request | None) -> tuple[str, bool]:
        """Who acts (the signed-in user: a password login or a Hugging Face sign-in; else the one local
        annotator), and whether they are an admin."""
        username = getattr(request, "username", None) or None
        return username or LOCAL_ANNOTATOR, self.is_admin(username)

    def scope(self, request: gr.Request | None) -> Scope:
        """The request's project (its page's `?project=`, else the user's default) and the user's role in
        it, read from the database on every call; a page error where the user may not open it."""
        user, admin = self.acting(request)
        wanted = project_param(request)
        with self.db.read() as session:
            if wanted is None:
                names = repo.openable_projects(session, user, admin)
                wanted = self.default_project if self.default_project in names else next(iter(names), None)
                if wanted is None:
                    fix = "create one in the Manage tab" if admin else "ask an admin to add you to one"
                    raise NoProject(html.escape(f"{user} can open no project yet: {fix}", quote=False))
            found = repo.project_access(session, wanted, user, admin)
        if found is None:  # the same words whether it exists or not: nothing is learnt of others' projects
            said = f"no project named {wanted!r} that {user} can open; pick one from the project list"
            raise NoProject(html.escape(said, quote=False))
        return Scope(wanted, found.project_id, user, found.role, found.created_at)

    def offer_download(self, path: Path, project: str) -> str:
        """`path` as a download of `project`'s: Gradio serves it at an address that names no project, so the
        access gate asks download_projects() whose it is, and refuses anyone who may not open that project."""
        with self._downloads_lock:
            self._downloads.setdefault(path.name, set()).add(project)
        return str(path)

    def download_projects(self, name: str) -> frozenset[str]:
        """The projects a download of this file name was offered from (none: not an export)."""
        with self._downloads_lock:
            return frozenset(self._downloads.get(name, ()))

    def export_target(self, name: str) -> Path:
        """A fresh folder for one export (two exports in the same second never meet), and the file's path."""
        folder = self.export_dir / secrets.token_hex(16)
        folder.mkdir(mode=0o700)
        return folder / name

    def preview_builder(self) -> Any:
        """The canvas builder for previews: the engine's own when it reads canvases, else one over the
        offline Gemma tokenizer, loaded once. EngineNotReady while the model is still loading."""
        builder = getattr(self.slot.engine, "builder", None)
        if builder is None:
            builder = self._fallback_builder
        return builder

    @cached_property
    def _fallback_builder(self) -> Any:
        from diffjev.canvas import CanvasBuilder, ModelFormat
        from diffjev.models import offline_gemma_tokenizer

        tokenizer = offline_gemma_tokenizer()
        return CanvasBuilder(tokenizer, ModelFormat.from_tokenizer(tokenizer))
