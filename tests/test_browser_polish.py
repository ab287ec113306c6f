"""What a newcomer's first hour in the studio met, in a real browser: a member removed while the page is open
is told once, with the way out; the tabs refresh what an import changed."""

from __future__ import annotations

from storage import repo
from studio_fixtures import serve_studio, studio_db
from test_browser_roles import USERS, log_in


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
