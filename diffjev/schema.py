"""Questions, schemas and their validation.

A schema is plain, frozen data: the ordered questions, shared instructions, the response template and
the sampling policy. Every way a schema can be wrong raises `SchemaError`, whose message names the
question and the field and says how to fix it.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any, Mapping

from diffjev.errors import SchemaError
from diffjev.template import Template

KIND_ALIASES = {
    "yes_no": "yes_no",
    "noul": "yes_no",
    "bool": "yes_no",
    "boolean": "yes_no",
    "choice": "choice",
    "score": "score",
}
KINDS = ("yes_no", "choice", "score")
MAX_ALTERNATIVES = 26
MAX_QUESTIONS = 64
LETTERS = tuple(string.ascii_uppercase)
DIGITS = tuple(string.digits)

# Sampling policy bounds (djev clamps the same way: one read at least, 32 at most).
MAX_SAMPLES = 32
DEFAULT_AUTO_THRESHOLD = 0.1
DEFAULT_AUTO_MAX = 4


@dataclass(frozen=True)
class Alternative:
    """One answer a question allows: the name people see and the single-token label the model writes."""

    name: str
    label: str
    description: str | None = None


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    instructions: str
    alternatives: tuple[Alternative, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.alternatives)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(a.label for a in self.alternatives)


@dataclass(frozen=True)
class SamplingPolicy:
    """How many noise draws a read takes: a fixed N, or "auto" (one, then more when a slot is unsure)."""

    samples: int | str = "auto"
    auto_threshold: float = DEFAULT_AUTO_THRESHOLD
    auto_max: int = DEFAULT_AUTO_MAX

    @property
    def first_draws(self) -> int:
        return 1 if self.samples == "auto" else int(self.samples)


@dataclass(frozen=True)
class Schema:
    questions: tuple[Question, ...]
    instructions: str = ""
    template: Template = field(default=None)  # type: ignore[assignment]
    sampling: SamplingPolicy = SamplingPolicy()
    # Item fields kept off the annotator's card (a gold answer, an internal note): still stored and exported.
    hidden_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.template is None:
            object.__setattr__(self, "template", Template.default([q.id for q in self.questions]))
        self.template.check_against([q.id for q in self.questions])

    def question(self, question_id: str) -> Question:
        for q in self.questions:
            if q.id == question_id:
                return q
        raise KeyError(question_id)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Schema":
        """Read a schema from its JSON form.

        `questions` is either a list of `{id, type, instructions, options | levels | criteria}` (the
        native form) or the Jev request form `{id: {type, instructions, criteria}}`.
        """
        if not isinstance(data, Mapping):
            raise SchemaError("a schema must be a JSON object with a 'questions' field")
        known = {"instructions", "questions", "template", "samples", "auto_threshold", "auto_max", "hidden_fields"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SchemaError(
                f"unknown schema field(s) {', '.join(map(repr, unknown))}; known fields are {', '.join(sorted(known))}",
                field=unknown[0],
            )
        raw = data.get("questions")
        if isinstance(raw, Mapping):
            items = [(qid, spec) for qid, spec in raw.items()]
        elif isinstance(raw, list):
            items = []
            for n, spec in enumerate(raw):
                if not isinstance(spec, Mapping):
                    raise SchemaError(f"question #{n + 1} must be an object", field="questions")
                items.append((spec.get("id"), {k: v for k, v in spec.items() if k != "id"}))
        else:
            raise SchemaError("give 'questions' as a list of question objects, or as {id: question}", field="questions")
        if not items:
            raise SchemaError("a schema needs at least one question", field="questions")
        if len(items) > MAX_QUESTIONS:
            raise SchemaError(f"{len(items)} questions; at most {MAX_QUESTIONS} fit one read", field="questions")
        questions: list[Question] = []
        seen: set[str] = set()
        for n, (qid, spec) in enumerate(items):
            _check_id(qid, n, seen)
            seen.add(qid)
            questions.append(question_from_dict(qid, spec, jev_form=isinstance(raw, Mapping)))

        instructions = _optional_text(data.get("instructions"), "instructions")
        sampling = _sampling(data)
        template_text = data.get("template")
        if template_text is None:
            template = None
        elif isinstance(template_text, str):
            template = Template.parse(template_text)
        else:
            raise SchemaError("the template must be text with one {question_id} slot per question", field="template")
        return cls(tuple(questions), instructions, template, sampling, _hidden_fields(data.get("hidden_fields")))

    def to_dict(self) -> dict[str, Any]:
        """The native JSON form; `Schema.from_dict(s.to_dict()) == s`."""
        out: dict[str, Any] = {"questions": [question_to_dict(q) for q in self.questions]}
        if self.instructions:
            out["instructions"] = self.instructions
        if not self.template.is_default_for([q.id for q in self.questions]):
            out["template"] = self.template.text
        out["samples"] = self.sampling.samples
        out["auto_threshold"] = self.sampling.auto_threshold
        out["auto_max"] = self.sampling.auto_max
        if self.hidden_fields:
            out["hidden_fields"] = list(self.hidden_fields)
        return out

    def to_jev_questions(self) -> dict[str, dict[str, Any]]:
        """The Jev request form of the questions: `{id: {type, instructions, criteria}}`."""
        out: dict[str, dict[str, Any]] = {}
        for q in self.questions:
            if q.kind == "yes_no":
                yes, no = q.alternatives
                spec: dict[str, Any] = {"type": "noul", "instructions": q.instructions}
                if yes.description or no.description:
                    spec["criteria"] = {"true": yes.description, "false": no.description}
            elif q.kind == "choice":
                spec = {
                    "type": "choice",
                    "instructions": q.instructions,
                    "criteria": {a.name: a.description for a in q.alternatives},
                }
            else:
                spec = {"type": "score", "instructions": q.instructions, "criteria": list(q.names)}
            out[q.id] = spec
        return out


def _check_id(qid: Any, n: int, seen: set[str]) -> None:
    where = f"question #{n + 1}"
    if not isinstance(qid, str) or not qid.strip():
        raise SchemaError(
            f"{where} has an empty id; give every question a short unique id such as 'urgent'", field="id"
        )
    if ":" in qid or "\n" in qid or "\r" in qid:
        raise SchemaError(
            "an id cannot contain ':' or a line break; use letters, digits, '_' or '-'", question=qid, field="id"
        )
    if qid != qid.strip():
        raise SchemaError("an id cannot start or end with spaces", question=qid, field="id")
    if any(c in qid for c in "{}"):
        raise SchemaError("an id cannot contain '{' or '}', which mark template slots", question=qid, field="id")
    if qid in seen:
        raise SchemaError("this id is used twice; every question needs its own id", question=qid, field="id")


def _optional_text(value: Any, name: str, question: str | None = None) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SchemaError("must be text", question=question, field=name)
    return value.strip()


QUESTION_FIELDS = {"type", "instructions", "options", "levels", "criteria"}


NOUL_MEANING = "noul is the Jev API's name for yes_no: a yes/no question, answered with the probability of yes"
EXAMPLES = {"option": '["billing", "technical"]', "level": '["calm", "annoyed", "furious"]'}


def question_from_dict(qid: str, spec: Any, jev_form: bool = False) -> Question:
    """One question from its native form (`options` or `levels`) or, with `jev_form`, the Jev API's form,
    where the answers are in `criteria`. Errors name the field as the user wrote it (or, when it is
    missing, as the form in use names it)."""
    if not isinstance(spec, Mapping):
        raise SchemaError("a question must be an object with 'type' and 'instructions'", question=qid)
    unknown = sorted(set(spec) - QUESTION_FIELDS)
    if unknown:
        raise SchemaError(
            f"unknown field; a question takes {', '.join(sorted(QUESTION_FIELDS | {'id'}))}",
            question=qid,
            field=unknown[0],
        )
    raw_kind = spec.get("type")
    kind = KIND_ALIASES.get(raw_kind) if isinstance(raw_kind, str) else None
    if kind is None:
        raise SchemaError(
            f"unknown kind {raw_kind!r}; use yes_no, choice or score. yes_no may also be written noul, bool or "
            f"boolean ({NOUL_MEANING})",
            question=qid,
            field="type",
        )
    written = kind if raw_kind == kind else f"{raw_kind} ({kind})"  # the kind as the user named it
    instructions = _optional_text(spec.get("instructions"), "instructions", qid)
    if not instructions:
        raise SchemaError(
            "say what to decide, e.g. 'Does the customer need a reply within the hour?'",
            question=qid,
            field="instructions",
        )

    if kind == "yes_no":
        for other in ("options", "levels"):
            if other in spec:
                raise SchemaError(
                    f"a {written} question has no options or levels; use 'criteria' "
                    '{"true": ..., "false": ...} to describe yes and no',
                    question=qid,
                    field=other,
                )
        criteria = spec.get("criteria") or {}
        if not isinstance(criteria, Mapping) or set(criteria) - {"true", "false"}:
            raise SchemaError(
                f'criteria of a {written} question is {{"true": text, "false": text}}', question=qid, field="criteria"
            )
        alternatives = (
            Alternative("yes", "yes", _optional_text(criteria.get("true"), "criteria", qid) or None),
            Alternative("no", "no", _optional_text(criteria.get("false"), "criteria", qid) or None),
        )
    else:
        name_field = "options" if kind == "choice" else "levels"
        wrong = "levels" if kind == "choice" else "options"
        if wrong in spec:
            raise SchemaError(
                f"a {kind} question lists its answers in '{name_field}', not '{wrong}'", question=qid, field=wrong
            )
        if name_field in spec and "criteria" in spec:
            raise SchemaError(
                f"give the answers once, in '{name_field}' or in 'criteria'", question=qid, field="criteria"
            )
        if name_field in spec or "criteria" in spec:
            field_used = name_field if name_field in spec else "criteria"
        else:  # nothing given: the field this form would have it in
            field_used = "criteria" if jev_form else name_field
        named = _alternatives(qid, field_used, spec.get(field_used), kind)
        labels = _labels(kind, len(named))
        alternatives = tuple(Alternative(name, label, desc) for (name, desc), label in zip(named, labels))
    return Question(qid, kind, instructions, alternatives)


def _alternatives(qid: str, field_name: str, raw: Any, kind: str) -> list[tuple[str, str | None]]:
    what = "option" if kind == "choice" else "level"
    if isinstance(raw, Mapping):  # Jev form: {name: description or null}, order kept
        pairs = [(k, v) for k, v in raw.items()]
    elif isinstance(raw, list):
        pairs = []
        for n, entry in enumerate(raw):
            if isinstance(entry, str):
                pairs.append((entry, None))
            elif isinstance(entry, Mapping) and set(entry) <= {"name", "description"}:
                pairs.append((entry.get("name"), entry.get("description")))
            else:
                raise SchemaError(
                    f'{what} #{n + 1} must be a name, or {{"name": ..., "description": ...}}',
                    question=qid,
                    field=field_name,
                )
    else:
        raise SchemaError(f"list the {what}s, e.g. {EXAMPLES[what]}", question=qid, field=field_name)
    out: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    for n, (name, desc) in enumerate(pairs):
        if not isinstance(name, str) or not name.strip():
            raise SchemaError(f"{what} #{n + 1} has an empty name", question=qid, field=field_name)
        name = name.strip()
        if name in seen:
            raise SchemaError(
                f"{what} {name!r} appears twice; every {what} needs its own name", question=qid, field=field_name
            )
        if "\n" in name:
            raise SchemaError(
                f"{what} {name!r} contains a line break; keep names on one line", question=qid, field=field_name
            )
        if desc is not None and not isinstance(desc, str):
            raise SchemaError(f"the description of {what} {name!r} must be text", question=qid, field=field_name)
        seen.add(name)
        out.append((name, (desc or "").strip() or None))
    if len(out) < 2:
        raise SchemaError(
            f"a {kind} question needs at least 2 {what}s; it has {len(out)}", question=qid, field=field_name
        )
    if len(out) > MAX_ALTERNATIVES:
        raise SchemaError(
            f"a {kind} question allows at most {MAX_ALTERNATIVES} {what}s; it has {len(out)}. "
            "Split it into two questions",
            question=qid,
            field=field_name,
        )
    return out


def _labels(kind: str, n: int) -> tuple[str, ...]:
    """Single-token labels, as upstream: letters for options, digits 0..9 for scores (0-indexed, so a
    label is its score); a score with more than ten levels falls back to letters."""
    if kind == "score" and n <= len(DIGITS):
        return DIGITS[:n]
    return LETTERS[:n]


def _hidden_fields(raw: Any) -> tuple[str, ...]:
    """The item fields annotators do not see: a list of field names, each once."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(name, str) and name.strip() for name in raw):
        raise SchemaError(
            'list the item fields annotators must not see by name, e.g. ["expected_team"]', field="hidden_fields"
        )
    names = tuple(name.strip() for name in raw)
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise SchemaError(f"{', '.join(map(repr, twice))} is listed twice; name each field once", field="hidden_fields")
    return names


def _sampling(data: Mapping[str, Any]) -> SamplingPolicy:
    samples = data.get("samples", "auto")
    if samples != "auto":
        if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SAMPLES:
            raise SchemaError(f'give a whole number of noise draws from 1 to {MAX_SAMPLES}, or "auto"', field="samples")
    threshold = data.get("auto_threshold", DEFAULT_AUTO_THRESHOLD)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold < 0:
        raise SchemaError("give the entropy threshold in nats as a number >= 0, e.g. 0.1", field="auto_threshold")
    auto_max = data.get("auto_max", DEFAULT_AUTO_MAX)
    if isinstance(auto_max, bool) or not isinstance(auto_max, int) or not 1 <= auto_max <= MAX_SAMPLES:
        raise SchemaError(f"give the most draws 'auto' may take, from 1 to {MAX_SAMPLES}", field="auto_max")
    return SamplingPolicy(samples, float(threshold), auto_max)


def question_to_dict(q: Question) -> dict[str, Any]:
    out: dict[str, Any] = {"id": q.id, "type": q.kind, "instructions": q.instructions}
    if q.kind == "yes_no":
        yes, no = q.alternatives
        if yes.description or no.description:
            out["criteria"] = {"true": yes.description, "false": no.description}
    else:
        key = "options" if q.kind == "choice" else "levels"
        out[key] = [{"name": a.name, "description": a.description} if a.description else a.name for a in q.alternatives]
    return out
