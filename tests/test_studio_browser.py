"""The studio in a real browser (Debian chromium through Playwright): a whole session from schema to
export, driven by the keyboard where annotators use it, and an item's markup shown as text."""

import json
import os

from sqlalchemy import select

from storage.models import Response
from studio_fixtures import choose, one_question_at_a_time, serve_studio, studio_db

SMALL_SCHEMA = {
    "instructions": "Support tickets.",
    "questions": [
        {"id": "urgent", "type": "yes_no", "instructions": "Does it need a reply within the hour?"},
        {"id": "team", "type": "choice", "instructions": "Which team?", "options": ["billing", "technical", "account"]},
    ],
    "samples": 1,
}


def test_schema_import_prelabel_annotate_by_keyboard_undo_and_export(browser, tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "studio.db", ["placeholder"])  # the project starts with the demo's schema
    server, studio = serve_studio(db, dgemma_engine)
    csv_path = tmp_path / "tickets.csv"
    csv_path.write_text(
        "id,body,plan\nk1,The site is down,pro\nk2,Refund my invoice,free\nk3,,pro\nk4,Add two seats,team\n"
    )
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        # Project: replace the schema with a smaller one and save it as a new version.
        page.get_by_role("tab", name="Project").click()
        page.locator("#schema-json .cm-content").click()
        page.keyboard.press("Control+A")
        page.keyboard.insert_text(json.dumps(SMALL_SCHEMA, indent=1))
        page.wait_for_function("document.querySelector('#canvas-preview').innerText.includes('urgent @')")
        page.locator("#schema-save").click()
        page.wait_for_function("document.querySelector('#schema-error').innerText.includes('schema version 2')")
        page.reload()
        # Import a CSV, choosing its text column.
        page.get_by_role("tab", name="Import").click()
        page.locator("#import-file input[type=file]").set_input_files(str(csv_path))
        page.locator("#import-preview").click()
        page.wait_for_function("document.querySelector('#import-table').innerText.includes('Refund my invoice')")
        choose(page, "#import-text", "body")
        # the text is not in the project's text field ("text"): the import asks first
        page.wait_for_function("document.querySelector('#import-confirm')?.innerText.includes(\"column 'body'\")")
        page.locator("#import-confirm input").check()
        page.locator("#import-go").click()
        page.wait_for_function("document.querySelector('#import-report').innerText.includes('Imported 3')")
        assert "line 4: empty text" in page.inner_text("#import-report")
        # Pre-label.
        page.get_by_role("tab", name="Pre-label").click()
        page.locator("#prelabel-start").click()
        page.wait_for_function(
            "document.querySelector('#prelabel-report').innerText.includes('completed')", timeout=60_000
        )
        # Annotate "team" in order: accept with Enter, correct with a number key, then undo the correction.
        page.get_by_role("tab", name="Annotate").click()
        one_question_at_a_time(page)
        choose(page, "#annotate-question", "team")
        choose(page, "#annotate-queue", "Unlabeled, in order")
        page.locator("#annotate-start").click()
        page.wait_for_selector("#item .dj-text")
        # the card can show before the event's progress timer ("0.8s") leaves the question (seen under load)
        page.wait_for_function("document.querySelector('#question-text').innerText.trim() === 'Which team?'")
        first = page.inner_text("#item .dj-id")
        page.locator("body").click(position={"x": 5, "y": 5})
        os.environ.get("DIFFJEV_SCREENSHOTS") and page.screenshot(
            path=os.path.join(os.environ["DIFFJEV_SCREENSHOTS"], "annotate.png")
        )
        page.screenshot(path=str(tmp_path / "annotate.png"))
        page.keyboard.press("Enter")
        page.wait_for_function(f"document.querySelector('#item .dj-id').innerText !== {json.dumps(first)}")
        second = page.inner_text("#item .dj-id")
        model_answer = page.inner_text("#suggestion-info").split("Model: ")[1].split(",")[0].strip()
        corrected = next(n for n in ("billing", "technical", "account") if n != model_answer)
        page.keyboard.press(str(["billing", "technical", "account"].index(corrected) + 1))
        page.wait_for_function(f"document.querySelector('#item .dj-id').innerText !== {json.dumps(second)}")
        page.keyboard.press("u")
        page.wait_for_function(f"document.querySelector('#item .dj-id').innerText === {json.dumps(second)}")
        # Export what was answered.
        page.get_by_role("tab", name="Export").click()
        page.locator("#export-go").click()
        page.wait_for_function("document.querySelector('#export-note').innerText.includes('Exported 1 items')")
        with page.expect_download() as download:
            page.locator("#export-download").click()
        exported = [json.loads(line) for line in open(download.value.path()).read().splitlines()]
    assert (tmp_path / "annotate.png").stat().st_size > 10_000
    with db.read() as session:
        rows = session.scalars(select(Response)).all()
    assert [(r.source, r.annotator, r.suggestion_shown, r.status) for r in rows] == [
        ("accepted", "local", True, "submitted")
    ]
    assert rows[0].seconds > 0
    assert len(exported) == 1 and exported[0]["id"] == first.removeprefix("item ")
    assert exported[0]["team_source"] == "accepted" and exported[0]["team"] == exported[0]["team_model"]
    assert set(exported[0]) >= {"urgent", "team", "team_distribution"} and "tone" not in exported[0]


def test_markup_in_an_item_is_shown_as_text_and_never_runs(browser, tmp_path, dgemma_engine):
    hostile = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> and <b>bold</b>'
    db = studio_db(tmp_path / "escape.db", [hostile], dgemma_engine)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page()
        page.goto(server.url)
        one_question_at_a_time(page)
        page.locator("#annotate-start").click()
        page.wait_for_selector("#item .dj-text")
        page.wait_for_timeout(300)
        assert page.inner_text("#item .dj-text") == hostile
        assert page.evaluate("window.__pwned") is None
        assert page.locator("#item img").count() == 0 and page.locator("#item b").count() == 0


def test_instructions_load_no_remote_image(browser, tmp_path, dgemma_engine):
    from test_engine_access import Recorder

    with Recorder(body=b"GIF89a") as listener:
        leaky = {
            "questions": [
                {
                    "id": "urgent",
                    "type": "yes_no",
                    "instructions": f'Urgent? ![x]({listener.url}/leak.png) <img src="{listener.url}/raw.png"> **now**',
                }
            ],
            "samples": 1,
        }
        db = studio_db(tmp_path / "leak.db", ["The site is down"], dgemma_engine, schema=leaky)
        server, _ = serve_studio(db, dgemma_engine)
        with server:
            page = browser.new_page()
            asked = []
            page.on("request", lambda r: asked.append(r.url))
            page.goto(server.url)
            one_question_at_a_time(page)
            page.locator("#annotate-start").click()
            page.wait_for_function("document.querySelector('#question-text').innerText.includes('Urgent?')")
            page.wait_for_timeout(1000)
            assert listener.requests == [] and not [u for u in asked if u.startswith(listener.url)]
            shown = page.inner_text("#question-text")
            assert "[image: x]" in shown and f'<img src="{listener.url}/raw.png">' in shown
            assert page.locator("#question-text strong").inner_text() == "now"  # markdown still renders
            assert page.locator("#question-text img").count() == 0
        assert listener.requests == [] and not [u for u in asked if u.startswith(listener.url)]


def test_review_tab_draws_the_reliability_diagram_and_the_comparison_table(browser, tmp_path, dgemma_engine):
    from test_calibration_service import seeded

    db, runs = seeded(tmp_path, 40)
    server, _ = serve_studio(db, dgemma_engine, name="p")
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1600})
        page.goto(server.url)
        page.get_by_role("tab", name="Review").click()
        choose(page, "#cal-question", "team")
        page.wait_for_function(f"document.querySelector('#cal-run input').value === '{runs[-1]}'")
        page.locator("#cal-go").click()
        page.wait_for_function("document.querySelector('#cal-note').innerText.includes('Answers used: all (40 items')")
        page.wait_for_function("document.querySelector('#reliability canvas, #reliability svg') !== null")
        assert "ECE" in page.inner_text("#cal-summary")
        page.locator("#compare-go").click()
        page.wait_for_function("document.querySelector('#comparison').innerText.includes('autoregressive-sequential')")
        text = page.inner_text("#comparison")
        assert "diffusion" in text and "passes / item" in text
        page.screenshot(path=str(tmp_path / "review.png"), full_page=True)


def test_markup_in_names_and_messages_loads_nothing(browser, tmp_path, dgemma_engine):
    """A dataset name, a file's column or a server's URL ends up in a message on the page: shown as text,
    it loads nothing from anywhere. A value the page's encoder cannot hold (an integer past 64 bits)
    still previews, and its row is reported by line."""
    from test_engine_access import Recorder

    with Recorder(body=b"GIF89a") as listener:
        hostile = f'![x]({listener.url}/md.png) <img src="{listener.url}/raw.png">'
        huge = 10**70 + 7
        db = studio_db(tmp_path / "names.db", ["The site is down"], dgemma_engine)
        server, _ = serve_studio(db, dgemma_engine)
        rows = tmp_path / "columns.jsonl"
        rows.write_text(
            f'{{"body": "fine ticket", {json.dumps(hostile)}: "x"}}\n'
            f'{{"body": "second ticket", {json.dumps(hostile)}: {huge}}}\n'
        )
        with server:
            page = browser.new_page()
            asked = []
            page.on("request", lambda r: asked.append(r.url))
            page.goto(server.url)
            page.get_by_role("tab", name="Import").click()
            page.locator("#import-hf textarea, #import-hf input").first.fill(hostile)
            page.locator("#import-preview").click()
            page.wait_for_timeout(1500)
            page.locator("#import-hf textarea, #import-hf input").first.fill("")
            page.locator("#import-file input[type=file]").set_input_files(str(rows))
            page.wait_for_timeout(1500)
            page.locator("#import-preview").click()
            page.wait_for_function(
                f"document.querySelector('#import-table').innerText.includes('{huge}')", timeout=30_000
            )
            page.wait_for_function("document.querySelector('#import-confirm')?.innerText.includes(\"column 'body'\")")
            page.locator("#import-confirm input").check()  # the text is not in the project's text field
            page.locator("#import-go").click()
            page.wait_for_function("document.querySelector('#import-report').innerText.includes('mported')")
            page.wait_for_timeout(800)
            report = page.inner_text("#import-report")
            assert "line 2" in report and hostile in report, report
            assert listener.requests == [] and not [u for u in asked if u.startswith(listener.url)]
            assert page.locator("#import-report img").count() == 0
