"""Exporting a project's labeled set: one record per item, each question's human answer beside the
model's answer, distribution and confidence, written atomically as JSONL, CSV, Parquet or a Hugging
Face dataset.

Columns: `item_id`, `external_id` (the item's own id, named as the import's id field where the project's
imports used one, such as `ticket`, unless a column of the export already has that name), `text`,
`fields` (the context fields; an object in JSONL, JSON text elsewhere), `run_id`, `engine`, `model`
(the run the item's model answers come from: the run asked for, else the latest run that read the item,
so a run that failed or is still reading never blanks them), and per question `q`: `q` (the human
answer), `q_annotator`,
`q_source` (accepted / corrected / manual), `q_annotations` (how many annotators answered), `q_model`,
`q_confidence` and `q_distribution` (answer name -> probability). When several annotators answered,
`q` is the latest answer (or the named annotator's, with `annotator=`).

Where a reviewer adjudicated an item's answer (see diffjev.services.adjudication), that answer is THE
label: `q` holds it, `q_source` is `adjudicated` and `q_annotator` the reviewer. Every export also has
`q_adjudicated_by` and `q_comment` (the reviewer and their comment; empty where nobody adjudicated) and
`q_answers`, every annotator's own answer (annotator, value, source), oldest first, so what was settled
stays beside the label. `q_disputed` is true where annotators gave different answers and nobody has
settled them yet: `q` is then only the latest of those answers, not an agreed label.

A project whose items have images has an `image` column too: in Parquet and the Hugging Face dataset, the
image's bytes and file name as the `datasets` `Image` feature (loading the export gives images); in JSONL
and CSV, the path of the image's file, relative to the export, in a folder written beside it
(`labeled_images/` beside `labeled.csv`), each image once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import orjson

from diffjev.images import EXTENSION_BY_MIME
from diffjev.io import SourceError, atomic_path, write_export, write_zip
from diffjev.schema import Question
from diffjev.spans import parse_span_value
from diffjev.staging import skips
from storage import images as image_store
from storage import items as item_store
from storage import repo
from storage.db import Database

PAGE = 10_000
IMAGES_AT_ONCE = 4  # the images an export holds in memory at once, whatever its page size: one may be 20 MB


def _answer_type() -> Any:
    """One person's answer in `q_answers`: what they gave, how (`source`), its `status` (submitted,
    skipped, draft, not_asked), the seconds it took, and for a not_asked answer why it was not asked."""
    import pyarrow as pa

    return pa.struct(
        [
            ("annotator", pa.string()),
            ("value", pa.string()),
            ("source", pa.string()),
            ("status", pa.string()),
            ("seconds", pa.float64()),
            ("skipped", _skip_type()),
        ]
    )


def csv_escape_setting() -> bool:
    """Whether CSV files escape cells a spreadsheet would run as formulas ($DIFFJEV_CSV_ESCAPE; on unless
    it is 0, false, no or off). See diffjev.io.csv_cell for why it is on by default."""
    return os.environ.get("DIFFJEV_CSV_ESCAPE", "1").strip().lower() not in ("0", "false", "no", "off")


def _span_type() -> Any:
    import pyarrow as pa

    return pa.list_(pa.struct([("start", pa.int64()), ("end", pa.int64()), ("text", pa.string())]))


def _model_span_type() -> Any:
    """The model's spans carry the confidence the read gave each one."""
    import pyarrow as pa

    fields = [("start", pa.int64()), ("end", pa.int64()), ("text", pa.string()), ("confidence", pa.float64())]
    return pa.list_(pa.struct(fields))


def _skip_type() -> Any:
    import pyarrow as pa

    return pa.struct([("because", pa.string()), ("was", pa.string()), ("wanted", pa.list_(pa.string()))])


def columns_and_schema(
    question_keys: list[str],
    names: dict[str, list[str]],
    span_keys: frozenset[str] = frozenset(),
    staged: frozenset[str] = frozenset(),
    image: str | None = None,
    id_column: str = "external_id",
) -> tuple[list[str], Any]:
    """The export's column names and Arrow schema.

    A span question (in `span_keys`) has no distribution over answer names; it has `q_spans` and
    `q_model_spans` instead: its label's and the model's spans, each `{start, end, text}` (code point
    offsets into `text`, end exclusive, as Label Studio and spaCy count; the model's with its
    `confidence`). A staged question (one with
    `ask_if`) also has `<q>_skipped`: why it was not asked of the item, where it was not (its label is
    then empty). `image`: "bytes" or "path" for an image column."""
    import pyarrow as pa

    answer_type = _answer_type()
    fields = [
        ("item_id", pa.int64()),
        (id_column, pa.string()),
        ("text", pa.string()),
        ("fields", pa.string()),
        ("run_id", pa.int64()),
        ("engine", pa.string()),
        ("model", pa.string()),
    ]
    for q in question_keys:
        span = q in span_keys
        fields += [
            (q, pa.string()),
            *([(f"{q}_spans", _span_type())] if span else []),
            (f"{q}_annotator", pa.string()),
            (f"{q}_source", pa.string()),
            (f"{q}_annotations", pa.int64()),
            (f"{q}_model", pa.string()),
            *([(f"{q}_model_spans", _model_span_type())] if span else []),
            (f"{q}_confidence", pa.float64()),
            *([] if span else [(f"{q}_distribution", pa.struct([(n, pa.float64()) for n in names[q]]))]),
            (f"{q}_disputed", pa.bool_()),
            (f"{q}_adjudicated_by", pa.string()),
            (f"{q}_comment", pa.string()),
            (f"{q}_answers", pa.list_(answer_type)),
        ]
        if q in staged:
            fields.append((f"{q}_skipped", _skip_type()))
    schema = pa.schema(fields)
    if image is not None:
        schema = _with_image_column(schema, image)
    return schema.names, schema


def _with_image_column(schema: Any, image: str) -> Any:
    """The schema with an `image` column after `fields`: a path, or the `datasets` Image feature's storage
    (bytes and file name), named as that feature in the schema's Hugging Face metadata."""
    import datasets
    import pyarrow as pa

    if image == "path":
        return schema.insert(schema.get_field_index("fields") + 1, pa.field("image", pa.string()))
    storage = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = schema.insert(schema.get_field_index("fields") + 1, pa.field("image", storage))
    features = datasets.Features.from_arrow_schema(schema)
    features["image"] = datasets.Image()
    return schema.with_metadata({"huggingface": orjson.dumps({"info": {"features": features.to_dict()}}).decode()})


def images_folder(target: str | os.PathLike) -> Path:
    """Where a JSONL or CSV export's images go: `labeled_images/` beside `labeled.csv`."""
    target = Path(target)
    return target.with_name(f"{target.stem}_images")


def download_of(target: str | os.PathLike) -> Path:
    """What a browser is handed for a written export: the file itself, or one .zip beside it where the export
    is more than one file. A Hugging Face dataset is a folder; a JSONL or CSV export with images is the file
    and its images folder, zipped side by side so that unzipping gives the pair its relative `image` paths
    name. Called once the export is written: it packages the files, whatever wrote them."""
    target = Path(target)
    if target.is_dir():
        entries = {path.name: path for path in sorted(target.iterdir())}
    elif images_folder(target).is_dir():
        entries = {target.name: target, images_folder(target).name: images_folder(target)}
    else:
        return target
    archive = target.with_name(f"{target.name}.zip")
    write_zip(archive, entries)
    return archive


def _add_images(
    batches: Iterator[dict[str, list]], db: Database, project_id: int, folder: Path | None, shown: str
) -> Iterator[dict[str, list]]:
    """The batches with each item's image: written once into `folder` and named by its path from the export
    (JSONL, CSV), or as bytes and a file name (Parquet, HF). None for an item without an image.

    A page is cut into slices of at most IMAGES_AT_ONCE images, each slice's images read when it is written
    and let go after: an image may be 20 MB, and a page of 10,000 of them would not fit in memory."""
    written: dict[str, str] = {}  # sha256 -> its file's name in `folder`
    for batch in batches:
        with db.read() as session:
            keys = image_store.item_image_keys(session, project_id, batch["item_id"])
        for part in _slices_by_images(batch, keys):
            needed = {keys[i] for i in part["item_id"] if i in keys} - set(written)
            with db.read() as session:
                found = image_store.image_files(session, project_id, needed)
            if folder is None:
                column = [_image_value(found.get(keys.get(i)), keys.get(i)) for i in part["item_id"]]
            else:
                for sha, (data, mime) in found.items():
                    written[sha] = f"{sha}.{EXTENSION_BY_MIME[mime]}"
                    (folder / written[sha]).write_bytes(data)
                column = [f"{shown}/{written[keys[i]]}" if keys.get(i) in written else None for i in part["item_id"]]
            del found
            yield {**part, "image": column}
            del column  # before the next slice's images are read


def _image_value(file: tuple[bytes, str] | None, sha: str | None) -> dict[str, Any] | None:
    """An image as the `datasets` Image feature stores it: its bytes and a file name."""
    if file is None:
        return None
    data, mime = file
    return {"bytes": data, "path": f"{sha}.{EXTENSION_BY_MIME[mime]}"}


def _slices_by_images(batch: dict[str, list], keys: dict[int, str]) -> Iterator[dict[str, list]]:
    """The batch in consecutive slices, each naming at most IMAGES_AT_ONCE images (items without one are
    free); each slice's image bytes are held only while it is written."""
    ids = batch["item_id"]
    start, shown = 0, set()
    for end, item_id in enumerate(ids):
        sha = keys.get(item_id)
        if sha is not None and sha not in shown and len(shown) == IMAGES_AT_ONCE:
            yield {name: values[start:end] for name, values in batch.items()}
            start, shown = end, set()
        if sha is not None:
            shown.add(sha)
    if start < len(ids):
        yield {name: values[start:] for name, values in batch.items()}


def export_project(
    db: Database,
    project_name: str,
    target: str | os.PathLike,
    fmt: str,
    *,
    run_id: int | None = None,
    annotator: str | None = None,
    reviewed_only: bool = True,
    actor: str = "system",
    progress: Callable[[int], None] | None = None,
    push_to_hub: str | None = None,
    token: str | None = None,
    csv_escape: bool | None = None,
) -> int:
    """Write the export and return how many items it holds. `csv_escape` (default: csv_escape_setting())
    prefixes a quote to CSV text cells that a spreadsheet would run as formulas."""
    if push_to_hub and fmt != "hf":
        raise SourceError("push_to_hub needs the 'hf' format")
    if push_to_hub and not token:
        raise SourceError("push_to_hub needs a Hugging Face token (--hf-token or HF_TOKEN)")
    with db.read() as session:
        project = repo.get_project(session, project_name)
        version = repo.latest_version(session, project.id)
        schema, question_rows = repo.version_schema(version)
        if run_id is not None:
            repo.get_run(session, run_id, project.id)  # another project's run is not found
        runs = {r.id: (r.engine, r.model) for r in repo.list_runs(session, project.id)}
        project_id = project.id
        with_images = image_store.project_has_images(session, project_id)
        own_id = item_store.id_field_of(session, project_id)
    keys = [q.id for q in schema.questions]
    span_kinds = {q.id: q.kind for q in schema.questions if q.type.reads == "span"}
    staged = frozenset(q.id for q in schema.questions if q.ask_if)
    image = ("path" if fmt in ("jsonl", "csv") else "bytes") if with_images else None
    shape = (keys, {q.id: list(q.names) for q in schema.questions}, frozenset(span_kinds), staged, image)
    taken, _ = columns_and_schema(*shape)
    id_column = own_id if own_id and own_id not in taken else "external_id"
    _, arrow_schema = columns_and_schema(*shape, id_column=id_column)
    # JSONL keeps the context fields as an object; the tabular formats hold them as JSON text.
    batches = _column_batches(
        db, project_id, question_rows, keys, (run_id, runs), annotator, reviewed_only, fields_as_text=fmt != "jsonl"
    )
    if id_column != "external_id":
        batches = ({id_column if k == "external_id" else k: v for k, v in b.items()} for b in batches)
    if span_kinds:
        batches = _with_spans(batches, span_kinds)
    if staged:
        batches = _with_skips(db, schema.questions, question_rows, staged, annotator, batches)
    escape = csv_escape_setting() if csv_escape is None else csv_escape
    finish = None
    if fmt == "hf":  # its dataset card counts the rows as they are written and joins them in the folder
        from diffjev.services.hub_card import LabelTally, export_card

        tally = LabelTally(keys, span_kinds)
        batches = tally.over(batches)

        def finish(folder: Path) -> None:
            export_card(db, project_name, schema, tally, id_column).save(folder / "README.md")

    if image == "path":  # the images' folder is moved into place with the export, or not at all
        folder = images_folder(target)
        with atomic_path(folder, directory=True) as partial:
            batches = _add_images(batches, db, project_id, partial, folder.name)
            count = write_export(batches, target, fmt, arrow_schema, on_batch=progress, csv_escape=escape)
    else:
        if image == "bytes":
            batches = _add_images(batches, db, project_id, None, "")
        count = write_export(batches, target, fmt, arrow_schema, on_batch=progress, csv_escape=escape, finish=finish)
    if push_to_hub:
        _push(target, push_to_hub, token)
    with db.session() as session:
        repo.log(
            session,
            actor,
            "export.written",
            project_id,
            target=str(target),
            format=fmt,
            items=count,
            run_id=run_id,
            annotator=annotator,
            reviewed_only=reviewed_only,
        )
    return count


def _column_batches(
    db: Database,
    project_id: int,
    question_rows: dict[str, int],
    keys: list[str],
    run_info: tuple[int | None, dict[int, tuple[str, str]]],
    annotator: str | None,
    reviewed_only: bool,
    fields_as_text: bool,
) -> Iterator[dict[str, list]]:
    run_id, runs = run_info  # the run asked for (None: each item's current suggestion), engine and model by run
    question_ids = [question_rows[k] for k in keys]
    key_of = {qid: k for k, qid in question_rows.items()}
    after = 0
    while True:
        with db.read() as session:
            rows = repo.export_page(session, project_id, run_id, question_ids, after, PAGE, fields_as_text)
            if not rows:
                return
            first, after = rows[0][0], rows[-1][0]
            answers = repo.every_answer_for(session, first, after, question_ids, annotator)  # oldest first
            settled = {
                (item_id, key_of[question_id]): (value, reviewer, comment)
                for item_id, question_id, value, reviewer, comment in repo.adjudications_for(
                    session, first, after, question_ids
                )
            }
        given: dict[tuple[int, str], list] = {}  # submitted answers: the label and its agreement come from them
        everyone: dict[tuple[int, str], list] = {}  # every answer, whatever its status, for `q_answers`
        for item_id, question_id, value, who, source, status, seconds, detail in answers:
            key = (item_id, key_of[question_id])
            if status == "submitted":
                given.setdefault(key, []).append((value, who, source))
            skipped = (detail or {}).get("skipped") if status == "not_asked" else None
            everyone.setdefault(key, []).append(
                {"annotator": who, "value": value, "source": source, "status": status, "seconds": seconds}
                | {"skipped": skipped}
            )
        if reviewed_only:
            answered = {item_id for item_id, _ in given}
            rows = [r for r in rows if r[0] in answered]
            if not rows:
                continue
        columns = list(zip(*rows))  # transposed in C: one list per selected column
        # each row's run: the first question's that has a suggestion (one run reads all of them)
        row_runs = [next((r for r in row[7::5] if r is not None), None) for row in rows]
        batch: dict[str, list] = {
            "item_id": list(columns[0]),
            "external_id": list(columns[1]),
            "text": list(columns[2]),
            "fields": list(columns[3]),
            "run_id": row_runs,
            "engine": [runs[r][0] if r is not None else None for r in row_runs],
            "model": [runs[r][1] if r is not None else None for r in row_runs],
        }
        for k_index, k in enumerate(keys):
            answer, confidence, distribution, _, detail = columns[4 + 5 * k_index : 9 + 5 * k_index]
            latest = [given.get((item_id, k)) for item_id in batch["item_id"]]
            final = [settled.get((item_id, k)) for item_id in batch["item_id"]]
            # the label: the adjudicated answer where there is one, else the latest answer
            batch[k] = [f[0] if f else g[-1][0] if g else None for f, g in zip(final, latest)]
            batch[f"{k}_annotator"] = [f[1] if f else g[-1][1] if g else None for f, g in zip(final, latest)]
            batch[f"{k}_source"] = [repo.ADJUDICATED if f else g[-1][2] if g else None for f, g in zip(final, latest)]
            batch[f"{k}_annotations"] = [len(g) if g else 0 for g in latest]
            batch[f"{k}_model"] = list(answer)
            batch[f"{k}_confidence"] = list(confidence)
            batch[f"{k}_distribution"] = [orjson.loads(d) if d is not None else None for d in distribution]
            batch[f"{k}_disputed"] = [
                not f and len({value for value, _, _ in g or () if value is not None}) > 1
                for f, g in zip(final, latest)
            ]
            batch[f"{k}_adjudicated_by"] = [f[1] if f else None for f in final]
            batch[f"{k}_comment"] = [f[2] if f else None for f in final]
            batch[f"{k}_answers"] = [everyone.get((item_id, k), []) for item_id in batch["item_id"]]
            batch[f"{k}_model_detail"] = [orjson.loads(d) if d is not None else None for d in detail]
        yield batch


def _with_spans(batches: Iterator[dict[str, list]], span_kinds: dict[str, str]) -> Iterator[dict[str, list]]:
    """Each span question's label and model answer ("12-18,30-35", "none") as spans of the item text, and
    no distribution column (a span answer has none). The model's spans are the read's own, with their
    confidences, where the suggestion holds them."""
    for batch in batches:
        texts = batch["text"]
        for key, kind in span_kinds.items():
            batch[f"{key}_spans"] = [_spans(v, t, kind) for v, t in zip(batch[key], texts)]
            batch[f"{key}_model_spans"] = [
                _model_spans(v, d, t, kind)
                for v, d, t in zip(batch[f"{key}_model"], batch[f"{key}_model_detail"], texts)
            ]
            batch.pop(f"{key}_distribution", None)
        yield batch


def _model_spans(value: str | None, detail: dict[str, Any] | None, text: str, kind: str) -> list[dict] | None:
    if detail and "spans" in detail:
        return [{k: s.get(k) for k in ("start", "end", "text", "confidence")} for s in detail["spans"]]
    spans = _spans(value, text, kind)
    return None if spans is None else [{**s, "confidence": None} for s in spans]


def _spans(value: str | None, text: str, kind: str) -> list[dict[str, Any]] | None:
    """A stored span answer as [{start, end, text}]; None where there is no answer, or where it no longer
    fits the item text (it is still in the answer column, as it was given)."""
    if value is None:
        return None
    try:
        spans = parse_span_value(value, text, kind)
    except ValueError:
        return None
    return [{"start": s.start, "end": s.end, "text": s.text} for s in spans]


def _with_skips(
    db: Database,
    questions: Sequence[Question],
    question_rows: dict[str, int],
    staged: frozenset[str],
    annotator: str | None,
    batches: Iterator[dict[str, list]],
) -> Iterator[dict[str, list]]:
    """Each batch with `<q>_skipped` for the staged questions without a label: the record of the latest
    `not_asked` response, else the one the row's final answers imply (each question's label, else the
    model's answer), so a question the model's read skipped, or that a person's later answer no longer
    asks, is exported as a skip, never as a missing label."""
    for batch in batches:
        ids = batch["item_id"]
        with db.read() as session:
            records = repo.not_asked_for(session, ids[0], ids[-1], [question_rows[q] for q in staged], annotator)
        implied = [skips(questions, _final_answers(batch, questions, i)) for i in range(len(ids))]
        for q in sorted(staged, key=list(question_rows).index):
            row = question_rows[q]
            batch[f"{q}_skipped"] = [
                None if value is not None else records.get((item_id, row)) or implied[i].get(q)
                for i, (item_id, value) in enumerate(zip(ids, batch[q]))
            ]
        yield batch


def _final_answers(batch: dict[str, list], questions: Sequence[Question], index: int) -> dict[str, str | None]:
    """One row's answers as the export gives them: the label where there is one, else the model's."""
    return {
        q.id: batch[q.id][index] if batch[q.id][index] is not None else batch[f"{q.id}_model"][index] for q in questions
    }


def _push(target: str | os.PathLike, repo_id: str, token: str) -> None:
    from diffjev.models import hub_reachable

    why = hub_reachable()
    if why is not None:
        raise SourceError(f"the export was written to {target}, but it cannot be pushed to {repo_id}: {why}")
    import datasets
    from huggingface_hub import DatasetCard, HfApi

    # The card goes up first: the dataset's push then adds its own metadata (features, files) to that card
    # rather than writing a bare one over it.
    HfApi(token=token).create_repo(repo_id, repo_type="dataset", exist_ok=True)
    DatasetCard.load(Path(target) / "README.md").push_to_hub(repo_id, token=token)
    datasets.load_from_disk(str(target)).push_to_hub(repo_id, token=token)
