"""Questions, schemas and their validation.

A schema is plain, frozen data: the ordered questions, shared instructions, the response template and
the sampling policy. Every way a schema can be wrong raises `SchemaError`, whose message names the
question and the field and says how to fix it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from diffjev.errors import SchemaError
from diffjev.question_types import (  # noqa: F401 - Alternative and Question are part of this module's API
    NOUL_MEANING,
    QUESTION_TYPES,
    Alternative,
    Question,
    optional_text,
    question_type,
)
from diffjev.staging import check_stages
from diffjev.template import Template

MAX_QUESTIONS = 64

# Sampling policy bounds (djev clamps the same way: one read at least, 32 at most).
MAX_SAMPLES = 32
DEFAULT_AUTO_THRESHOLD = 0.1
DEFAULT_AUTO_MAX = 4


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
        # Only questions read at a slot of the joint canvas have a place in the response template; a span
        # question takes a read of its own. A schema of span questions alone has no template.
        if self.template is None and self.slot_ids:
            object.__setattr__(self, "template", Template.default(self.slot_ids))
        if self.template is not None:
            self.template.check_against(self.slot_ids)
        check_stages(self.questions)

    @property
    def slot_ids(self) -> list[str]:
        """The ids of the questions the joint canvas reads, one slot each, in order."""
        return [q.id for q in self.questions if q.type.reads == "slot"]

    def slot_part(self) -> "Schema | None":
        """The part of the schema the joint canvas reads: its slot questions (itself when every question is
        one; None when it has none). Span questions take reads of their own."""
        slots = tuple(q for q in self.questions if q.type.reads == "slot")
        if len(slots) == len(self.questions):
            return self
        return dataclasses.replace(self, questions=slots) if slots else None

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

        instructions = optional_text(data.get("instructions"), "instructions")
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
        if self.template is not None and not self.template.is_default_for(self.slot_ids):
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
            out[q.id] = {**q.type.to_jev_spec(q), **staging_fields(q)}
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


BASE_FIELDS = {"type", "instructions"}
STAGING_FIELDS = {"depends_on", "ask_if", "alone"}
INTERCHANGE_FIELDS = {"part_of"}


def question_from_dict(qid: str, spec: Any, jev_form: bool = False) -> Question:
    """One question from its native form (`options` or `levels`) or, with `jev_form`, the Jev API's form,
    where the answers are in `criteria`. Errors name the field as the user wrote it (or, when it is
    missing, as the form in use names it). What differs between kinds is its type's (`question_types`)."""
    if not isinstance(spec, Mapping):
        raise SchemaError("a question must be an object with 'type' and 'instructions'", question=qid)
    raw_kind = spec.get("type")
    qtype = question_type(raw_kind) if isinstance(raw_kind, str) else None
    if qtype is None:
        raise SchemaError(
            f"unknown kind {raw_kind!r}; use {_kinds_listed()}. yes_no may also be written noul, bool or "
            f"boolean ({NOUL_MEANING})",
            question=qid,
            field="type",
        )
    allowed = (
        BASE_FIELDS | STAGING_FIELDS | INTERCHANGE_FIELDS | set().union(*(t.fields for t in QUESTION_TYPES.values()))
    )
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise SchemaError(
            f"unknown field; a question takes {', '.join(sorted(allowed | {'id'}))}",
            question=qid,
            field=unknown[0],
        )
    written = qtype.name if raw_kind == qtype.name else f"{raw_kind} ({qtype.name})"  # as the user named it
    instructions = optional_text(spec.get("instructions"), "instructions", qid)
    if not instructions:
        raise SchemaError(
            "say what to decide, e.g. 'Does the customer need a reply within the hour?'",
            question=qid,
            field="instructions",
        )
    parsed = qtype.parse(qid, spec, written, jev_form)
    return dataclasses.replace(
        parsed, instructions=instructions, **staging_from_dict(qid, spec), part_of=_part_of(qid, spec)
    )


def _part_of(qid: str, spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """`part_of: {"question": "ner", "label": "PER"}`: the other tool's question and label this one reads."""
    raw = spec.get("part_of")
    if raw is None:
        return None
    if (
        not isinstance(raw, Mapping)
        or set(raw) != {"question", "label"}
        or not all(isinstance(raw[k], str) and raw[k].strip() for k in ("question", "label"))
    ):
        raise SchemaError(
            'give the multi-label question and the label this question reads, e.g. {"question": "ner", "label": "PER"}',
            question=qid,
            field="part_of",
        )
    return (raw["question"], raw["label"])


def _kinds_listed() -> str:
    names = list(QUESTION_TYPES)
    return ", ".join(names[:-1]) + f" or {names[-1]}"


def staging_from_dict(qid: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The staging fields' shapes; how they fit the other questions is `staging.check_stages`'s to say."""
    depends_on = spec.get("depends_on", [])
    if not isinstance(depends_on, list) or not all(isinstance(d, str) and d for d in depends_on):
        raise SchemaError(
            'list the ids of the questions read before this one, e.g. ["urgent"]', question=qid, field="depends_on"
        )
    ask_if = spec.get("ask_if", {})
    if not isinstance(ask_if, Mapping):
        raise SchemaError(
            'give the earlier answers this question is asked under, e.g. {"urgent": "yes"}',
            question=qid,
            field="ask_if",
        )
    conditions = []
    for earlier, wanted in ask_if.items():
        answers = [wanted] if isinstance(wanted, str) else wanted
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            raise SchemaError(
                f'ask_if.{earlier} must be an answer name or a list of them, e.g. "yes" or ["billing"]',
                question=qid,
                field="ask_if",
            )
        conditions.append((earlier, tuple(answers)))
    alone = spec.get("alone", False)
    if not isinstance(alone, bool):
        raise SchemaError("alone is true or false", question=qid, field="alone")
    return {"depends_on": tuple(dict.fromkeys(depends_on)), "ask_if": tuple(conditions), "alone": alone}


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
    out = {"id": q.id, "type": q.kind, "instructions": q.instructions, **q.type.to_dict(q), **staging_fields(q)}
    if q.part_of:
        out["part_of"] = {"question": q.part_of[0], "label": q.part_of[1]}
    return out


def staging_fields(q: Question) -> dict[str, Any]:
    """The staging fields a question sets, as both JSON forms write them."""
    out: dict[str, Any] = {}
    if q.depends_on:
        out["depends_on"] = list(q.depends_on)
    if q.ask_if:
        out["ask_if"] = {earlier: list(wanted) for earlier, wanted in q.ask_if}
    if q.alone:
        out["alone"] = True
    return out
