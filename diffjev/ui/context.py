"""What every tab of the studio shares: the database, the engine, the project, and who is acting."""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import gradio as gr

from diffjev.engines.auto import ChosenEngine
from diffjev.schema import Schema
from diffjev.services.engine_access import configured_engine_urls, default_model_dir
from diffjev.services.annotation import project_schema
from diffjev.storage.db import Database

LOCAL_ANNOTATOR = "local"


@dataclass
class Studio:
    db: Database
    chosen: ChosenEngine
    project: str
    export_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="diffjev-exports-")))
    # Saved datasets a user may import by folder name; nothing outside it ($DIFFJEV_IMPORT_DIR).
    import_dir: Path = field(default_factory=lambda: Path(os.environ.get("DIFFJEV_IMPORT_DIR", "imports")))
    # The largest upload the studio accepts ($DIFFJEV_MAX_UPLOAD, Gradio's size syntax: "200mb", "1gb").
    max_upload: str = field(default_factory=lambda: os.environ.get("DIFFJEV_MAX_UPLOAD", "200mb"))
    # Engine servers a user may name in the Pre-label tab, besides $DIFFJEV_VLLM_URL ($DIFFJEV_ENGINE_URLS).
    engine_urls: tuple[str, ...] = field(default_factory=configured_engine_urls)
    # Model folders a user may name in the Pre-label tab; nothing outside it ($DIFFJEV_MODEL_DIR).
    model_dir: Path = field(default_factory=default_model_dir)
    cancels: dict[str, threading.Event] = field(default_factory=dict)
    # (handler, inputs, outputs) that fill a tab when the page loads
    on_load: list[tuple[Any, list, list]] = field(default_factory=list)

    def schema(self) -> tuple[int, Schema, dict[str, int], int | None]:
        return project_schema(self.db, self.project)

    @staticmethod
    def annotator(request: gr.Request | None) -> str:
        """The logged-in user (Gradio login or Hugging Face OAuth), else the one local annotator."""
        if request is None:
            return LOCAL_ANNOTATOR
        if getattr(request, "username", None):
            return request.username
        try:  # a Space with `hf_oauth: true` keeps the signed-in user in the session
            info = request.session.get("oauth_info") or {}
            return info.get("userinfo", {}).get("preferred_username") or LOCAL_ANNOTATOR
        except (AttributeError, AssertionError, KeyError):  # no session middleware: no OAuth here
            return LOCAL_ANNOTATOR

    def preview_builder(self) -> Any:
        """The canvas builder for previews: the engine's own when it reads canvases, else one over the
        offline Gemma tokenizer, loaded once."""
        builder = getattr(self.chosen.engine, "builder", None)
        if builder is None:
            builder = self._fallback_builder
        return builder

    @cached_property
    def _fallback_builder(self) -> Any:
        from diffjev.canvas import CanvasBuilder, ModelFormat
        from diffjev.models import offline_gemma_tokenizer

        tokenizer = offline_gemma_tokenizer()
        return CanvasBuilder(tokenizer, ModelFormat.from_tokenizer(tokenizer))
