"""What every tab of the studio shares: the database, the engine, the project, and who is acting."""

from __future__ import annotations

import html
import os
import re
import secrets
import tempfile
import threading
from dataclasses import dataclass, field
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


@dataclass
class Studio:
    db: Database
    # The engine, loaded in the background so the page serves at once; a ChosenEngine is held as loaded.
    slot: EngineSlot | ChosenEngine
    project: str
    # Exports are written here (a folder only this process's user can open) and handed to the browser as
    # Gradio downloads, at an unguessable address; the folder itself is never served.
    export_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="diffjev-exports-")))
    # Saved datasets a user may import by folder name; nothing outside it ($DIFFJEV_IMPORT_DIR).
    import_dir: Path = field(default_factory=lambda: Path(os.environ.get("DIFFJEV_IMPORT_DIR", "imports")))
    # The largest upload the studio accepts ($DIFFJEV_MAX_UPLOAD, Gradio's size syntax: "200mb", "1gb").
    max_upload: str = field(default_factory=lambda: os.environ.get("DIFFJEV_MAX_UPLOAD", "200mb"))
    hub_sign_in: bool = field(default_factory=hub_sign_in_configured)
    # Engine servers a user may name in the Pre-label tab, besides $DIFFJEV_VLLM_URL ($DIFFJEV_ENGINE_URLS).
    engine_urls: tuple[str, ...] = field(default_factory=configured_engine_urls)
    # Model folders a user may name in the Pre-label tab; nothing outside it ($DIFFJEV_MODEL_DIR).
    model_dir: Path = field(default_factory=default_model_dir)
    cancels: dict[str, threading.Event] = field(default_factory=dict)
    # The run each page picked in a tab's run list, by (page session, tab): kept here rather than passed
    # to the tab's API events, whose inputs clients already send (none picked: each item's latest read).
    picked_runs: dict[tuple[str, str], int | None] = field(default_factory=dict)
    # (handler, inputs, outputs) that fill a tab when the page loads
    on_load: list[tuple[Any, list, list]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.slot, ChosenEngine):
            self.slot = EngineSlot.holding(self.slot)

    def engine(self) -> Engine:
        """The studio's engine, or a page error: the model is still loading, or why there is none."""
        try:
            return self.slot.engine
        except EngineError as exc:
            raise refusal(exc) from None

    def schema(self) -> tuple[int, Schema, dict[str, int], int | None]:
        return project_schema(self.db, self.project)

    @staticmethod
    def annotator(request: gr.Request | None) -> str:
        """The signed-in user (a password login or a Hugging Face sign-in), else the one local annotator."""
        return getattr(request, "username", None) or LOCAL_ANNOTATOR

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
