"""The Annotate tab picks pre-labels up as they are stored, in a real browser (Debian chromium through
Playwright): an empty queue turns into a card, and a card without a suggestion shows its distribution,
without pressing anything or reloading; the card being answered stays the same item."""

import json
import threading

from sqlalchemy import func, select

from diffjev.services.prelabel import prelabel
from storage.models import Item, Response, Run, Suggestion
from conftest import TICKETS
from studio_fixtures import choose, one_question_at_a_time, serve_studio, studio_db

TEXTS = [f"Ticket number {i}: the export is failing" for i in range(4)]
DISTRIBUTION = "#distribution [data-testid$='-confidence-set']"


def start(page, queue: str) -> None:
    one_question_at_a_time(page)
    choose(page, "#annotate-question", "team")
    choose(page, "#annotate-queue", queue)
    page.locator("#annotate-start").click()


def read_in_the_background(db, engine, run_id=None) -> threading.Thread:
    thread = threading.Thread(target=prelabel, args=(db, "tickets", engine), kwargs={"run_id": run_id}, daemon=True)
    thread.start()
    return thread


def test_an_empty_queue_turns_into_a_card_when_suggestions_arrive(browser, tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "empty.db", TEXTS, schema={**TICKETS, "samples": 1})
    cancel = threading.Event()
    # A run stopped after its first batch, one item: the queue holds that item alone until it goes on.
    first = prelabel(db, "tickets", dgemma_engine, cancel=cancel, progress=lambda p: cancel.set())
    assert first.read == 1
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        start(page, "Least confidence first")
        page.wait_for_selector(DISTRIBUTION)
        assert page.inner_text("#item .dj-id") == "item t0"
        page.locator("#pick-1").click()
        page.wait_for_function("document.querySelector('#annotate-progress').innerText.includes('Nothing left')")
        assert page.locator(DISTRIBUTION).count() == 0
        read_in_the_background(db, dgemma_engine, first.run_id).join(120)
        # Nothing is pressed: the tab's own tick finds the stored suggestions and shows the next card.
        page.wait_for_selector(DISTRIBUTION, timeout=30_000)
        picked = page.inner_text("#item .dj-id")
        assert picked in {"item t1", "item t2", "item t3"}
        assert "Nothing left" not in page.inner_text("#annotate-progress")
        # The card the tick brought is the one a key answers (the tick updated the session, not only the page).
        page.locator("#accept").click()
        page.wait_for_function(f"document.querySelector('#item .dj-id').innerText !== {json.dumps(picked)}")
        with db.read() as session:
            answered = session.scalars(
                select(Item.external_id).join(Response, Response.item_id == Item.id).order_by(Response.id)
            ).all()
        assert answered == ["t0", picked.removeprefix("item ")]


def test_the_card_being_answered_gets_its_suggestion_and_stays(browser, tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "card.db", TEXTS, schema={**TICKETS, "samples": 1})
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        start(page, "Unlabeled, in order")
        page.wait_for_function("document.querySelector('#suggestion-info').innerText.includes('No suggestion')")
        shown = page.inner_text("#item .dj-id")
        assert page.locator(DISTRIBUTION).count() == 0
        reading = read_in_the_background(db, dgemma_engine)
        page.wait_for_selector(DISTRIBUTION, timeout=30_000)
        assert page.inner_text("#item .dj-id") == shown  # the same item, now with its distribution
        answer = page.inner_text("#suggestion-info")
        assert answer.startswith("Model: ")
        reading.join(120)
        # A second run makes newer suggestions current; the card on screen keeps the one it showed.
        prelabel(db, "tickets", dgemma_engine)
        page.wait_for_timeout(4_000)  # two ticks
        assert page.inner_text("#item .dj-id") == shown and page.inner_text("#suggestion-info") == answer
        # Accepting answers the item on screen with the suggestion it showed (the first run's).
        page.locator("#accept").click()
        page.wait_for_function(f"document.querySelector('#item .dj-id').innerText !== {json.dumps(shown)}")
        with db.read() as session:
            response = session.scalar(select(Response))
            item = session.scalar(select(Item.external_id).where(Item.id == response.item_id))
            run = session.scalar(select(Suggestion.run_id).where(Suggestion.id == response.suggestion_id))
            first_run = session.scalar(select(func.min(Run.id)))
        assert (response.source, item, run) == ("accepted", shown.removeprefix("item "), first_run)


def test_undo_still_works_after_the_queue_ran_empty_and_the_tab_ticked(browser, tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "undo-empty.db", TEXTS[:2], schema={**TICKETS, "samples": 1})
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        start(page, "Unlabeled, in order")
        page.wait_for_function("document.querySelector('#suggestion-info').innerText.includes('No suggestion')")
        page.locator("body").click()
        for key in ("1", "2"):
            page.keyboard.press(key)
            page.wait_for_timeout(1_000)
        page.wait_for_function("document.querySelector('#annotate-progress').innerText.includes('Nothing left')")
        # Reads arrive while the queue is empty: the tab's tick looks for a card and finds none.
        prelabel(db, "tickets", dgemma_engine)
        page.wait_for_timeout(5_000)
        page.keyboard.press("u")
        page.wait_for_function(
            "document.querySelector('#annotate-progress').innerText.includes('Undone')", timeout=30_000
        )
        with db.read() as session:
            assert session.scalar(select(func.count()).select_from(Response)) == 1
