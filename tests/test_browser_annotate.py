"""Annotating in a real browser (Debian chromium through Playwright): undo that stays within the session's
question, skips that stay skipped, the reason a queue is empty, what the card shows (answer descriptions,
no hidden gold field), clicking an answer in the distribution, and the two probabilities of "Try a read"."""

import json

import pandas as pd
from sqlalchemy import select

from diffjev import Schema
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database
from storage.models import Question, Response
from conftest import TICKETS
from studio_fixtures import choose, one_question_at_a_time, serve_studio


def tickets_db(path, engine, n=6):
    """The demo's schema with its gold column hidden, n tickets with a gold team and a plan, pre-labeled."""
    db = Database(path)
    with db.session() as session:
        schema = Schema.from_dict({**TICKETS, "samples": 1, "hidden_fields": ["expected_team"]})
        repo.create_project(session, "tickets", schema, "owner")
    frame = pd.DataFrame(
        {
            "id": [f"t{i}" for i in range(n)],
            "text": [f"Ticket number {i}: something is wrong" for i in range(n)],
            "expected_team": ["GOLD-technical"] * n,
            "plan": ["pro"] * n,
        }
    )
    import_items(db, "tickets", frame, id_field="id")
    prelabel(db, "tickets", engine)
    return db


def start(page, question: str, queue: str) -> None:
    one_question_at_a_time(page)
    choose(page, "#annotate-question", question)
    choose(page, "#annotate-queue", queue)
    page.locator("#annotate-start").click()


def shown_id(page) -> str:
    return page.inner_text("#item .dj-id")


def press_and_wait(page, key: str, until_id: str | None = None) -> str:
    """Press a key with the page focused, and wait until the card is another item (or `until_id`)."""
    before = shown_id(page)
    page.keyboard.press(key)
    if until_id is None:
        page.wait_for_function(f"document.querySelector('#item .dj-id').innerText !== {json.dumps(before)}")
    else:
        page.wait_for_function(f"document.querySelector('#item .dj-id').innerText === {json.dumps(until_id)}")
    return shown_id(page)


def stored(db, question: str) -> dict[str, str | None]:
    with db.read() as session:
        rows = session.execute(
            select(repo.Item.external_id, Response.value)
            .join(repo.Item, repo.Item.id == Response.item_id)
            .join(Question, Question.id == Response.question_id)
            .where(Question.key == question)
        ).all()
    return {external: value for external, value in rows}


def test_undo_stays_in_the_session_and_its_question(browser, tmp_path, dgemma_engine):
    db = tickets_db(tmp_path / "undo.db", dgemma_engine)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        one_question_at_a_time(page)
        assert "Backspace" in page.inner_text("#keys-help")
        page.get_by_role("tab", name="Project").click()  # the setting is part of the schema a person edits
        page.wait_for_function("document.querySelector('#schema-json').innerText.includes('hidden_fields')")
        assert '"expected_team"' in page.inner_text("#schema-json")
        page.get_by_role("tab", name="Annotate").click()
        # An earlier session on "team": its answers must survive every undo of the next session.
        start(page, "team", "Unlabeled, in order")
        page.wait_for_function("document.querySelector('#question-text').innerText.includes('Which team')")
        options = page.inner_text("#answer-options")
        assert "technical — bugs, outages" in options and "billing" in options
        card = page.inner_text("#item")
        assert "pro" in card and "expected_team" not in card and "GOLD" not in card  # the gold stays hidden
        first = shown_id(page)
        # each bar carries its answer's key: the bars go most likely first, the keys in the answers' order
        drawn = page.inner_text("#distribution")
        assert all(f"[{k}] {name}" in drawn for k, name in ((1, "billing"), (2, "technical"), (3, "account")))
        page.locator("#distribution").get_by_test_id("[3] account-confidence-set").click()  # clicking picks
        page.wait_for_function(f"document.querySelector('#item .dj-id').innerText !== {json.dumps(first)}")
        page.locator("body").click(position={"x": 5, "y": 5})
        press_and_wait(page, "1")
        team = {first.removeprefix("item "): "account"}
        team.update({k: v for k, v in stored(db, "team").items() if k not in team})
        assert stored(db, "team") == team and sorted(team.values()) == ["account", "billing"]
        # This session: three tone answers, then four undos.
        start(page, "tone", "Unlabeled, in order")
        page.wait_for_function("document.querySelector('#question-text').innerText.includes('How upset')")
        page.locator("body").click(position={"x": 5, "y": 5})
        tone_ids = [shown_id(page)]
        for key in ("1", "2", "3"):
            tone_ids.append(press_and_wait(page, key))
        for back, key in zip((tone_ids[2], tone_ids[1], tone_ids[0]), ("u", "Backspace", "u")):
            press_and_wait(page, key, until_id=back)
        page.keyboard.press("u")
        page.wait_for_function(
            "document.querySelector('#annotate-progress').innerText.includes('Nothing left to undo in this session')"
        )
        assert shown_id(page) == tone_ids[0] and "How upset" in page.inner_text("#question-text")
        assert stored(db, "tone") == {} and stored(db, "team") == team
        press_and_wait(page, "2")  # the next key answers the tone item on screen, not a team item
    assert stored(db, "tone") == {tone_ids[0].removeprefix("item "): "annoyed"}
    assert stored(db, "team") == team


def test_skips_stay_skipped_until_the_skipped_queue_and_an_empty_queue_says_why(browser, tmp_path, dgemma_engine):
    db = tickets_db(tmp_path / "skip.db", dgemma_engine, n=4)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        start(page, "urgent", "Least confidence first")
        page.wait_for_selector("#item .dj-text")
        page.locator("body").click(position={"x": 5, "y": 5})
        seen = [shown_id(page)]
        for _ in range(3):
            seen.append(press_and_wait(page, "s"))
        assert len(set(seen)) == 4, seen  # three skips, three different items, and a fourth after them
        assert "waits in the 'Skipped' queue" in page.inner_text("#annotate-progress")
        start(page, "urgent", "Skipped (the items you skipped)")
        page.wait_for_function(f"document.querySelector('#item .dj-id').innerText === {json.dumps(seen[0])}")
        page.locator("body").click(position={"x": 5, "y": 5})
        assert press_and_wait(page, "1") == seen[1]
        assert press_and_wait(page, "1") == seen[2]
        page.keyboard.press("1")
        page.wait_for_function(  # an empty queue asks several counts for its reason: slow on a loaded machine
            "document.querySelector('#annotate-progress').innerText.includes('Nothing left')", timeout=90_000
        )
        assert "no skipped items for urgent" in page.inner_text("#annotate-progress")
        # A queue that cannot have items yet says why, and what to do.
        start(page, "team", "Runs disagree")
        page.wait_for_function("document.querySelector('#annotate-progress').innerText.includes('pre-label runs')")
        said = page.inner_text("#annotate-progress")
        assert "compares the answers of the two latest pre-label runs; there is one" in said
        assert "Start another run in the Pre-label tab" in said
    assert stored(db, "urgent") == {s.removeprefix("item "): "yes" for s in seen[:3]}


def test_try_a_read_names_its_two_probabilities_apart(browser, tmp_path, dgemma_engine):
    db = tickets_db(tmp_path / "try.db", dgemma_engine, n=1)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        page.get_by_role("tab", name="Try a read").click()
        page.locator("#try-read").click()
        page.wait_for_function(
            "document.querySelector('#try-distributions').innerText.includes('full-vocabulary probability')",
            timeout=60_000,
        )
        assert "confidence" in page.inner_text("#try-distributions")
        note = page.inner_text("#try-confidence-note")
        assert "full-vocabulary probability" in note and "Jev JSON calls confidence" in note
