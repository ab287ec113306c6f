"""Importing items into a project: streamed in chunks, each chunk one transaction, nothing twice."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Callable, Sequence

from diffjev.io import Rejected, Row, read_rows
from diffjev.storage import repo
from diffjev.storage.db import Database

CHUNK_ROWS = 5_000
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
