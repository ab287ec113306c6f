"""The item view in a real browser: keys move between questions and pick within them, Enter stores every
question's answer at once and the next item shows, and markup in an item or an answer is shown, not run."""

import json

from sqlalchemy import select

from storage import repo
from storage.models import Question, Response
from studio_fixtures import choose, serve_studio, studio_db

SCHEMA = {
    "questions": [
        {"id": "color", "type": "choice", "instructions": "Which colour?", "options": ["<i>red</i>", "blue", "green"]},
        {"id": "urgent", "type": "yes_no", "instructions": "Urgent?"},
    ],
    "samples": 1,
}
TEXTS = [f'<img src=x onerror="window.ranMarkup = 1"> ticket {i}: the screen is <b>red</b>' for i in range(3)]


def stored(db) -> dict[tuple[str, str], str | None]:
    with db.read() as session:
        rows = session.execute(
            select(repo.Item.external_id, Question.key, Response.value)
            .join(repo.Item, repo.Item.id == Response.item_id)
            .join(Question, Question.id == Response.question_id)
        ).all()
    return {(item, key): value for item, key, value in rows}


def chosen(page) -> dict[str, str]:
    return page.evaluate(
        "Object.fromEntries(Array.from(document.querySelectorAll('#itemview .dj-iq'))"
        ".map((q) => [q.dataset.q, q.dataset.chosen]))"
    )


def test_keys_pick_and_enter_stores_the_whole_item(browser, tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "itemview.db", TEXTS, prelabel_with=dgemma_engine, schema=SCHEMA)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1366, "height": 768})  # a laptop's screen
        page.goto(server.url)
        page.locator("#itemview-queue").wait_for()  # the item view is the default for two questions
        page.locator("#itemview-start").click()
        page.locator("#itemview .dj-iq").first.wait_for()
        first = page.inner_text("#itemview .dj-id")
        # markup in the item and in an answer's name is shown as text, never run
        assert "<img src=x" in page.inner_text("#itemview .dj-text")
        assert "<i>red</i>" in page.inner_text("#itemview .dj-iq[data-q='color']")
        assert page.locator("#itemview img, #itemview .dj-iq i").count() == 0
        assert page.evaluate("window.ranMarkup") is None
        page.locator("#itemview .dj-text").click()  # the keys go to the page, not the Start button
        page.keyboard.press("2")  # the first question has the focus: its second answer
        page.keyboard.press("ArrowDown")
        on_screen = "(() => { const r = document.querySelector('#itemview .dj-focus').getBoundingClientRect(); "
        on_screen += "return r.top >= 0 && r.bottom <= window.innerHeight + 1; })()"  # + a subpixel
        page.wait_for_function(on_screen)  # the focused question is scrolled into view
        page.keyboard.press("1")
        page.keyboard.press("ArrowRight")  # the next answer of the focused question
        assert chosen(page) == {"color": "blue", "urgent": "no"}
        # the tiny model put almost nothing on these answers: the warning stays once an answer is picked
        for q in ("color", "urgent"):
            assert "treat this as a guess" in page.inner_text(f"#itemview .dj-iq[data-q='{q}']"), q
        page.keyboard.press("Shift+Tab")  # back to the first question
        page.keyboard.press("ArrowLeft")
        assert chosen(page) == {"color": "<i>red</i>", "urgent": "no"}
        # a click on an answer picks it
        page.locator("#itemview .dj-iq[data-q='color'] .dj-opt[data-v='green']").click()
        assert chosen(page) == {"color": "green", "urgent": "no"}
        page.keyboard.press("Enter")
        page.wait_for_function(f"document.querySelector('#itemview .dj-id').innerText !== {json.dumps(first)}")
        external = first.removeprefix("item ")
        assert stored(db) == {(external, "color"): "green", (external, "urgent"): "no"}
        assert "Saved the last item" in page.inner_text("#itemview-progress")
        # U takes the whole item back
        page.keyboard.press("u")
        page.wait_for_function(f"document.querySelector('#itemview .dj-id').innerText === {json.dumps(first)}")
        assert stored(db) == {}
        # nothing more to undo: said beside the progress line, which stays
        page.keyboard.press("u")
        page.wait_for_function("document.querySelector('#itemview-progress').innerText.includes('Nothing left')")
        assert "Answered: color 0 of 3" in page.inner_text("#itemview-progress")
        # Enter on a focused button presses that button, not Accept
        page.locator("#item-skip-shown").focus()
        page.keyboard.press("Enter")
        page.wait_for_function("document.querySelector('#itemview-progress').innerText.includes('Skipped the last')")
        assert stored(db) == {(external, "color"): None, (external, "urgent"): None}  # skipped, nothing saved


def test_an_item_shown_before_its_read_gets_its_suggestions_without_a_reload(browser, tmp_path, dgemma_engine):
    from diffjev.services.prelabel import prelabel

    db = studio_db(tmp_path / "pickup.db", ["The site is down", "Charged twice"], schema=SCHEMA)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        page.locator("#itemview-queue").wait_for()
        page.locator("#itemview-start").click()
        page.locator("#itemview .dj-iq").first.wait_for()
        shown = page.inner_text("#itemview .dj-id")
        assert set(chosen(page).values()) <= {None, ""}  # nothing read yet: nothing preselected
        page.locator("#itemview .dj-text").click()
        page.keyboard.press("Enter")  # refused, and said on the page: nothing is chosen for the first question
        page.wait_for_function(
            "(document.querySelector('#itemview-progress')?.innerText || '').includes('color has no answer chosen')"
        )
        assert page.inner_text("#itemview .dj-id") == shown
        prelabel(db, "tickets", dgemma_engine)
        page.wait_for_function(
            "Array.from(document.querySelectorAll('#itemview .dj-iq')).every((q) => q.dataset.chosen)",
            timeout=30_000,
        )
        assert page.inner_text("#itemview .dj-id") == shown  # the same item, now with its suggestions
        page.close()


def test_the_controls_answer_the_keyboard_and_the_picker_counts_answers(browser, tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "controls.db", TEXTS, prelabel_with=dgemma_engine, schema=SCHEMA)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1366, "height": 768})
        page.goto(server.url)
        page.locator("#itemview-queue").wait_for()
        page.wait_for_function("document.querySelector('#project-picker input').value.includes('answered')")
        # the View switch is one radio group: the arrow keys move within it
        page.locator("#annotate-mode input[value='Whole item']").focus()
        page.keyboard.press("ArrowDown")
        one = "#annotate-mode input[value='One question at a time']"
        page.wait_for_function(f"document.querySelector({json.dumps(one)}).getAttribute('aria-checked') === 'true'")
        assert page.evaluate("document.activeElement.value") == "One question at a time"
        page.locator("#annotate-start").wait_for()
        # Tab from its Queue goes on to "Suggestions from", and the Queue's list closes behind it
        page.locator("#annotate-queue input").click()
        page.locator("#annotate-queue [role=option]").first.wait_for()
        page.keyboard.press("Tab")
        page.wait_for_function("document.querySelectorAll('#annotate-queue [role=option]').length === 0")
        assert page.evaluate("document.activeElement.closest('#annotate-run') !== null")
        page.locator("#annotate-mode input[value='One question at a time']").focus()
        page.keyboard.press("ArrowUp")
        page.locator("#itemview-start").wait_for()
        # a dropdown's list closes when Tab leaves it, and a pick with the mouse still takes
        page.locator("#itemview-queue input").click()
        page.get_by_role("option").first.wait_for()
        page.keyboard.press("Tab")
        page.wait_for_function("document.querySelectorAll('[role=option]').length === 0")
        assert page.evaluate("document.activeElement.id") == "itemview-start"
        choose(page, "#itemview-queue", "Unlabeled, in order")
        # the picker's share answered follows the answers, without a reload
        assert "0% answered" in page.locator("#project-picker input").input_value()
        page.locator("#itemview-start").click()
        page.locator("#itemview .dj-iq").first.wait_for()
        page.locator("#itemview .dj-text").click()
        page.keyboard.press("Enter")
        page.wait_for_function("document.querySelector('#project-picker input').value.includes('33% answered')")
        page.keyboard.press("u")
        page.wait_for_function("document.querySelector('#project-picker input').value.includes('0% answered')")


def test_the_focused_question_and_accept_stay_on_a_laptop_screen(browser, tmp_path, dgemma_engine):
    many = {
        "questions": [
            {"id": f"q{k}", "type": "choice", "instructions": f"Question {k}?", "options": ["a", "b", "c", "d"]}
            for k in range(6)
        ],
        "samples": 1,
    }
    db = studio_db(tmp_path / "laptop.db", ["The screen is red"], prelabel_with=dgemma_engine, schema=many)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1366, "height": 768})
        page.goto(server.url)
        page.locator("#itemview-start").click()
        page.locator("#itemview .dj-iq").first.wait_for()
        page.locator("#itemview .dj-text").click()
        seen = (
            "(() => { const q = document.querySelector('#itemview .dj-focus').getBoundingClientRect();"
            " const a = document.querySelector('#item-accept-shown').getBoundingClientRect();"
            " return q.top >= 0 && q.bottom <= a.top + 1 && a.bottom <= window.innerHeight + 1; })()"
        )
        for k in range(6):
            page.wait_for_function(f"document.querySelector('#itemview .dj-focus').dataset.q === 'q{k}'")
            page.wait_for_function(seen, timeout=5_000)  # the focused question above Accept, both on screen
            page.keyboard.press("Tab")
