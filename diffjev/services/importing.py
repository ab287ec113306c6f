"""Importing items into a project: streamed in chunks, each chunk one transaction, nothing twice."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Sequence

from diffjev.io import HubDataset, Rejected, Row, SourceError, read_rows
from diffjev.storage import repo
from diffjev.storage.db import Database

CHUNK_ROWS = 5_000
HUB_DATASET = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
MAX_REPORTED_REJECTS = 1_000  # every reject is counted; the first thousand are kept with their reasons


@dataclass
class ImportReport:
    imported: int = 0
    duplicates: int = 0
    rejected: int = 0
    rejects: list[Rejected] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"imported {self.imported}, duplicates {self.duplicates}, rejected {self.rejected}"]
        lines += [f"  line {r.line}: {r.reason}" for r in self.rejects[:20]]
        if self.rejected > 20:
            lines.append(f"  ... and {self.rejected - 20} more")
        return "\n".join(lines)


def dataset_source(name: str, folder: Path) -> str | HubDataset:
    """What a studio user may import by name: a saved dataset folder inside `folder`, or a Hugging Face
    Hub dataset name. A name that reaches outside `folder` (absolute, `..`, a link out) is refused, so a
    user of the studio cannot read the server's other files."""
    name = name.strip()
    where = Path(name)
    if where.is_absolute() or ".." in where.parts or "\x00" in name:
        raise SourceError(f"dataset {name!r}: a folder must be named relative to the import folder {folder}, "
                          f"without '..'; move the dataset under it, or give a Hub dataset name (owner/name)")
    root = folder.resolve()
    local = (root / where).resolve()
    if not local.is_relative_to(root):
        raise SourceError(f"dataset {name!r} leads outside the import folder {folder}; move the dataset under it")
    if local.is_dir():
        return str(local)
    if HUB_DATASET.fullmatch(name):
        return HubDataset(name)  # fetched from the Hub only, never looked up on the server's disk
    raise SourceError(f"dataset {name!r} is neither a folder under the import folder {folder} nor a Hub dataset "
                      f"name (owner/name)")


def import_items(db: Database, project_name: str, source: Any, *, text_field: str | None = None,
                 id_field: str | None = None, context_fields: Sequence[str] | None = None, split: str = "train",
                 actor: str = "system", chunk_rows: int = CHUNK_ROWS,
                 progress: Callable[[ImportReport], None] | None = None) -> ImportReport:
    """Import a CSV, JSONL or Parquet file, a DataFrame, or a Hugging Face dataset into a project.

    Re-importing adds nothing twice: rows are keyed on `id_field` when given, else on a hash of their
    text and context fields."""
    with db.read() as session:
        project = repo.get_project(session, project_name)
        project_id, default_text = project.id, project.text_field
    rows = read_rows(source, text_field or default_text, id_field, context_fields, split)
    report = ImportReport()
    while True:
        chunk = list(islice(rows, chunk_rows))
        if not chunk:
            break
        good = []
        for r in chunk:
            if isinstance(r, Rejected):
                report.rejected += 1
                if len(report.rejects) < MAX_REPORTED_REJECTS:
                    report.rejects.append(r)
            else:
                good.append(r)
        added = db.write(lambda session: _store_chunk(session, project_id, good))
        report.imported += added
        report.duplicates += len(good) - added
        if progress:
            progress(report)
    with db.session() as session:
        repo.log(session, actor, "items.imported", project_id, source=str(source)[:500], imported=report.imported,
                 duplicates=report.duplicates, rejected=report.rejected)
    return report


def _store_chunk(session, project_id: int, rows: list[Row]) -> int:
    """Insert, in file order, the rows not stored yet nor repeated earlier in the chunk; returns how many."""
    hashes = [r.content_hash for r in rows]
    have_ids, have_hashes = repo.existing_keys(
        session, project_id, [r.external_id for r in rows if r.external_id is not None],
        [h for r, h in zip(rows, hashes) if r.external_id is None])
    fresh = []
    for r, h in zip(rows, hashes):
        seen, key = (have_ids, r.external_id) if r.external_id is not None else (have_hashes, h)
        if key in seen:
            continue
        seen.add(key)
        fresh.append({"external_id": r.external_id, "content_hash": h, "text": r.text, "fields": r.fields})
    repo.insert_items(session, project_id, fresh)
    return len(fresh)
