"""Runs in a real browser: a refused run leaves the queue and the export as they were, a run still
reading never empties the queue and shows its progress on the Annotate tab, and the Pre-label tab lists
and deletes runs."""

import json
import threading
import time

from sqlalchemy import select

from diffjev.engines.base import Engine
from diffjev.services.prelabel import prelabel
from storage.models import Run
from conftest import TICKETS
from faulty_servers import closed_port_url
from studio_fixtures import choose, one_question_at_a_time, serve_studio, studio_db

TEMPLATED = {**TICKETS, "samples": 1, "template": "Urgent: {urgent}\nTeam: {team}\nTone: {tone}"}
TEXTS = ["The site is down", "Refund my invoice", "Add two seats", "Reset my password"]


def text_of(selector: str) -> str:
    return f"(document.querySelector('{selector}') || {{innerText: ''}}).innerText"


class Slow(Engine):
    """The tiny engine, one item at a time, each after a pause: a run that takes a while."""

    def __init__(self, inner, pause_s: float, go: threading.Event):
        self.inner, self.pause_s, self.go = inner, pause_s, go
        self.name, self.model_name = "slow", "tiny"

    def check_schema(self, schema):
        self.inner.check_schema(schema)

    def decide_many(self, schema, states, seed=42):
        for state in states:
            self.go.wait(60)
            time.sleep(self.pause_s)
            yield from self.inner.decide_many(schema, [state], seed)


def test_a_refused_jev_run_leaves_the_queue_and_the_export(browser, tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "refused.db", TEXTS, dgemma_engine, schema=TEMPLATED)
    dead = closed_port_url()
    server, _ = serve_studio(db, dgemma_engine, engine_urls=(dead,))
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        page.get_by_role("tab", name="Pre-label").click()
        choose(page, "#prelabel-engine", "jev")
        page.locator("#prelabel-url textarea, #prelabel-url input").first.fill(dead)
        page.locator("#prelabel-start").click()
        page.wait_for_selector("text=cannot use a custom template", timeout=30_000)
        page.get_by_role("tab", name="Annotate").click()
        one_question_at_a_time(page)
        choose(page, "#annotate-question", "team")
        page.locator("#annotate-start").click()
        page.wait_for_selector("#item .dj-text")
        assert "Model:" in page.inner_text("#suggestion-info")
        page.get_by_role("tab", name="Export").click()
        page.locator("#export-reviewed input").uncheck()
        page.locator("#export-go").click()
        page.wait_for_function(f"{text_of('#export-note')}.includes('Exported 4 items')")
        with page.expect_download() as download:
            page.locator("#export-download").click()
        rows = [json.loads(line) for line in open(download.value.path()).read().splitlines()]
    assert all(r["team_model"] is not None for r in rows)
    with db.read() as session:
        assert len(session.scalars(select(Run.id)).all()) == 1  # the refused run was never made


def test_a_run_in_progress_keeps_the_queue_shows_its_progress_and_runs_are_listed_and_deleted(
    browser, tmp_path, dgemma_engine
):
    db = studio_db(tmp_path / "progress.db", TEXTS, dgemma_engine)
    go = threading.Event()
    slow = Slow(dgemma_engine, 2.0, go)
    background = threading.Thread(target=prelabel, args=(db, "tickets", slow), daemon=True)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        background.start()
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        # the Pre-label tab of a page opened while the run reads shows its progress (a reload lost it)
        page.get_by_role("tab", name="Pre-label").click()
        page.wait_for_function(f"{text_of('#prelabel-live')}.includes('Pre-labeling (run 2): 0/4 read')")
        page.get_by_role("tab", name="Annotate").click()
        # the new run has stored nothing yet: the queue still serves the first run's suggestions
        one_question_at_a_time(page)
        choose(page, "#annotate-question", "team")
        page.locator("#annotate-start").click()
        page.wait_for_selector("#item .dj-text")
        assert "Model:" in page.inner_text("#suggestion-info")
        go.set()
        # the run's progress, from its first stored item on, without reloading the page
        page.wait_for_function(f"/Pre-labeling \\(run 2\\): [1-3]\\/4 read/.test({text_of('#annotate-prelabel')})")
        line = page.inner_text("#annotate-prelabel")
        assert "items/s" in line and "ETA" in line
        background.join(60)
        page.get_by_role("tab", name="Pre-label").click()
        page.wait_for_function(f"{text_of('#prelabel-runs')}.includes('slow')")
        runs = page.inner_text("#prelabel-runs")
        assert "completed" in runs and "transformers" in runs
        page.reload()
        page.get_by_role("tab", name="Pre-label").click()
        choose(page, "#prelabel-run", next(o for o in run_options(db) if o.startswith("Run 2 ")))
        page.locator("#prelabel-delete").click()  # not ticked: nothing is deleted
        page.wait_for_function(f"{text_of('#prelabel-report')}.includes('Nothing deleted')")
        assert "slow" in page.inner_text("#prelabel-runs")
        page.get_by_label("Yes, delete run 2 and its suggestions; answers stay").check()
        page.locator("#prelabel-delete").click()
        page.wait_for_function(f"{text_of('#prelabel-report')}.includes('Deleted run 2')")
        page.wait_for_function(f"!{text_of('#prelabel-runs')}.includes('slow')")
    with db.read() as session:
        assert session.scalars(select(Run.id)).all() == [1]


def run_options(db):
    with db.read() as session:
        return [f"Run {r.id} · {r.engine} {r.model_name} · {r.status}" for r in session.scalars(select(Run))]


def test_a_fresh_page_preselects_the_newest_resumable_run(browser, tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "resumable.db", TEXTS, dgemma_engine)
    prelabel(db, "tickets", dgemma_engine)
    prelabel(db, "tickets", dgemma_engine)
    with db.session() as session:  # run 2 stopped part way; run 3, the newest, completed
        session.get(Run, 2).status = "interrupted"
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        page.get_by_role("tab", name="Pre-label").click()
        page.wait_for_function("document.querySelector('#prelabel-run input').value.startsWith('Run 2 ')")
        page.locator("#prelabel-resume").click()
        page.wait_for_function(f"/Run 2 \\*?\\*?completed/.test({text_of('#prelabel-report')})", timeout=60_000)
        assert "Choose a run" not in page.inner_text("body")
        page.close()
