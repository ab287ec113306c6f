"""Check files that diffjev exports (or imports) against the other tools' own code: Label Studio's SDK
and Argilla's client. Runs inside .venv-interchange (scripts/check-interchange makes it), never in
diffjev's own install, so neither tool becomes a dependency of diffjev.

    python scripts/interchange/validate.py PATH [PATH ...] [--config label_config.xml]

PATH is one of
- a Label Studio labeling config (*.xml): parsed by `LabelInterface(config)` and checked by its
  `validate()` (the config schema, unique names, every toName points at a tag);
- a Label Studio JSON export (*.json, a list of tasks): its config is `--config`, else
  `<stem>.label_config.xml` beside it (what diffjev writes), else `label_config.xml` beside it. Each
  task's data must hold every value the config's object tags read (`$text`), and every annotation
  and prediction goes through `LabelInterface.validate_prediction(..., return_errors=True)`: each
  result's from_name/to_name/type must match a control of the config and its value must fit that
  control (a known choice, a span with start/end/labels of the config's labels, a rating >= 0), and a
  prediction's score must lie in [0, 1]. The SDK leaves a few things to the labeling editor; those are
  checked here as the editor enforces them: one choice for a single <Choices>, a rating within
  maxRating, a span's text equal to the task text between its offsets, and an annotation's annotator;
- an Argilla dataset folder, as `Dataset.to_disk` writes it: `.argilla/dataset.json` through
  Argilla's `DatasetModel`, `.argilla/settings.json` through `Settings.from_json`, and each record of
  `records.json` through `Record.from_dict(..., dataset=...).api_model()`, the calls `Dataset.from_disk`
  makes before it sends records to a server. The values are then held to the rules the Argilla
  server applies when records are logged (argilla_server/validators: records, responses,
  response_values, suggestions): known and required fields, suggestions and responses only for
  configured questions, a label among the options, a non-empty list of unique known labels for a
  multi-label question, a rating among the rating values, spans inside the field with known labels
  and without overlap unless the question allows it, a score list as long as a list value, a
  response status of draft/submitted/discarded, and a submitted response answering every required
  question.

Every problem is one line, "file: task 3: field 'x': what is wrong"; the exit status is 1 when there
is any, 0 when every file passes (then one line per file says what was checked).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any


class Problems:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, file: Path | str, where: str | None, field: str | None, problem: str) -> None:
        parts = [str(file)] + ([where] if where else []) + ([f"field {field!r}"] if field else [])
        self.lines.append(": ".join(parts) + ": " + " ".join(str(problem).split()))


def load_json(path: Path, problems: Problems) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.add(path, None, None, f"cannot be read as JSON: {exc}")
        return None


# --- Label Studio --------------------------------------------------------------------------------


def label_interface(path: Path, problems: Problems):
    from label_studio_sdk.label_interface import LabelInterface

    try:
        text = path.read_text(encoding="utf-8")
        interface = LabelInterface(text)
        interface.validate()
    except Exception as exc:  # the SDK raises lxml, jsonschema and its own errors alike
        problems.add(path, None, None, f"Label Studio does not take this labeling config: {exc}")
        return None
    return interface


def check_labelstudio_config(path: Path, problems: Problems) -> str | None:
    interface = label_interface(path, problems)
    if interface is None:
        return None
    return f"Label Studio config: {len(interface.controls)} controls over {len(interface.objects)} objects"


def config_beside(export: Path) -> Path | None:
    for candidate in (export.with_name(f"{export.stem}.label_config.xml"), export.with_name("label_config.xml")):
        if candidate.is_file():
            return candidate
    return None


def editor_rules(interface, task_data: dict, region: dict) -> list[tuple[str, str]]:
    """What the labeling editor enforces and the SDK's validator does not: (field, problem) pairs."""
    out: list[tuple[str, str]] = []
    try:
        control = interface.get_control(region.get("from_name"))
    except Exception:
        return out  # the SDK already named the unknown control
    value = region.get("value") or {}
    tag = control.tag.lower()
    name = region.get("from_name")
    if tag == "choices" and not control.is_multiple_choice and len(value.get("choices") or []) > 1:
        out.append((name, f"{value['choices']} holds several choices for a single-choice <Choices>"))
    if tag == "rating":
        most = int(control.attr.get("maxRating", 5))
        if isinstance(value.get("rating"), int) and not 1 <= value["rating"] <= most:
            out.append((name, f"rating {value['rating']} is outside 1..{most} (maxRating)"))
    if tag == "labels" and {"start", "end"} <= value.keys():
        try:
            item = interface.get_object(region.get("to_name"))
        except Exception:
            return out
        text = task_data.get(item.value_name) if item.value_is_variable else None
        start, end = value["start"], value["end"]
        if not isinstance(text, str) or not (isinstance(start, int) and isinstance(end, int)):
            return out
        if not 0 <= start < end <= len(text):
            out.append((name, f"span {start}-{end} is outside the text ({len(text)} characters)"))
        elif "text" in value and value["text"] != text[start:end]:
            out.append((name, f"span {start}-{end} says {value['text']!r} but the text there is {text[start:end]!r}"))
    return out


def check_labelstudio_export(path: Path, config: Path | None, problems: Problems) -> str | None:
    config = config or config_beside(path)
    if config is None:
        problems.add(path, None, None, "no labeling config: pass --config, or put <stem>.label_config.xml beside it")
        return None
    interface = label_interface(config, problems)
    tasks = load_json(path, problems)
    if interface is None or tasks is None:
        return None
    if not isinstance(tasks, list):
        problems.add(path, None, None, "a Label Studio JSON export is a list of tasks")
        return None
    counts = defaultdict(int)
    for index, task in enumerate(tasks):
        where = f"task {task.get('id', index + 1) if isinstance(task, dict) else index + 1}"
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            problems.add(path, where, "data", "each task is an object with its data under 'data'")
            continue
        for item in interface.objects:
            if item.value_is_variable and task["data"].get(item.value_name) is None:
                problems.add(path, where, f"data.{item.value_name}", f"<{item.tag} name={item.name!r}> reads it")
        for kind in ("annotations", "predictions"):
            entries = task.get(kind, [])
            if not isinstance(entries, list):
                problems.add(path, where, kind, "must be a list")
                continue
            for number, entry in enumerate(entries, 1):
                field = f"{kind}[{number}]"
                if not isinstance(entry, dict):
                    problems.add(
                        path, where, field,
                        f"is {entry!r}, an id only: export with full bodies (an export snapshot with "
                        f"serialization_options {kind}.only_id false), not the Export button's quick form",
                    )  # fmt: skip
                    continue
                counts[kind] += 1
                who = entry.get("completed_by")
                # As Label Studio's import takes it: none (the importing user), a user id, or {"email": ...}
                if kind == "annotations" and not (
                    who is None
                    or (isinstance(who, int) and not isinstance(who, bool))
                    or (isinstance(who, dict) and isinstance(who.get("email"), str))
                ):
                    problems.add(
                        path, where, f"{field}.completed_by", "is left out, a user id, or an object with an email"
                    )
                for error in interface.validate_prediction(entry, return_errors=True):
                    problems.add(path, where, field, error)
                for region in entry.get("result") or []:
                    if isinstance(region, dict):
                        for name, problem in editor_rules(interface, task["data"], region):
                            problems.add(path, where, f"{field}.result.{name}", problem)
    return (
        f"Label Studio export: {len(tasks)} tasks, {counts['annotations']} annotations and "
        f"{counts['predictions']} predictions valid against {config.name}"
    )


# --- Argilla -------------------------------------------------------------------------------------


def offline_argilla():
    """Argilla's settings and records take their client from `Argilla._get_default()`, whose constructor
    checks a server connection; the check is the only request made, so leave it out. Nothing is sent."""
    import argilla as rg

    class OfflineArgilla(rg.Argilla):
        def _validate_connection(self) -> None:
            pass

    rg.Argilla._set_default(OfflineArgilla(api_url="http://localhost:6900", api_key="offline"))
    return rg


def span_rules(value: list, settings: dict, fields: dict) -> list[str]:
    field = settings.get("field")
    if field not in fields or not isinstance(fields[field], str):
        return [f"a span question needs the record's field {field!r}"]
    size, labels, out = len(fields[field]), [o["value"] for o in settings.get("options", [])], []
    for n, span in enumerate(value):
        if not isinstance(span, dict) or not {"start", "end", "label"} <= span.keys():
            out.append(f"span {n} is not {{start, end, label}}")
            continue
        if not (isinstance(span["start"], int) and isinstance(span["end"], int)):
            out.append(f"span {n}: start and end are integers")
        elif span["start"] > size - 1 or span["end"] > size or span["start"] >= span["end"]:
            out.append(f"span {n} ({span['start']}-{span['end']}) is outside field {field!r} ({size} characters)")
        if span["label"] not in labels:
            out.append(f"span {n}: undefined label {span['label']!r}; valid labels are {labels}")
    if not settings.get("allow_overlapping"):
        good = [s for s in value if isinstance(s, dict) and isinstance(s.get("start"), int)]
        for i, a in enumerate(good):
            for j, b in enumerate(good[i + 1 :], i + 1):
                if isinstance(b.get("end"), int) and a["start"] < b["end"] and a["end"] > b["start"]:
                    out.append(f"spans {i} and {j} overlap and the question does not allow overlapping")
    return out


def value_rules(value: Any, settings: dict, fields: dict) -> list[str]:
    """The value rules of argilla_server/validators/response_values.py, which suggestions share."""
    kind = settings.get("type")
    options = [option.get("value") for option in settings.get("options", [])]
    if kind == "text":
        return [] if isinstance(value, str) else [f"a text question takes text, not {value!r}"]
    if kind in ("label_selection", "rating"):
        return [] if value in options else [f"{value!r} is not one of {options}"]
    if kind == "multi_label_selection":
        if not isinstance(value, list) or not value:
            return [f"a multi-label question takes a non-empty list of labels, not {value!r}"]
        if len(value) != len(set(value)):
            return [f"{value} repeats a label"]
        unknown = sorted(set(value) - set(options))
        return [f"{unknown} are not among the labels {options}"] if unknown else []
    if kind == "span":
        return span_rules(value, settings, fields) if isinstance(value, list) else ["a span question takes a list"]
    if kind == "ranking":
        return [] if isinstance(value, list) else ["a ranking question takes a list"]
    return [f"unknown question type {kind!r}"]


def check_argilla_folder(folder: Path, problems: Problems) -> str | None:
    rg = offline_argilla()
    from argilla._models import DatasetModel

    files = {
        "dataset": folder / ".argilla" / "dataset.json",
        "settings": folder / ".argilla" / "settings.json",
        "records": folder / "records.json",
    }
    for name, file in files.items():
        if not file.is_file():
            problems.add(folder, None, None, f"no {file.relative_to(folder)}: Dataset.to_disk writes it")
    if any(not file.is_file() for file in files.values()):
        return None
    dataset_json = load_json(files["dataset"], problems)
    settings_json = load_json(files["settings"], problems)
    records = load_json(files["records"], problems)
    if dataset_json is None or settings_json is None or records is None:
        return None
    try:
        DatasetModel(**dataset_json)
    except Exception as exc:
        problems.add(files["dataset"], None, None, f"Argilla's DatasetModel refuses it: {exc}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            settings = rg.Settings.from_json(files["settings"])
            dataset = rg.Dataset(name=dataset_json.get("name") or folder.name, settings=settings)
    except Exception as exc:
        problems.add(files["settings"], None, None, f"Argilla's Settings.from_json refuses it: {exc}")
        return None
    if not isinstance(records, list):
        problems.add(files["records"], None, None, "records.json is a list of records")
        return None

    questions = {q["name"]: q for q in settings_json.get("questions", [])}
    fields_conf = {f["name"]: f for f in settings_json.get("fields", [])}
    counts = defaultdict(int)
    for index, data in enumerate(records):
        where = f"record {data.get('id') or index + 1}" if isinstance(data, dict) else f"record {index + 1}"
        try:
            rg.Record.from_dict(data, dataset=dataset).api_model()
        except Exception as exc:
            problems.add(files["records"], where, None, f"Argilla's Record.from_dict refuses it: {exc}")
            continue
        fields = data.get("fields") or {}
        for name, conf in fields_conf.items():
            if conf.get("required", True) and fields.get(name) is None:
                problems.add(files["records"], where, f"fields.{name}", "a required field has no value")
        for name in fields.keys() - fields_conf.keys():
            problems.add(files["records"], where, f"fields.{name}", "no such field in the settings")
        # argilla_server/validators/records.py: metadata the settings do not define is refused unless they allow
        # extra metadata, and a terms property takes only its listed values
        properties = {m["name"]: m for m in settings_json.get("metadata") or []}
        for name, value in (data.get("metadata") or {}).items():
            prop = properties.get(name)
            if prop is None:
                if not settings_json.get("allow_extra_metadata", True):
                    problems.add(
                        files["records"],
                        where,
                        f"metadata.{name}",
                        "no such metadata property, and extra metadata is not allowed",
                    )
                continue
            terms = (prop.get("settings") or {}).get("values")
            if (prop.get("settings") or {}).get("type") == "terms" and terms and value not in terms:
                problems.add(files["records"], where, f"metadata.{name}", f"{value!r} is not one of {terms}")
        for name, suggestion in (data.get("suggestions") or {}).items():
            field = f"suggestions.{name}"
            if name not in questions:
                problems.add(files["records"], where, field, "no such question in the settings")
                continue
            counts["suggestions"] += 1
            value, score = suggestion.get("value"), suggestion.get("score")
            for problem in value_rules(value, questions[name]["settings"], fields):
                problems.add(files["records"], where, field, problem)
            if isinstance(value, list) and score is not None and not isinstance(score, list):
                problems.add(files["records"], where, field, "a list value takes a list of scores, one per item")
            if not isinstance(value, list) and isinstance(score, list):
                problems.add(files["records"], where, field, "a single value takes a single score")
            if isinstance(value, list) and isinstance(score, list) and len(value) != len(score):
                problems.add(files["records"], where, field, f"{len(value)} items but {len(score)} scores")
        by_user: dict[str, dict[str, Any]] = defaultdict(dict)
        for name, responses in (data.get("responses") or {}).items():
            if name not in questions:
                problems.add(files["records"], where, f"responses.{name}", "no such question in the settings")
                continue
            for response in responses:
                field = f"responses.{name} ({response.get('user_id')})"
                counts["responses"] += 1
                status = response.get("status") or "draft"  # Record.from_dict's default for a missing status
                if status not in ("draft", "submitted", "discarded"):
                    problems.add(files["records"], where, field, f"status {status!r} is not draft/submitted/discarded")
                by_user[str(response.get("user_id"))][name] = status
                if response.get("value") is not None:
                    for problem in value_rules(response["value"], questions[name]["settings"], fields):
                        problems.add(files["records"], where, field, problem)
                elif status == "submitted":
                    problems.add(files["records"], where, field, "a submitted response has a value")
        for user, answered in by_user.items():
            if "submitted" in answered.values():
                for name, question in questions.items():
                    if question.get("required") and name not in answered:
                        problems.add(
                            files["records"], where, f"responses.{name} ({user})",
                            "a submitted response answers every required question",
                        )  # fmt: skip
    return (
        f"Argilla folder: {len(questions)} questions, {len(records)} records, {counts['suggestions']} "
        f"suggestions and {counts['responses']} responses valid for Argilla 2.x"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--config", type=Path, help="the Label Studio labeling config of the JSON exports")
    args = parser.parse_args(argv)
    problems, passed = Problems(), []
    for path in args.paths:
        before = len(problems.lines)
        if path.is_dir():
            summary = check_argilla_folder(path, problems)
        elif path.suffix == ".xml":
            summary = check_labelstudio_config(path, problems)
        elif path.suffix == ".json":
            summary = check_labelstudio_export(path, args.config, problems)
        else:
            problems.add(path, None, None, "not a Label Studio config (.xml), export (.json) or Argilla folder")
            summary = None
        if summary and len(problems.lines) == before:
            passed.append(f"{path}: ok: {summary}")
    for line in problems.lines:
        print(line)
    for line in passed:
        print(line)
    return 1 if problems.lines else 0


if __name__ == "__main__":
    sys.exit(main())
