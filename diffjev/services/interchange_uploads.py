"""Another tool's project as files a browser sends and receives: a Label Studio export (its tasks JSON and
its labeling config) or an Argilla dataset (the folder `Dataset.to_disk` writes, zipped) becomes a new
project; a project becomes one .zip for either tool.

The files arrive as uploads, kept under names the server chose; what a person reads in an error is the
name they uploaded, never where the server keeps it. An import is one transaction
(services.interchange.import_bundle): a file that cannot be held stores nothing.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from diffjev.archive import unpack_zip
from diffjev.formats.bundle import Bundle, InterchangeError
from diffjev.io import SourceError, write_zip
from diffjev.services.interchange import BundleReport, export_file, import_bundle, read_file
from diffjev.services.projects import ProjectInputError
from storage import repo
from storage.db import Database

ARGILLA_SETTINGS = Path(".argilla") / "settings.json"  # what marks a folder Dataset.to_disk wrote
TOOL_NAMES = {"labelstudio": "Label Studio", "argilla": "Argilla"}


@dataclasses.dataclass(frozen=True)
class Upload:
    """A received file: where the server keeps it, and the name its sender gave it."""

    path: str
    name: str


def _shown(exc: SourceError, places: dict[str, str]) -> SourceError:
    """The error as its reader should see it: each server path in it replaced by the name they know."""

    def clean(text: str | None) -> str | None:
        if text is None:
            return None
        for path, name in sorted(places.items(), key=lambda p: -len(p[0])):  # the longest (most specific) first
            text = text.replace(path, name)
        return text

    if isinstance(exc, InterchangeError):
        return InterchangeError(clean(exc.file), clean(exc.where), clean(exc.field), clean(exc.problem))
    return SourceError(clean(str(exc)))


def _dataset_folder(root: Path, name: str) -> Path:
    """The unpacked Argilla dataset: the archive's top, or the one folder at its top (a zipped folder)."""
    if (root / ARGILLA_SETTINGS).is_file():
        return root
    found = [child for child in root.iterdir() if child.is_dir() and (child / ARGILLA_SETTINGS).is_file()]
    if len(found) == 1:
        return found[0]
    problem = "holds more than one Argilla dataset; zip one" if found else "holds no Argilla dataset"
    raise InterchangeError(
        name,
        None,
        None,
        f"{problem}: zip the folder Argilla's Dataset.to_disk wrote (it holds {ARGILLA_SETTINGS.as_posix()})",
    )


def _unpacked(source: Upload, scratch: Path, places: dict[str, str]) -> Path:
    """The uploaded zip unpacked into `scratch`; its paths are shown in messages as the zip's own."""
    unpack_zip(source.path, scratch, source.name)
    places[f"{scratch.resolve()}{os.sep}"] = f"{source.name}/"
    places[str(scratch.resolve())] = source.name
    return scratch.resolve()


def _labelstudio_pair(root: Path, name: str) -> tuple[Path, Path]:
    """The tasks JSON and labeling config in an unpacked zip: its one .json file and its one .xml file."""
    files = [p for p in root.rglob("*") if p.is_file()]
    tasks = [p for p in files if p.suffix.lower() == ".json"]
    configs = [p for p in files if p.suffix.lower() == ".xml"]
    if len(tasks) != 1 or len(configs) > 1:
        raise InterchangeError(
            name,
            None,
            None,
            f"holds {len(tasks)} .json and {len(configs)} .xml files: zip one Label Studio export (its tasks "
            "JSON) and its labeling config, as diffjev's download for Label Studio holds them, or upload the two",
        )
    if not configs:
        raise InterchangeError(
            name,
            None,
            None,
            "holds no labeling config: add it to the zip, or upload it beside (Settings > Labeling Interface > "
            "Code, saved as an .xml file)",
        )
    return tasks[0], configs[0]


def read_upload(fmt: str, source: Upload, config: Upload | None, scratch: Path) -> Bundle:
    """The uploaded files as a Bundle named after the uploaded file (so a second import of the same file
    keeps to the runs the first made); an Argilla .zip is unpacked into `scratch` first."""
    places = {source.path: source.name}
    if config is not None:
        places[config.path] = config.name
    try:
        if fmt == "labelstudio" and source.name.lower().endswith(".zip"):
            # diffjev's own download for Label Studio: the tasks JSON and its labeling config, zipped
            tasks, xml = _labelstudio_pair(_unpacked(source, scratch, places), source.name)
            bundle = read_file(fmt, tasks, config.path if config is not None else xml)
        elif fmt == "labelstudio":
            if config is None:
                raise InterchangeError(
                    source.name,
                    None,
                    None,
                    "Label Studio's export does not carry the labeling config; upload it too (Settings > Labeling "
                    "Interface > Code, saved as an .xml file)",
                )
            bundle = read_file(fmt, source.path, config.path)
        elif fmt == "argilla":
            if config is not None:
                raise InterchangeError(
                    config.name, None, None, "an Argilla dataset carries its own settings; upload no labeling config"
                )
            if not source.name.lower().endswith(".zip"):
                raise InterchangeError(
                    source.name,
                    None,
                    None,
                    "an Argilla dataset is a folder: upload the folder Dataset.to_disk wrote, zipped",
                )
            bundle = read_file(fmt, _dataset_folder(_unpacked(source, scratch, places), source.name))
        else:
            raise SourceError(f"unknown format {fmt!r}; choose Label Studio or Argilla")
    except SourceError as exc:
        raise _shown(exc, places) from None
    return dataclasses.replace(bundle, source=source.name)


def create_project_from_upload(
    db: Database, name: str, fmt: str, source: Upload, config: Upload | None, actor: str
) -> BundleReport:
    """A new project named `name`, made from another tool's uploaded files in one transaction. A taken or
    unusable name is a ProjectInputError; a file that cannot be held, a SourceError in one line. Either way
    nothing is stored."""
    name = (name or "").strip()
    if not name:
        raise ProjectInputError("name: give the project a name (letters, digits, spaces, '.', '_' or '-')")
    with db.read() as session:
        try:
            repo.get_project(session, name)
        except repo.NotFound:
            pass
        else:  # this makes projects; adding to one is for its reviewers, through the CLI
            raise ProjectInputError(f"name: a project named {name!r} already exists; pick another name")
    with tempfile.TemporaryDirectory(prefix="diffjev-upload-") as scratch:
        bundle = read_upload(fmt, source, config, Path(scratch))
    try:
        return import_bundle(db, name, bundle, actor, new_project=True)
    except repo.Conflict as exc:  # the name is not one a project may have, or was taken while the file was read
        raise ProjectInputError(f"name: {exc}") from None


def export_for_tool(
    db: Database,
    project: str,
    fmt: str,
    folder: Path,
    stem: str,
    actor: str,
    run_id: int | None = None,
    reviewed_only: bool = True,
) -> tuple[int, Path]:
    """The project written for Label Studio (the tasks JSON and its labeling config) or Argilla (the folder
    `Dataset.to_disk` writes) inside `folder`, and one .zip of it for a browser; the items written and the
    zip. Unzipped, each is what that tool's import reads."""
    if fmt == "labelstudio":
        tasks = folder / f"{stem}.json"
        count = export_file(db, project, fmt, tasks, actor, run_id=run_id, reviewed_only=reviewed_only)
        config = tasks.with_name(f"{tasks.stem}.label_config.xml")
        entries = {tasks.name: tasks, config.name: config}
    elif fmt == "argilla":
        dataset = folder / stem
        count = export_file(db, project, fmt, dataset, actor, run_id=run_id, reviewed_only=reviewed_only)
        entries = {dataset.name: dataset}
    else:
        raise SourceError(f"unknown format {fmt!r}; choose Label Studio or Argilla")
    archive = folder / f"{stem}.{fmt}.zip"
    write_zip(archive, entries)
    return count, archive
