"""A real studio on localhost: a temporary SQLite file, a tiny-model engine, uvicorn in a thread."""

from __future__ import annotations

import json

import pandas as pd

from diffjev import Schema
from diffjev.engines.auto import ChosenEngine
from diffjev.engines.slot import EngineSlot
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database
from diffjev.ui.context import Studio
from diffjev.ui.studio import create_app, server_config
from conftest import LocalServer, TICKETS

BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def studio_db(path, texts, prelabel_with=None, name="tickets", schema=None):
    db = Database(path)
    with db.session() as session:
        repo.create_project(session, name, Schema.from_dict(schema or {**TICKETS, "samples": 1}), "owner")
    import_items(db, name, pd.DataFrame({"id": [f"t{i}" for i in range(len(texts))], "text": texts}), id_field="id")
    if prelabel_with is not None:
        prelabel(db, name, prelabel_with)
    return db


def serve_studio(db, engine, name="tickets", auth=None, **settings):
    """`engine`: an engine, held as loaded, or an EngineSlot that loads one as the test lets it."""
    tiny = "transformers, tiny random DiffusionGemma"
    held = engine if isinstance(engine, EngineSlot) else ChosenEngine(engine, tiny)
    studio = Studio(db, held, name, **settings)
    return LocalServer(create_app(studio, auth), config=server_config), studio


def choose(page, dropdown: str, option: str) -> None:
    """Pick a dropdown option with the mouse, and wait until the dropdown shows it."""
    page.locator(f"{dropdown} input").click()
    page.get_by_role("option", name=option, exact=True).click()
    page.wait_for_function(f"document.querySelector('{dropdown} input').value === {json.dumps(option)}")


def one_question_at_a_time(page) -> None:
    """Switch the Annotate tab to the one-question view (the item view is the default for up to six
    questions), once the page load has set the default; nothing when it is on already."""
    if page.locator("#annotate-start").is_visible():
        return
    page.locator("#itemview-queue").wait_for()
    page.get_by_label("One question at a time").check()
    page.locator("#annotate-start").wait_for()
