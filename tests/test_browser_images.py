"""An item's image on the item card in a real browser: shown beside the text, zoomed with a click, sent inside
the item the page's scope loaded (a data URL), never fetched from an address; the keys still work."""

import base64
import io

import pandas as pd
from PIL import Image as PILImage

from diffjev import Schema
from diffjev.services.importing import import_items
from storage import repo
from storage.db import Database
from studio_fixtures import one_question_at_a_time, serve_studio

SCHEMA = {"questions": [{"id": "broken", "type": "yes_no", "instructions": "Does the screenshot show an error?"}]}


def png(color) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (40, 30), color).save(out, "PNG")
    return out.getvalue()


def test_the_card_shows_the_items_image_beside_its_text_and_zooms(browser, tmp_path, dgemma_engine):
    db = Database(tmp_path / "images.db")
    with db.session() as session:
        repo.create_project(session, "shots", Schema.from_dict(SCHEMA), "owner")
        repo.create_project(session, "other", Schema.from_dict(SCHEMA), "owner")
    red, blue = png((255, 0, 0)), png((0, 0, 255))
    frame = pd.DataFrame({"id": ["s1"], "text": ["checkout page"], "shot": [red]})
    import_items(db, "shots", frame, id_field="id", image_field="shot")
    import_items(db, "other", frame.assign(shot=[blue]), id_field="id", image_field="shot")
    server, _ = serve_studio(db, dgemma_engine, name="shots")
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        fetched = []
        page.on("request", lambda r: fetched.append(r.url))
        page.goto(f"{server.url}/?project=shots")
        page.locator("#itemview-start").click()
        image = page.locator("#itemview .dj-with-image .dj-image img")
        image.wait_for()
        assert "checkout page" in page.inner_text("#itemview .dj-with-image .dj-text")  # beside the text
        src = image.get_attribute("src")
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == red  # this project's image, not the other's
        assert page.evaluate("document.querySelector('#itemview .dj-image img').naturalWidth") == 40
        narrow = image.bounding_box()["width"]
        image.click()
        page.wait_for_function("document.querySelector('#itemview .dj-image img').classList.contains('dj-zoomed')")
        assert image.bounding_box()["width"] > narrow
        image.click()
        page.wait_for_function("!document.querySelector('#itemview .dj-image img').classList.contains('dj-zoomed')")
        page.keyboard.press("1")  # the keys still pick after a click on the image
        assert page.evaluate("document.querySelector('#itemview .dj-iq').dataset.chosen") == "yes"
        assert not [url for url in fetched if url.startswith("data:") is False and "png" in url.lower()]


def test_the_one_question_card_shows_the_items_image_and_zooms(browser, tmp_path, dgemma_engine):
    db = Database(tmp_path / "one.db")
    with db.session() as session:
        repo.create_project(session, "shots", Schema.from_dict(SCHEMA), "owner")
    red = png((255, 0, 0))
    import_items(
        db,
        "shots",
        pd.DataFrame({"id": ["s1"], "text": ["checkout page"], "shot": [red]}),
        id_field="id",
        image_field="shot",
    )
    server, _ = serve_studio(db, dgemma_engine, name="shots")
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(f"{server.url}/?project=shots")
        one_question_at_a_time(page)
        page.locator("#annotate-start").click()
        image = page.locator("#item .dj-with-image .dj-image img")
        image.wait_for()
        assert "checkout page" in page.inner_text("#item .dj-with-image .dj-text")
        assert base64.b64decode(image.get_attribute("src").split(",", 1)[1]) == red
        narrow = image.bounding_box()["width"]
        image.click()
        page.wait_for_function("document.querySelector('#item .dj-image img').classList.contains('dj-zoomed')")
        assert image.bounding_box()["width"] > narrow
