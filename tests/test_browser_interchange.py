"""A project made from a Label Studio export in a real browser: the export and its labeling config are
uploaded in the Manage tab, the new project opens on its Annotate tab saying what came in, and an item shows
with the imported prediction's distribution drawn and its model named."""

import json
from pathlib import Path

from diffjev.services.interchange import project_bundle
from studio_fixtures import choose, serve_studio, studio_db

DATA = Path(__file__).parent / "data" / "labelstudio"


def wait_for_text(page, selector: str, text: str) -> None:
    page.wait_for_function(
        f"(document.querySelector('{selector}')?.innerText || '').includes({json.dumps(text)})", timeout=60_000
    )


def test_a_label_studio_export_becomes_a_project_whose_items_show_the_imported_predictions(
    browser, tmp_path, dgemma_engine, monkeypatch
):
    monkeypatch.setenv("DIFFJEV_OVERLAP", "100")  # every item in the double-annotation share
    db = studio_db(tmp_path / "browser-interchange.db", ["Already here"])
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        page.wait_for_function(  # the page has loaded: its project is picked
            "(document.querySelector('#project-picker input')?.value || '').includes('tickets')", timeout=60_000
        )
        page.get_by_role("tab", name="Manage").click()
        page.locator("#tool-import-name input, #tool-import-name textarea").first.fill("from-ls")
        page.locator("#tool-import-file input[type=file]").set_input_files(str(DATA / "export.json"))
        page.locator("#tool-import-config input[type=file]").set_input_files(str(DATA / "label_config.xml"))
        page.locator("#tool-import-file [aria-label='export.json']").wait_for()  # uploaded
        page.locator("#tool-import-config [aria-label='label_config.xml']").wait_for()
        page.locator("#tool-import-create").click()
        # the new project opens on its Annotate tab, by its address
        page.wait_for_url("**project=from-ls**tab=annotate**", timeout=60_000)
        # where it lands, the page says what came in, and keeps saying it until dismissed
        wait_for_text(page, "#import-notice", "Imported: Created project 'from-ls': 3 items")
        assert "suggestions in 2 runs" in page.inner_text("#import-notice")
        # Every task with a prediction was answered in Label Studio already: a second annotation is the
        # work that follows, and the double-annotation queue serves the task one person answered.
        page.locator("#annotate-start").wait_for()  # eight questions: the page opens on one at a time
        choose(page, "#annotate-question", "sentiment")
        choose(page, "#annotate-queue", "Double annotation (agreement share)")
        page.locator("#annotate-start").click()
        wait_for_text(page, "#item", "FastShip")  # task 102, which alice's colleague answered alone
        record = next(r for r in project_bundle(db, "from-ls").records if r.external_id == "102")
        predicted = [
            answer.distribution
            for answers in record.predictions.values()
            for answer in answers
            if answer.question == "sentiment"
        ]
        assert len(predicted) == 2  # gemma-v1 and gemma-v2 each read it; the latest one is drawn
        page.wait_for_function("document.querySelector('#distribution').innerText.includes('%')")
        assert "· from gemma-v2" in page.inner_text("#suggestion-info")  # the imported run's model
        drawn = page.inner_text("#distribution")
        assert any(
            all(f"{name}\n{round(p * 100)}%" in drawn for name, p in distribution.items() if p >= 0.005)
            for distribution in predicted
        ), (drawn, predicted)
        page.locator("#import-notice-dismiss").click()
        page.locator("#import-notice-row").wait_for(state="hidden")
        page.reload()
        page.locator("#annotate-start").wait_for()
        page.wait_for_timeout(2_000)  # the page's load events have answered
        assert not page.locator("#import-notice-row").is_visible()
        page.close()
