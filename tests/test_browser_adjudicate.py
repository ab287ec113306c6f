"""The Adjudicate tab in a real browser (Debian chromium through Playwright): two annotators disagree,
the reviewer sees both answers with their seconds and the model's distribution, picks one with a comment,
the next case follows, and the export downloaded from the Export tab marks the settled label."""

import json

from studio_fixtures import choose, serve_studio
from test_adjudicate_service import answer, project


def shows(page, selector: str, text: str) -> None:
    page.wait_for_function(
        f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText?.includes({json.dumps(text)})"
    )


def test_a_reviewer_settles_a_disagreement_and_the_export_marks_it(browser, tmp_path, dgemma_engine):
    from storage.db import Database

    db = Database(tmp_path / "adjudicate.db")
    ids = project(db, items=3)
    answer(db, ids, "t0", "alice", "billing", 3.5)
    answer(db, ids, "t0", "bob", "technical", 7.0)
    answer(db, ids, "t1", "alice", "account", 2.0)
    answer(db, ids, "t1", "bob", "billing", 2.0)
    server, _ = serve_studio(db, dgemma_engine, name="p")  # no logins: the local user is the admin
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1600})
        page.goto(server.url)
        page.get_by_role("tab", name="Adjudicate").click()
        shows(page, "#adjudicate-heading", "2 open disagreements")
        card = "#adjudicate-card"
        shows(page, card, "Item t0")
        text = page.inner_text(card)
        for seen in ("alice", "billing", "3.5", "bob", "technical", "7.0", "technical 0.90"):
            assert seen in text, (seen, text)
        choose(page, "#adjudicate-pick", "billing")
        page.locator("#adjudicate-comment textarea").fill("the invoice line decides")
        page.locator("#adjudicate-save").click()
        shows(page, "#adjudicate-note", "Item t0, team: settled as billing.")
        shows(page, card, "Item t1")  # the next disagreement follows
        shows(page, "#adjudicate-heading", "1 open disagreements · 1 settled")
        # Another answer than either annotator gave must be one of the question's
        page.locator("#adjudicate-other input, #adjudicate-other textarea").first.fill("furious")
        page.locator("#adjudicate-save").click()
        shows(page, "#adjudicate-note", "'furious' is not an answer to team")
        page.reload()
        page.get_by_role("tab", name="Export").click()
        choose(page, "#export-format", "jsonl")
        page.locator("#export-go").click()
        shows(page, "#export-note", "Exported 2 items.")
        with page.expect_download() as done:
            page.locator("#export-download").click()
        rows = {r["id"]: r for r in map(json.loads, open(done.value.path(), encoding="utf-8"))}
        t0 = rows["t0"]
        assert (t0["team"], t0["team_source"], t0["team_adjudicated_by"]) == ("billing", "adjudicated", "local")
        assert t0["team_comment"] == "the invoice line decides"
        assert [(a["annotator"], a["value"]) for a in t0["team_answers"]] == [
            ("alice", "billing"),
            ("bob", "technical"),
        ]
        assert rows["t1"]["team_source"] == "manual" and rows["t1"]["team_adjudicated_by"] is None
        page.close()
