"""Roles on the page: an annotator of a project that names reviewers sees the tabs for answering only; a
reviewer sees them all; the page's address picks the project, and a reload keeps it."""

from __future__ import annotations

from storage import repo
from studio_fixtures import serve_studio, studio_db

USERS = [("alice", "a-secret"), ("bob", "b-secret")]
MANAGING = ("Import", "Pre-label", "Review", "Adjudicate", "Export", "Manage")


def log_in(browser, server, user):
    context = browser.new_context()
    page = context.new_page()
    page.goto(server.url)
    page.get_by_label("username").fill(user[0])
    page.get_by_label("password").fill(user[1])
    page.get_by_role("button", name="Login").click()
    page.wait_for_selector("#engine-banner", timeout=30_000)
    return context, page


def visible_tabs(page) -> set[str]:
    page.wait_for_selector("#engine-banner :text('project')", timeout=30_000)
    page.wait_for_timeout(500)  # the load's updates all land together
    tabs = page.get_by_role("tab")
    return {tabs.nth(i).inner_text().strip() for i in range(tabs.count()) if tabs.nth(i).is_visible()}


def test_an_annotator_sees_the_tabs_for_answering_and_a_reviewer_all(tmp_path, dgemma_engine, browser):
    db = studio_db(tmp_path / "roles.db", ["ALPHA one", "ALPHA two"], dgemma_engine, name="alpha")
    studio_db(tmp_path / "roles.db", ["BETA one"], dgemma_engine, name="beta")
    with db.session() as session:
        repo.set_reviewers(session, "alpha", ["alice"], "owner")
    server, _ = serve_studio(db, dgemma_engine, name="alpha", auth=USERS)
    with server:
        context, page = log_in(browser, server, USERS[1])
        page.goto(f"{server.url}/?project=alpha")
        tabs = visible_tabs(page)
        assert "Annotate" in tabs and not tabs & set(MANAGING), tabs
        # the schema is there to read, with no Save the handler would refuse
        page.get_by_role("tab", name="Project", exact=True).click()
        page.wait_for_function("document.querySelector('#schema-json')?.innerText.includes('urgent')")
        assert not page.locator("#schema-save").is_visible()
        # beta names no reviewers: bob runs it, and its page says so
        page.goto(f"{server.url}/?project=beta")
        tabs = visible_tabs(page)
        assert set(MANAGING) <= tabs, tabs
        assert "beta" in page.locator("#engine-banner").inner_text()
        page.get_by_role("tab", name="Manage").click()  # bob runs beta, but only admins make projects
        page.locator("#project-roles").wait_for()
        assert not page.locator("#new-project").is_visible()
        # who is signed in, and the way out
        assert "Signed in as bob" in page.locator("#engine-banner").inner_text()
        assert page.locator("#engine-banner a[href='/logout']").inner_text() == "Sign out"
        page.reload()
        assert set(MANAGING) <= visible_tabs(page)
        assert "beta" in page.locator("#engine-banner").inner_text()
        context.close()
        context, page = log_in(browser, server, USERS[0])
        page.goto(f"{server.url}/?project=alpha")
        assert set(MANAGING) <= visible_tabs(page)
        context.close()
