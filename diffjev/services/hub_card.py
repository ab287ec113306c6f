"""The figures of a Hugging Face export's dataset card, gathered from the project: agreement between
annotators (diffjev.services.review.agreement), each run's calibration against the human labels
(diffjev.services.calibration.calibrate) and the runs themselves. The label counts come from the rows the
export wrote (LabelTally), so the card describes exactly those rows; diffjev.formats.hub renders it."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator

from diffjev.formats.hub import dataset_card
from diffjev.schema import Schema
from diffjev.services.calibration import calibrate
from diffjev.services.review import agreement
from diffjev.staging import is_span
from storage import repo
from storage.db import Database


MARKED, NONE = "spans marked", "none"


class LabelTally:
    """Counts each question's labels and the runs named as the export's batches go by. A span question's
    labels are offsets, different on every item: it counts the items with spans marked and with none."""

    def __init__(self, questions: Iterable[str], span_questions: Iterable[str] = ()):
        self.counts: dict[str, Counter] = {q: Counter() for q in questions}
        self.span_questions = frozenset(span_questions)
        self.runs: set[int] = set()
        self.items = 0

    def over(self, batches: Iterator[dict[str, list]]) -> Iterator[dict[str, list]]:
        for batch in batches:
            self.items += len(batch["item_id"])
            self.runs.update(r for r in batch["run_id"] if r is not None)
            for q, counts in self.counts.items():
                labels = (v for v in batch[q] if v is not None)
                counts.update((NONE if v == NONE else MARKED for v in labels) if q in self.span_questions else labels)
            yield batch


def export_card(db: Database, project_name: str, schema: Schema, tally: LabelTally, id_column: str) -> Any:
    """The dataset card of an export whose rows `tally` counted; `id_column` holds the items' own ids."""
    with db.read() as session:
        project = repo.get_project(session, project_name)
        listed = {r.id: r for r in repo.list_runs(session, project.id) if r.id in tally.runs}
        versions = {run_id: repo.get_run(session, run_id, project.id).model_version for run_id in listed}
    runs = [
        {
            "id": r.id,
            "engine": r.engine,
            "model": r.model,
            "model_version": versions[r.id],
            "status": r.status,
            "started_at": _when(r.started_at),
            "finished_at": _when(r.finished_at),
            "read": r.read,
        }
        for r in sorted(listed.values(), key=lambda r: r.id)
    ]
    calibration = []
    for run in runs:
        for q in schema.questions:
            if is_span(q):  # a span answer has no distribution over names to calibrate
                continue
            found = calibrate(db, project_name, run["id"], q.id, full=False)
            if found is not None:
                calibration.append(found.summary())
    pairs, _ = agreement(db, project_name)
    counts = {q: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) for q, c in tally.counts.items()}
    exported_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return dataset_card(project_name, schema, tally.items, counts, pairs, calibration, runs, exported_at, id_column)


def _when(moment: datetime | None) -> str | None:
    return moment.isoformat(timespec="seconds") if moment is not None else None
