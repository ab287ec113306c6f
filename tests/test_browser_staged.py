"""Staged questions in the item view, in a real browser: a question whose condition the chosen answer
does not meet is hidden, appears or disappears at once when that answer changes, and Enter stores it as
not asked, with why."""

import json

from sqlalchemy import select

from storage import repo
from storage.models import Question, Response
from studio_fixtures import serve_studio, studio_db

SCHEMA = {
    "questions": [
        {"id": "urgent", "type": "yes_no", "instructions": "Urgent?"},
        {"id": "outage", "type": "yes_no", "instructions": "Outage?", "ask_if": {"urgent": "yes"}},
        {"id": "calm", "type": "yes_no", "instructions": "Calm?", "ask_if": {"urgent": "no"}},
    ],
    "samples": 1,
}


def visible(page) -> list[str]:
    return page.evaluate(
        "Array.from(document.querySelectorAll('#itemview .dj-iq')).filter((q) => q.offsetParent !== null)"
        ".map((q) => q.dataset.q)"
    )


def test_changing_an_answer_shows_or_hides_the_question_it_asks(browser, tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "staged.db", ["The site is down", "Charged twice"], dgemma_engine, schema=SCHEMA)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        page.locator("#itemview-queue").wait_for()
        page.locator("#itemview-start").click()
        page.locator("#itemview .dj-iq").first.wait_for()
        first = page.inner_text("#itemview .dj-id")
        suggested = page.get_attribute("#itemview .dj-iq[data-q='urgent']", "data-chosen")
        assert visible(page) == ["urgent", "outage" if suggested == "yes" else "calm"]
        page.locator("#itemview .dj-text").click()
        page.keyboard.press("1")  # urgent: yes
        assert visible(page) == ["urgent", "outage"]
        page.keyboard.press("2")  # urgent: no
        assert visible(page) == ["urgent", "calm"]
        page.locator("#itemview .dj-iq[data-q='calm'] .dj-opt[data-v='yes']").click()
        page.keyboard.press("Enter")
        page.wait_for_function(f"document.querySelector('#itemview .dj-id').innerText !== {json.dumps(first)}")
        page.close()
    external = first.removeprefix("item ")
    with db.read() as session:
        rows = session.execute(
            select(Question.key, Response.value, Response.status, Response.detail)
            .join(repo.Item, repo.Item.id == Response.item_id)
            .join(Question, Question.id == Response.question_id)
            .where(repo.Item.external_id == external)
        ).all()
    assert {key: (value, status, detail) for key, value, status, detail in rows} == {
        "urgent": ("no", "submitted", None),
        "calm": ("yes", "submitted", None),
        "outage": (None, "not_asked", {"skipped": {"because": "urgent", "was": "no", "wanted": ["yes"]}}),
    }
