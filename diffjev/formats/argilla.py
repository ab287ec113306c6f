"""Argilla 2.x datasets on disk, in the form `Dataset.to_disk` writes and `Dataset.from_disk` reads:

    <folder>/.argilla/dataset.json    the dataset model (name, guidelines, ...)
    <folder>/.argilla/settings.json   `Settings.to_json`: fields, questions, metadata, guidelines
    <folder>/records.json             `DatasetRecords.to_json`: a list of records
        {"id", "fields": {name: value}, "metadata": {...}, "suggestions": {question: {value, score, agent}},
         "responses": {question: [{value, user_id}]}, "vectors", "status", "_server_id"}

Questions map as every diffjev format maps them: LabelQuestion -> choice; MultiLabelQuestion -> one yes_no
question per label (part_of); RatingQuestion -> score with the values as levels; SpanQuestion -> one spans
question per label (part_of), and its field must be the item text. TextQuestion and RankingQuestion have no
diffjev equivalent: reading them fails, naming the question. The item text is the first TextField; the
other fields and the record metadata become item fields.

Argilla keeps one suggestion per question per record, a score (a float, or one per label or span) and no
distribution; its on-disk responses carry no status (`to_dict` writes value and user_id only, so a
discarded response is one with no value) and annotators are user ids (UUIDs). What diffjev holds beyond
that rides in the record's metadata under the key "diffjev" (undeclared metadata, which the settings allow
with `allow_extra_metadata`, so it survives a trip through an Argilla server and back):
every run's answers with their full distributions, model skips, each answer's status (skipped, draft,
not_asked and why), source and time, the annotators' names behind their user ids, and each reviewer's
adjudication (the settled answer, the reviewer and their comment: Argilla records have no such thing).
The diffjev schema itself (kinds, criteria, staging) goes beside Argilla's files in `.argilla/diffjev.json`,
which Argilla ignores; a folder without it is read from the settings alone.

A dataset's own settings (question titles, descriptions, `required`, option texts, its fields, metadata
properties, `allow_extra_metadata`) and name are kept with the project (Bundle.tool_settings) and written
back where they still fit its questions: a question is written with its own settings while its options are
the same, and the fields it had come back as fields. Where the settings forbid extra metadata and every
record has an id, what diffjev holds of a record rides in `.argilla/diffjev.json` by record id instead;
where the records carry item fields the settings do not define, extra metadata is allowed.

Writing, a question's one suggestion is the latest run's (the bundle's order) that answered it, its agent
the run's model name (bundle.run_names); metadata.diffjev.runs maps that name back to the run's key.

A suggestion read from Argilla alone becomes a distribution by one rule: the suggested answer gets the
score and the other answers share the rest evenly (no score: the answer has none, and none is written
back). A multi-label
suggestion's scores are P(yes) of the labels it lists; a label it leaves out is a "no" with no score, unless
metadata.diffjev holds the run's answers to that question: then a label missing from them was not answered.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

from diffjev.errors import SchemaError
from diffjev.formats import extras as shapes
from diffjev.formats.bundle import (
    Adjudication,
    Bundle,
    HumanAnswer,
    InterchangeError,
    ModelAnswer,
    Record,
    RunInfo,
    SpanMark,
    run_names,
    score_distribution,
)
from diffjev.io import atomic_path, unstorable_text
from diffjev.schema import Question, Schema
from diffjev.spans import parse_span_value, span_value

SETTINGS = ".argilla/settings.json"
DATASET = ".argilla/dataset.json"
RECORDS = "records.json"
SIDECAR = ".argilla/diffjev.json"
EXTRAS = "diffjev"  # the record metadata key holding what Argilla cannot
ENGINE = "argilla"  # a run read from Argilla's suggestions alone: its agent is all that is known
NO_AGENT = "argilla-suggestions"  # the run key of suggestions with no agent
ANNOTATOR_IDS = uuid.UUID("0b7e9a6c-56a4-4c1e-9d0e-6f1d2c3b4a59")  # namespace of annotator names as user ids
REFUSED = {
    "text": "a TextQuestion asks for free text, which no diffjev question holds",
    "ranking": "a RankingQuestion orders the options, which no diffjev question holds",
}


# --- reading ---------------------------------------------------------------------------------------------


class _Target:
    """Where one diffjev question sits in Argilla: the question's name, its shape there ("label", "rating",
    "multi", "span"), the label for a multi-label or span question, and the question's values in order with
    the diffjev answer names they stand for (label and rating questions)."""

    def __init__(self, qid: str, argilla: str, shape: str, label: str | None, values: list[Any], labels: list[str]):
        self.qid, self.argilla, self.shape, self.label = qid, argilla, shape, label
        self.values, self.labels = values, labels  # labels: every label of a multi-label or span question
        self.names: list[str] = [str(v) for v in values]


def read_argilla(folder: str | Path) -> Bundle:
    folder = Path(folder)
    settings_file = folder / SETTINGS
    settings = _load_json(settings_file, dict, "the settings Argilla's Settings.to_json writes")
    text_field, other_fields = _text_field(settings, str(settings_file))
    derived, targets = _schema_from_settings(settings, text_field, str(settings_file))
    schema, targets = _with_sidecar(folder / SIDECAR, derived, targets)
    records_file = folder / RECORDS
    if not records_file.exists():
        raise InterchangeError(str(records_file), None, None, _no_records(folder))
    raw_records = _load_json(records_file, list, "a list of records")
    bundle = Bundle(schema=schema, records=[], text_field=text_field, source=str(folder))
    kept = _kept_settings(settings, folder / DATASET, bundle.notes)
    if len(json.dumps(kept)) <= MAX_KEPT_SETTINGS:
        bundle.tool_settings["argilla"] = kept
    else:
        bundle.notes.append(
            f"the dataset's settings were not kept for a later Argilla export: over {MAX_KEPT_SETTINGS // 1000} KB"
        )
    aside = _sidecar_extras(folder / SIDECAR)
    for n, raw in enumerate(raw_records):
        bundle.records.append(_read_record(raw, n, text_field, targets, schema, bundle, str(records_file), aside))
    return bundle


MAX_KEPT_SETTINGS = 256_000  # characters of an Argilla dataset's settings kept with its project
_QUESTION_KEYS = ("name", "title", "description", "required", "type", "settings")
_FIELD_KEYS = ("name", "title", "description", "required", "type", "settings")


def _kept_settings(settings: dict[str, Any], dataset_file: Path, notes: list[str]) -> dict[str, Any]:
    """What an export to Argilla writes back of the dataset's own settings: the parts diffjev's schema does
    not hold, in Settings.serialize()'s shape, and the dataset's name. A part Argilla's own models would
    refuse (a title that is not text, `required` that is not true or false, settings nested past any
    setting's depth) is not kept, and `notes` says which; the export writes diffjev's own there."""

    def entries(key: str, what: str, keys: tuple[str, ...]) -> list[dict[str, Any]]:
        listed = settings.get(key)
        kept = []
        for entry in listed if isinstance(listed, list) else []:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue  # the schema's reading has refused or skipped it already
            good = {}
            for k in keys:
                if k not in entry:
                    continue
                problem = _setting_problem(k, entry[k])
                if not problem and what == "metadata property" and k == "settings":
                    if entry[k].get("type") not in METADATA_TYPES:
                        problem = f"name no type of {', '.join(METADATA_TYPES)}"
                if problem:
                    notes.append(f"{what} {entry['name'][:80]!r}: its {k} {problem}; not kept for an Argilla export")
                else:
                    good[k] = entry[k]
            kept.append(good)
        return kept

    # a metadata property is its settings: one whose settings were not kept is not kept (the notes said why)
    properties = [entry for entry in entries("metadata", "metadata property", _METADATA_KEYS) if "settings" in entry]
    for entry in settings.get("metadata") if isinstance(settings.get("metadata"), list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str) and "settings" not in entry:
            notes.append(f"metadata property {entry['name'][:80]!r} has no settings; not kept for an Argilla export")
    kept: dict[str, Any] = {
        "settings": {
            "questions": entries("questions", "question", _QUESTION_KEYS),
            "fields": entries("fields", "field", _FIELD_KEYS),
            "metadata": properties,
        }
    }
    if isinstance(settings.get("allow_extra_metadata"), bool):
        kept["settings"]["allow_extra_metadata"] = settings["allow_extra_metadata"]
    if dataset_file.is_file():
        dataset = _load_json(dataset_file, dict, "the dataset model Argilla's Dataset.to_disk writes")
        if isinstance(dataset.get("name"), str):
            kept["name"] = dataset["name"]
    return kept


METADATA_TYPES = ("terms", "integer", "float")  # Argilla 2.x's metadata properties
_METADATA_KEYS = ("name", "title", "settings", "visible_for_annotators")
SETTINGS_DEPTH = 8  # a question's options list holds objects: no Argilla setting nests deeper


def _setting_problem(key: str, value: Any) -> str | None:
    """Why a dataset's own setting would not load in Argilla's models, or None where it would."""
    if key == "name":
        return None
    if key in ("title", "type"):
        return None if isinstance(value, str) else "is not text"
    if key == "description":
        return None if value is None or isinstance(value, str) else "is not text"
    if key in ("required", "visible_for_annotators"):
        return None if isinstance(value, bool) else "is not true or false"
    if not isinstance(value, dict):
        return "is not an object"
    return None if _depth(value) <= SETTINGS_DEPTH else f"nest past {SETTINGS_DEPTH} levels"


def _depth(value: Any) -> int:
    """How deep lists and objects nest in a JSON value, counted without recursion (it may be thousands)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if deepest > SETTINGS_DEPTH:
                return deepest
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _sidecar_extras(path: Path) -> dict[str, Any]:
    """What diffjev holds of each record beyond Argilla, by record id, where the settings forbade extra
    metadata (write_argilla put it beside the records instead)."""
    if not path.exists():
        return {}
    records = _load_json(path, dict, "the diffjev schema written with the dataset").get("records", {})
    if not isinstance(records, dict):
        raise InterchangeError(
            str(path), None, "records", "maps each record's id to what diffjev holds of it; fix it, or remove it"
        )
    return records


def _no_records(folder: Path) -> str:
    """Why a folder with Argilla's settings and no records.json is refused, rather than read as no records."""
    if any(folder.glob("**/*.parquet")):
        return (
            "no such file: this is Argilla's Hub layout (Dataset.to_hub, records in Parquet), which diffjev does "
            "not read; load it with rg.Dataset.from_hub(...) and save it with dataset.to_disk(folder), then "
            "import that folder"
        )
    return "no such file; give the folder Argilla's Dataset.to_disk wrote (it writes records.json beside .argilla/)"


def _load_json(path: Path, shape: type, what: str) -> Any:
    if not path.exists():
        raise InterchangeError(str(path), None, None, "no such file; give the folder Argilla's Dataset.to_disk wrote")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InterchangeError(str(path), None, None, f"not JSON ({e}); it should hold {what}") from None
    except RecursionError:
        raise InterchangeError(
            str(path), None, None, f"nests lists or objects thousands deep; it should hold {what}"
        ) from None
    except OSError as e:  # a folder, or a file this user may not read
        raise InterchangeError(
            str(path), None, None, f"cannot read it ({e.strerror}); it should be a file holding {what}"
        ) from None
    if not isinstance(data, shape):
        raise InterchangeError(str(path), None, None, f"holds a {type(data).__name__}; it should hold {what}")
    return data


def _kind(entry: dict[str, Any]) -> str | None:
    settings = entry.get("settings")
    return (settings.get("type") if isinstance(settings, dict) else None) or entry.get("type")


def _text_field(settings: dict[str, Any], file: str) -> tuple[str, list[str]]:
    fields = settings.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, dict) and isinstance(f.get("name"), str) for f in fields):
        raise InterchangeError(file, None, "fields", "list the dataset's fields, each with a name and settings")
    seen: set[str] = set()
    for f in fields:
        if f["name"] in seen:
            raise InterchangeError(file, None, "fields", f"two fields are named {f['name']!r}; give each its own name")
        seen.add(f["name"])
    texts = [f["name"] for f in fields if _kind(f) == "text"]
    if not texts:
        raise InterchangeError(file, None, "fields", "no TextField; diffjev's items are texts, so add one")
    return texts[0], [f["name"] for f in fields if f["name"] != texts[0]]


def _options(entry: dict[str, Any], file: str, where: str) -> list[tuple[Any, str | None]]:
    options = (entry.get("settings") or {}).get("options")
    if not isinstance(options, list) or not all(isinstance(o, dict) and "value" in o for o in options):
        raise InterchangeError(file, where, "settings.options", "list the options, each with a value")
    for o in options:
        # a value is the label's name (or a rating's number): str() of an object names no answer anyone gave
        if isinstance(o["value"], bool) or not isinstance(o["value"], (str, int)):
            raise InterchangeError(
                file, where, "settings.options", f"the option value {o['value']!r} is not a label (text) or a number"
            )
    return [(o["value"], o.get("text")) for o in options]


def _instructions(entry: dict[str, Any]) -> str:
    parts = [p.strip() for p in (entry.get("title"), entry.get("description")) if isinstance(p, str) and p.strip()]
    return " ".join(dict.fromkeys(parts)) or str(entry["name"])


def _schema_from_settings(settings: dict[str, Any], text_field: str, file: str) -> tuple[Schema, list[_Target]]:
    questions = settings.get("questions")
    if not isinstance(questions, list) or not questions:
        raise InterchangeError(file, None, "questions", "list the dataset's questions; diffjev needs at least one")
    specs: list[dict[str, Any]] = []
    targets: list[_Target] = []
    used: set[str] = set()
    for n, entry in enumerate(questions):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InterchangeError(file, f"question #{n + 1}", "name", "every question needs a name")
        name, kind, where = entry["name"], _kind(entry), f"question {entry['name']!r}"
        if kind in REFUSED:
            raise InterchangeError(file, where, "type", f"{REFUSED[kind]}; remove it from the settings to import")
        instructions = _instructions(entry)
        if kind == "label_selection":
            options = _options(entry, file, where)
            qid = _unique(_sanitize(name), used)
            specs.append({"id": qid, "type": "choice", "instructions": instructions, "options": _named(options)})
            targets.append(_Target(qid, name, "label", None, [v for v, _ in options], []))
        elif kind == "rating":
            options = _options(entry, file, where)
            qid = _unique(_sanitize(name), used)
            specs.append(
                {"id": qid, "type": "score", "instructions": instructions, "levels": [str(v) for v, _ in options]}
            )
            targets.append(_Target(qid, name, "rating", None, [v for v, _ in options], []))
        elif kind in ("multi_label_selection", "span"):
            if kind == "span" and (entry.get("settings") or {}).get("field") != text_field:
                raise InterchangeError(
                    file,
                    where,
                    "settings.field",
                    f"marks spans in {(entry.get('settings') or {}).get('field')!r}, but the item text is "
                    f"{text_field!r} (the first TextField); diffjev marks spans in the item text only",
                )
            options = _options(entry, file, where)
            labels = [str(v) for v, _ in options]
            for value, text in options:
                label = str(value)
                shown = text or label
                qid = _unique(_sanitize(f"{name}.{label}"), used)
                if kind == "span":
                    spec = {"type": "spans", "instructions": f"Mark every {shown} in the text."}
                else:
                    spec = {"type": "yes_no", "instructions": f"Does {shown} apply? {instructions}"}
                specs.append({"id": qid, **spec, "part_of": {"question": name, "label": label}})
                targets.append(_Target(qid, name, "span" if kind == "span" else "multi", label, [], labels))
        else:
            raise InterchangeError(
                file,
                where,
                "type",
                f"unknown question type {kind!r}; diffjev reads label_selection, "
                "multi_label_selection, rating and span questions",
            )
    guidelines = settings.get("guidelines")
    data = {"questions": specs, **({"instructions": guidelines} if isinstance(guidelines, str) else {})}
    try:
        return Schema.from_dict(data), targets
    except SchemaError as e:
        raise InterchangeError(file, None, "questions", str(e)) from None


def _named(options: list[tuple[Any, str | None]]) -> list[Any]:
    return [{"name": str(v), "description": t} if t and t != str(v) else str(v) for v, t in options]


def _sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"


def _unique(qid: str, used: set[str]) -> str:
    out, n = qid, 2
    while out in used:
        out, n = f"{qid}_{n}", n + 1
    used.add(out)
    return out


def _with_sidecar(path: Path, derived: Schema, targets: list[_Target]) -> tuple[Schema, list[_Target]]:
    """The schema diffjev wrote beside the settings, where it still fits them: the same questions at the same
    Argilla places. Otherwise (the settings changed since, or there is none) the schema read from them."""
    if not path.exists():
        return derived, targets
    data = _load_json(path, dict, "the diffjev schema written with the dataset")
    try:
        schema = Schema.from_dict(data.get("schema"))
        places = {qid: (place[0], place[1]) for qid, place in data.get("questions", {}).items()}
    except (SchemaError, TypeError, AttributeError, IndexError) as e:
        raise InterchangeError(str(path), None, "schema", f"not a diffjev schema ({e}); delete the file") from None
    by_place = {(t.argilla, t.label): t for t in targets}
    if sorted(places.values(), key=str) != sorted(by_place, key=str) or {q.id for q in schema.questions} != set(places):
        return derived, targets
    out = []
    for q in schema.questions:
        t = by_place[places[q.id]]
        moved = _Target(q.id, t.argilla, t.shape, t.label, t.values, t.labels)
        if t.shape in ("label", "rating"):
            if len(q.names) != len(t.values):
                return derived, targets
            moved.names = list(q.names)
        out.append(moved)
    return schema, out


def _read_record(
    raw: Any,
    n: int,
    text_field: str,
    targets: list[_Target],
    schema: Schema,
    bundle: Bundle,
    file: str,
    aside: dict[str, Any],
) -> Record:
    if not isinstance(raw, dict):
        raise InterchangeError(file, f"record #{n + 1}", None, "a record is an object with id, fields, responses")
    rid = raw.get("id")
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, (str, int))):
        raise InterchangeError(file, f"record #{n + 1}", "id", f"{rid!r} is no record id; give text or a whole number")
    where = f"record {rid!r}" if rid is not None else f"record #{n + 1}"
    fields = raw.get("fields") or {}
    text = fields.get(text_field) if isinstance(fields, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise InterchangeError(file, where, f"fields.{text_field}", "no text; every record needs the item text")
    problem = unstorable_text(text, f"fields.{text_field}")
    if problem:
        raise InterchangeError(file, where, f"fields.{text_field}", problem)
    broken = shapes.surrogate_path(raw)
    if broken is not None:
        raise InterchangeError(file, where, broken, shapes.LONE_SURROGATE)
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InterchangeError(file, where, "metadata", "the metadata is an object of named values; fix it")
    metadata = dict(metadata)
    own = metadata.pop(EXTRAS, None)
    if own is None and rid is not None and str(rid) in aside:  # written beside the records (write_argilla)
        facts_file, at = str(Path(file).parent / SIDECAR), f"records.{rid}"
        fix = f"fix it, or remove the record's entry from {SIDECAR} to import what Argilla's own fields hold"
        own = aside[str(rid)]
    else:
        facts_file, at = file, f"metadata.{EXTRAS}"
        fix = f"fix it, or remove metadata.{EXTRAS} from the record to import what Argilla's own fields hold"
    extras = shapes.checked(shapes.ArgillaExtras, own or {}, facts_file, where, at, fix)
    item_fields = {k: v for k, v in fields.items() if k != text_field}
    item_fields.update({k: v for k, v in metadata.items() if k not in item_fields})
    record = Record(text=text, external_id=None if rid is None else str(rid), fields=item_fields, where=where)
    by_argilla: dict[str, list[_Target]] = {}
    for t in targets:
        by_argilla.setdefault(t.argilla, []).append(t)
    names = extras.annotators
    answer_facts = {(a.question, a.annotator): a for a in extras.answers}

    responses = raw.get("responses") or {}
    if not isinstance(responses, dict):
        raise InterchangeError(file, where, "responses", "responses map each question's name to a list of responses")
    for qname, entries in responses.items():
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise InterchangeError(
                file, where, f"responses.{qname}", "a question's responses are a list of {value, user_id} objects"
            )
        for t in by_argilla.get(qname, []):
            for entry in entries:
                user = str(entry.get("user_id"))
                annotator = names.get(user, user)
                facts = answer_facts.pop((t.qid, annotator), None)
                record.answers.append(
                    _human(t, entry.get("value"), entry.get("status"), annotator, facts, text, file, where)
                )
    for facts in answer_facts.values():  # answers Argilla has no response for: not asked, or skipped
        if facts.question not in {t.qid for t in targets}:
            raise InterchangeError(
                facts_file, where, f"{at}.answers", f"an answer to unknown question {facts.question!r}"
            )
        record.answers.append(_human_from_facts(facts))

    suggestions = raw.get("suggestions") or {}
    keys = {run.name: key for key, run in extras.runs.items() if run.name is not None}  # agent -> run key
    for key, info in extras.runs.items():  # first, so the runs keep the order diffjev wrote them in
        bundle.runs[key] = info.info(key)
    for qname, s in suggestions.items():
        if not isinstance(s, dict) or qname not in by_argilla:
            continue
        agent = s.get("agent")
        if agent is not None and not isinstance(agent, str):
            raise InterchangeError(
                file, where, f"suggestions.{qname}.agent", f"{agent!r} is no agent; name the model or person (text)"
            )
        key = keys.get(agent, agent) or NO_AGENT
        bundle.runs.setdefault(key, RunInfo(key, ENGINE, key))
        answers = record.predictions.setdefault(key, [])
        for t in by_argilla[qname]:
            answers.append(_suggested(t, s, schema.question(t.qid), text, file, where))
    group_of = {t.qid: t.argilla for t in targets}
    for key, answers in extras.predictions.items():
        if key not in bundle.runs:  # its answers would be stored under no run, so dropped
            raise InterchangeError(
                facts_file, where, f"{at}.predictions.{key}", f"no run of that key in {at}.runs; {fix}"
            )
        unknown = sorted({a.question for a in answers} - set(group_of))
        if unknown:
            raise InterchangeError(
                facts_file, where, f"{at}.predictions.{key}", f"an answer to unknown question {unknown[0]!r}; {fix}"
            )
        # diffjev's own answers of a run replace what Argilla's one score per suggestion kept of them; a
        # multi-label suggestion says "no" of every label it leaves out, but where diffjev holds the run's
        # answers to that question, a label missing from them is one the run never answered
        kept = {a.question: a.model_answer(a.question) for a in answers}
        answered = {group_of.get(qid) for qid in kept}
        current = [
            a
            for a in record.predictions.get(key, [])
            if a.question not in kept and group_of.get(a.question) not in answered
        ]
        record.predictions[key] = _in_order(current + list(kept.values()), targets)
    for key, skipped in extras.model_skipped.items():
        unknown = sorted(set(skipped) - set(group_of))
        if key not in bundle.runs or unknown:
            problem = f"no run of that key in {at}.runs" if key not in bundle.runs else f"{unknown[0]!r} is no question"
            raise InterchangeError(facts_file, where, f"{at}.model_skipped.{key}", f"{problem}; {fix}")
    record.model_skipped = {key: shapes.skips(skipped) for key, skipped in extras.model_skipped.items()}
    settled = extras.adjudications or []
    if not isinstance(settled, list):
        raise InterchangeError(facts_file, where, f"{at}.adjudications", "adjudications is a list")
    record.adjudications = [_settled(raw, targets, facts_file, where) for raw in settled]
    return record


def _settled(raw: Any, targets: list[_Target], file: str, where: str) -> Adjudication:
    """One adjudication as diffjev wrote it into the record's metadata."""
    field = f"metadata.{EXTRAS}.adjudications"
    if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in ("question", "reviewer", "value")):
        raise InterchangeError(file, where, field, "each adjudication is an object with question, reviewer and value")
    if raw["question"] not in {t.qid for t in targets}:
        raise InterchangeError(file, where, field, f"an adjudication of unknown question {raw['question']!r}")
    spans = raw.get("spans")
    try:
        marks = None if spans is None else tuple(SpanMark(**m) for m in spans)
    except TypeError:
        raise InterchangeError(
            file, where, field, f"the spans of {raw['reviewer']}'s adjudication are not {{start, end, text}}"
        ) from None
    comment = raw.get("comment")
    return Adjudication(
        raw["question"], raw["reviewer"], raw["value"], comment if isinstance(comment, str) else None, marks
    )


def _in_order(answers: list[ModelAnswer], targets: list[_Target]) -> list[ModelAnswer]:
    order = {t.qid: i for i, t in enumerate(targets)}
    return sorted(answers, key=lambda a: order.get(a.question, len(order)))


def _human(
    t: _Target,
    value: Any,
    status: Any,
    annotator: str,
    facts: shapes.ArgillaAnswerFacts | None,
    text: str,
    file: str,
    where: str,
) -> HumanAnswer:
    field = f"responses.{t.argilla}"
    facts = facts or shapes.ArgillaAnswerFacts.model_construct(question=t.qid, annotator=annotator)
    status = facts.status or {"discarded": "skipped", "draft": "draft"}.get(status, "submitted")
    extra = {"source": facts.source, "seconds": facts.seconds}
    if value is None or status in ("skipped", "not_asked"):
        return HumanAnswer(
            t.qid,
            annotator,
            None,
            status="skipped" if status == "submitted" else status,
            skipped=facts.skipped.record() if facts.skipped is not None else None,
            **extra,
        )
    if t.shape == "span":
        marks = _spans(value, t, text, file, where, field)
        return HumanAnswer(t.qid, annotator, span_value(marks), status=status, spans=marks, **extra)
    return HumanAnswer(t.qid, annotator, _answer_name(t, value, file, where, field), status=status, **extra)


def _human_from_facts(facts: shapes.ArgillaAnswerFacts) -> HumanAnswer:
    return HumanAnswer(
        facts.question,
        facts.annotator,
        None,
        facts.source,
        facts.status or "skipped",
        skipped=facts.skipped.record() if facts.skipped is not None else None,
        seconds=facts.seconds,
    )


def _answer_name(t: _Target, value: Any, file: str, where: str, field: str) -> str:
    """A person's or a model's value as the diffjev answer name."""
    if t.shape == "multi":
        if not isinstance(value, list):
            raise InterchangeError(file, where, field, f"{value!r} is not a list of labels")
        unknown = [v for v in value if str(v) not in t.labels]
        if unknown:
            raise InterchangeError(
                file, where, field, f"{unknown[0]!r} is not one of its labels ({', '.join(t.labels)}); fix the value"
            )
        return "yes" if t.label in map(str, value) else "no"
    if value not in t.values:
        raise InterchangeError(
            file, where, field, f"{value!r} is not one of its labels ({', '.join(map(str, t.values))}); fix the value"
        )
    return t.names[t.values.index(value)]


def _spans(value: Any, t: _Target, text: str, file: str, where: str, field: str) -> tuple[SpanMark, ...]:
    if not isinstance(value, list):
        raise InterchangeError(file, where, field, "a span answer is a list of {start, end, label}")
    marks = []
    for s in value:
        whole = isinstance(s, dict) and all(
            isinstance(s.get(k), int) and not isinstance(s.get(k), bool) for k in ("start", "end")
        )
        if not whole:
            raise InterchangeError(file, where, field, f"{s!r} is not a span {{start, end, label}}")
        if not 0 <= s["start"] < s["end"] <= len(text):
            raise InterchangeError(
                file,
                where,
                field,
                f"span {s['start']}-{s['end']} is outside the text ({len(text)} characters); fix the offsets",
            )
        if str(s.get("label")) not in t.labels:
            raise InterchangeError(
                file, where, field, f"{s.get('label')!r} is not one of its labels ({', '.join(t.labels)}); fix the span"
            )
        if str(s.get("label")) == t.label:
            marks.append(SpanMark(s["start"], s["end"], text[s["start"] : s["end"]]))
    return tuple(sorted(marks, key=lambda m: (m.start, m.end)))


def _suggested(t: _Target, s: dict[str, Any], q: Question, text: str, file: str, where: str) -> ModelAnswer:
    """An Argilla suggestion as one diffjev question's model answer (the module docstring gives the rule)."""
    field, value, score = f"suggestions.{t.argilla}", s.get("value"), s.get("score")
    if score is not None and not isinstance(score, (int, float, list)):
        raise InterchangeError(file, where, f"{field}.score", f"{score!r} is not a number or a list of numbers")
    if t.shape == "span":
        marks = _spans(value, t, text, file, where, field)
        scores = _per_item(score, len(value), file, where, field)
        if scores is None:
            return ModelAnswer(t.qid, span_value(marks), {}, None, marks)
        own = [scores[i] for i, v in enumerate(value) if str(v.get("label")) == t.label]
        marks = tuple(SpanMark(m.start, m.end, m.text, c) for m, c in zip(marks, sorted_scores(value, own, t)))
        # a label with no span here has no score of its own: the suggestion scored other labels' spans
        return ModelAnswer(t.qid, span_value(marks), {}, min(own) if own else None, marks)
    if t.shape == "multi":
        answer = _answer_name(t, value, file, where, field)
        scores = _per_item(score, len(value), file, where, field)
        listed = [i for i, v in enumerate(value) if str(v) == t.label]
        if scores is None or not listed:  # a label the suggestion leaves out is a "no" it gave no score
            return ModelAnswer(t.qid, answer, {}, None)
        p_yes = scores[listed[0]]
        return ModelAnswer(t.qid, answer, {"yes": p_yes, "no": 1.0 - p_yes}, max(p_yes, 1.0 - p_yes))
    answer = _answer_name(t, value, file, where, field)
    if score is None:
        return ModelAnswer(t.qid, answer, {}, None)
    p = score if not isinstance(score, list) else score[0] if len(score) == 1 else None
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise InterchangeError(file, where, f"{field}.score", f"{score!r} is not a probability between 0 and 1")
    return ModelAnswer(t.qid, answer, score_distribution(q.names, answer, p), p)


def sorted_scores(value: list[dict[str, Any]], own: list[float], t: _Target) -> list[float]:
    """The scores of one label's spans in the order `_spans` returns them (by offset)."""
    mine = [v for v in value if str(v.get("label")) == t.label]
    order = sorted(range(len(mine)), key=lambda i: (mine[i]["start"], mine[i]["end"]))
    return [own[i] for i in order]


def _per_item(score: Any, n: int, file: str, where: str, field: str) -> list[float] | None:
    """One score per listed label or span: Argilla gives a list as long as the value, or one number for all;
    None where it gives none."""
    if score is None:
        return None
    scores = score if isinstance(score, list) else [score] * n
    if len(scores) != n or not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1 for x in scores
    ):
        raise InterchangeError(
            file, where, f"{field}.score", f"give one probability between 0 and 1 per item of the value ({n})"
        )
    return [float(x) for x in scores]


# --- writing ---------------------------------------------------------------------------------------------


class _Group:
    """One Argilla question and the diffjev questions it holds (one, or one per label)."""

    def __init__(self, name: str, shape: str, questions: list[Question]):
        self.name, self.shape, self.questions = name, shape, questions

    def label(self, q: Question) -> str | None:
        return q.part_of[1] if q.part_of else (q.id if self.shape == "span" else None)


def write_argilla(bundle: Bundle, folder: str | Path) -> None:
    """The bundle as the folder `Dataset.to_disk` writes; nothing is left at `folder` if any of it fails."""
    folder = Path(folder)
    groups = _groups(bundle.schema, bundle.source or str(folder))
    kept = bundle.tool_settings.get("argilla") or {}
    settings = _settings(bundle, groups, kept.get("settings") or {})
    extra_keys = [key for record in bundle.records for key in (*record.predictions, *record.model_skipped)]
    names = run_names(bundle.runs, extra_keys)
    fields = [f["name"] for f in settings["fields"] if f["name"] != bundle.text_field]
    records = [_record(bundle, record, groups, names, fields) for record in bundle.records]
    defined = {m["name"] for m in settings["metadata"]}
    if any(set(r["metadata"]) - defined - {EXTRAS} for r in records):  # item fields Argilla is not told of
        settings["allow_extra_metadata"] = True
    aside: dict[str, Any] = {}
    if not settings["allow_extra_metadata"]:
        if all(r["id"] is not None for r in records):
            aside = {str(r["id"]): r["metadata"].pop(EXTRAS) for r in records if EXTRAS in r["metadata"]}
        elif any(EXTRAS in r["metadata"] for r in records):  # no id to find them by beside the records
            settings["allow_extra_metadata"] = True
    with atomic_path(folder, directory=True) as temp:
        (temp / ".argilla").mkdir()
        _dump(temp / DATASET, _dataset_model(kept.get("name") or folder.name, bundle.schema, settings))
        _dump(temp / SETTINGS, settings)
        places = {q.id: [g.name, g.label(q)] for g in groups for q in g.questions}
        sidecar = {"schema": bundle.schema.to_dict(), "questions": places}
        _dump(temp / SIDECAR, {**sidecar, "records": aside} if aside else sidecar)
        _dump(temp / RECORDS, records)


def _dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def _groups(schema: Schema, file: str) -> list[_Group]:
    groups: dict[str, _Group] = {}
    names: dict[str, str] = {}  # diffjev name -> Argilla name (lower case letters, digits, _ and -)
    used: set[str] = set()
    for q in schema.questions:
        key = q.part_of[0] if q.part_of else q.id
        shape = {"yes_no": "multi" if q.part_of else "label", "choice": "label", "score": "rating"}.get(q.kind, "span")
        if key not in names:
            names[key] = _unique(re.sub(r"[^a-z0-9_-]", "_", key.lower()), used)
            groups[key] = _Group(names[key], shape, [])
        group = groups[key]
        if group.shape != shape or (q.part_of is None and group.questions):
            raise InterchangeError(
                file,
                f"question {q.id!r}",
                "part_of",
                f"joins {key!r} with questions of another kind; one Argilla question holds one kind",
            )
        if shape == "rating" and len(q.names) > 11:
            raise InterchangeError(file, f"question {q.id!r}", "levels", "an Argilla rating holds at most 11 values")
        group.questions.append(q)
    return list(groups.values())


def _rating_values(q: Question) -> list[int]:
    """The levels as Argilla's ratings (0..10): themselves where they are such numbers, else 1..N."""
    if all(n.isdigit() for n in q.names):
        values = [int(n) for n in q.names]
        if values == sorted(set(values)) and values[-1] <= 10:
            return values
    return list(range(1, len(q.names) + 1)) if len(q.names) <= 10 else list(range(len(q.names)))


def _values(group: _Group) -> list[Any]:
    q = group.questions[0]
    if group.shape == "rating":
        return _rating_values(q)
    if group.shape == "label":
        return list(q.names)
    return [group.label(member) for member in group.questions]


def _dataset_model(name: str, schema: Schema, settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": None, "inserted_at": None, "updated_at": None, "name": name, "status": "ready",
        "guidelines": schema.instructions or None, "allow_extra_metadata": settings["allow_extra_metadata"],
        "distribution": None, "workspace_id": None, "last_activity_at": None,
    }  # fmt: skip


def _settings(bundle: Bundle, groups: list[_Group], kept: dict[str, Any]) -> dict[str, Any]:
    """`Settings.serialize()`'s shape: diffjev's questions, each with the dataset's own title, description,
    `required` and option settings (`kept`, read with it) where they still fit, and its fields and metadata
    properties. Extra metadata is allowed unless the dataset said otherwise: it carries diffjev's facts and
    the item fields."""
    blank = {"id": None, "inserted_at": None, "updated_at": None}
    theirs = {q["name"]: q for q in kept.get("questions") or [] if isinstance(q.get("name"), str)}
    questions = []
    for n, g in enumerate(groups):
        values = _values(g)
        if g.shape == "rating":
            settings: dict[str, Any] = {"type": "rating", "options": [{"value": v} for v in values]}
        else:
            options = [{"text": str(v), "value": v} for v in values]
            settings = {"type": {"label": "label_selection", "multi": "multi_label_selection"}.get(g.shape, "span")}
            if g.shape == "span":
                settings.update(allow_overlapping=False, field=bundle.text_field, options=options, visible_options=None)
            else:
                # as Argilla's own settings model sets it: the label count, from 3 labels up (fewer: none)
                settings.update(options=options, visible_options=len(options) if len(options) >= 3 else None)
                if g.shape == "multi":
                    settings["options_order"] = "natural"
        title = g.questions[0].instructions if len(g.questions) == 1 and not g.questions[0].part_of else g.name
        question = {
            **blank, "name": g.name, "settings": settings, "title": title, "description": None,
            "required": n == 0, "dataset_id": None, "type": settings["type"],
        }  # fmt: skip
        own = theirs.get(g.name)
        if own is not None and _kind(own) == settings["type"]:
            question.update({k: own[k] for k in ("title", "description", "required") if k in own})
            if _same_options(own.get("settings"), settings):
                question["settings"] = own["settings"]
        questions.append(question)
    text_field = {
        **blank, "name": bundle.text_field, "settings": {"type": "text", "use_markdown": False},
        "title": bundle.text_field, "required": True, "description": None, "dataset_id": None, "type": "text",
    }  # fmt: skip
    # the dataset's own text fields: the item text's, and the others where the items still hold them
    held = {k for record in bundle.records for k, v in record.fields.items() if isinstance(v, str)}
    fields = [text_field]
    for f in kept.get("fields") or []:
        if _kind(f) != "text" or not isinstance(f.get("name"), str):
            continue
        if f["name"] == bundle.text_field:
            fields[0] = {**text_field, **f}
        elif f["name"] in held:
            fields.append({**text_field, "title": f["name"], "required": False, **f})
    return {
        "guidelines": bundle.schema.instructions or None,
        "questions": questions,
        "fields": fields,
        "vectors": [],
        "metadata": [
            {**blank, **m, "dataset_id": None}
            for m in kept.get("metadata") or []
            if m["name"] not in {f["name"] for f in fields}
        ],
        "allow_extra_metadata": kept.get("allow_extra_metadata", True),
        "distribution": {"strategy": "overlap", "min_submitted": 1},
        "mapping": None,
    }


def _same_options(own: Any, settings: dict[str, Any]) -> bool:
    """Whether a dataset's own question settings list the options diffjev writes, in the same order (their
    texts may differ: "Billing" for billing), and for spans the same field."""
    if not isinstance(own, dict) or not isinstance(own.get("options"), list):
        return False
    values = [o.get("value") if isinstance(o, dict) else None for o in own["options"]]
    same = values == [o["value"] for o in settings["options"]]
    return same and own.get("field", settings.get("field")) == settings.get("field")


def _user_id(annotator: str) -> str:
    """Argilla names annotators by user id (a UUID): one kept as it is, any other name mapped to a fixed one."""
    try:
        return str(uuid.UUID(annotator))
    except ValueError:
        return str(uuid.uuid5(ANNOTATOR_IDS, annotator))


def _marks(q: Question, value: str | None, spans: tuple[SpanMark, ...] | None, text: str) -> tuple[SpanMark, ...]:
    if spans is not None:
        return spans
    return tuple(SpanMark(s.start, s.end, s.text) for s in parse_span_value(value or "none", text, q.kind))


def _record(
    bundle: Bundle, record: Record, groups: list[_Group], names: dict[str, str], fields: list[str]
) -> dict[str, Any]:
    """One record; `names` are the runs' agents (bundle.run_names), `fields` the item fields that are
    the dataset's own text fields (the rest is metadata)."""
    extras: dict[str, Any] = {}
    annotators: dict[str, str] = {}
    facts: list[dict[str, Any]] = []
    responses: dict[str, list[dict[str, Any]]] = {}
    for g in groups:
        ids = {q.id: q for q in g.questions}
        by_person: dict[str, list[HumanAnswer]] = {}
        for a in record.answers:
            if a.question in ids:
                by_person.setdefault(a.annotator, []).append(a)
        for person, answers in by_person.items():
            uid = _user_id(person)
            if uid != person:
                annotators[uid] = person
            for a in answers:
                fact = {
                    k: v
                    for k, v in (("status", a.status), ("source", a.source))
                    if v != HumanAnswer.__dataclass_fields__[k].default
                }
                fact.update({k: v for k, v in (("skipped", a.skipped), ("seconds", a.seconds)) if v is not None})
                if fact:
                    facts.append({"question": a.question, "annotator": person, **fact})
            given = [a for a in answers if a.status in ("submitted", "draft") and a.value is not None]
            if not any(a.status != "not_asked" for a in answers):
                continue  # never asked: Argilla has no response for it; the facts above hold why
            responses.setdefault(g.name, []).append(
                {"value": _response_value(g, given, record.text, bundle), "user_id": uid}
            )
    suggestions: dict[str, dict[str, Any]] = {}
    # Argilla keeps one suggestion per question: the latest run's (the bundle lists its runs oldest first)
    # that answered it; the older runs' answers ride in the metadata below
    oldest_first = dict.fromkeys([*bundle.runs, *record.predictions])
    latest_first = [key for key in reversed(oldest_first) if record.predictions.get(key)]
    for g in groups:
        for key in latest_first:
            by_question = {a.question: a for a in record.predictions[key]}
            suggestion = _suggestion(g, [by_question[q.id] for q in g.questions if q.id in by_question])
            if suggestion is not None:
                suggestions[g.name] = {**suggestion, "agent": names[key]}
                break
    predictions = {key: [_answer_dict(a) for a in answers] for key, answers in record.predictions.items() if answers}
    runs = {key: info for key, info in bundle.runs.items() if key in record.predictions or key in record.model_skipped}
    for name, value in (
        ("annotators", annotators),
        ("answers", facts),
        (
            "runs",
            {
                k: {"engine": r.engine, "model": r.model, "model_version": r.model_version}
                | ({"name": names[k]} if names[k] != k else {})  # the agent shown: reading maps it back to k
                for k, r in runs.items()
            },
        ),
        ("predictions", predictions),
        ("model_skipped", record.model_skipped),
        ("adjudications", [_settled_dict(a) for a in record.adjudications]),
    ):
        if value:
            extras[name] = value
    metadata = {k: v for k, v in record.fields.items() if k not in fields}
    if extras:
        metadata[EXTRAS] = extras
    own = {k: record.fields[k] for k in fields if isinstance(record.fields.get(k), str)}
    return {
        "id": record.external_id,
        "fields": {bundle.text_field: record.text, **own},
        "metadata": metadata,
        "suggestions": suggestions,
        "responses": responses,
        "vectors": {},
        "status": "pending",
        "_server_id": None,
    }


def _response_value(g: _Group, given: list[HumanAnswer], text: str, bundle: Bundle) -> Any:
    """A person's answers to one Argilla question as its value; None where they skipped it (as Argilla's
    discarded responses are written)."""
    if not given:
        return None
    if g.shape in ("label", "rating"):
        q, a = g.questions[0], given[0]
        return _values(g)[q.names.index(a.value)]
    by_id = {q.id: q for q in g.questions}
    if g.shape == "multi":
        return [g.label(by_id[a.question]) for a in given if a.value == "yes"]
    spans = []
    for a in given:
        q = by_id[a.question]
        spans += [{"start": m.start, "end": m.end, "label": g.label(q)} for m in _marks(q, a.value, a.spans, text)]
    return sorted(spans, key=lambda s: (s["start"], s["end"]))


def _suggestion(g: _Group, answers: list[ModelAnswer]) -> dict[str, Any] | None:
    """A run's answers to one Argilla question as Argilla's one suggestion: the top answer and its score."""
    if not answers:
        return None
    by_id = {q.id: q for q in g.questions}
    if g.shape in ("label", "rating"):
        a, q = answers[0], g.questions[0]
        return _scored(_values(g)[q.names.index(a.answer)], a.confidence)
    if g.shape == "multi":
        yes = [a for a in answers if a.answer == "yes"]
        scores = [a.distribution.get("yes") for a in yes]
        return _scored([g.label(by_id[a.question]) for a in yes], None if None in scores else scores)
    spans = []
    for a in answers:
        for m in a.spans or ():
            score = a.confidence if m.confidence is None else m.confidence
            spans.append(({"start": m.start, "end": m.end, "label": g.label(by_id[a.question])}, score))
    spans.sort(key=lambda s: (s[0]["start"], s[0]["end"]))
    scores = [c for _, c in spans]
    return _scored([s for s, _ in spans], None if None in scores else scores)


def _scored(value: Any, score: Any) -> dict[str, Any]:
    """A suggestion, with its score only where one was given: Argilla's score is optional."""
    return {"value": value} if score is None else {"value": value, "score": score}


def _settled_dict(a: Adjudication) -> dict[str, Any]:
    spans = None if a.spans is None else [vars(m) for m in a.spans]
    return {"question": a.question, "reviewer": a.reviewer, "value": a.value, "comment": a.comment, "spans": spans}


def _answer_dict(a: ModelAnswer) -> dict[str, Any]:
    spans = None if a.spans is None else [vars(m) for m in a.spans]
    return {
        "question": a.question,
        "answer": a.answer,
        "distribution": a.distribution,
        "confidence": a.confidence,
        "spans": spans,
    }
