"""Question types: each kind of question is one class here, and everything that differs between kinds
lives on it, as vLLM's `question_types` does for `/v1/systemone`.

A type says how its questions are written and checked (`parse`, `to_dict`, the Jev request form), what
the model is told (`option_lines`, `reply_instruction`), how it is read (`reads`: one label token at one
slot of the joint canvas, or a read of its own), how its answer is shaped (`answer_value`, `to_jev`,
`jev_probabilities`), what a person may answer (`human_value`), which widget the studio shows (`widget`,
a name the UI maps to its own component, so the core never imports the UI) and what an export holds
(`export_categories`). A new kind is a new entry in `QUESTION_TYPES`, not a branch through every layer.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Mapping

from diffjev.errors import SchemaError

MAX_ALTERNATIVES = 26
LETTERS = tuple(string.ascii_uppercase)
DIGITS = tuple(string.digits)
UPSTREAM_SCORE_LEVELS = 10  # vLLM's API labels score levels 0..9 only
NOUL_MEANING = "noul is the Jev API's name for yes_no: a yes/no question, answered with the probability of yes"
EXAMPLES = {"option": '["billing", "technical"]', "level": '["calm", "annoyed", "furious"]'}


@dataclass(frozen=True)
class Alternative:
    """One answer a question allows: the name people see and the single-token label the model writes."""

    name: str
    label: str
    description: str | None = None


@dataclass(frozen=True)
class Question:
    id: str
    kind: str  # the canonical name of its type: yes_no, choice, score, ...
    instructions: str
    alternatives: tuple[Alternative, ...]
    # Staging: questions read before this one, the earlier answers it is asked under ({id: names}, as pairs
    # so the question stays hashable), and whether it takes a read of its own in its stage.
    depends_on: tuple[str, ...] = ()
    ask_if: tuple[tuple[str, tuple[str, ...]], ...] = ()
    alone: bool = False
    # Span kinds: the blank's length in tokens, and (spans) the most spans in one answer.
    max_tokens: int | None = None
    max_items: int | None = None
    # Interchange: this question is one label of another tool's multi-label question (a Label Studio
    # <Labels> or multiple <Choices> tag, an Argilla SpanQuestion or MultiLabelQuestion): (its name, the
    # label). diffjev reads each label on its own (a yes/no or spans question); an export joins them again.
    part_of: tuple[str, str] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.alternatives)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(a.label for a in self.alternatives)

    @property
    def type(self) -> QuestionType:
        return QUESTION_TYPES[self.kind]

    @property
    def conditions(self) -> dict[str, tuple[str, ...]]:
        """`ask_if` as a mapping: earlier question id -> the answers under which this one is asked."""
        return dict(self.ask_if)


def optional_text(value: Any, name: str, question: str | None = None) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SchemaError("must be text", question=question, field=name)
    return value.strip()


class QuestionType:
    """The behaviour one kind of question shares. Subclasses fill in what differs."""

    name: str = ""
    aliases: tuple[str, ...] = ()
    jev_type: str = ""
    reads: str = "slot"  # "slot": one label token at one slot of the joint canvas; "span": a read of its own
    widget: str = "options"  # the studio's widget: "options" (one button per answer), "span", "spans"
    ordinal: bool = False  # answers are ordered levels: agreement weighs near misses, calibration keeps order
    answers_field: str | None = None  # where the native form lists the answers: "options", "levels", or none
    answer_word: str = "answer"  # what one answer is called in messages: option, level
    reply_instruction: str = ""
    fields: frozenset[str] = frozenset()  # the kind's own fields beside id, type, instructions and staging

    # --- writing and checking a question -----------------------------------------------------------------
    def parse(self, qid: str, spec: Mapping[str, Any], written: str, jev_form: bool) -> Question:
        """The question from its JSON form (already checked for unknown fields and `instructions`)."""
        raise NotImplementedError

    def to_dict(self, q: Question) -> dict[str, Any]:
        """The kind's own fields in the native form."""
        return {}

    def to_jev_spec(self, q: Question) -> dict[str, Any]:
        """The Jev request form: `{type, instructions[, criteria]}`."""
        return {"type": self.jev_type, "instructions": q.instructions}

    def check_jev(self, q: Question) -> None:
        """Raise SchemaError if vLLM's API cannot take this question."""

    # --- what the model is told --------------------------------------------------------------------------
    def option_lines(self, q: Question, separator: str = ": ", describe: str = " ({})") -> list[str]:
        return [
            a.label + separator + a.name + (describe.format(a.description) if a.description else "")
            for a in q.alternatives
        ]

    # --- answers ------------------------------------------------------------------------------------------
    def answer_value(self, answer: Any) -> float | None:
        """The answer as one number where the kind has one (P(yes), the expected level), else None."""
        return None

    def to_jev(self, answer: Any, q: Question) -> dict[str, Any]:
        """vLLM's `/v1/systemone` answer shape."""
        raise NotImplementedError

    def jev_probabilities(self, q: Question, shape: Mapping[str, Any]) -> list[float]:
        """The distribution, in answer order, from a `/v1/systemone` answer shape."""
        return [float(shape["probabilities"][name]) for name in q.names]

    def human_value(self, q: Question, value: Any, text: str = "") -> str:
        """What a person answered, checked and as stored; ValueError names the answers it may be."""
        if not isinstance(value, str) or value not in q.names:
            raise ValueError(f"{value!r} is not an answer to {q.id}; answers: {', '.join(q.names)}")
        return value

    def export_categories(self, q: Question) -> list[str] | None:
        """The answer names, where an export may store them as categories; None for free values."""
        return list(q.names)


class YesNo(QuestionType):
    name = "yes_no"
    aliases = ("noul", "bool", "boolean")
    jev_type = "noul"
    reply_instruction = "Answer with yes or no only."
    fields = frozenset({"criteria"})

    def parse(self, qid, spec, written, jev_form):
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
            Alternative("yes", "yes", optional_text(criteria.get("true"), "criteria", qid) or None),
            Alternative("no", "no", optional_text(criteria.get("false"), "criteria", qid) or None),
        )
        return Question(qid, self.name, "", alternatives)

    def _criteria(self, q: Question) -> dict[str, Any]:
        yes, no = q.alternatives
        return (
            {"criteria": {"true": yes.description, "false": no.description}}
            if yes.description or no.description
            else {}
        )

    def to_dict(self, q):
        return self._criteria(q)

    def to_jev_spec(self, q):
        return {**super().to_jev_spec(q), **self._criteria(q)}

    def option_lines(self, q, separator=": ", describe=" ({})"):
        return [a.label + (separator + a.description if a.description else "") for a in q.alternatives]

    def answer_value(self, answer):
        return answer.probabilities["yes"]

    def to_jev(self, answer, q):
        return {
            "type": "noul",
            "noul": answer.probabilities["yes"],
            "probabilities": {"yes": answer.probabilities["yes"], "no": answer.probabilities["no"]},
            "confidence": answer.full_vocab_confidence,
        }


class _Listed(QuestionType):
    """A kind whose answers are listed by name: options or levels."""

    def parse(self, qid, spec, written, jev_form):
        name_field = self.answers_field
        wrong = "levels" if name_field == "options" else "options"
        if wrong in spec:
            raise SchemaError(
                f"a {self.name} question lists its answers in '{name_field}', not '{wrong}'", question=qid, field=wrong
            )
        if name_field in spec and "criteria" in spec:
            raise SchemaError(
                f"give the answers once, in '{name_field}' or in 'criteria'", question=qid, field="criteria"
            )
        if name_field in spec or "criteria" in spec:
            field_used = name_field if name_field in spec else "criteria"
        else:  # nothing given: the field this form would have it in
            field_used = "criteria" if jev_form else name_field
        named = self._alternatives(qid, field_used, spec.get(field_used))
        labels = self.labels_for(len(named))
        alternatives = tuple(Alternative(name, label, desc) for (name, desc), label in zip(named, labels))
        return Question(qid, self.name, "", alternatives)

    def labels_for(self, n: int) -> tuple[str, ...]:
        """Single-token labels, as upstream: letters A, B, C, ..."""
        return LETTERS[:n]

    def _alternatives(self, qid: str, field_name: str, raw: Any) -> list[tuple[str, str | None]]:
        what = self.answer_word
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
                f"a {self.name} question needs at least 2 {what}s; it has {len(out)}", question=qid, field=field_name
            )
        if len(out) > MAX_ALTERNATIVES:
            raise SchemaError(
                f"a {self.name} question allows at most {MAX_ALTERNATIVES} {what}s; it has {len(out)}. "
                "Split it into two questions",
                question=qid,
                field=field_name,
            )
        return out

    def to_dict(self, q):
        return {
            self.answers_field: [
                {"name": a.name, "description": a.description} if a.description else a.name for a in q.alternatives
            ]
        }


class Choice(_Listed):
    name = "choice"
    jev_type = "choice"
    answers_field = "options"
    answer_word = "option"
    reply_instruction = "Answer with the letter of one option only."
    fields = frozenset({"options", "criteria"})

    def to_jev_spec(self, q):
        return {**super().to_jev_spec(q), "criteria": {a.name: a.description for a in q.alternatives}}

    def to_jev(self, answer, q):
        return {
            "type": "choice",
            "choice": answer.answer,
            "probabilities": dict(answer.probabilities),
            "confidence": answer.full_vocab_confidence,
        }


class Score(_Listed):
    name = "score"
    jev_type = "score"
    ordinal = True
    answers_field = "levels"
    answer_word = "level"
    reply_instruction = "Answer with the number of one level only."
    fields = frozenset({"levels", "criteria"})

    def labels_for(self, n):
        """Digits 0..9 (0-indexed, so a label is its score); more than ten levels fall back to letters."""
        return DIGITS[:n] if n <= len(DIGITS) else LETTERS[:n]

    def to_jev_spec(self, q):
        return {**super().to_jev_spec(q), "criteria": list(q.names)}

    def check_jev(self, q):
        if len(q.alternatives) > UPSTREAM_SCORE_LEVELS:
            raise SchemaError(
                f"the Jev API allows at most {UPSTREAM_SCORE_LEVELS} score levels", question=q.id, field="levels"
            )

    def answer_value(self, answer):
        return sum(i * p for i, p in enumerate(answer.probabilities.values()))

    def to_jev(self, answer, q):
        probs = list(answer.probabilities.values())
        return {
            "type": "score",
            "score": self.answer_value(answer),
            "legend": {str(i): name for i, name in enumerate(q.names)},
            "probabilities": {str(i): p for i, p in enumerate(probs)},
            "confidence": answer.full_vocab_confidence,
        }

    def jev_probabilities(self, q, shape):
        # keyed by level index, named through `legend`
        return [float(shape["probabilities"][str(i)]) for i in range(len(q.alternatives))]


QUESTION_TYPES: dict[str, QuestionType] = {}


def register(question_type: QuestionType) -> QuestionType:
    """Add a kind to the registry under its name and aliases."""
    QUESTION_TYPES[question_type.name] = question_type
    return question_type


for _type in (YesNo(), Choice(), Score()):
    register(_type)


def question_type(name: str) -> QuestionType | None:
    """The type a question's `type` field names (its canonical name or an alias); None if there is none."""
    if not isinstance(name, str):
        return None
    found = QUESTION_TYPES.get(name)
    if found is not None:
        return found
    return next((t for t in QUESTION_TYPES.values() if name in t.aliases), None)


def kind_names() -> tuple[str, ...]:
    return tuple(QUESTION_TYPES)
