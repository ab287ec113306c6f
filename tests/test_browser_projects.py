"""Many projects in a real browser: the picker lists only the projects the signed-in user may open, a new
project made in the page opens on its Import tab, and two browser contexts on two projects at once each
answer into their own project."""

import json

import pandas as pd
import pytest
from sqlalchemy import select

from diffjev import Schema
from diffjev.services.importing import import_items
from storage import repo
from storage.models import Item, Project, Response
from conftest import TICKETS
from studio_fixtures import choose, one_question_at_a_time, serve_studio, studio_db


def add_project(db, name, texts, members=None):
    with db.session() as session:
        repo.create_project(session, name, Schema.from_dict({**TICKETS, "samples": 1}), "owner")
        if members is not None:
            repo.set_members(session, name, members, "owner")
    import_items(db, name, pd.DataFrame({"text": texts}))


def picker_options(page) -> list[str]:
    page.locator("#project-picker input").click()
    page.wait_for_selector("[role=option]")
    options = [text.removeprefix("✓").strip() for text in page.locator("[role=option]").all_inner_texts()]
    page.keyboard.press("Escape")
    return options


def test_the_picker_lists_only_the_users_projects_and_picking_one_opens_it(
    tmp_path, dgemma_engine, browser, monkeypatch
):
    monkeypatch.setenv("DIFFJEV_ADMINS", "alice")
    db = studio_db(tmp_path / "picker.db", ["Site down", "Refund please"])
    add_project(db, "secret", ["Hidden ticket"], members=["alice"])
    add_project(db, "shared", ["One", "Two", "Three"], members=["alice", "bob"])
    server, _ = serve_studio(db, dgemma_engine, auth=[("alice", "a-secret"), ("bob", "b-secret")])
    with server:
        context = browser.new_context()
        try:
            assert context.request.post(f"{server.url}/login", form={"username": "bob", "password": "b-secret"}).ok
            page = context.new_page()
            page.goto(server.url)
            page.wait_for_function(
                "(document.querySelector('#project-picker input')?.value || '').startsWith('tickets · ')"
            )
            options = picker_options(page)
            assert [o.split(" · ")[0] for o in options] == ["shared", "tickets"]  # not "secret"
            assert " · 3 items · 0% answered · " in options[0]
            page.locator("#project-picker input").fill("shared")  # the options narrow to the one typed
            with page.expect_navigation(url="**?project=shared"):
                page.keyboard.press("ArrowDown")
                page.keyboard.press("Enter")
            page.wait_for_function(
                "(document.querySelector('#project-picker input')?.value || '').startsWith('shared · ')"
            )
            page.reload()  # the address keeps the project
            page.wait_for_function(
                "(document.querySelector('#project-picker input')?.value || '').startsWith('shared · ')"
            )
            # focus leaving the picker opens nothing: the page stays, as does the focus
            page.evaluate("window.stayed = true")
            page.locator("#project-picker input").click()
            page.keyboard.press("Escape")
            page.keyboard.press("Tab")
            page.get_by_role("tab", name="Project", exact=True).click()
            page.wait_for_function("document.querySelector('#schema-json')?.innerText.includes('urgent')")
            assert page.evaluate("window.stayed") is True
        finally:
            context.close()


def test_a_new_project_opens_on_its_import_tab(tmp_path, dgemma_engine, browser):
    db = studio_db(tmp_path / "new.db", ["Site down"])
    server, _ = serve_studio(db, dgemma_engine)  # no logins: the local user is the admin
    with server:
        page = browser.new_page()
        try:
            page.goto(server.url)
            page.get_by_role("tab", name="Manage").click()
            page.locator("#new-project-name input, #new-project-name textarea").fill("fresh")
            page.locator("#new-project-create").click()  # the form's one row has no id yet
            page.wait_for_function("document.querySelector('#new-project-error').innerText.includes('question row 1')")
            page.get_by_label("JSON").check()  # the questions pasted as JSON this time
            # the form held no question: the editor starts from an example, with no warning
            page.wait_for_function("!document.querySelector('#new-project-error').innerText.includes('question row')")
            page.wait_for_function(
                "document.querySelector('#new-project-json .cm-content')?.innerText.includes('team')"
            )
            assert "not valid JSON" not in page.inner_text("#new-project-error")
            assert not page.locator("#new-project-add").is_visible()  # the form's buttons go with the form
            schema = {"questions": [{"id": "urgent", "type": "yes_no", "instructions": "Reply within the hour?"}]}
            page.locator("#new-project-json .cm-content").fill(json.dumps(schema))
            page.wait_for_function("document.querySelector('#new-project-preview').innerText.includes('urgent')")
            page.locator("#new-project-create").click()
            page.wait_for_url("**?project=fresh&tab=import")
            page.wait_for_function(
                "document.querySelector('[role=tab][aria-selected=true]')?.innerText.trim() === 'Import'"
            )
        finally:
            page.close()
    with db.read() as session:
        project = repo.get_project(session, "fresh")
        schema, _ = repo.version_schema(repo.latest_version(session, project.id))
    assert [q.id for q in schema.questions] == ["urgent"]


def answer_first(page, question="urgent"):
    one_question_at_a_time(page)
    choose(page, "#annotate-question", question)
    choose(page, "#annotate-queue", "Unlabeled, in order")
    page.locator("#annotate-start").click()
    page.wait_for_function("document.querySelector('#item .dj-id') !== null")
    shown = page.inner_text("#item .dj-text")
    page.locator("#pick-any input").click()
    page.get_by_role("option", name="yes", exact=True).click()
    page.locator("#pick-any-go").click()
    return shown


@pytest.mark.timeout(300)
def test_two_contexts_on_two_projects_answer_into_their_own_project(tmp_path, dgemma_engine, browser):
    db = studio_db(tmp_path / "two.db", ["Tickets only"])
    add_project(db, "other", ["Other only"])
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        first, second = browser.new_context(), browser.new_context()
        try:
            one, two = first.new_page(), second.new_page()
            one.goto(f"{server.url}/?project=tickets")
            two.goto(f"{server.url}/?project=other")
            assert answer_first(one) == "Tickets only"
            assert answer_first(two) == "Other only"
            for page in (one, two):
                page.wait_for_function("document.querySelector('#annotate-progress').innerText.length > 0")
        finally:
            first.close()
            second.close()
    with db.read() as session:
        rows = session.execute(
            select(Project.name, Item.text, Response.value)
            .join(Item, Item.id == Response.item_id)
            .join(Project, Project.id == Item.project_id)
            .order_by(Project.name)
        ).all()
    assert [tuple(r) for r in rows] == [("other", "Other only", "yes"), ("tickets", "Tickets only", "yes")], json.dumps(
        [list(map(str, r)) for r in rows]
    )


def test_after_the_last_project_is_deleted_the_page_says_so_once_and_a_new_one_can_be_made(
    tmp_path, dgemma_engine, browser
):
    db = studio_db(tmp_path / "last.db", ["Site down"])
    server, _ = serve_studio(db, dgemma_engine)  # no logins: the local user is the admin
    with server:
        page = browser.new_page()
        try:
            page.goto(server.url)
            page.get_by_role("tab", name="Manage").click()
            page.locator("#project-archive").click()  # the accordion
            page.locator("#project-delete-name input, #project-delete-name textarea").fill("tickets")
            page.locator("#project-delete-button").click()
            page.wait_for_function(
                "(document.querySelector('#engine-banner')?.innerText || '').includes('can open no project yet')"
            )
            assert "create one in the Manage tab" in page.inner_text("#engine-banner")
            page.wait_for_timeout(3500)  # the tabs' 2 s and 3 s timers have ticked
            assert page.locator(".toast-body").count() == 0  # no tab nor tick raised the same error as a toast
            page.get_by_role("tab", name="Manage").click()
            page.locator("#new-project-name input, #new-project-name textarea").fill("again")
            page.get_by_label("JSON").check()
            schema = {"questions": [{"id": "urgent", "type": "yes_no", "instructions": "Reply within the hour?"}]}
            page.locator("#new-project-json .cm-content").fill(json.dumps(schema))
            page.wait_for_function("document.querySelector('#new-project-preview').innerText.includes('urgent')")
            page.locator("#new-project-create").click()
            page.wait_for_url("**?project=again&tab=import")
        finally:
            page.close()
    with db.read() as session:
        assert repo.openable_projects(session, "local", admin=True) == ["again"]


def test_a_page_opened_without_a_project_names_it_in_its_address(tmp_path, dgemma_engine, browser):
    db = studio_db(tmp_path / "address.db", ["Site down"])
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page()
        try:
            page.goto(server.url)
            page.wait_for_url("**?project=tickets", timeout=30_000)  # a link to what the page shows
            page.reload()
            page.wait_for_function("(document.querySelector('#engine-banner')?.innerText || '').includes('tickets')")
        finally:
            page.close()
