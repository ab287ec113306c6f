"""A diffjev export as a Hugging Face dataset: its dataset card, and reading such a dataset back.

`diffjev export --format hf` writes a `datasets` folder (save_to_disk) with a README.md: the dataset card,
made here with the Hub's own card library. Its YAML metadata holds, under the `diffjev` key, what the
rows alone cannot say and what re-import needs: the schema (every question with its kind, instructions
and answers), the runs the model answers come from (engine, model, version, date, items read), and the
figures (label counts, agreement between annotators, calibration of each run against the human labels).
The card's text shows the same figures as tables for a reader on the Hub.

`read_diffjev_export` reads such a folder (or the dataset pushed to the Hub) into a Bundle: each row's
item, every person's answer from `<q>_answers` (with its status, seconds, a span answer's spans (drafts'
too) and, for a question not asked, why), the reviewer's adjudication (`<q>` where `<q>_adjudicated_by`
names a reviewer, with `<q>_comment`; the reviewer's own answer, if they gave one, stays in `<q>_answers`),
and the row's run's answers (distribution, confidence, spans
with their confidences) and the questions that run's read skipped. A dataset without the `diffjev`
metadata was not written by diffjev and is refused; nothing else is guessed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import orjson

from diffjev.formats.bundle import (
    Adjudication,
    Bundle,
    HumanAnswer,
    InterchangeError,
    ModelAnswer,
    Record,
    RunInfo,
    SpanMark,
)
from diffjev.schema import Schema, SchemaError
from diffjev.spans import parse_span_value
from diffjev.staging import is_span, skips

FORMAT_VERSION = 1
CARD_FILE = "README.md"


def run_key(run_id: int) -> str:
    """How a diffjev run is named in a Bundle (the services layer uses the same key)."""
    return f"run-{run_id}"


# The card ------------------------------------------------------------------------------------------------


def dataset_card(
    project: str,
    schema: Schema,
    items: int,
    label_counts: Mapping[str, Mapping[str, int]],
    agreement: Sequence[Mapping[str, Any]],
    calibration: Sequence[Mapping[str, Any]],
    runs: Sequence[Mapping[str, Any]],
    exported_at: str,
    id_column: str = "external_id",
) -> Any:
    """The dataset card (a huggingface_hub DatasetCard) of one export, from plain data.

    `label_counts`: per question, the items with each label (the export's `q` column: the adjudicated
    answer, else the latest). `agreement`: rows {question, annotators, items, agreement, kappa}.
    `calibration`: rows {question, run, items, accuracy, ECE, Brier, answers used}. `runs`: rows {id,
    engine, model, model_version, status, started_at, finished_at, read}. `id_column`: the column
    that holds the items' own ids."""
    from huggingface_hub import DatasetCard, DatasetCardData

    spans = any(is_span(q) for q in schema.questions)
    data = DatasetCardData(
        pretty_name=project,
        tags=["diffjev", "annotations"],
        task_categories=["text-classification"] + (["token-classification"] if spans else []),
        size_categories=[_size_category(items)],
        diffjev={
            "format_version": FORMAT_VERSION,
            "project": project,
            "exported_at": exported_at,
            "items": items,
            "id_column": id_column,
            "schema": schema.to_dict(),
            "runs": [dict(r) for r in runs],
            "label_counts": {q: dict(c) for q, c in label_counts.items()},
            "agreement": [dict(r) for r in agreement],
            "calibration": [dict(r) for r in calibration],
        },
    )
    body = _card_text(project, schema, items, label_counts, agreement, calibration, runs, exported_at)
    return DatasetCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


def _size_category(n: int) -> str:
    """The Hub's size category for n rows."""
    for bound, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < bound:
            return name
    return "1M<n<10M" if n < 10_000_000 else "n>10M"


def _card_text(
    project: str,
    schema: Schema,
    items: int,
    label_counts: Mapping[str, Mapping[str, int]],
    agreement: Sequence[Mapping[str, Any]],
    calibration: Sequence[Mapping[str, Any]],
    runs: Sequence[Mapping[str, Any]],
    exported_at: str,
) -> str:
    out = [
        f"# {project}",
        "",
        f"{items} items labeled in diffjev, exported {exported_at}. Each row holds an item, "
        "its label per question (`q`: the adjudicated answer, else the latest), every annotator's own answer "
        "(`q_answers`) and the model's answer with its distribution (`q_model`, `q_distribution`). "
        "`diffjev import-project --from hf` reads this dataset back into a project.",
        "",
        "## Questions",
        "",
    ]
    if schema.instructions:
        out += [schema.instructions, ""]
    out += _table(
        ["question", "kind", "instructions", "answers"],
        [[q.id, q.kind, q.instructions, ", ".join(q.names) or "spans of the text"] for q in schema.questions],
    )
    out += ["", "## Label counts", ""]
    out += _table(
        ["question", "label", "items"],
        [[q, label, n] for q, counts in label_counts.items() for label, n in counts.items()],
        empty="No item has a human label yet.",
    )
    out += ["", "## Agreement between annotators", ""]
    out += _table(
        ["question", "annotators", "items", "agreement", "kappa"],
        [[r.get(k) for k in ("question", "annotators", "items", "agreement", "kappa")] for r in agreement],
        empty="No item has answers from two annotators.",
    )
    out += ["", "## Model runs", ""]
    out += _table(
        ["run", "engine", "model", "version", "status", "started", "finished", "items read"],
        [
            [
                r.get(k)
                for k in ("id", "engine", "model", "model_version", "status", "started_at", "finished_at", "read")
            ]
            for r in runs
        ],
        empty="No model run read these items.",
    )
    out += ["", "## Calibration against the human labels", ""]
    out += _table(
        ["question", "run", "items", "accuracy", "ECE", "Brier", "answers used"],
        [
            [r.get(k) for k in ("question", "run", "items", "accuracy", "ECE", "Brier", "answers used")]
            for r in calibration
        ],
        empty="No item has both a model answer and a human label.",
    )
    return "\n".join(out) + "\n"


def _table(header: list[str], rows: list[list[Any]], empty: str = "") -> list[str]:
    if not rows:
        return [empty]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return lines + ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]


def _cell(value: Any) -> str:
    """A table cell: empty for nothing, and no pipe or line break to break the table."""
    if value is None:
        return ""
    return str(value).replace("|", "\\|").replace("\n", " ")


# Reading an export back ----------------------------------------------------------------------------------


def read_diffjev_export(source: str | Path) -> Bundle:
    """A dataset written by `diffjev export --format hf` as a Bundle: a local folder, or a Hub dataset name
    (only where the Hub answers; otherwise one line says so at once)."""
    path = Path(str(source))
    shown = path.name if path.is_dir() else str(source)
    if path.is_dir():
        folder = path
        dataset = _load_folder(folder, shown)
    else:
        folder = _download(str(source))
        dataset = _load_snapshot(folder, shown)
    meta = _diffjev_metadata(folder, shown)
    try:
        schema = Schema.from_dict(meta.get("schema") or {})
    except SchemaError as exc:
        raise InterchangeError(shown, CARD_FILE, "diffjev.schema", f"the schema does not load: {exc}") from None
    if "image" in dataset.column_names:
        raise InterchangeError(
            shown, None, "image", "the items have images, which re-import does not carry yet; export without them"
        )
    runs = {run_key(r["id"]): _run_info(r) for r in meta.get("runs") or []}
    records = []
    id_column = meta.get("id_column") or "external_id"
    for index, row in enumerate(dataset):
        where = f"row {index + 1}" + (f" ({row[id_column]})" if row.get(id_column) else "")
        record = _record(row, schema, where, shown, runs, id_column)
        records.append(record)
    return Bundle(schema=schema, records=records, runs=runs, text_field="text", source=shown)


def _load_folder(folder: Path, shown: str) -> Any:
    import datasets

    try:
        return datasets.load_from_disk(str(folder))
    except (FileNotFoundError, ValueError):
        raise InterchangeError(
            shown, None, None, "not a dataset folder written by `diffjev export --format hf` (save_to_disk)"
        ) from None


def _download(name: str) -> Path:
    """The Hub dataset's files, or one line saying why they cannot be had."""
    from diffjev.models import hub_reachable

    why = hub_reachable()
    if why is not None:
        raise InterchangeError(name, None, None, f"it is not a local folder, and the Hub cannot be reached: {why}")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, repo_type="dataset"))
    except Exception as exc:  # the Hub client raises many types; the user needs its message
        raise InterchangeError(name, None, None, f"cannot download the dataset: {exc}") from None


def _load_snapshot(folder: Path, shown: str) -> Any:
    import datasets

    try:
        loaded = datasets.load_dataset(str(folder))
    except Exception as exc:  # as above: many types, one message
        raise InterchangeError(shown, None, None, f"cannot load the dataset: {exc}") from None
    if "train" not in loaded:
        raise InterchangeError(shown, None, None, f"no 'train' split; its splits are {', '.join(loaded)}")
    return loaded["train"]


def _diffjev_metadata(folder: Path, shown: str) -> dict[str, Any]:
    from huggingface_hub import DatasetCard

    card_path = folder / CARD_FILE
    refuse = "was not written by `diffjev export --format hf`: "
    if not card_path.is_file():
        raise InterchangeError(shown, None, None, refuse + f"it has no {CARD_FILE} dataset card")
    try:
        meta = DatasetCard.load(card_path).data.to_dict().get("diffjev")
    except Exception as exc:  # a card whose YAML does not parse: the card library's own error types vary
        raise InterchangeError(shown, CARD_FILE, None, f"the card's metadata does not parse: {exc}") from None
    if not isinstance(meta, dict) or "schema" not in meta:
        raise InterchangeError(shown, CARD_FILE, "diffjev", refuse + "its card has no diffjev schema")
    if meta.get("format_version") != FORMAT_VERSION:
        raise InterchangeError(
            shown,
            CARD_FILE,
            "diffjev.format_version",
            f"version {meta.get('format_version')!r} is not one this diffjev reads ({FORMAT_VERSION}); "
            "export it again with this version",
        )
    return meta


def _run_info(run: Mapping[str, Any]) -> RunInfo:
    return RunInfo(run_key(run["id"]), run.get("engine") or "", run.get("model") or "", run.get("model_version"))


def _record(
    row: Mapping[str, Any], schema: Schema, where: str, shown: str, runs: dict[str, RunInfo], id_column: str
) -> Record:
    text = row["text"]
    try:
        fields = orjson.loads(row["fields"]) if isinstance(row.get("fields"), str) else dict(row.get("fields") or {})
    except orjson.JSONDecodeError:
        raise InterchangeError(shown, where, "fields", "is not JSON text; export it again") from None
    record = Record(text=text, external_id=row.get(id_column), fields=fields, where=where)
    for q in schema.questions:
        record.answers += _human_answers(row, q, text, where, shown)
        reviewer = row.get(f"{q.id}_adjudicated_by")
        if reviewer:
            value = row[q.id]
            spans = _spans_of(value, text, q, where, shown, q.id)
            record.adjudications.append(Adjudication(q.id, reviewer, value, row.get(f"{q.id}_comment"), spans))
    run_id = row.get("run_id")
    if run_id is not None:
        key = run_key(run_id)
        runs.setdefault(key, RunInfo(key, row.get("engine") or "", row.get("model") or ""))
        answers = [a for q in schema.questions if (a := _model_answer(row, q, text, where, shown)) is not None]
        record.predictions[key] = answers
        # The questions the run's read left out: those its own answers do not ask (a staged read skips them).
        given = {a.question: a.answer for a in answers}
        skipped = {q: why for q, why in skips(schema.questions, given).items() if q not in given}
        if skipped:
            record.model_skipped[key] = skipped
    return record


def _column(row: Mapping[str, Any], name: str, where: str, shown: str) -> Any:
    if name not in row:
        raise InterchangeError(shown, where, name, "the column is missing; the card's schema names a question it lacks")
    return row[name]


def _human_answers(row: Mapping[str, Any], q: Any, text: str, where: str, shown: str) -> list[HumanAnswer]:
    out = []
    for given in _column(row, f"{q.id}_answers", where, shown) or []:
        value, status = given.get("value"), given.get("status") or "submitted"
        spans = _spans_of(value, text, q, where, shown, f"{q.id}_answers")  # a draft's too: None where no value
        out.append(
            HumanAnswer(
                question=q.id,
                annotator=given["annotator"],
                value=value,
                source=given.get("source") or "manual",
                status=status,
                spans=spans,
                skipped=dict(given["skipped"]) if given.get("skipped") else None,
                seconds=given.get("seconds"),
            )
        )
    return out


def _spans_of(value: Any, text: str, q: Any, where: str, shown: str, field: str) -> tuple[SpanMark, ...] | None:
    if not is_span(q) or value is None:
        return None
    try:
        return tuple(SpanMark(s.start, s.end, s.text) for s in parse_span_value(value, text, q.kind))
    except ValueError as exc:
        raise InterchangeError(shown, where, field, f"{q.id}: {exc}") from None


def _model_answer(row: Mapping[str, Any], q: Any, text: str, where: str, shown: str) -> ModelAnswer | None:
    answer = _column(row, f"{q.id}_model", where, shown)
    if answer is None:
        return None
    confidence = row.get(f"{q.id}_confidence")
    if is_span(q):
        marks = _column(row, f"{q.id}_model_spans", where, shown)
        if marks is None:
            raise InterchangeError(shown, where, f"{q.id}_model_spans", f"the model answered {answer!r} with no spans")
        spans = tuple(SpanMark(m["start"], m["end"], m["text"], m.get("confidence")) for m in marks)
        for s in spans:
            if text[s.start : s.end] != s.text:
                raise InterchangeError(
                    shown, where, f"{q.id}_model_spans", f"span {s.start}-{s.end} is not {s.text!r} in the item text"
                )
        return ModelAnswer(q.id, answer, {}, confidence, spans)
    distribution = _column(row, f"{q.id}_distribution", where, shown) or {}
    return ModelAnswer(q.id, answer, {k: v for k, v in distribution.items() if v is not None}, confidence)
