"""Importing items with images: paths inside the import folder only, bytes and Hugging Face `Image` values,
each image stored once per project, limits and bad files rejected by row, and Hub URLs failing fast offline."""

import io
import json
import os

import datasets
import pandas as pd
import pytest
from PIL import Image as PILImage

from diffjev import Schema
from diffjev.io import SourceError
from diffjev.services.importing import import_items
from storage import images as image_store
from storage import repo
from storage.db import Database
from storage.models import Image, Item
from conftest import TICKETS


def png(color=(255, 0, 0), size=(4, 3), kind="PNG") -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", size, color).save(out, kind)
    return out.getvalue()


@pytest.fixture
def db(db_url):
    database = Database(db_url)
    with database.session() as session:
        repo.create_project(session, "p", Schema.from_dict(TICKETS), "owner")
        repo.create_project(session, "other", Schema.from_dict(TICKETS), "owner")
    return database


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def stored(db, project="p"):
    with db.read() as session:
        pid = repo.get_project(session, project).id
        items = session.query(Item).filter_by(project_id=pid).order_by(Item.id).all()
        images = session.query(Image).filter_by(project_id=pid).all()
        return [(i.text, i.image) for i in items], {im.sha256: (im.mime, im.width, im.height, im.size) for im in images}


def test_paths_in_the_import_folder_are_stored_once_per_project(db, tmp_path):
    folder = tmp_path / "imports"
    (folder / "pics").mkdir(parents=True)
    (folder / "pics" / "red.png").write_bytes(png())
    (folder / "blue.jpg").write_bytes(png((0, 0, 255), (8, 5), "JPEG"))
    source = write_jsonl(
        folder / "items.jsonl",
        [
            {"text": "a red one", "img": "pics/red.png"},
            {"text": "the same red one", "img": "pics/red.png"},
            {"text": "a blue one", "img": "blue.jpg"},
            {"text": "no picture"},
        ],
    )
    report = import_items(db, "p", source, image_field="img", image_folder=folder)
    assert (report.imported, report.rejected) == (4, 0)
    items, images = stored(db)
    assert len(images) == 2  # the red image twice is stored once
    red, blue = items[0][1], items[2][1]
    assert items[1][1] == red and items[3][1] is None
    assert images[red] == ("image/png", 4, 3, len(png()))
    assert images[blue][:3] == ("image/jpeg", 8, 5)
    with db.read() as session:  # the image column is not a context field
        assert all("img" not in item.fields for item in session.query(Item))
    # the same image in another project is that project's own row, and is found only through its items
    import_items(db, "other", source, image_field="img", image_folder=folder)
    with db.read() as session:
        p, other = repo.get_project(session, "p").id, repo.get_project(session, "other").id
        other_item = session.query(Item).filter_by(project_id=other).order_by(Item.id).first()
        assert image_store.item_image(session, other, other_item.id).sha256 == red
        assert image_store.item_image(session, p, other_item.id) is None


def test_a_reimport_adds_nothing_and_same_text_with_other_images_is_two_items(db, tmp_path):
    (tmp_path / "a.png").write_bytes(png((1, 2, 3)))
    (tmp_path / "b.png").write_bytes(png((3, 2, 1)))
    source = write_jsonl(
        tmp_path / "items.jsonl", [{"text": "photo", "img": "a.png"}, {"text": "photo", "img": "b.png"}]
    )
    assert import_items(db, "p", source, image_field="img", image_folder=tmp_path).imported == 2
    again = import_items(db, "p", source, image_field="img", image_folder=tmp_path)
    assert (again.imported, again.duplicates) == (0, 2)


def test_paths_outside_the_import_folder_are_rejected_by_line(db, tmp_path):
    folder = tmp_path / "imports"
    folder.mkdir()
    secret = tmp_path / "secret.png"
    secret.write_bytes(png())
    (folder / "link.png").symlink_to(secret)  # a link inside that leads out
    (folder / "dir.png").mkdir()
    os.mkfifo(folder / "pipe.png")  # reading it would block the import
    source = write_jsonl(
        folder / "items.jsonl",
        [
            {"text": "1", "img": "../secret.png"},
            {"text": "2", "img": "../../etc/passwd"},
            {"text": "3", "img": str(secret)},
            {"text": "4", "img": "link.png"},
            {"text": "5", "img": "missing.png"},
            {"text": "6", "img": "dir.png"},
            {"text": "7", "img": "pipe.png"},
            {"text": "8", "img": "file:///etc/passwd"},
            {"text": "9", "img": "http://169.254.169.254/latest/meta-data"},
        ],
    )
    report = import_items(db, "p", source, image_field="img", image_folder=folder)
    assert (report.imported, report.rejected) == (0, 9)
    reasons = {r.line: r.reason for r in report.rejects}
    assert all(reason.startswith("image field 'img': ") for reason in reasons.values())
    assert "without '..'" in reasons[1] and "without '..'" in reasons[2] and "without '..'" in reasons[3]
    assert "leads outside the import folder" in reasons[4]
    assert "no image at 'missing.png'" in reasons[5]
    assert "is not a file" in reasons[6] and "is not a file" in reasons[7]
    assert "only a Hugging Face Hub dataset file" in reasons[8] and "only a Hugging Face Hub" in reasons[9]
    # no server path in a message, but the row's own value
    assert str(tmp_path) not in " ".join(reason for line, reason in reasons.items() if line != 3)
    assert stored(db) == ([], {})


def test_without_an_import_folder_no_path_is_read(db, tmp_path):
    (tmp_path / "red.png").write_bytes(png())
    frame = pd.DataFrame({"text": ["x"], "img": [str(tmp_path / "red.png")]})
    report = import_items(db, "p", frame, image_field="img")
    assert report.rejected == 1 and "names no folder" in report.rejects[0].reason


def test_limits_and_bad_files_are_rejected_with_the_row(db, tmp_path, monkeypatch):
    big = png(size=(300, 300))
    (tmp_path / "big.png").write_bytes(big)
    (tmp_path / "small.png").write_bytes(png())
    (tmp_path / "fake.png").write_bytes(b"<html><script>alert(1)</script></html>")
    (tmp_path / "cut.png").write_bytes(png(size=(50, 50))[:60])
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    (tmp_path / "x.svg").write_bytes(svg)
    tiff = io.BytesIO()
    PILImage.new("RGB", (2, 2)).save(tiff, "TIFF")
    (tmp_path / "t.tif").write_bytes(tiff.getvalue())
    monkeypatch.setenv("DIFFJEV_MAX_IMAGE", f"{len(big) - 1}b")
    source = write_jsonl(
        tmp_path / "items.jsonl",
        [
            {"text": str(i), "img": name}
            for i, name in enumerate(["big.png", "small.png", "fake.png", "cut.png", "x.svg", "t.tif"])
        ],
    )
    report = import_items(db, "p", source, image_field="img", image_folder=tmp_path)
    assert report.imported == 1
    reasons = {r.line: r.reason for r in report.rejects}
    assert sorted(reasons) == [1, 3, 4, 5, 6]
    assert "over the limit" in reasons[1] and "DIFFJEV_MAX_IMAGE" in reasons[1]
    for line in (3, 4, 5):
        assert "not an image that can be decoded" in reasons[line], reasons[line]
    assert "TIFF image is not taken" in reasons[6]
    monkeypatch.setenv("DIFFJEV_MAX_IMAGE", "lots")
    with pytest.raises(SourceError, match="DIFFJEV_MAX_IMAGE='lots'"):
        import_items(db, "p", source, image_field="img", image_folder=tmp_path)


def test_a_decompression_bomb_is_rejected(db, tmp_path):
    bomb = io.BytesIO()
    PILImage.new("1", (20_000, 20_000)).save(bomb, "PNG")  # a few kB that decode to 400 M pixels
    frame = pd.DataFrame({"text": ["boom"], "img": [bomb.getvalue()]})
    report = import_items(db, "p", frame, image_field="img")
    assert report.rejected == 1 and "more pixels than Pillow decodes safely" in report.rejects[0].reason


def test_bytes_in_parquet_and_a_hugging_face_image_feature(db, tmp_path):
    red, blue = png(), png((0, 0, 255))
    pd.DataFrame({"text": ["r", "b"], "img": [red, blue]}).to_parquet(tmp_path / "items.parquet")
    assert import_items(db, "p", tmp_path / "items.parquet", image_field="img").imported == 2
    (tmp_path / "g.png").write_bytes(png((0, 255, 0)))
    features = datasets.Features({"text": datasets.Value("string"), "picture": datasets.Image()})
    dataset = datasets.Dataset.from_dict(
        {"text": ["green", "red again"], "picture": [str(tmp_path / "g.png"), {"bytes": red, "path": None}]},
        features=features,
    )
    dataset.save_to_disk(str(tmp_path / "saved"))
    report = import_items(db, "p", str(tmp_path / "saved"), image_field="picture")
    assert (report.imported, report.rejected) == (2, 0)
    items, images = stored(db)
    assert len(images) == 3  # red once, blue, green
    assert items[3][1] == items[0][1]  # "red again" shows the image imported from Parquet


def test_a_hub_file_url_fails_fast_without_network(db, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = write_jsonl(
        tmp_path / "items.jsonl",
        [{"text": "x", "img": "https://huggingface.co/datasets/owner/pets/resolve/main/cat.png"}],
    )
    with pytest.raises(SourceError, match=r"line 1, image field 'img': cannot fetch the image .* HF_HUB_OFFLINE"):
        import_items(db, "p", source, image_field="img", image_folder=tmp_path)
    assert stored(db) == ([], {})


def test_a_missing_image_column_is_named(db, tmp_path):
    pd.DataFrame({"text": ["x"]}).to_csv(tmp_path / "items.csv", index=False)
    with pytest.raises(SourceError, match="no column 'img' for the image field"):
        import_items(db, "p", tmp_path / "items.csv", image_field="img", image_folder=tmp_path)


def test_undoing_an_import_and_deleting_items_drop_the_images_no_item_shows(db, tmp_path):
    """An image row lives as long as an item of its project names it: undoing an import or deleting items
    removes the images left without an item, keeps those another item (or another project) still shows."""
    from diffjev.services.importing import undo_import
    from diffjev.services.items import delete_items

    red, blue = png((255, 0, 0)), png((0, 0, 255))
    first = pd.DataFrame({"id": ["a", "b"], "text": ["red", "blue"], "shot": [red, blue]})
    second = pd.DataFrame({"id": ["c", "d"], "text": ["red again", "plain"], "shot": [red, None]})
    undone = import_items(db, "p", first, id_field="id", image_field="shot")
    kept = import_items(db, "p", second, id_field="id", image_field="shot")
    import_items(db, "other", first, id_field="id", image_field="shot")
    assert (undone.imported, kept.imported) == (2, 2)
    items, images = stored(db)
    red_key, blue_key = items[0][1], items[1][1]

    assert undo_import(db, "p", undone.import_id, "owner") == 2
    items, images = stored(db)
    assert [text for text, _ in items] == ["red again", "plain"]
    assert set(images) == {red_key}  # blue has no item left; red is still shown by "red again"

    with db.read() as session:
        numbers = [i.id for i in session.query(Item).filter_by(project_id=repo.get_project(session, "p").id)]
    assert delete_items(db, "p", numbers, "owner", confirmed=True, with_answers=False) == 2
    assert stored(db) == ([], {})
    assert set(stored(db, "other")[1]) == {red_key, blue_key}  # another project's images are its own


def test_an_import_naming_an_image_keeps_it_against_a_delete_running_meanwhile(db, monkeypatch):
    """An import that finds an image already stored and a delete of the image's last item, at once: the
    delete waits for the import, so the import's items never name an image that was removed under them."""
    import threading

    from diffjev.services.items import delete_items

    red = png((255, 0, 0))
    import_items(
        db, "p", pd.DataFrame({"id": ["a"], "text": ["red"], "shot": [red]}), id_field="id", image_field="shot"
    )
    with db.read() as session:
        last = session.query(Item).filter_by(project_id=repo.get_project(session, "p").id).one().id
    inserted, deleted = threading.Event(), threading.Event()
    insert_items = repo.insert_items

    def insert_then_hold(session, project_id, rows):  # the import's transaction stays open a moment
        insert_items(session, project_id, rows)
        inserted.set()
        deleted.wait(timeout=1.5)

    monkeypatch.setattr(repo, "insert_items", insert_then_hold)
    again = pd.DataFrame({"id": ["b"], "text": ["red again"], "shot": [red]})
    importing = threading.Thread(
        target=import_items, args=(db, "p", again), kwargs={"id_field": "id", "image_field": "shot"}
    )
    importing.start()
    assert inserted.wait(timeout=30)
    assert delete_items(db, "p", [last], "owner", confirmed=True, with_answers=False) == 1
    deleted.set()
    importing.join(timeout=30)
    items, images = stored(db)
    assert items == [("red again", items[0][1])] and set(images) == {items[0][1]}
