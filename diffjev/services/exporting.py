"""Exporting a project's labeled set: one record per item, each question's human answer beside the
model's answer, distribution and confidence, written atomically as JSONL, CSV, Parquet or a Hugging
Face dataset.

Columns: `item_id`, `external_id`, `text`, `fields` (the context fields; an object in JSONL, JSON text
elsewhere), `run_id`, `engine`, `model`, and per question `q`: `q` (the human answer), `q_annotator`,
`q_source` (accepted / corrected / manual), `q_annotations` (how many annotators answered), `q_model`,
`q_confidence` and `q_distribution` (answer name -> probability). When several annotators answered,
`q` is the latest answer (or the named annotator's, with `annotator=`).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator

from diffjev.io import SourceError, write_export
from diffjev.storage import repo
from diffjev.storage.db import Database

PAGE = 10_000


def columns_and_schema(question_keys: list[str], names: dict[str, list[str]]) -> tuple[list[str], Any]:
    import pyarrow as pa

    fields = [("item_id", pa.int64()), ("external_id", pa.string()), ("text", pa.string()), ("fields", pa.string()),
              ("run_id", pa.int64()), ("engine", pa.string()), ("model", pa.string())]
    for q in question_keys:
        fields += [(q, pa.string()), (f"{q}_annotator", pa.string()), (f"{q}_source", pa.string()),
                   (f"{q}_annotations", pa.int64()), (f"{q}_model", pa.string()), (f"{q}_confidence", pa.float64()),
                   (f"{q}_distribution", pa.struct([(n, pa.float64()) for n in names[q]]))]
    schema = pa.schema(fields)
    return schema.names, schema


def export_project(db: Database, project_name: str, target: str | os.PathLike, fmt: str, *,
                   run_id: int | None = None, annotator: str | None = None, reviewed_only: bool = True,
                   actor: str = "system", progress: Callable[[int], None] | None = None,
                   push_to_hub: str | None = None, token: str | None = None) -> int:
    """Write the export and return how many items it holds."""
    with db.read() as session:
        project = repo.get_project(session, project_name)
        version = repo.latest_version(session, project.id)
        schema, question_rows = repo.version_schema(version)
        run = repo.get_run(session, run_id) if run_id is not None else repo.latest_run(session, project.id)
        if run is not None and run.project_id != project.id:
            raise repo.NotFound(f"run {run_id} belongs to another project")
        run_info = (run.id, run.engine, run.model_name) if run else (None, None, None)
        project_id = project.id
    keys = [q.id for q in schema.questions]
    columns, arrow_schema = columns_and_schema(keys, {q.id: list(q.names) for q in schema.questions})
    batches = _records(db, project_id, question_rows, keys, run_info, annotator, reviewed_only)
    count = write_export(batches, target, fmt, columns, arrow_schema, on_batch=progress)
    if push_to_hub:
        _push(target, fmt, push_to_hub, token)
    with db.session() as session:
        repo.log(session, actor, "export.written", project_id, target=str(target), format=fmt, items=count,
                 run_id=run_info[0], annotator=annotator, reviewed_only=reviewed_only)
    return count


def _records(db: Database, project_id: int, question_rows: dict[str, int], keys: list[str],
             run_info: tuple, annotator: str | None, reviewed_only: bool) -> Iterator[list[dict[str, Any]]]:
    run_id, engine, model = run_info
    by_row = {row: key for key, row in question_rows.items()}
    after = 0
    while True:
        with db.read() as session:
            items = repo.item_page(session, project_id, after, PAGE)
            if not items:
                return
            after = items[-1].id
            ids = [i.id for i in items]
            answers: dict[tuple[int, str], list] = {}
            for r in repo.responses_for(session, ids, list(by_row), annotator):  # oldest first
                answers.setdefault((r.item_id, by_row[r.question_id]), []).append(r)
            suggestions = {(s.item_id, by_row[s.question_id]): s
                           for s in (repo.suggestions_for(session, run_id, ids) if run_id is not None else [])
                           if s.question_id in by_row}
        batch = []
        for item in items:
            if reviewed_only and not any((item.id, k) in answers for k in keys):
                continue
            record: dict[str, Any] = {"item_id": item.id, "external_id": item.external_id, "text": item.text,
                                      "fields": item.fields, "run_id": run_id, "engine": engine, "model": model}
            for k in keys:
                given = answers.get((item.id, k), [])
                latest = given[-1] if given else None
                s = suggestions.get((item.id, k))
                record.update({
                    k: latest.value if latest else None,
                    f"{k}_annotator": latest.annotator if latest else None,
                    f"{k}_source": latest.source if latest else None,
                    f"{k}_annotations": len(given),
                    f"{k}_model": s.answer if s else None,
                    f"{k}_confidence": s.confidence if s else None,
                    f"{k}_distribution": dict(s.distribution) if s else None,
                })
            batch.append(record)
        if batch:
            yield batch


def _push(target: str | os.PathLike, fmt: str, repo_id: str, token: str | None) -> None:
    if fmt != "hf":
        raise SourceError("push_to_hub needs the 'hf' format")
    if not token:
        raise SourceError("push_to_hub needs a Hugging Face token (--hf-token or HF_TOKEN)")
    from diffjev.models import hub_reachable

    why = hub_reachable()
    if why is not None:
        raise SourceError(f"the export was written to {target}, but it cannot be pushed to {repo_id}: {why}")
    import datasets

    datasets.load_from_disk(str(target)).push_to_hub(repo_id, token=token)
