"""Label Studio's labeling config and JSON export, read into and written from a Bundle.

The config (XML) maps onto a diffjev schema tag by tag:

- single <Choices> -> a choice question (options: each <Choice>'s alias, else its value; the hint is the
  option's description); <Choices choice="multiple"> -> one yes_no question per choice, id "<name>.<choice>",
  `part_of` the Choices tag;
- <Rating maxRating="N"> (5 unless set) -> a score question with levels "1".."N";
- <Labels> -> one spans question per <Label>, id "<name>.<label>", `part_of` the Labels tag;
- a flat <Taxonomy> (one level of <Choice>) -> a choice question; a person who picks more than one path is
  refused when the export is read (write maxUsages="1" to hold Label Studio to one);
- the instructions come from the <Header> just before a control, else its `hint` or `title`.

Every other control tag (TextArea, RectangleLabels, Relations, Number, ...) is refused with one line naming the
tag and its name: diffjev has no question that holds it. Controls must read the one <Text> object whose value
("$text") names the item text; an <Image> beside it is kept as an item field.

A config diffjev writes carries its schema in an XML comment (Label Studio stores the config as written), so
what the tags cannot say (yes/no criteria, staging, span-vs-spans, descriptions) survives a trip through Label
Studio; the comment is used only where its questions still match the tags.

The export is Label Studio's "JSON" export: a list of tasks {id, data, annotations, predictions, meta, ...}.
Each annotation becomes one person's answers (annotator: `completed_by`'s email where the export carries user
details, else "ls-user-<id>"; `was_cancelled` marks every question skipped; `lead_time` is the seconds).
Predictions are grouped by `model_version` into runs. A prediction's per-answer distribution is the result's
`meta.distribution` where diffjev wrote one; otherwise it is derived from the score: the chosen answer gets the
result's `score` (else the prediction's `score`) and the other answers share the rest evenly; for a
multiple Choices tag a chosen label gets P(yes) = score and an unchosen one P(yes) = 1 - score. An answer
with no score at all has none (ModelAnswer.confidence None): none is invented, so none is written back, and
a prediction's `score` is the mean of the scores its answers were given.

Writing, a run's `model_version` is its model's name (bundle.run_names: "model@version", " (run 7)" where two
runs share one) and meta.diffjev.runs maps that name back to the run's key; each annotator has one
`completed_by` for the whole export (an "ls-user-<id>" read from Label Studio keeps its id).

What Label Studio's results cannot hold (which person a numeric `completed_by` was, a skip of one question, a
staged question not asked, a span answer "none", a model's skipped reads, a run's engine) travels in the task's
`meta` under the key "diffjev", which Label Studio keeps on import and writes back on export.

A reviewer's adjudication (the answer that settles what the annotators gave, with the reviewer and their
comment) travels in that meta too, under "adjudications"; Label Studio shows it nowhere, and diffjev marks no
annotation as ground truth. Label Studio's own nearest notion is an annotation with `ground_truth: true`: in an
export, each answer of a ground-truth annotation to a question that another annotator also answered becomes an
adjudication by that annotation's author (with no comment: the export carries none), beside their answer; a
ground-truth annotation nobody else answered beside is an answer like any other. Meta's adjudications come
first: a ground-truth answer does not replace one.

Reading needs the config: give it, or leave it beside the export as <stem>.label_config.xml (as
`write_labelstudio` writes it). Label Studio's export does not carry the config.
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from diffjev.errors import SchemaError
from diffjev.formats import extras
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
from diffjev.schema import Schema
from diffjev.spans import parse_span_value, span_value

META_KEY = "diffjev"
SCHEMA_COMMENT = "diffjev-schema:"
CONTROL_TAGS = ("Choices", "Rating", "Labels", "Taxonomy")
# Tags that only lay out or decorate the page: nothing to read or answer.
LAYOUT_TAGS = {"View", "Header", "Style", "Collapse", "Panel", "Filter", "Shortcut", "Markdown", "Table"}
# Controls Label Studio has that diffjev cannot hold, and what to say instead of "unknown".
WHY_REFUSED = {
    "TextArea": "diffjev has no free-text question",
    "Number": "diffjev has no number question; a <Rating> or <Choices> can hold a small scale",
    "DateTime": "diffjev has no date question",
    "Relations": "diffjev does not hold relations between spans",
    "Relation": "diffjev does not hold relations between spans",
    "Pairwise": "diffjev reads one item at a time, not pairs",
    "Ranker": "diffjev has no ranking question",
    "HyperTextLabels": "diffjev's spans are offsets into plain text, not into HTML",
    "ParagraphLabels": "diffjev's spans are offsets into plain text, not into paragraphs",
}
DEFAULT_MAX_RATING = 5
MAX_CONFIG_DEPTH = 100
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class Control:
    """One Label Studio control tag and the diffjev questions it holds.

    `labels` are the values its results carry (a Choice's alias or value, a Label's value, a rating "1".."N");
    `questions` are the diffjev ids: one per label for a multiple Choices or Labels tag, else one."""

    tag: str  # Choices / Rating / Labels / Taxonomy
    name: str  # from_name
    to_name: str
    labels: tuple[str, ...]
    questions: tuple[str, ...]
    multiple: bool = False

    @property
    def result_type(self) -> str:
        return self.tag.lower()

    def question_of(self, label: str) -> str:
        return self.questions[self.labels.index(label)] if self.per_label else self.questions[0]

    @property
    def per_label(self) -> bool:
        return self.tag == "Labels" or self.multiple


@dataclass(frozen=True)
class LabelConfig:
    """A labeling config in diffjev's terms: the schema, the item text's data key, and per question the
    control that writes its results."""

    schema: Schema
    text_field: str  # the data key the <Text> object reads ("$text" -> "text")
    text_name: str  # that object's name: results' to_name
    controls: tuple[Control, ...]
    image_field: str | None = None  # an <Image> object's data key, kept as an item field

    def control(self, name: str) -> Control | None:
        return next((c for c in self.controls if c.name == name), None)

    def control_for(self, question_id: str) -> Control:
        return next(c for c in self.controls if question_id in c.questions)


# --- the config ---------------------------------------------------------------------------------------------


def _refuse_dtd(xml_text: str, file: str) -> None:
    """ElementTree expands internal entities; a config has no use for a DTD, so none is parsed at all."""
    if re.search(r"<!\s*(DOCTYPE|ENTITY)", xml_text, re.IGNORECASE):
        raise InterchangeError(
            file,
            None,
            None,
            "the config declares a DTD or entities (<!DOCTYPE/<!ENTITY); remove them, a labeling config needs neither",
        )


def _parse_xml(xml_text: str, file: str) -> tuple[ET.Element, list[str]]:
    """The root element and the text of every comment, in order."""
    if not isinstance(xml_text, str) or not xml_text.strip():
        raise InterchangeError(file, None, None, "the config is empty; give Label Studio's labeling config (XML)")
    _refuse_dtd(xml_text, file)
    comments: list[str] = []

    class Builder(ET.TreeBuilder):
        depth = 0

        def comment(self, data: str) -> None:
            comments.append(data)

        def start(self, tag: str, attrs: dict[str, str]) -> ET.Element:
            # reading the tree walks it recursively: a config nested thousands deep would overflow the stack
            self.depth += 1
            if self.depth > MAX_CONFIG_DEPTH:
                raise InterchangeError(
                    file,
                    None,
                    None,
                    f"the config nests tags more than {MAX_CONFIG_DEPTH} deep; a labeling config needs a few levels "
                    "of <View>, so flatten it",
                )
            return super().start(tag, attrs)

        def end(self, tag: str) -> ET.Element:
            self.depth -= 1
            return super().end(tag)

    parser = ET.XMLParser(target=Builder())
    try:
        parser.feed(xml_text)
        root = parser.close()
    except ET.ParseError as exc:
        raise InterchangeError(
            file,
            None,
            None,
            f"the config is not XML ({exc}); export it from Label Studio's Settings > Labeling Interface > Code",
        ) from None
    return root, comments


def _sanitize(name: str) -> str:
    return _UNSAFE_ID.sub("_", name.strip()) or "_"


class _Ids:
    """Question ids, sanitized and unique within the schema."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def take(self, wanted: str) -> str:
        base = _sanitize(wanted)
        qid, n = base, 2
        while qid in self.used:
            qid, n = f"{base}_{n}", n + 1
        self.used.add(qid)
        return qid


def _describe(el: ET.Element) -> str:
    name = el.get("name")
    return f"{el.tag} name={name}" if name else el.tag


def schema_from_config(xml_text: str, file: str = "label config") -> LabelConfig:
    """The diffjev schema a Label Studio labeling config asks for; InterchangeError names the first tag that
    diffjev cannot hold."""
    root, comments = _parse_xml(xml_text, file)
    objects: dict[str, tuple[str, str]] = {}  # name -> (tag, data key)
    controls: list[tuple[ET.Element, str]] = []  # (element, the instructions its page gives)
    header = ""

    def walk(el: ET.Element) -> None:
        nonlocal header
        for child in el:
            if not isinstance(child.tag, str):
                continue
            tag = child.tag
            if tag == "Header":
                header = (child.get("value") or "".join(child.itertext())).strip()
            elif tag in CONTROL_TAGS:
                controls.append((child, header or (child.get("hint") or child.get("title") or "").strip()))
                header = ""
            elif tag in ("Text", "Image"):
                value = child.get("value") or ""
                if not value.startswith("$") or not child.get("name"):
                    raise InterchangeError(
                        file,
                        None,
                        _describe(child),
                        f'give the {tag} object a name and a value naming a data key, e.g. value="$text"',
                    )
                objects[child.get("name")] = (tag, value[1:])
            elif tag in LAYOUT_TAGS:
                walk(child)
            elif child.get("toName") is not None or tag in WHY_REFUSED:
                why = WHY_REFUSED.get(tag, f"diffjev has no question that holds a <{tag}>")
                raise InterchangeError(
                    file,
                    None,
                    _describe(child),
                    f"{why}; remove it from the config (diffjev holds Choices, Rating, Labels and flat Taxonomy)",
                )
            elif (child.get("value") or "").startswith("$"):
                raise InterchangeError(
                    file,
                    None,
                    _describe(child),
                    f"diffjev reads an item's text (and an image beside it), not a <{tag}>; use a <Text> object",
                )
            else:
                walk(child)

    if root.tag in CONTROL_TAGS or root.tag in ("Text", "Image"):
        raise InterchangeError(file, None, root.tag, "a labeling config starts with <View>")
    walk(root)
    texts = {name: key for name, (tag, key) in objects.items() if tag == "Text"}
    images = [key for tag, key in objects.values() if tag == "Image"]
    if not controls:
        raise InterchangeError(file, None, None, "the config has no Choices, Rating, Labels or Taxonomy tag to import")
    targets = {el.get("toName") for el, _ in controls}
    for el, _ in controls:
        to_name = el.get("toName")
        if not el.get("name"):
            raise InterchangeError(file, None, el.tag, f'give the <{el.tag}> a name, e.g. name="{el.tag.lower()}"')
        if to_name not in objects:
            raise InterchangeError(
                file, None, _describe(el), f"toName={to_name!r} names no <Text> object in the config; point it at one"
            )
        if objects[to_name][0] != "Text":
            raise InterchangeError(
                file, None, _describe(el), f"diffjev's questions read the item text, not the <Image> {to_name!r}"
            )
    if len(targets) > 1:
        raise InterchangeError(
            file,
            None,
            None,
            f"controls read {len(targets)} different <Text> objects ({', '.join(sorted(targets))}); diffjev reads one "
            "text per item, so point every control at the same one",
        )
    text_name = targets.pop()
    ids = _Ids()
    questions: list[dict[str, Any]] = []
    built: list[Control] = []
    names_seen: set[str] = set()
    for el, instructions in controls:
        if el.get("name") in names_seen:
            raise InterchangeError(file, None, _describe(el), "two controls share this name; give each its own")
        names_seen.add(el.get("name"))
        control, qs = _control(el, instructions, ids, file)
        built.append(control)
        questions.extend(qs)
    try:
        schema = Schema.from_dict({"questions": questions})
    except SchemaError as exc:
        raise InterchangeError(file, None, None, str(exc)) from None
    schema = _written_schema(schema, comments) or schema
    return LabelConfig(schema, texts[text_name], text_name, tuple(built), images[0] if images else None)


def _labels_of(el: ET.Element, child_tag: str, file: str) -> list[tuple[str, str | None]]:
    """(the value results carry, its description) for each <Choice>/<Label>."""
    out: list[tuple[str, str | None]] = []
    for child in el.iter(child_tag):
        value = (child.get("value") or "").strip()
        if not value:
            raise InterchangeError(file, None, _describe(el), f'a <{child_tag}> has no value; give it value="..."')
        alias = (child.get("alias") or "").strip()
        hint = (child.get("hint") or "").strip()
        description = hint or (value if alias and alias != value else "") or None
        out.append((alias or value, description))
    if not out:
        raise InterchangeError(file, None, _describe(el), f"the <{el.tag}> lists no <{child_tag}>; add them")
    return out


def _control(el: ET.Element, instructions: str, ids: _Ids, file: str) -> tuple[Control, list[dict[str, Any]]]:
    name, to_name, tag = el.get("name"), el.get("toName"), el.tag
    if el.get("perRegion") == "true":
        raise InterchangeError(file, None, _describe(el), "diffjev answers per item, not per region; remove perRegion")
    if tag == "Rating":
        try:
            most = int(el.get("maxRating", DEFAULT_MAX_RATING))
        except ValueError:
            most = 0
        if not 2 <= most <= 26:
            raise InterchangeError(file, None, _describe(el), "maxRating must be a whole number from 2 to 26")
        levels = [str(n) for n in range(1, most + 1)]
        qid = ids.take(name)
        question = {
            "id": qid,
            "type": "score",
            "levels": levels,
            "instructions": instructions or f"Rate the {name} from 1 to {most}.",
        }
        return Control(tag, name, to_name, tuple(levels), (qid,)), [question]
    if tag == "Labels":
        labels = _labels_of(el, "Label", file)
        if len(labels) == 1 and labels[0][0] == name:  # one label named as its tag: a question of its own
            qid = ids.take(name)
            question = {
                "id": qid,
                "type": "spans",
                "instructions": instructions or labels[0][1] or f"Mark every {name}.",
            }
            return Control(tag, name, to_name, (name,), (qid,)), [question]
        qids, qs = [], []
        for label, hint in labels:
            qid = ids.take(f"{name}.{label}")
            qids.append(qid)
            qs.append(
                {
                    "id": qid,
                    "type": "spans",
                    "instructions": hint or f"Mark every {label} in the text.",
                    "part_of": {"question": name, "label": label},
                }
            )
        return Control(tag, name, to_name, tuple(label for label, _ in labels), tuple(qids)), qs
    if tag == "Taxonomy":
        for choice in el.iter("Choice"):
            if any(grand.tag == "Choice" for grand in choice):
                raise InterchangeError(
                    file,
                    None,
                    _describe(el),
                    "a nested taxonomy has no diffjev equivalent; flatten it to one level of <Choice> or use <Choices>",
                )
        if el.get("maxUsages") not in (None, "1"):
            raise InterchangeError(
                file,
                None,
                _describe(el),
                'a taxonomy that takes several choices has no diffjev equivalent; set maxUsages="1" or use '
                '<Choices choice="multiple">',
            )
    options = _labels_of(el, "Choice", file)
    labels = tuple(label for label, _ in options)
    multiple = tag == "Choices" and el.get("choice") == "multiple"
    if multiple:
        qids, qs = [], []
        for label, hint in options:
            qid = ids.take(f"{name}.{label}")
            qids.append(qid)
            text = " ".join(part for part in (f"Does {label} apply?", hint or "", instructions) if part)
            qs.append(
                {
                    "id": qid,
                    "type": "yes_no",
                    "instructions": text,
                    "part_of": {"question": name, "label": label},
                }
            )
        return Control(tag, name, to_name, labels, tuple(qids), multiple=True), qs
    qid = ids.take(name)
    question = {
        "id": qid,
        "type": "choice",
        "instructions": instructions or f"Which {name} fits the text?",
        "options": [{"name": label, "description": d} if d else label for label, d in options],
    }
    return Control(tag, name, to_name, labels, (qid,)), [question]


def _written_schema(derived: Schema, comments: list[str]) -> Schema | None:
    """The schema diffjev wrote into the config's comment, where its questions still match the tags: same ids,
    same answers, a kind the tag can hold. An edited config falls back to what the tags say."""
    for text in comments:
        text = text.strip()
        if not text.startswith(SCHEMA_COMMENT):
            continue
        try:
            written = Schema.from_dict(json.loads(text[len(SCHEMA_COMMENT) :]))
        except (ValueError, SchemaError):
            return None
        if [q.id for q in written.questions] != [q.id for q in derived.questions]:
            return None
        for w, d in zip(written.questions, derived.questions):
            holds = {"choice": ("choice", "yes_no", "score"), "spans": ("spans", "span")}.get(d.kind, (d.kind,))
            if w.kind not in holds or w.names != d.names or w.part_of != d.part_of:
                return None
        return written
    return None


def _comment_json(schema: Schema) -> str:
    # "--" may not appear inside an XML comment; in JSON it only occurs within strings, where \u002d is a '-'
    return json.dumps(schema.to_dict(), ensure_ascii=False).replace("--", "-\\u002d")


def config_from_schema(schema: Schema, text_field: str = "text") -> str:
    """A Label Studio labeling config for the schema: questions with the same `part_of` join into one multiple
    Choices or Labels tag, in schema order; the schema itself rides along in a comment."""
    root = ET.Element("View")
    ET.SubElement(root, "Text", name="text", value=f"${text_field}")
    done: set[str] = set()
    for q in schema.questions:
        if q.part_of:
            group_name = q.part_of[0]
            if group_name in done:
                continue
            done.add(group_name)
            group = [other for other in schema.questions if other.part_of and other.part_of[0] == group_name]
            if all(other.kind in ("span", "spans") for other in group):
                labels = ET.SubElement(root, "Labels", name=group_name, toName="text")
                for other in group:
                    attrs = {"value": other.part_of[1]}
                    if other.instructions != f"Mark every {other.part_of[1]} in the text.":
                        attrs["hint"] = other.instructions
                    ET.SubElement(labels, "Label", attrs)
            else:
                # the question text each "Does <label> apply? <text>" shares, where they share one
                shared = {o.instructions.removeprefix(f"Does {o.part_of[1]} apply?").strip() for o in group}
                ET.SubElement(
                    root, "Header", value=shared.pop() if len(shared) == 1 and "" not in shared else group_name
                )
                choices = ET.SubElement(root, "Choices", name=group_name, toName="text", choice="multiple")
                for other in group:
                    ET.SubElement(choices, "Choice", value=other.part_of[1])
            continue
        ET.SubElement(root, "Header", value=q.instructions)
        if q.kind in ("span", "spans"):
            labels = ET.SubElement(root, "Labels", name=q.id, toName="text")
            ET.SubElement(labels, "Label", value=q.id)
        elif q.kind == "score" and q.names == tuple(str(n) for n in range(1, len(q.names) + 1)):
            ET.SubElement(root, "Rating", name=q.id, toName="text", maxRating=str(len(q.names)))
        else:
            choices = ET.SubElement(root, "Choices", name=q.id, toName="text", choice="single")
            for a in q.alternatives:
                attrs = {"value": a.name}
                if a.description:
                    attrs["hint"] = a.description
                ET.SubElement(choices, "Choice", attrs)
    root.insert(0, ET.Comment(f" {SCHEMA_COMMENT}{_comment_json(schema)} "))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"


# --- results <-> answers -------------------------------------------------------------------------------------


def _spans_checked(control: Control, value: Mapping[str, Any], text: str, bad: Any) -> tuple[list[str], SpanMark]:
    start, end = value.get("start"), value.get("end")
    # whole numbers only: int() would take 0.5 as 0, "3" as 3 and true as 1, and fail on Infinity
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, end)):
        raise bad(
            control.name,
            f"a Labels region needs whole-number start and end offsets, not {start!r} and {end!r}; fix the region",
        )
    labels = value.get("labels")
    if not isinstance(labels, list) or not labels:
        raise bad(control.name, "a Labels region lists no labels")
    if not 0 <= start < end <= len(text):
        raise bad(control.name, f"region {start}-{end} is outside the text ({len(text)} characters)")
    marked = value.get("text", text[start:end])
    if marked != text[start:end]:
        raise bad(
            control.name,
            f"region {start}-{end} says {marked!r} but the task text there is {text[start:end]!r}; the offsets must "
            "count characters of the task's own text",
        )
    return labels, SpanMark(start, end, text[start:end])


def _decode(
    config: LabelConfig, results: Iterable[Any], text: str, bad: Any
) -> dict[str, tuple[str, list[SpanMark] | None, Mapping[str, Any], Any]]:
    """What one annotation's or prediction's results answer: question id -> (value, spans, result meta, result).

    A per-label question of a control that has a result but not that label is answered: "no" / "none"."""
    found: dict[str, tuple[str, list[SpanMark] | None, Mapping[str, Any], Any]] = {}
    regions: dict[str, list[SpanMark]] = {}
    span_results: dict[str, Any] = {}
    for result in results:
        if not isinstance(result, Mapping):
            raise bad(None, "a result is not an object")
        if result.get("type") == "relation" or "from_name" not in result:
            raise bad(None, f"a {result.get('type', 'untyped')} result has no diffjev equivalent; remove it")
        control = config.control(result["from_name"])
        if control is None:
            raise bad(
                result["from_name"], "no control of the config has this name; import with the config this export used"
            )
        value = result.get("value")
        meta = result.get("meta") if isinstance(result.get("meta"), Mapping) else {}
        if not isinstance(value, Mapping):
            raise bad(control.name, "the result has no value object")
        if control.tag == "Labels":
            labels, mark = _spans_checked(control, value, text, bad)
            for label in labels:
                if label not in control.labels:
                    raise bad(
                        control.name,
                        f"{label!r} is not a <Label> of this tag ({', '.join(control.labels)}); add it to the config",
                    )
                conf = _probability(result.get("score"), bad, control.name, "the region's score")
                regions.setdefault(control.question_of(label), []).append(replace(mark, confidence=conf))
                span_results.setdefault(control.question_of(label), result)
            for qid in control.questions:
                regions.setdefault(qid, [])
                span_results.setdefault(qid, result)
            continue
        if control.questions[0] in found:
            raise bad(control.name, "two results for one single-answer control")
        picked = _picked(control, value, bad)
        if control.multiple:
            for label, qid in zip(control.labels, control.questions):
                found[qid] = ("yes" if label in picked else "no", None, meta, result)
        else:
            found[control.questions[0]] = (picked[0], None, meta, result)
    for qid, marks in regions.items():
        marks.sort(key=lambda m: (m.start, m.end))
        found[qid] = (span_value(marks), marks, span_results[qid].get("meta") or {}, span_results[qid])
    return found


def _picked(control: Control, value: Mapping[str, Any], bad: Any) -> list[str]:
    if control.tag == "Rating":
        rating = value.get("rating")
        whole = isinstance(rating, int) or (isinstance(rating, float) and rating.is_integer())
        if isinstance(rating, bool) or not whole or str(int(rating)) not in control.labels:
            raise bad(control.name, f"rating {rating!r} is not one of 1..{len(control.labels)}")
        return [str(int(rating))]
    if control.tag == "Taxonomy":
        paths = value.get("taxonomy")
        if not isinstance(paths, list) or len(paths) != 1 or not isinstance(paths[0], list) or len(paths[0]) != 1:
            raise bad(
                control.name,
                "diffjev's choice holds one flat taxonomy path; this result picks "
                f'{paths!r} (set maxUsages="1" in Label Studio)',
            )
        chosen = [paths[0][0]]
    else:
        chosen = value.get("choices")
        if not isinstance(chosen, list) or not all(isinstance(c, str) for c in chosen):
            raise bad(control.name, "a Choices result lists its choices as a list of names")
        if not control.multiple and len(chosen) != 1:
            raise bad(control.name, f"a single-choice tag's result picks {len(chosen)} choices; it takes one")
    for c in chosen:
        if c not in control.labels:
            raise bad(
                control.name, f"{c!r} is not a <Choice> of this tag ({', '.join(control.labels)}); add it to the config"
            )
    return chosen


def _probability(value: Any, bad: Any, field: str, what: str) -> float | None:
    """A score or confidence the file gives, or None where it gives none; anything but a number from 0 to 1
    is refused (clamping -3 to 0 would store an answer the model never gave)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise bad(field, f"{what} {value!r} is not a probability from 0 to 1; fix it or remove it")
    return float(value)


def _model_answer(
    config: LabelConfig,
    qid: str,
    decoded: tuple[str, list[SpanMark] | None, Mapping[str, Any], Any],
    prediction_score: float | None,
    bad: Any,
) -> ModelAnswer:
    answer, marks, meta, result = decoded
    question = config.schema.question(qid)
    control = config.control_for(qid)
    score = _probability(result.get("score"), bad, control.name, "the result's score")
    if marks is not None:
        # A region without a score of its own takes the prediction's; a label with no region at all is
        # scored only by the prediction's score (a region's score is about that region's label).
        marks = [m if m.confidence is not None else replace(m, confidence=prediction_score) for m in marks]
        confidence = _probability(meta.get("confidence"), bad, control.name, "the result's meta.confidence")
        if confidence is None:
            own = [m.confidence for m in marks if m.confidence is not None]
            confidence = sum(own) / len(own) if own and len(own) == len(marks) else prediction_score
        return ModelAnswer(qid, answer, {}, confidence, tuple(marks))
    written = meta.get("distribution")
    if control.multiple:
        label = control.labels[control.questions.index(qid)]
        where = f"the result's meta.distribution for {label!r}"
        p_yes = _probability(written.get(label), bad, control.name, where) if isinstance(written, Mapping) else None
        confs = meta.get("confidence")
        where = f"the result's meta.confidence for {label!r}"
        confidence = _probability(confs.get(label), bad, control.name, where) if isinstance(confs, Mapping) else None
        if p_yes is None:
            s = score if score is not None else prediction_score
            if s is None:
                return ModelAnswer(qid, answer, {}, confidence)
            p_yes = s if answer == "yes" else 1.0 - s
        return ModelAnswer(
            qid,
            answer,
            {"yes": p_yes, "no": 1.0 - p_yes},
            confidence if confidence is not None else max(p_yes, 1.0 - p_yes),
        )
    if isinstance(written, Mapping):
        if set(written) - set(question.names):
            raise bad(control.name, f"meta.distribution must map the answers ({', '.join(question.names)}) to numbers")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in written.values()):
            raise bad(
                control.name,
                f"meta.distribution {dict(written)!r} is not probabilities: give each answer a number from 0 to 1",
            )
        distribution = {name: float(written.get(name, 0.0)) for name in question.names}
        confidence = _probability(meta.get("confidence"), bad, control.name, "the result's meta.confidence")
        if confidence is None:
            confidence = score if score is not None else distribution[answer]
        return ModelAnswer(qid, answer, distribution, confidence)
    p = score if score is not None else prediction_score
    if p is None:
        return ModelAnswer(qid, answer, {}, None)
    return ModelAnswer(qid, answer, score_distribution(question.names, answer, p), p)


def _results(config: LabelConfig, answers: Mapping[str, Any], model: bool) -> list[dict[str, Any]]:
    """LS result regions for one person's or one run's answers (question id -> HumanAnswer / ModelAnswer)."""
    out: list[dict[str, Any]] = []
    n = 0

    def region(control: Control, value: dict[str, Any], **extra: Any) -> dict[str, Any]:
        nonlocal n
        n += 1
        kind = "prediction" if model else "manual"
        return {
            "id": f"{control.name}-{n}",
            "from_name": control.name,
            "to_name": config.text_name,
            "type": control.result_type,
            "value": value,
            "origin": kind,
            **extra,
        }

    for control in config.controls:
        held = [(qid, answers[qid]) for qid in control.questions if qid in answers]
        if control.tag == "Labels":
            for qid, answer in held:
                label = control.labels[control.questions.index(qid)]
                for mark in answer.spans or ():
                    extra: dict[str, Any] = {}
                    if model:
                        score = mark.confidence if mark.confidence is not None else answer.confidence
                        extra = _given(score=score, meta=_given(confidence=answer.confidence))
                    out.append(
                        region(
                            control,
                            {"start": mark.start, "end": mark.end, "text": mark.text, "labels": [label]},
                            **extra,
                        )
                    )
            continue
        if control.multiple:
            held = [(qid, a) for qid, a in held if _value(a) in ("yes", "no")]
            if not held:
                continue
            chosen = [control.labels[control.questions.index(qid)] for qid, a in held if _value(a) == "yes"]
            if not chosen:  # an empty Choices result is not a region Label Studio shows; meta carries the "no"s
                continue
            extra = {}
            if model:
                label = {qid: control.labels[control.questions.index(qid)] for qid, _ in held}
                extra = _given(
                    score=_mean([a.confidence for _, a in held]),
                    meta=_given(
                        distribution={label[q]: a.distribution["yes"] for q, a in held if "yes" in a.distribution},
                        confidence={label[q]: a.confidence for q, a in held if a.confidence is not None},
                    ),
                )
            out.append(region(control, {"choices": chosen}, **extra))
            continue
        for qid, answer in held:
            value = _value(answer)
            if value not in control.labels:
                continue
            if control.tag == "Rating":
                payload: dict[str, Any] = {"rating": int(value)}
            elif control.tag == "Taxonomy":
                payload = {"taxonomy": [[value]]}
            else:
                payload = {"choices": [value]}
            extra = (
                _given(score=answer.confidence, meta=_given(distribution=dict(answer.distribution))) if model else {}
            )
            out.append(region(control, payload, **extra))
    return out


def _given(**fields: Any) -> dict[str, Any]:
    """The fields that hold something: a score the source never gave is not written (nor an empty meta)."""
    return {k: v for k, v in fields.items() if v is not None and v != {}}


def _mean(scores: list[float | None]) -> float | None:
    """The mean of the scores given, None where none was: a missing score is not counted as 1."""
    given = [s for s in scores if s is not None]
    return sum(given) / len(given) if given else None


def _value(answer: Any) -> str | None:
    return answer.answer if isinstance(answer, ModelAnswer) else answer.value


# --- answers <-> plain JSON, for what travels in meta --------------------------------------------------------


def _marks_json(marks: tuple[SpanMark, ...] | None) -> list[list[Any]] | None:
    return None if marks is None else [[m.start, m.end, m.text, m.confidence] for m in marks]


def _marks_from(raw: Any) -> tuple[SpanMark, ...] | None:
    return None if raw is None else tuple(SpanMark(int(s), int(e), t, c) for s, e, t, c in raw)


def _human_json(a: HumanAnswer) -> dict[str, Any]:
    return {
        "value": a.value,
        "source": a.source,
        "status": a.status,
        "spans": _marks_json(a.spans),
        "skipped": a.skipped,
        "seconds": a.seconds,
    }


def _human_from(qid: str, annotator: str, raw: extras.LabelStudioAnswer) -> HumanAnswer:
    return HumanAnswer(
        qid,
        annotator,
        raw.value,
        raw.source,
        raw.status or "submitted",
        extras.marks(raw.spans),
        raw.skipped.record() if raw.skipped is not None else None,
        raw.seconds,
    )


def _settled_json(a: Adjudication) -> dict[str, Any]:
    return {
        "question": a.question,
        "reviewer": a.reviewer,
        "value": a.value,
        "comment": a.comment,
        "spans": _marks_json(a.spans),
    }


def _settled_from(config: LabelConfig, raw: Any, bad: Any) -> Adjudication:
    field = f"meta.{META_KEY}.adjudications"
    if not isinstance(raw, Mapping) or not all(isinstance(raw.get(k), str) for k in ("question", "reviewer", "value")):
        raise bad(field, "each adjudication is an object with question, reviewer and value (text)")
    if raw["question"] not in {q.id for q in config.schema.questions}:
        raise bad(field, f"an adjudication of {raw['question']!r}, which the config asks no question for")
    comment = raw.get("comment")
    try:
        spans = _marks_from(raw.get("spans"))
    except (TypeError, ValueError):
        raise bad(
            field, f"the spans of {raw['reviewer']}'s adjudication are not [start, end, text, confidence]"
        ) from None
    return Adjudication(
        raw["question"], raw["reviewer"], raw["value"], comment if isinstance(comment, str) else None, spans
    )


def _model_json(a: ModelAnswer) -> dict[str, Any]:
    return {
        "answer": a.answer,
        "distribution": a.distribution,
        "confidence": a.confidence,
        "spans": _marks_json(a.spans),
    }


# --- reading an export -----------------------------------------------------------------------------------------


def _config_path(export_path: Path, config_path: str | Path | None) -> Path:
    if config_path is not None:
        return Path(config_path)
    beside = export_path.with_name(f"{export_path.stem}.label_config.xml")
    if beside.exists():
        return beside
    raise InterchangeError(
        str(export_path),
        None,
        None,
        "Label Studio's export does not carry the labeling config; give it (--config label_config.xml, from "
        f"Settings > Labeling Interface > Code) or save it beside the export as {beside.name}",
    )


def read_labelstudio(export_path: str | Path, config_path: str | Path | None = None) -> Bundle:
    """A Label Studio JSON export (a list of tasks) and its labeling config, as a Bundle."""
    export_path = Path(export_path)
    cpath = _config_path(export_path, config_path)
    try:
        xml_text = cpath.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InterchangeError(str(cpath), None, None, f"cannot read the config ({exc})") from None
    config = schema_from_config(xml_text, str(cpath))
    file = str(export_path)
    try:
        tasks = json.loads(export_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InterchangeError(file, None, None, f"cannot read the export ({exc})") from None
    except json.JSONDecodeError as exc:
        raise InterchangeError(
            file, None, None, f"not JSON ({exc.msg} at line {exc.lineno}); use Label Studio's Export > JSON"
        ) from None
    except RecursionError:
        raise InterchangeError(
            file,
            None,
            None,
            "nests lists or objects thousands deep, which no export does; use Label Studio's Export > JSON",
        ) from None
    if isinstance(tasks, Mapping):
        tasks = [tasks]
    if not isinstance(tasks, list):
        raise InterchangeError(file, None, None, "a Label Studio JSON export is a list of tasks")
    runs: dict[str, RunInfo] = {}
    records = [_read_task(config, task, n, file, runs) for n, task in enumerate(tasks)]
    bundle = Bundle(config.schema, records, runs, config.text_field, file, aliases=_user_aliases(tasks))
    by_id = sum(
        isinstance(p, int) and not isinstance(p, bool)
        for task in tasks
        if isinstance(task, Mapping) and isinstance(task.get("predictions"), list)
        for p in task["predictions"]
    )
    drafts = sum(
        len(task["drafts"]) for task in tasks if isinstance(task, Mapping) and isinstance(task.get("drafts"), list)
    )
    if drafts:
        bundle.notes.append(
            f"{drafts} draft{'s' if drafts != 1 else ''} (answers saved in Label Studio but never submitted) "
            f"{'were' if drafts != 1 else 'was'} not imported; to bring them, submit them in Label Studio and export "
            "again: nothing is added twice"
        )
    if by_id:
        bundle.notes.append(
            f"{by_id} predictions were listed by id only (the Export button's quick JSON) and were not imported; "
            "to bring them, export a snapshot with full bodies (POST /api/projects/<id>/exports with "
            "serialization_options.predictions.only_id false) and import it again: nothing is added twice"
        )
    return bundle


def _read_task(config: LabelConfig, task: Any, n: int, file: str, runs: dict[str, RunInfo]) -> Record:
    where = f"task {task.get('id')}" if isinstance(task, Mapping) and task.get("id") is not None else f"task #{n + 1}"

    def bad(field: str | None, problem: str) -> InterchangeError:
        return InterchangeError(file, where, field, problem)

    if not isinstance(task, Mapping) or not isinstance(task.get("data"), Mapping):
        raise bad("data", "a task is an object whose 'data' holds the item's fields")
    data = task["data"]
    text = data.get(config.text_field)
    if not isinstance(text, str):
        raise bad(
            f"data.{config.text_field}",
            f"the task has no text in data.{config.text_field}, which the config's "
            f'<Text value="${config.text_field}"> reads',
        )
    problem = unstorable_text(text, f"data.{config.text_field}")
    if problem:
        raise bad(f"data.{config.text_field}", problem)
    broken = extras.surrogate_path(task)
    if broken is not None:
        raise bad(broken, extras.LONE_SURROGATE)
    meta = task.get("meta") if isinstance(task.get("meta"), Mapping) else {}
    ours = extras.checked(
        extras.LabelStudioMeta,
        meta.get(META_KEY) or {},
        file,
        where,
        f"meta.{META_KEY}",
        f"fix it, or remove meta.{META_KEY} from the task to import what Label Studio's own fields hold",
    )
    if "external_id" in ours.model_fields_set:
        external_id = ours.external_id
    else:
        external_id = _task_id(task.get("id"), bad)
    fields = {k: v for k, v in data.items() if k != config.text_field and not k.startswith("$")}
    record = Record(text, external_id, fields, where=where)
    annotations = task.get("annotations") or []
    if not isinstance(annotations, list):
        raise bad("annotations", "annotations is a list")
    # what diffjev wrote per annotation; an export whose annotations were added or removed since has none
    kept = ours.annotations if len(ours.annotations) == len(annotations) else [None] * len(annotations)
    ground_truth: list[list[HumanAnswer]] = []
    for n_annotation, (annotation, extra) in enumerate(zip(annotations, kept)):
        answers = _read_annotation(config, annotation, extra, text, bad, f"annotations.{n_annotation}")
        record.answers.extend(answers)
        if annotation.get("ground_truth") and not annotation.get("was_cancelled"):
            ground_truth.append(answers)
    settled = ours.adjudications or []
    if not isinstance(settled, list):
        raise bad(f"meta.{META_KEY}.adjudications", "adjudications is a list")
    record.adjudications = [_settled_from(config, raw, bad) for raw in settled]
    record.adjudications += _ground_truth(record, ground_truth)
    predictions = task.get("predictions") or []
    if not isinstance(predictions, list):
        raise bad("predictions", "predictions is a list")
    for n_prediction, prediction in enumerate(predictions):
        if isinstance(prediction, int) and not isinstance(prediction, bool):
            continue  # listed by id only (the Export button's quick JSON): counted and said by read_labelstudio
        if not isinstance(prediction, Mapping):
            raise bad("predictions", "a prediction is an object")
        version = prediction.get("model_version")
        if version is not None and (isinstance(version, bool) or not isinstance(version, (str, int))):
            raise bad(
                f"predictions.{n_prediction}.model_version",
                f"{version!r} is no model version; give the version's name (text)",
            )
        shown = str(version or "labelstudio")
        key = next((k for k, run in ours.runs.items() if run.name == shown), shown)
        if key not in runs:
            info = ours.runs.get(key)
            runs[key] = info.info(key) if info is not None else RunInfo(key, "labelstudio", key, key)
        decoded = _decode(config, prediction.get("result") or [], text, bad)
        score = _probability(
            prediction.get("score"), bad, f"predictions.{n_prediction}.score", "the prediction's score"
        )
        answers = {qid: _model_answer(config, qid, d, score, bad) for qid, d in decoded.items()}
        run_extra = ours.predictions.get(key) or extras.LabelStudioRun()
        for qid, raw in run_extra.answers.items():
            if raw is None:
                answers.pop(qid, None)
            else:
                answers[qid] = raw.model_answer(qid)
        record.predictions.setdefault(key, []).extend(answers[q.id] for q in config.schema.questions if q.id in answers)
        if run_extra.skipped:
            record.model_skipped[key] = extras.skips(run_extra.skipped)
    return record


def _task_id(value: Any, bad: Any) -> str | None:
    """A task's id as the item's id: Label Studio's ids are whole numbers; an edited file may hold text."""
    if value is None or (isinstance(value, (str, int)) and not isinstance(value, bool)):
        return None if value is None else str(value)
    raise bad("id", f"{value!r} is no task id; a task id is a whole number")


def _ground_truth(record: Record, ground_truth: list[list[HumanAnswer]]) -> list[Adjudication]:
    """Label Studio's ground-truth annotations as adjudications, where they settle another annotator's answer
    to the question and nothing settled it already."""
    out: list[Adjudication] = []
    settled = {a.question for a in record.adjudications}
    for answers in ground_truth:
        for answer in answers:
            if answer.status != "submitted" or answer.value is None or answer.question in settled:
                continue
            others = any(
                other.question == answer.question
                and other.annotator != answer.annotator
                and other.status == "submitted"
                for other in record.answers
            )
            if others:
                settled.add(answer.question)
                out.append(Adjudication(answer.question, answer.annotator, answer.value, None, answer.spans))
    return out


def _user_aliases(tasks: list[Any]) -> dict[str, str]:
    """ "ls-user-<id>" -> email for each user a snapshot names with both: the quick export gives only the id,
    so one person's answers would otherwise come in twice, once under each name (_annotator)."""
    found: dict[str, str] = {}
    for task in tasks:
        annotations = task.get("annotations") if isinstance(task, Mapping) else None
        for annotation in annotations if isinstance(annotations, list) else []:
            who = annotation.get("completed_by") if isinstance(annotation, Mapping) else None
            if isinstance(who, Mapping) and who.get("email") and who.get("id") is not None:
                found[f"ls-user-{who['id']}"] = str(who["email"])
    return found


def _annotator(annotation: Mapping[str, Any]) -> str:
    who = annotation.get("completed_by")
    if isinstance(who, Mapping):
        if who.get("email"):
            return str(who["email"])
        who = who.get("id")
    return f"ls-user-{who}" if who is not None else "ls-user-unknown"


def _read_annotation(
    config: LabelConfig,
    annotation: Any,
    extra: extras.LabelStudioAnnotation | None,
    text: str,
    bad: Any,
    at: str = "annotations",
) -> list[HumanAnswer]:
    if not isinstance(annotation, Mapping):
        raise bad("annotations", "an annotation is an object")
    extra = extra or extras.LabelStudioAnnotation()
    annotator = extra.annotator or _annotator(annotation)
    seconds = annotation.get("lead_time")
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < math.inf
    ):
        raise bad(f"{at}.lead_time", f"{seconds!r} is not seconds spent (a number of 0 or more); fix it or remove it")
    answers: dict[str, HumanAnswer] = {}
    if annotation.get("was_cancelled"):
        for q in config.schema.questions:
            answers[q.id] = HumanAnswer(q.id, annotator, None, status="skipped", seconds=seconds)
    else:
        for qid, (value, marks, _, _) in _decode(config, annotation.get("result") or [], text, bad).items():
            question = config.schema.question(qid)
            if marks is not None:
                try:
                    parse_span_value(value, text, question.kind)
                except ValueError as exc:
                    raise bad(config.control_for(qid).name, f"{qid}: {exc}") from None
            answers[qid] = HumanAnswer(
                qid, annotator, value, spans=tuple(marks) if marks is not None else None, seconds=seconds
            )
    for qid, raw in extra.answers.items():
        if raw is None:
            answers.pop(qid, None)
        else:
            answers[qid] = _human_from(qid, annotator, raw)
    return [answers[q.id] for q in config.schema.questions if q.id in answers]


# --- writing an export ------------------------------------------------------------------------------------------


def write_labelstudio(bundle: Bundle, out_path: str | Path, user_ids: bool = False) -> None:
    """Tasks JSON that Label Studio imports, at out_path, and the labeling config beside it as
    <stem>.label_config.xml. Both are written whole or not at all.

    An annotation's `completed_by` is left out, so Label Studio gives it to the user who imports (a user id
    it does not know fails the whole import, and a fresh instance knows only user 1); the annotators' names
    travel in meta. `user_ids` writes each annotator's Label Studio user id instead (_user_ids), for an
    instance where those users exist, such as the one the answers came from."""
    out_path = Path(out_path)
    xml_text = config_from_schema(bundle.schema, bundle.text_field)
    config = schema_from_config(xml_text, "the written config")
    config = replace(config, schema=bundle.schema)
    extra_keys = [key for record in bundle.records for key in (*record.predictions, *record.model_skipped)]
    names = model_versions(bundle.runs, extra_keys)
    people = _user_ids(bundle) if user_ids else {}
    tasks = [_task(config, bundle, record, n, names, people) for n, record in enumerate(bundle.records)]
    config_out = out_path.with_name(f"{out_path.stem}.label_config.xml")
    with atomic_path(out_path) as temp, atomic_path(config_out) as config_temp:
        temp.write_text(json.dumps(tasks, ensure_ascii=False, indent=1, default=str), encoding="utf-8")
        config_temp.write_text(xml_text, encoding="utf-8")


LS_USER = re.compile(r"ls-user-(\d{1,18})")
REMARK = re.compile(r"\([^()]*\)")
NOT_TOKEN = re.compile(r"[^A-Za-z0-9._-]+")
_RUN_NUMBER = re.compile(r"run-(\d+)")
FROM_ANOTHER_TOOL = ("labelstudio", "argilla", "")  # runs read from a file, named as that tool named them


def version_token(text: str) -> str:
    """`text` as one token of letters, digits, '.', '_' and '-': a remark in parentheses dropped (the
    offline model's name says which package holds it), every other run of characters (spaces, '/') one '-'."""
    without_remarks = REMARK.sub(" ", text)
    return NOT_TOKEN.sub("-", without_remarks).strip("-")


def diffjev_model_version(engine: str, model: str | None) -> str:
    """The `model_version` of diffjev's predictions, `diffjev-<engine>-<model>` as one token, the same from
    the ML backend and in an export: Label Studio lists and filters predictions by it."""
    return f"diffjev-{version_token(engine) or 'engine'}-{version_token(model or '') or 'unnamed'}"


def own_version(run: RunInfo) -> str:
    """A diffjev run's `model_version`: its engine and model, and its model's version where one is set."""
    base = diffjev_model_version(run.engine, run.model)
    if run.model_version and run.model_version != run.model:
        return f"{base}-{version_token(run.model_version) or 'version'}"
    return base


def model_versions(runs: dict[str, RunInfo], keys: list[str]) -> dict[str, str]:
    """Each run's `model_version`: diffjev's own runs as diffjev_model_version names them, a run read from
    another tool under its own name (bundle.run_names); two runs that would share one get '-run-<n>' after
    it. meta.diffjev.runs maps each back to its run's key."""
    names = run_names(runs, keys)
    shared = Counter(own_version(run) for run in runs.values() if run.engine not in FROM_ANOTHER_TOOL)
    versions: dict[str, str] = {}
    for key in names:
        info = runs.get(key)
        if info is None or info.engine in FROM_ANOTHER_TOOL:
            versions[key] = names[key]
            continue
        version, own = own_version(info), _RUN_NUMBER.fullmatch(key)
        if shared[version] > 1 or version in versions.values():
            version = f"{version}-run-{own[1] if own else version_token(key)}"
        versions[key] = version
    return versions


def _user_ids(bundle: Bundle) -> dict[str, int]:
    """One Label Studio user id per annotator for the whole export, so a person is the same `completed_by` in
    every task: an annotator read from Label Studio by number ("ls-user-12") keeps that number, the others
    take the lowest numbers nobody holds, in the order they first answer. Their names travel in meta."""
    people = list(dict.fromkeys(a.annotator for record in bundle.records for a in record.answers))
    ids = {who: int(own[1]) for who in people if (own := LS_USER.fullmatch(who))}
    taken, number = set(ids.values()), 0
    for who in people:
        if who not in ids:
            number += 1
            while number in taken:
                number += 1
            ids[who] = number
    return ids


def _task(
    config: LabelConfig, bundle: Bundle, record: Record, n: int, names: dict[str, str], people: dict[str, int]
) -> dict[str, Any]:
    """One task; `names` are the runs' model_versions (bundle.run_names), `people` the annotators' user ids."""
    text = record.text

    def bad(field: str | None, problem: str) -> InterchangeError:
        return InterchangeError(bundle.source or "bundle", record.where or f"record {n + 1}", field, problem)

    known = {q.id for q in config.schema.questions}
    for answer in [*record.answers, *(a for answers in record.predictions.values() for a in answers)]:
        if answer.question not in known:
            raise bad(answer.question, "an answer to a question the schema does not have; add it to the schema")
    by_person: dict[str, dict[str, HumanAnswer]] = {}
    for answer in record.answers:
        by_person.setdefault(answer.annotator, {})[answer.question] = answer
    annotations, kept = [], []
    for annotator, answers in by_person.items():
        statuses = {a.status for a in answers.values()}
        cancelled = statuses == {"skipped"}
        results = (
            []
            if cancelled
            else _results(config, {q: a for q, a in answers.items() if a.status == "submitted"}, model=False)
        )
        seconds = next((a.seconds for a in answers.values() if a.seconds is not None), None)
        annotation = {
            **({"completed_by": people[annotator]} if people else {}),
            "result": results,
            "was_cancelled": cancelled,
            "ground_truth": False,
            "lead_time": seconds,
        }
        annotations.append(annotation)
        # what Label Studio's results give back, and what differs: that travels in meta
        back = {
            a.question: a
            for a in _read_annotation(
                config, annotation, extras.LabelStudioAnnotation.model_construct(annotator=annotator), text, bad
            )
        }
        differs = {qid: _human_json(a) for qid, a in answers.items() if back.get(qid) != a}
        differs.update({qid: None for qid in back if qid not in answers})
        kept.append({"annotator": annotator, "answers": differs})
    predictions, run_extra = [], {}
    # in the bundle's order of runs, which a reader takes as the order they ran in
    for key in [k for k in dict.fromkeys([*bundle.runs, *record.predictions]) if k in record.predictions]:
        answers_list = record.predictions[key]
        answers = {a.question: a for a in answers_list}
        prediction = {
            "model_version": names[key],
            "result": _results(config, answers, model=True),
            "score": _mean([a.confidence for a in answers_list]),
        }
        predictions.append(prediction)
        decoded = _decode(config, prediction["result"], text, bad)
        back = {qid: _model_answer(config, qid, d, prediction["score"], bad) for qid, d in decoded.items()}
        differs = {qid: _model_json(a) for qid, a in answers.items() if back.get(qid) != a}
        differs.update({qid: None for qid in back if qid not in answers})
        entry: dict[str, Any] = {"answers": differs} if differs else {}
        if record.model_skipped.get(key):
            entry["skipped"] = record.model_skipped[key]
        if entry:
            run_extra[key] = entry
    for key, skipped in record.model_skipped.items():
        if key not in record.predictions:
            predictions.append({"model_version": names[key], "result": [], "score": None})
            run_extra[key] = {"skipped": skipped}
    ours: dict[str, Any] = {"external_id": record.external_id, "annotations": kept}
    for settled in record.adjudications:
        if settled.question not in known:
            raise bad(settled.question, "an adjudication of a question the schema does not have; add it to the schema")
    if record.adjudications:
        ours["adjudications"] = [_settled_json(a) for a in record.adjudications]
    if run_extra:
        ours["predictions"] = run_extra
    runs: dict[str, Any] = {}
    for key in dict.fromkeys([*record.predictions, *record.model_skipped]):
        if key in bundle.runs:
            info = bundle.runs[key]
            runs[key] = {"engine": info.engine, "model": info.model, "model_version": info.model_version}
            if names[key] != key:  # the name Label Studio shows: reading maps it back to the run's key
                runs[key]["name"] = names[key]
    if runs:
        ours["runs"] = runs
    task: dict[str, Any] = {
        "data": {bundle.text_field: text, **record.fields},
        "annotations": annotations,
        "predictions": predictions,
        "meta": {META_KEY: ours},
    }
    if record.external_id is not None and str(record.external_id).isdigit():
        task["id"] = int(record.external_id)
    return task


def task_predictions(config: LabelConfig, answers: list[ModelAnswer], model_version: str, text: str) -> dict:
    """One Label Studio prediction for a task (what an ML backend's /predict returns per task): the results,
    `score` the mean confidence, each choice or rating result's distribution in its `meta`."""
    by_question = {a.question: a for a in answers}
    results = _results(config, by_question, model=True)
    for result in results:
        if result["type"] == "labels":
            mark = result["value"]
            if text[mark["start"] : mark["end"]] != mark["text"]:
                raise ValueError(f"span {mark['start']}-{mark['end']} does not match the task text")
    score = sum(a.confidence for a in answers) / len(answers) if answers else 0.0
    return {"model_version": model_version, "score": score, "result": results}
