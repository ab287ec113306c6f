"""Importing items into a project: streamed in chunks, each chunk one transaction, nothing twice.

A bad row is rejected with its line and the rest import: every row is checked before it is stored (see
diffjev.io), and a chunk the database still refuses is stored again row by row, so only the rows it
refuses are rejected. An import that stops part way (an error, Ctrl-C) still records what it stored.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Sequence

from sqlalchemy.exc import DataError, IntegrityError, OperationalError, StatementError

from diffjev.images import ImageSourceError, max_image_bytes
from diffjev.io import HubDataset, ImageColumn, Limits, Rejected, Row, SourceError, read_rows, source_name
from storage import images as image_store
from storage import items as item_store
from storage import repo
from storage.db import Database

CHUNK_ROWS = 5_000
# The longest item text imported, in characters ($DIFFJEV_MAX_ITEM_CHARS, `--max-chars`). A read costs
# memory quadratic in the prompt: one 100k-character item took 4.7 GB in-process.
MAX_ITEM_CHARS = 100_000
HUB_DATASET = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
MAX_REPORTED_REJECTS = 1_000  # every reject is counted; the first thousand are kept with their reasons


@dataclass
class ImportReport:
    imported: int = 0
    duplicates: int = 0
    rejected: int = 0
    rejects: list[Rejected] = field(default_factory=list)
    import_id: int | None = None  # the import's record once it stored a chunk: what undo_import takes

    def summary(self) -> str:
        lines = [f"imported {self.imported}, duplicates {self.duplicates}, rejected {self.rejected}"]
        lines += [f"  line {r.line}: {r.reason}" for r in self.rejects[:20]]
        if self.rejected > 20:
            lines.append(f"  ... and {self.rejected - 20} more")
        return "\n".join(lines)


def dataset_source(name: str, folder: Path) -> str | HubDataset:
    """What a studio user may import by name: a saved dataset folder inside `folder`, or a Hugging Face
    Hub dataset name. A name that reaches outside `folder` (absolute, `..`, a link out) is refused, so a
    user of the studio cannot read the server's other files; a refusal says "the import folder", never
    where the server keeps it."""
    name = name.strip()
    where = Path(name)
    if where.is_absolute() or ".." in where.parts or "\x00" in name:
        raise SourceError(
            f"dataset {name!r}: a folder must be named relative to the import folder, "
            f"without '..'; move the dataset under it, or give a Hub dataset name (owner/name)"
        )
    root = folder.resolve()
    local = (root / where).resolve()
    if not local.is_relative_to(root):
        raise SourceError(f"dataset {name!r} leads outside the import folder; move the dataset under it")
    if local.is_dir():
        return str(local)
    if HUB_DATASET.fullmatch(name):
        return HubDataset(name)  # fetched from the Hub only, never looked up on the server's disk
    raise SourceError(
        f"dataset {name!r} is neither a folder under the import folder nor a Hub dataset name (owner/name)"
    )


def max_item_chars() -> int:
    """The import's cap on item text: $DIFFJEV_MAX_ITEM_CHARS, else MAX_ITEM_CHARS."""
    raw = os.environ.get("DIFFJEV_MAX_ITEM_CHARS", "").strip().replace("_", "")
    if not raw:
        return MAX_ITEM_CHARS
    if not raw.isdigit() or int(raw) < 1:
        raise SourceError(
            f"DIFFJEV_MAX_ITEM_CHARS={raw!r}: give the longest item text to import as a whole "
            f"number of characters, such as {MAX_ITEM_CHARS}"
        )
    return int(raw)


def import_items(
    db: Database,
    project_name: str,
    source: Any,
    *,
    text_field: str | None = None,
    id_field: str | None = None,
    context_fields: Sequence[str] | None = None,
    split: str = "train",
    actor: str = "system",
    chunk_rows: int = CHUNK_ROWS,
    max_chars: int | None = None,
    progress: Callable[[ImportReport], None] | None = None,
    label: str | None = None,
    image_field: str | None = None,
    image_folder: str | os.PathLike | None = None,
) -> ImportReport:
    """Import a CSV, JSONL or Parquet file, a DataFrame, or a Hugging Face dataset into a project.

    Re-importing adds nothing twice: rows are keyed on `id_field` when given, else on a hash of their
    text and context fields (and image). A text longer than `max_chars` (default: max_item_chars()) is
    rejected. The import is listed under `label` where given, else under the source's name.

    `image_field` names a column holding each item's image: a path inside `image_folder` (the import
    folder; without one, only bytes, a dataset's `Image` values and Hub file URLs are taken), a URL to a
    Hub dataset file, or bytes. Each image is stored once per project (see diffjev.images for the checks)."""
    if max_chars is not None and max_chars < 1:
        raise SourceError(f"max_chars={max_chars}: the longest item text must be at least one character")
    limits = Limits(max_text_chars=max_chars or max_item_chars(), max_id_chars=repo.EXTERNAL_ID_CHARS)
    image = _image_column(image_field, image_folder)
    with db.read() as session:
        project = repo.get_project(session, project_name)
        project_id, default_text = project.id, project.text_field
    text_field = text_field or default_text
    rows = read_rows(source, text_field, id_field, context_fields, split, limits, image)
    report = ImportReport()

    listed_as = label or source_name(source)

    def record_import() -> int:
        return db.write(
            lambda session: item_store.create_import(session, project_id, listed_as, text_field, actor, id_field)
        )

    try:
        _import_chunks(db, project_id, rows, chunk_rows, report, progress, record_import)
    except BaseException as exc:
        # The chunks stored so far stay stored: the audit trail says so, and why the import stopped. A
        # failure to write that event (the database gone) must not hide the reason the import stopped. A
        # source refused before any chunk (no such column) stored nothing, and leaves no event.
        if report.imported or report.duplicates or report.rejected:
            with contextlib.suppress(Exception):
                _log_import(db, actor, project_id, source, report, interrupted=type(exc).__name__)
        raise
    _log_import(db, actor, project_id, source, report)
    return report


def _image_column(image_field: str | None, image_folder: str | os.PathLike | None) -> ImageColumn | None:
    if not image_field:
        return None
    try:
        limit = max_image_bytes()
    except ImageSourceError as exc:
        raise SourceError(str(exc)) from None
    return ImageColumn(image_field, Path(image_folder) if image_folder is not None else None, limit)


def _import_chunks(
    db: Database,
    project_id: int,
    rows,
    chunk_rows: int,
    report: ImportReport,
    progress: Callable[[ImportReport], None] | None,
    record_import: Callable[[], int],
) -> None:
    while True:
        chunk = list(islice(rows, chunk_rows))  # the first read checks the columns: a refused source records nothing
        if not chunk:
            return
        if report.import_id is None:
            report.import_id = record_import()
        import_id = report.import_id
        good = [r for r in chunk if not isinstance(r, Rejected)]
        rejected = [r for r in chunk if isinstance(r, Rejected)]
        try:
            added = db.write(lambda session: _store_chunk(session, project_id, good, import_id))
        except (DataError, IntegrityError, StatementError) as exc:
            if isinstance(exc, OperationalError):  # the database itself failed, not a row: nothing to retry
                raise
            added, refused = db.write(lambda session: _store_rows_one_by_one(session, project_id, good, import_id))
            refused_lines = {r.line for r in refused}
            good = [r for r in good if r.line not in refused_lines]
            rejected = sorted(rejected + refused, key=lambda r: r.line)
        report.imported += added
        report.duplicates += len(good) - added
        report.rejected += len(rejected)
        report.rejects.extend(rejected[: MAX_REPORTED_REJECTS - len(report.rejects)])
        if progress:
            progress(report)


def _log_import(
    db: Database, actor: str, project_id: int, source: Any, report: ImportReport, interrupted: str | None = None
) -> None:
    extra = {"interrupted": interrupted} if interrupted else {}
    with db.session() as session:
        repo.log(
            session,
            actor,
            "items.imported",
            project_id,
            source=str(source)[:500],
            imported=report.imported,
            duplicates=report.duplicates,
            rejected=report.rejected,
            **extra,
        )


def _store_rows_one_by_one(session, project_id: int, rows: list[Row], import_id: int) -> tuple[int, list[Rejected]]:
    """Store a chunk the database refused as a whole, each row in its own savepoint; returns how many were
    added and the rows the database refused, each with the database's reason. The reason is the driver's
    first line only: the statement and its parameters (other rows' texts) are never repeated."""
    added, refused = 0, []
    for row in rows:
        try:
            with session.begin_nested():
                added += _store_chunk(session, project_id, [row], import_id)
        except (DataError, IntegrityError, StatementError) as exc:
            if isinstance(exc, OperationalError):
                raise
            reason = str(getattr(exc, "orig", None) or type(exc).__name__).strip().splitlines()[0]
            refused.append(Rejected(row.line, f"the database refused it: {reason}"))
    return added, refused


def _store_chunk(session, project_id: int, rows: list[Row], import_id: int) -> int:
    """Insert, in file order, the rows not stored yet nor repeated earlier in the chunk; returns how many."""
    hashes = [r.content_hash for r in rows]
    have_ids, have_hashes = repo.existing_keys(
        session,
        project_id,
        [r.external_id for r in rows if r.external_id is not None],
        [h for r, h in zip(rows, hashes) if r.external_id is None],
    )
    fresh = []
    for r, h in zip(rows, hashes):
        seen, key = (have_ids, r.external_id) if r.external_id is not None else (have_hashes, h)
        if key in seen:
            continue
        seen.add(key)
        fresh.append(
            {
                "external_id": r.external_id,
                "content_hash": h,
                "text": r.text,
                "fields": r.fields,
                "import_id": import_id,
                "image": r.image.sha256 if r.image is not None else None,
            }
        )
    stored = {item["image"] for item in fresh}  # a duplicate row's image is not stored
    image_store.store_images(session, project_id, [r.image for r in rows if r.image and r.image.sha256 in stored])
    repo.insert_items(session, project_id, fresh)
    return len(fresh)


# Undoing an import -------------------------------------------------------------------------------------------


class UndoRefused(ValueError):
    """An import that cannot be undone; the message says why and what to do instead."""


def project_text_field(db: Database, project_name: str) -> str:
    """The column a project's items are read from unless an import names another."""
    with db.read() as session:
        return repo.get_project(session, project_name).text_field


def project_id_field(db: Database, project_name: str) -> str | None:
    """The id column the project's imports keyed its items on (one name), which its exports carry too."""
    with db.read() as session:
        return item_store.id_field_of(session, repo.get_project(session, project_name).id)


def recent_imports(db: Database, project_name: str, limit: int = 20) -> list[item_store.ImportSummary]:
    with db.read() as session:
        return item_store.recent_imports(session, repo.get_project(session, project_name).id, limit)


def undo_import(db: Database, project_name: str, import_id: int, actor: str) -> int:
    """Remove the items an import created, if none of them is answered yet; returns how many were removed.

    An answered item holds someone's work: the whole import is refused, and the message says how many are
    answered (the unanswered ones can still be deleted in the Items view)."""

    def work(session) -> int:
        project_id = repo.get_project(session, project_name).id
        found = item_store.get_import(session, project_id, import_id)
        if found is None or found.undone_at is not None:
            raise UndoRefused(f"no import {import_id} to undo in this project")
        total, answered = item_store.import_item_counts(session, project_id, import_id)
        if answered:
            raise UndoRefused(
                f"import {import_id} ({found.source}) cannot be undone: {answered} of its {total} items "
                f"{'is' if answered == 1 else 'are'} answered already. Nothing was removed; delete the items "
                f"you do not want in the Items tab instead"
            )
        removed = item_store.undo_import(session, project_id, import_id)
        repo.log(session, actor, "items.import_undone", project_id, import_id=import_id, removed=removed)
        return removed

    return db.write(work)
