"""Importing items with images through the studio's API: an uploaded file's image paths are read from the
studio's import folder only (never beside the upload, never outside the folder), and the report names each
refused row."""

import csv
import html
import io
import json
import re
import zipfile

import datasets
import httpx
import pandas as pd
import pyarrow.parquet as pq
from gradio_client import Client, handle_file
from PIL import Image as PILImage

from diffjev.services.importing import import_items
from storage import repo
from storage.models import Image, Item
from studio_fixtures import serve_studio, studio_db


def png(color) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (4, 4), color).save(out, "PNG")
    return out.getvalue()


def test_an_uploads_image_paths_resolve_inside_the_import_folder_only(tmp_path, dgemma_engine):
    imports = tmp_path / "imports"
    imports.mkdir()
    (imports / "red.png").write_bytes(png((255, 0, 0)))
    (tmp_path / "secret.png").write_bytes(png((0, 0, 0)))
    (imports / "link.png").symlink_to(tmp_path / "secret.png")
    upload = tmp_path / "upload"
    upload.mkdir()
    (upload / "beside.png").write_bytes(png((0, 255, 0)))  # beside the upload, not in the import folder
    source = upload / "items.csv"
    source.write_text(
        "text,shot\nred,red.png\nup,../secret.png\nabs,/etc/passwd\nlink,link.png\nbeside,beside.png\nnone,\n"
    )
    db = studio_db(tmp_path / "studio.db", ["a first ticket"])
    server, _ = serve_studio(db, dgemma_engine, import_dir=imports)
    with server:
        client = Client(server.url, verbose=False)
        client.predict(handle_file(str(source)), "", api_name="/import_preview")
        report = html.unescape(
            client.predict(handle_file(str(source)), "", "text", "", [], False, "shot", api_name="/import_items")
        )
    assert "**Imported 2**, duplicates 0, rejected 4" in report
    for line, says in ((3, "without '..'"), (4, "without '..'"), (5, "leads outside"), (6, "no image at")):
        assert f"line {line}: image field" in report and says in report
    assert str(tmp_path) not in report.replace("/etc/passwd", "")
    with db.read() as session:
        pid = repo.get_project(session, "tickets").id
        shown = {i.text: i.image for i in session.query(Item).filter_by(project_id=pid)}
        images = session.query(Image).filter_by(project_id=pid).all()
    assert shown["none"] is None and [i.sha256 for i in images] == [shown["red"]]
    assert bytes(images[0].data) == png((255, 0, 0))


# Exporting a project with images from the studio ---------------------------------------------------------------

USERS = [("alice", "a-secret"), ("bob", "b-secret")]


def logged_in(server, user) -> httpx.Client:
    http = httpx.Client(base_url=server.url, timeout=60)
    assert http.post("/login", data={"username": user[0], "password": user[1]}).status_code == 200
    return http


def exported(http: httpx.Client, fmt: str) -> tuple[str, dict]:
    """Press Export the way the page does: (the note shown, the download button's value) or the error."""
    started = http.post("/gradio_api/call/export", json={"data": [fmt, False, ""]})
    assert started.status_code == 200, started.text
    answer = http.get(f"/gradio_api/call/export/{started.json()['event_id']}").text
    assert "event: complete" in answer, answer
    note, download = json.loads(answer.split("data: ", 1)[1])
    return note, download["value"]


def test_a_studio_export_of_a_project_with_images_downloads_every_image(tmp_path, dgemma_engine):
    red, blue = png((255, 0, 0)), png((0, 0, 255))
    shots = tmp_path / "shots"
    shots.mkdir()
    (shots / "red.png").write_bytes(red)
    (shots / "blue.png").write_bytes(blue)
    db = studio_db(tmp_path / "studio.db", ["a first ticket"])
    rows = pd.DataFrame({"text": ["red", "blue", "red again"], "shot": ["red.png", "blue.png", "red.png"]})
    import_items(db, "tickets", rows, image_field="shot", image_folder=shots)
    expected = {"a first ticket": None, "red": red, "blue": blue, "red again": red}
    with db.session() as session:
        repo.set_members(session, "tickets", ["alice"], "owner")
    server, studio = serve_studio(db, dgemma_engine, auth=USERS)
    with server:
        alice = logged_in(server, USERS[0])
        for fmt in ("csv", "jsonl"):
            note, download = exported(alice, fmt)
            assert download["orig_name"].endswith(f".{fmt}.zip"), download
            got = alice.get(download["url"])
            assert got.status_code == 200
            assert re.search(r"/[0-9a-f]{64}/", download["url"]), download["url"]  # Gradio's keyed hash
            assert httpx.get(download["url"]).status_code in (401, 403)  # not without a login
            unzipped = tmp_path / f"unzipped-{fmt}"
            with zipfile.ZipFile(io.BytesIO(got.content)) as archive:
                archive.extractall(unzipped)
            [table] = list(unzipped.glob(f"*.{fmt}"))
            if fmt == "csv":
                with open(table, newline="") as f:
                    records = list(csv.DictReader(f))
            else:
                records = [json.loads(line) for line in table.read_text().splitlines()]
            paths = {r["text"]: r["image"] or None for r in records}
            assert {text: (unzipped / p).read_bytes() if p else None for text, p in paths.items()} == expected
            assert paths["red"].startswith(f"{table.stem}_images/")
            shown = html.unescape(note)  # as the page shows it
            assert (
                "Exported 4 items" in shown and f"one .zip holding {table.name} and its {table.stem}_images/" in shown
            )
            assert len(list((unzipped / f"{table.stem}_images").iterdir())) == 2  # each image once
            assert sorted(p.name for p in unzipped.iterdir()) == sorted([table.name, f"{table.stem}_images"])
        note, download = exported(alice, "parquet")
        assert download["orig_name"].endswith(".parquet") and "Exported 4 items" in note
        table = pq.read_table(io.BytesIO(alice.get(download["url"]).content)).to_pylist()
        assert {r["text"]: (r["image"] or {}).get("bytes") for r in table} == expected
        note, download = exported(alice, "hf")
        assert download["orig_name"].endswith(".zip") and "Exported 4 items" in note
        with zipfile.ZipFile(io.BytesIO(alice.get(download["url"]).content)) as archive:
            archive.extractall(tmp_path / "unzipped-hf")
        loaded = {r["text"]: r["image"] for r in datasets.load_from_disk(str(tmp_path / "unzipped-hf"))}
        assert loaded["a first ticket"] is None and loaded["blue"].getpixel((0, 0)) == (0, 0, 255)
        for written in studio.export_dir.rglob("*"):  # where the studio wrote them is never served
            assert alice.get(f"/gradio_api/file={written}").status_code in (403, 404)
        refused = httpx.post(f"{server.url}/login", data={"username": "bob", "password": "b-secret"})
        assert refused.status_code == 403  # not a member of the project: no page, no export, no download
    assert not list(studio.export_dir.rglob("*.partial"))


def test_the_one_question_view_shows_the_items_image_from_the_scopes_project(tmp_path, dgemma_engine):
    """The Annotate tab's one-question card carries the item's image as the item view does: inline as a data
    URL, zoomed with a click, found through the card's item in the page's project, never another's."""
    import base64
    import re

    import pandas as pd

    from diffjev import Schema
    from diffjev.services.importing import import_items
    from storage.db import Database

    db = Database(tmp_path / "one.db")
    schema = Schema.from_dict({"questions": [{"id": "broken", "type": "yes_no", "instructions": "An error?"}]})
    with db.session() as session:
        repo.create_project(session, "shots", schema, "owner")
        repo.create_project(session, "other", schema, "owner")
    red, blue = png((255, 0, 0)), png((0, 0, 255))
    frame = pd.DataFrame({"id": ["s1", "s2"], "text": ["checkout page", "no picture"], "shot": [red, None]})
    import_items(db, "shots", frame, id_field="id", image_field="shot")
    import_items(db, "other", frame.assign(shot=[blue, blue]), id_field="id", image_field="shot")
    server, _ = serve_studio(db, dgemma_engine, name="shots")
    with server:
        client = Client(server.url, verbose=False)
        cards = [client.predict("broken", "Least confidence first", api_name="/annotate_start")[1]]
        cards.append(client.predict(api_name="/pick_1")[1])  # answered: the next item's card
    shown = {("checkout page" in card): card for card in cards}
    assert set(shown) == {True, False}
    with_image, without = shown[True], shown[False]
    assert "dj-image" not in without and "<img" not in without
    assert "dj-with-image" in with_image and "classList.toggle('dj-zoomed')" in with_image
    sources = re.findall(r"<img src='data:image/png;base64,([^']+)'", with_image)
    assert [base64.b64decode(s) for s in sources] == [red]  # this project's image, not the other's
