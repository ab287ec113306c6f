"""The Review tab in a real browser (Debian chromium through Playwright): a table with nothing to show
says why, an answer is changed by the id its card shows, and the calibration view shows the items
behind its numbers and recommends no threshold from two lucky items."""

import json


from sqlalchemy import select

from storage import repo
from storage.models import Item, Question
from studio_fixtures import choose, serve_studio
from test_review_api import TWO_LUCKY, graded


def shows(page, selector: str, text: str) -> None:
    page.wait_for_function(
        f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText?.includes({json.dumps(text)})"
    )


def test_review_tab_explains_empty_tables_takes_card_ids_and_wants_enough_items(browser, tmp_path, dgemma_engine):
    db, run = graded(tmp_path / "review.db", TWO_LUCKY)
    server, _ = serve_studio(db, dgemma_engine, name="p")
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1800})
        page.goto(server.url)
        page.get_by_role("tab", name="Review").click()
        shows(page, "#review-disagreements", "k3")
        page.get_by_role("tab", name="Annotate").click()
        with db.session() as session:  # an answer changed while the Review tab was out of sight
            item = session.scalar(select(Item.id).where(Item.external_id == "k0"))
            question = session.scalar(select(Question.id).where(Question.key == "team"))
            repo.respond(session, repo.ResponseInput(item, question, "ann", "account", "manual"))
        page.get_by_role("tab", name="Review").click()
        shows(page, "#review-disagreements", "account")  # opening the tab again shows it, no Refresh needed
        with db.session() as session:  # and back, for what follows
            repo.respond(session, repo.ResponseInput(item, question, "ann", "billing", "manual"))
        # Every answer was typed, none accepted: the table of unsure accepts says so instead of "1 2 3".
        shows(page, "#review-unsure-empty", "No suggestion was accepted while the model's confidence")
        assert not page.locator("#review-unsure").is_visible()
        assert "k3" in page.inner_text("#review-disagreements")  # rows name items as their cards do
        for unfilled in ("#comparison", "#agreement", "#cal-summary"):  # no "1 | 2 | 3" before a button
            assert not page.locator(unfilled).is_visible(), unfilled
        page.locator("#agree-go").click()
        shows(page, "#agreement-empty", "No item has answers from two annotators yet")
        assert not page.locator("#agreement").is_visible()
        # Change an answer by the id on the card; a missing one is named.
        page.locator("#review-item input, #review-item textarea").first.fill("k404")
        choose(page, "#review-question", "team")
        page.locator("#review-value input, #review-value textarea").first.fill("technical")
        page.locator("#review-change").click()
        shows(page, "#review-note", "no item k404 in this project")
        page.locator("#review-item input, #review-item textarea").first.fill("k3")
        page.locator("#review-change").click()
        shows(page, "#review-note", "Item k3, team: changed to technical.")
        # Calibration: two items at 0.95 do not make a recommendation; the bins show their counts.
        choose(page, "#cal-question", "team")
        page.wait_for_function(f"document.querySelector('#cal-run input').value === '{run}'")
        page.locator("#cal-go").click()
        shows(page, "#cal-note", "No threshold is sure to reach 95% yet")
        note = page.inner_text("#cal-note")
        assert "would take" not in note and "71 more" in note, note
        assert "ECE" in page.inner_text("#cal-summary")  # the table shown once it has a row
        page.wait_for_function("document.querySelector('#reliability-counts canvas, #reliability-counts svg')")
        assert "below the grey diagonal" in page.inner_text("#reliability-guide")
        page.locator("#compare-go").click()
        shows(page, "#comparison", "diffusion")
        page.screenshot(path=str(tmp_path / "review.png"), full_page=True)


def test_calibrate_on_a_fresh_page_uses_the_first_question_and_the_newest_run_with_reads(
    browser, tmp_path, dgemma_engine
):
    from storage import repo

    db, run = graded(tmp_path / "fresh.db", TWO_LUCKY)
    with db.session() as session:  # a newer run that has read nothing yet
        project = repo.get_project(session, "p")
        repo.create_run(session, project.id, repo.latest_version(session, project.id), "diffusion", "m", None, {}, "o")
    server, _ = serve_studio(db, dgemma_engine, name="p")
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1800})
        page.goto(server.url)
        page.get_by_role("tab", name="Review").click()
        page.wait_for_function("document.querySelector('#cal-question input').value === 'team'")
        assert page.locator("#cal-run input").input_value() == str(run)
        page.locator("#cal-go").click()
        shows(page, "#cal-note", "No threshold is sure to reach 95% yet")
        assert page.get_by_text("Error", exact=True).count() == 0
        page.close()
