"""Importing in a real browser: the columns a preview picks, a bad row named by line, the question asked
before reading the text from another column, an import undone, and the Items tab."""

import json


from studio_fixtures import choose, serve_studio, studio_db


def wait_for_text(page, selector: str, text: str) -> None:
    page.wait_for_function(
        f"(document.querySelector('{selector}')?.innerText || '').includes({json.dumps(text)})", timeout=30_000
    )


def context_offered(page) -> list[str]:
    return [label.strip() for label in page.locator("#import-context label").all_inner_texts()]


def test_preview_picks_columns_names_bad_rows_asks_before_another_text_column_and_undoes(
    browser, tmp_path, dgemma_engine
):
    db = studio_db(tmp_path / "browser-import.db", ["Already here"])
    server, _ = serve_studio(db, dgemma_engine)
    path = tmp_path / "tickets.csv"
    path.write_bytes(
        b"uuid,title,text,plan\n"
        b"u1,Outage,The site is down,pro\n"
        b"u2,Caf\xe9,Latin-1 bytes here,free\n"  # line 3: not UTF-8
        b"u3,Billing,Refund my invoice,team\n"
    )
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        page.get_by_role("tab", name="Import").click()
        page.locator("#import-file input[type=file]").set_input_files(str(path))
        page.locator("#import-preview").click()
        wait_for_text(page, "#import-table", "Refund my invoice")
        wait_for_text(page, "#import-preview-note", "line 3: bytes that are not UTF-8")
        assert "Latin" not in page.inner_text("#import-table")
        assert page.locator("#import-text input").input_value() == "text"
        assert page.locator("#import-id input").input_value() == "uuid"
        assert context_offered(page) == ["title", "plan"]
        assert page.locator("#import-context input:checked").count() == 2
        assert not page.locator("#import-confirm").is_visible()  # the project's own text field: nothing to ask

        # Reading the text from another column: it leaves the context, and the import asks first.
        choose(page, "#import-text", "title")
        page.wait_for_function("!document.querySelector('#import-context').innerText.includes('title')")
        assert context_offered(page) == ["text", "plan"]
        wait_for_text(page, "#import-confirm", "not the project's field 'text'")
        page.locator("#import-go").click()
        wait_for_text(page, "#import-report", "Nothing imported")
        choose(page, "#import-text", "text")
        # the context choices follow the text column: 'title' is back among them before Import is pressed
        # (pressed sooner, the page sends the context of the column chosen before, which is refused)
        page.wait_for_function("document.querySelector('#import-context').innerText.includes('title')")
        page.locator("#import-go").click()
        wait_for_text(page, "#import-report", "Imported 2")
        assert "line 3: bytes that are not UTF-8" in page.inner_text("#import-report")

        # The Items tab finds them; undoing the import removes them.
        page.get_by_role("tab", name="Items").click()
        page.locator("#items-search textarea, #items-search input").first.fill("invoice")
        page.locator("#items-show").click()
        wait_for_text(page, "#items-summary", "Items 1–1 of 1.")
        page.locator("#items-key textarea, #items-key input").first.fill("u3")
        page.locator("#items-open").click()
        wait_for_text(page, "#items-item", "Refund my invoice")
        assert "plan: team" in page.inner_text("#items-item") and "no answer yet" in page.inner_text("#items-item")
        page.get_by_role("tab", name="Import").click()
        page.wait_for_function(
            "document.querySelector('#import-undo-which input').value.includes('tickets.csv · 2 items')"
        )
        page.locator("#import-undo").click()
        wait_for_text(page, "#import-undo-note", "2 items removed")
        page.get_by_role("tab", name="Items").click()
        page.locator("#items-show").click()
        wait_for_text(page, "#items-summary", "No items match.")
        page.close()


def test_a_preview_of_a_binary_file_clears_the_last_preview_and_says_why_in_the_note(browser, tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "browser-binary.db", ["Already here"])
    server, _ = serve_studio(db, dgemma_engine)
    good, binary = tmp_path / "tickets.csv", tmp_path / "binary.csv"
    good.write_bytes(b"uuid,text\nu1,The site is down\nu2,Caf\xe9 bytes\n")  # line 3: a note on bad rows
    binary.write_bytes(bytes(range(256)) * 40)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        page.get_by_role("tab", name="Import").click()
        page.locator("#import-file input[type=file]").set_input_files(str(good))
        page.locator("#import-preview").click()
        wait_for_text(page, "#import-preview-note", "line 3: bytes that are not UTF-8")
        page.locator("#import-go").click()
        wait_for_text(page, "#import-report", "Imported 1")

        page.locator("#import-file button[aria-label='Clear']").first.click()
        page.locator("#import-file input[type=file]").set_input_files(str(binary))
        page.locator("#import-preview").click()
        wait_for_text(page, "#import-preview-note", "binary.csv is not a text file")
        assert "line 3" not in page.inner_text("#import-preview-note")
        assert "Imported" not in page.inner_text("#import-report")
        assert "The site is down" not in page.inner_text("#import-table")
        assert [page.locator(f"{p} input").input_value() for p in ("#import-text", "#import-id")] == ["", ""]
        assert context_offered(page) == []
        assert page.get_by_text("Error", exact=True).count() == 0  # no red badge on the table or the pickers
        page.close()
