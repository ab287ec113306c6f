"""Images from the command line to the export and back: `diffjev import --image-field`, then every export
format holds each item's image (HF and Parquet: the `datasets` Image feature; JSONL and CSV: a path to a file
written beside the export), and a project without images exports as before."""

import csv
import io
import json
import os
import random
import subprocess
import sys
import tracemalloc

import datasets
import pytest
import pandas as pd
import pyarrow.parquet as pq
from PIL import Image as PILImage

from conftest import TICKETS


def diffjev(*args):
    return subprocess.run(
        [sys.executable, "-m", "diffjev.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def png(color) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (5, 3), color).save(out, "PNG")
    return out.getvalue()


def test_cli_import_then_every_export_format_round_trips_the_images(tmp_path):
    db = str(tmp_path / "cli.db")
    (tmp_path / "schema.json").write_text(json.dumps(TICKETS))
    assert diffjev("init", "--db", db, "--project", "p", "--schema", str(tmp_path / "schema.json")).returncode == 0
    data = tmp_path / "data"
    (data / "shots").mkdir(parents=True)
    red, blue = png((255, 0, 0)), png((0, 0, 255))
    (data / "shots" / "red.png").write_bytes(red)
    (data / "shots" / "blue.png").write_bytes(blue)
    (tmp_path / "outside.png").write_bytes(red)
    rows = [
        {"id": "a", "text": "red", "shot": "shots/red.png"},
        {"id": "b", "text": "blue", "shot": "shots/blue.png"},
        {"id": "c", "text": "red again", "shot": "shots/red.png"},
        {"id": "d", "text": "no shot"},
        {"id": "e", "text": "sneaky", "shot": "../outside.png"},
    ]
    (data / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = diffjev(
        "import", "--db", db, "--project", "p", str(data / "items.jsonl"), "--id-field", "id", "--image-field", "shot"
    )
    assert done.returncode == 0, done.stderr
    assert "imported 4, duplicates 0, rejected 1" in done.stdout
    assert "line 5: image field 'shot': image path '../outside.png'" in done.stdout
    expected = {"a": red, "b": blue, "c": red, "d": None}

    out = tmp_path / "out"
    for fmt, name in (("jsonl", "labeled.jsonl"), ("csv", "labeled.csv"), ("parquet", "l.parquet"), ("hf", "l_hf")):
        made = diffjev("export", "--db", db, "--project", "p", "--format", fmt, "--out", str(out / name), "--all")
        assert made.returncode == 0, made.stderr
    records = [json.loads(line) for line in (out / "labeled.jsonl").read_text().splitlines()]
    with open(out / "labeled.csv", newline="") as f:
        for got in (records, list(csv.DictReader(f))):
            paths = {r["id"]: r["image"] or None for r in got}
            assert {k: (out / p).read_bytes() if p else None for k, p in paths.items()} == expected
            assert paths["a"] == paths["c"] and paths["a"].startswith(("labeled_images/", "labeled_images\\"))
    assert len(list((out / "labeled_images").iterdir())) == 2  # each image once
    assert not list(out.glob(".*partial"))
    hf = datasets.load_from_disk(str(out / "l_hf"))
    assert isinstance(hf.features["image"], datasets.Image)
    loaded = {r["id"]: r["image"] for r in hf}
    assert loaded["d"] is None and loaded["a"].size == (5, 3) and loaded["b"].getpixel((0, 0)) == (0, 0, 255)
    table = pq.read_table(out / "l.parquet").to_pylist()
    assert {r["id"]: (r["image"] or {}).get("bytes") for r in table} == expected


def test_a_project_without_images_exports_no_image_column(tmp_path):
    db = str(tmp_path / "plain.db")
    (tmp_path / "schema.json").write_text(json.dumps(TICKETS))
    (tmp_path / "items.jsonl").write_text(json.dumps({"text": "hello"}) + "\n")
    assert diffjev("init", "--db", db, "--project", "p", "--schema", str(tmp_path / "schema.json")).returncode == 0
    assert diffjev("import", "--db", db, "--project", "p", str(tmp_path / "items.jsonl")).returncode == 0
    assert (
        diffjev(
            "export", "--db", db, "--project", "p", "--format", "jsonl", "--out", str(tmp_path / "x.jsonl"), "--all"
        ).returncode
        == 0
    )
    assert "image" not in json.loads((tmp_path / "x.jsonl").read_text())
    assert not (tmp_path / "x_images").exists()


def test_zipping_an_export_that_fails_midway_leaves_no_zip_behind(tmp_path):
    from diffjev.services.exporting import download_of

    target = tmp_path / "labeled.csv"
    target.write_text("item_id,image\n1,labeled_images/a.png\n2,labeled_images/b.png\n")
    (tmp_path / "labeled_images").mkdir()
    (tmp_path / "labeled_images" / "a.png").write_bytes(png((255, 0, 0)))
    (tmp_path / "labeled_images" / "b.png").symlink_to(tmp_path / "gone.png")  # unreadable: the zip fails on it
    with pytest.raises(OSError):
        download_of(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labeled.csv", "labeled_images"]
    (tmp_path / "labeled_images" / "b.png").unlink()
    (tmp_path / "labeled_images" / "b.png").write_bytes(png((0, 0, 255)))
    archive = download_of(target)
    assert archive == tmp_path / "labeled.csv.zip"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labeled.csv", "labeled.csv.zip", "labeled_images"]
    (tmp_path / "alone.csv").write_text("item_id\n1\n")
    assert download_of(tmp_path / "alone.csv") == tmp_path / "alone.csv"  # no images folder: the file itself


def noise_png(seed: int, side: int = 600) -> bytes:
    """A PNG of random pixels: it does not compress, so it is about side * side * 3 bytes (~1 MB)."""
    out = io.BytesIO()
    PILImage.frombytes("RGB", (side, side), random.Random(seed).randbytes(side * side * 3)).save(out, "PNG")
    return out.getvalue()


# Not "hf": its last step is `datasets`' save_to_disk, which copies the rows in batches of its own choosing,
# about 100 MB each (five images of 20 MB): a bound in bytes, which 30 images of 1 MB cannot show.
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_an_export_holds_a_few_images_at_a_time_whatever_its_page_size(tmp_path, monkeypatch, fmt):
    import pyarrow as pa

    from diffjev import Schema
    from diffjev.services import exporting
    from diffjev.services.importing import import_items
    from storage import repo
    from storage.db import Database

    db = Database(tmp_path / "big.db")
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(TICKETS), "owner")
    images = [noise_png(seed) for seed in range(30)]
    size = max(len(i) for i in images)
    assert size > 1_000_000
    frame = pd.DataFrame({"id": [f"s{n}" for n in range(30)], "text": [f"shot {n}" for n in range(30)], "shot": images})
    assert import_items(db, "p", frame, id_field="id", image_field="shot").imported == 30
    del frame
    monkeypatch.setattr(exporting, "PAGE", 30)  # one page holds every item: only streaming bounds the memory
    target = tmp_path / f"out.{fmt}"
    exporting.export_project(db, "p", tmp_path / "warm.jsonl", "jsonl", reviewed_only=False)  # imports, caches
    default_pool = pa.default_memory_pool()
    arrow = pa.proxy_memory_pool(default_pool)  # keeps Arrow's peak, which tracemalloc does not see
    pa.set_memory_pool(arrow)
    tracemalloc.start()
    try:
        assert exporting.export_project(db, "p", target, fmt, reviewed_only=False) == 30
        _, python_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        pa.set_memory_pool(default_pool)
    assert python_peak < 8 * size, f"{python_peak / size:.1f} images' worth of Python memory at once"
    assert arrow.max_memory() < 8 * size, f"{arrow.max_memory() / size:.1f} images' worth of Arrow memory at once"
    if fmt == "jsonl":
        records = [json.loads(line) for line in target.read_text().splitlines()]
        assert [(tmp_path / r["image"]).read_bytes() for r in records] == images
    else:
        assert [r["image"]["bytes"] for r in pq.read_table(target).to_pylist()] == images
