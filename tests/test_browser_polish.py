"""What a newcomer's first hour in the studio met, in a real browser: a member removed while the page is open
is told once, with the way out; the tabs refresh what an import changed."""

from __future__ import annotations

import pandas as pd
from sqlalchemy import select

from diffjev import Schema
from diffjev.engines.auto import ChosenEngine, fallback_notice
from diffjev.engines.slot import EngineSlot
from diffjev.services import annotation
from diffjev.services.importing import import_items
from storage import repo
from storage.db import Database
from studio_fixtures import choose, one_question_at_a_time, serve_studio, studio_db
from test_browser_roles import USERS, log_in
from test_spanstudio_service import SCHEMA as SPAN_SCHEMA
from test_spanstudio_service import TEXTS, span_of, store_span_suggestions


def test_a_member_removed_while_the_page_is_open_is_told_once_with_the_way_out(tmp_path, dgemma_engine, browser):
    db = studio_db(tmp_path / "removed.db", ["The site is down", "Charged twice"], dgemma_engine, name="staged")
    with db.session() as session:
        repo.set_members(session, "staged", ["alice", "bob"], "owner")
    server, _ = serve_studio(db, dgemma_engine, name="staged", auth=USERS)
    with server:
        context, page = log_in(browser, server, USERS[1])
        page.goto(f"{server.url}/?project=staged")
        page.locator("#itemview-start").click()
        page.locator("#itemview .dj-iq").first.wait_for()
        with db.session() as session:
            repo.set_members(session, "staged", ["alice"], "owner")
        # the timers tick every 2 to 3 seconds: the page has met the refusal several times over
        page.wait_for_function("document.body.innerText.includes('Open your projects')", timeout=15_000)
        page.wait_for_timeout(5_000)
        said = page.locator("body").inner_text()
        assert said.count("no project named") == 1, said
        assert "staged" in said and "bob" in said
        assert page.locator(".toast-body").count() == 0
        assert page.get_by_role("link", name="Open your projects").get_attribute("href") == "/"
        context.close()


def test_a_refused_event_stream_or_reconnect_also_takes_a_removed_member_to_the_way_out(
    tmp_path, dgemma_engine, browser
):
    """The gate may refuse the event stream (queue/data) or the client's reconnect probe (app_id) before any new
    event: removed between an event's join and its stream, the page must still leave, not retry for ever."""
    db = studio_db(tmp_path / "stream.db", ["The site is down"], dgemma_engine, name="staged")
    with db.session() as session:
        repo.set_members(session, "staged", ["alice", "bob"], "owner")
    server, _ = serve_studio(db, dgemma_engine, name="staged", auth=USERS)
    with server:
        for refused in ("/gradio_api/queue/data?session_hash=gone", "/gradio_api/app_id"):
            with db.session() as session:
                repo.set_members(session, "staged", ["alice", "bob"], "owner")
            context, page = log_in(browser, server, USERS[1])
            page.goto(f"{server.url}/?project=staged")
            page.locator("#itemview-start").wait_for()
            page.evaluate("() => { window.djStillHere = true; }")
            page.route("**/gradio_api/queue/join*", lambda route: route.abort())  # no tick meets the refusal first
            with db.session() as session:
                repo.set_members(session, "staged", ["alice"], "owner")
            page.evaluate(f"() => {{ fetch({refused!r}); }}")
            page.wait_for_function("document.body.innerText.includes('Open your projects')", timeout=15_000)
            assert page.evaluate("() => window.djStillHere === undefined"), refused  # the page was reloaded
            context.close()


def test_the_one_question_view_of_a_span_question_marks_the_span_and_offers_no_answer_list(
    tmp_path, dgemma_engine, browser
):
    urgent = {"id": "urgent", "type": "yes_no", "instructions": "Urgent?"}
    schema = {**SPAN_SCHEMA, "questions": [*SPAN_SCHEMA["questions"], urgent]}
    db = Database(tmp_path / "one.db")
    with db.session() as session:
        repo.create_project(session, "tickets", Schema.from_dict(schema), "owner")
    import_items(db, "tickets", pd.DataFrame({"id": ["a"], "text": [TEXTS[0]]}), id_field="id")
    with db.read() as session:
        (first,) = session.scalars(select(repo.Item.id))
    store_span_suggestions(db, "tickets", {first: {"product": (span_of(TEXTS[0], "Acme Phone X", 0.83),)}})
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        one_question_at_a_time(page)
        choose(page, "#annotate-question", "product")
        page.locator("#annotate-start").click()
        page.locator("#item .dj-mark").wait_for()
        assert page.inner_text("#item .dj-mark") == "Acme Phone X"
        assert "“Acme Phone X” 83%" in page.inner_text("#suggestion-info")
        for nothing_to_pick in ("#distribution", "#pick-any", "#pick-any-go", "#pick-1"):
            assert not page.locator(nothing_to_pick).is_visible(), nothing_to_pick
        keys = page.inner_text("#keys-help")
        assert "Enter" in keys and "1–9" not in keys and "item view" in keys, keys
        # an options question brings the distribution, the list and the number keys back
        choose(page, "#annotate-question", "urgent")
        page.locator("#annotate-start").click()
        page.locator("#pick-any-go").wait_for()
        assert "1–9" in page.inner_text("#keys-help")
        assert page.locator("#distribution").is_visible() and page.locator("#pick-any").is_visible()
        assert page.locator("#item .dj-mark").count() == 0
        page.close()


def test_review_shows_span_answers_with_their_words(tmp_path, dgemma_engine, browser):
    db = Database(tmp_path / "review.db")
    with db.session() as session:
        repo.create_project(session, "tickets", Schema.from_dict(SPAN_SCHEMA), "owner")
    import_items(db, "tickets", pd.DataFrame({"id": ["a"], "text": [TEXTS[0]]}), id_field="id")
    with db.read() as session:
        (first,) = session.scalars(select(repo.Item.id))
    store_span_suggestions(db, "tickets", {first: {"product": (span_of(TEXTS[0], "Acme Phone X"),)}})
    _, _, rows, _ = annotation.project_schema(db, "tickets")
    human = span_of(TEXTS[0], "Acme Phone")
    answer = repo.ResponseInput(first, rows["product"], "owner", f"{human.start}-{human.end}", "manual")
    db.write(lambda session: repo.respond(session, answer))
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.goto(server.url)
        page.get_by_role("tab", name="Review").click()
        page.wait_for_function("document.querySelector('#review-disagreements')?.innerText.includes('Acme')")
        table = page.inner_text("#review-disagreements")
        assert "“Acme Phone X” (14-26)" in table and "“Acme Phone” (14-24)" in table, table
        page.close()


def test_import_leaves_the_image_column_out_of_the_context_and_the_picker_counts_the_new_items(
    tmp_path, dgemma_engine, browser
):
    db = studio_db(tmp_path / "import.db", ["Already here"])
    # the engine's own sentence ends with a full stop, as the fallback's does
    described = ChosenEngine(dgemma_engine, fallback_notice("tiny-ar", "tiny-dgemma", "is not there"), fallback=True)
    server, _ = serve_studio(db, EngineSlot.holding(described))
    path = tmp_path / "tickets.csv"
    path.write_text("id,text,plan,photo\nu1,The site is down,pro,a.png\nu2,Refund my invoice,team,b.png\n")
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        page.wait_for_function("document.querySelector('#project-picker input')?.value?.includes('1 items')")
        page.get_by_role("tab", name="Pre-label").click()
        engine = page.inner_text("#prelabel-studio-engine")
        assert "local folder. Another engine" in engine and ".." not in engine, engine
        page.get_by_role("tab", name="Import").click()
        page.locator("#import-file input[type=file]").set_input_files(str(path))
        page.locator("#import-preview").click()
        page.wait_for_function("document.querySelector('#import-context').innerText.includes('photo')")
        page.locator("#import-go").click()
        page.wait_for_function("document.querySelector('#import-report').innerText.includes('Imported 2')")
        page.wait_for_function("document.querySelector('#project-picker input')?.value?.includes('3 items')")
        choose(page, "#import-image", "photo")
        page.wait_for_function("!document.querySelector('#import-context').innerText.includes('photo')")
        offered = [label.strip() for label in page.locator("#import-context label").all_inner_texts()]
        assert offered == ["plan"] and page.locator("#import-context input:checked").count() == 1
        page.close()
