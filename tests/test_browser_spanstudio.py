"""Span questions in the item view, in a real browser: the suggested span is marked with its confidence, a
mouse selection or the keys correct it (the page counts code points, not the browser's UTF-16 units, and
keeps the offsets right after a CRLF), Enter stores the spans, and markup in the text is shown, not run."""

import time

import pandas as pd
from sqlalchemy import select

from diffjev import Schema
from diffjev.services.importing import import_items
from storage import repo
from storage.db import Database
from storage.models import Question, Response
from studio_fixtures import choose, one_question_at_a_time, serve_studio
from test_spanstudio_service import SCHEMA, TEXTS, span_of, store_span_suggestions

# A word's box in a span question's text: the page's own text nodes, found by their words.
WORD_BOX = """([q, word, nth]) => {
  const box = document.querySelector(`#itemview .dj-iq[data-q='${q}'] .dj-spantext`);
  const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
  let seen = 0;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    let at = node.textContent.indexOf(word);
    while (at >= 0) {
      if (seen++ === nth) {
        const r = document.createRange(); r.setStart(node, at); r.setEnd(node, at + word.length);
        const b = r.getBoundingClientRect(); return [b.left, b.right, b.top + b.height / 2];
      }
      at = node.textContent.indexOf(word, at + 1);
    }
  }
  return null;
}"""
TEXT_WITH_MARKUP = TEXTS[0] + ' <img src=x onerror="window.ranMarkup = 1">'


def drag_over(page, question: str, first: str, last: str) -> None:
    """Select from the start of `first` to the end of `last` with the mouse, as a person does."""
    left, _, y = page.evaluate(WORD_BOX, [question, first, 0])
    _, right, _ = page.evaluate(WORD_BOX, [question, last, 0])
    page.mouse.move(left + 1, y)
    page.mouse.down()
    page.mouse.move((left + right) / 2, y, steps=4)
    page.mouse.move(right - 1, y, steps=4)
    page.mouse.up()


def chosen(page, question: str) -> str | None:
    return page.evaluate(f"document.querySelector(\"#itemview .dj-iq[data-q='{question}']\").dataset.chosen")


def stored(db) -> dict[tuple[str, str], tuple[str | None, dict | None]]:
    with db.read() as session:
        rows = session.execute(
            select(repo.Item.external_id, Question.key, Response.value, Response.detail)
            .join(repo.Item, repo.Item.id == Response.item_id)
            .join(Question, Question.id == Response.question_id)
        ).all()
    return {(item, key): (value, detail) for item, key, value, detail in rows}


def test_span_questions_are_marked_corrected_by_mouse_and_keys_and_stored_on_enter(browser, tmp_path, dgemma_engine):
    db = Database(tmp_path / "spans.db")
    with db.session() as session:
        repo.create_project(session, "tickets", Schema.from_dict(SCHEMA), "owner")
    texts = [TEXT_WITH_MARKUP, TEXTS[1]]
    import_items(db, "tickets", pd.DataFrame({"id": ["a", "b"], "text": texts}), id_field="id")
    with db.read() as session:
        first, second = session.scalars(select(repo.Item.id).order_by(repo.Item.id))
    suggested = (span_of(texts[0], "Acme Phone", 0.83),)
    store_span_suggestions(db, "tickets", {first: {"product": suggested, "parts": (span_of(texts[0], "screen"),)}})
    store_span_suggestions(db, "tickets", {second: {"parts": ()}})
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        page.locator("#itemview-queue").wait_for()
        choose(page, "#itemview-queue", "Unlabeled, in order")
        page.locator("#itemview-start").click()
        page.locator("#itemview .dj-spanq").first.wait_for()
        assert page.inner_text("#itemview .dj-id") == "item a"
        product = "#itemview .dj-iq[data-q='product']"
        # the suggested span is marked, with its confidence; markup in the text is shown, never run
        assert page.inner_text(f"{product} .dj-mark") == "Acme Phone"
        assert "“Acme Phone” 83%" in page.inner_text(f"{product} .dj-spanmodel")
        assert '<img src=x onerror="window.ranMarkup = 1">' in page.inner_text(f"{product} .dj-spantext")
        assert page.evaluate("window.ranMarkup") is None and page.locator("#itemview img").count() == 0
        assert chosen(page, "product") == "14-24"
        # the mouse: two emoji sit before the product, two code points but four UTF-16 units
        drag_over(page, "product", "Acme", "X")
        assert chosen(page, "product") == "14-26"
        assert page.inner_text(f"{product} .dj-mark") == "Acme Phone X"
        # the keys, on the focused question: the end moves a word back and forth
        page.keyboard.press("ArrowLeft")
        assert chosen(page, "product") == "14-24"
        page.keyboard.press("ArrowRight")
        assert chosen(page, "product") == "14-26"
        # a spans question: a double click adds a word, a click on a marked span drops it, + adds the next word
        hinge = span_of(texts[0], "hinge")
        screen = span_of(texts[0], "screen")
        left, right, y = page.evaluate(WORD_BOX, ["parts", "hinge", 0])
        page.mouse.dblclick((left + right) / 2, y)
        assert chosen(page, "parts") == f"{screen.start}-{screen.end},{hinge.start}-{hinge.end}"
        left, right, y = page.evaluate(WORD_BOX, ["parts", "screen", 0])
        page.mouse.click((left + right) / 2, y)
        assert chosen(page, "parts") == f"{hinge.start}-{hinge.end}"
        page.keyboard.press("Backspace")
        assert chosen(page, "parts") == "none"
        page.keyboard.press("Enter")
        page.wait_for_function("document.querySelector('#itemview .dj-id').innerText === 'item b'")
        assert stored(db) == {
            ("a", "product"): ("14-26", {"spans": [{"start": 14, "end": 26, "text": "Acme Phone X"}]}),
            ("a", "parts"): ("none", {"spans": []}),
        }

        # no suggestion for the product here: a CRLF and a combining mark come before the word chosen
        assert chosen(page, "product") is None
        left, right, y = page.evaluate(WORD_BOX, ["product", "Deluxe", 0])
        page.mouse.dblclick((left + right) / 2, y)
        deluxe = span_of(TEXTS[1], "Deluxe")
        assert chosen(page, "product") == f"{deluxe.start}-{deluxe.end}"
        page.keyboard.press("Enter")
        # the progress line already says "Saved" from item a: wait for item b's answer itself
        deadline = time.monotonic() + 30
        while ("b", "product") not in stored(db) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert stored(db)[("b", "product")] == (
            f"{deluxe.start}-{deluxe.end}",
            {"spans": [{"start": deluxe.start, "end": deluxe.end, "text": "Deluxe"}]},
        )


def test_the_one_question_view_shows_the_suggested_span_and_enter_accepts_it(browser, tmp_path, dgemma_engine):
    db = Database(tmp_path / "one.db")
    with db.session() as session:
        repo.create_project(session, "tickets", Schema.from_dict(SCHEMA), "owner")
    import_items(db, "tickets", pd.DataFrame({"id": ["a"], "text": [TEXTS[0]]}), id_field="id")
    with db.read() as session:
        (first,) = session.scalars(select(repo.Item.id))
    store_span_suggestions(db, "tickets", {first: {"product": (span_of(TEXTS[0], "Acme Phone X"),), "parts": ()}})
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        one_question_at_a_time(page)
        choose(page, "#annotate-question", "product")
        page.locator("#annotate-start").click()
        page.wait_for_function("document.querySelector('#suggestion-info').innerText.includes('Acme Phone X')")
        assert "“Acme Phone X” (14-26), confidence 0.70" in page.inner_text("#suggestion-info")
        page.locator("#item").click()
        page.keyboard.press("Enter")
        page.wait_for_function("document.querySelector('#annotate-progress').innerText.includes('Saved')")
        detail = {"spans": [{"start": 14, "end": 26, "text": "Acme Phone X"}]}
        assert stored(db) == {("a", "product"): ("14-26", detail)}
