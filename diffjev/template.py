"""The response template: the text the model's answer must look like, with one `{question_id}` slot per
question. Literal braces are written `{{` and `}}`, as in Python's str.format."""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Iterable, Mapping

from diffjev.errors import SchemaError


def _error(message: str, question: str | None = None) -> SchemaError:
    return SchemaError(message, question=question, field="template")


@dataclass(frozen=True)
class Template:
    text: str
    # The literal text before each slot, the slot's question id, and the text after the last slot.
    parts: tuple[tuple[str, str], ...]
    tail: str

    @classmethod
    def parse(cls, text: str) -> "Template":
        if not isinstance(text, str) or not text.strip():
            raise _error("the template is empty; write the reply with one {question_id} slot per question")
        parts: list[tuple[str, str]] = []
        tail = ""
        seen: set[str] = set()
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise _error(f"{exc}; write a literal brace as '{{{{' or '}}}}'") from None
        for literal, name, spec, conversion in parsed:
            if name is None:
                tail += literal
                continue
            if not name:
                raise _error("a slot '{}' has no question id; write e.g. {urgent}")
            if spec or conversion:
                raise _error(f"slot {{{name}}} has a format suffix; a slot is just the question id", question=name)
            if name in seen:
                raise _error("this slot appears twice; each question fills exactly one slot", question=name)
            seen.add(name)
            parts.append((tail + literal, name))
            tail = ""
        if not parts:
            raise _error("the template has no {question_id} slot")
        return cls(text, tuple(parts), tail)

    @classmethod
    def default(cls, question_ids: Iterable[str]) -> "Template":
        """One `id: {id}` line per question."""
        ids = list(question_ids)
        return cls.parse("\n".join(f"{_escape(q)}: {{{q}}}" for q in ids))

    @property
    def slots(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.parts)

    def is_default_for(self, question_ids: Iterable[str]) -> bool:
        return self == Template.default(question_ids)

    def check_against(self, question_ids: Iterable[str]) -> None:
        ids = list(question_ids)
        for slot in self.slots:
            if slot not in ids:
                raise _error(
                    f"the template has a slot {{{slot}}} but no question has that id; "
                    f"the questions are {', '.join(ids)}",
                    question=slot,
                )
        for qid in ids:
            if qid not in self.slots:
                raise _error(
                    f"this question has no slot in the template; add {{{qid}}} where its answer goes", question=qid
                )

    def render(self, fill: Mapping[str, str]) -> str:
        """The reply text with each slot replaced by `fill[question_id]`."""
        return "".join(lead + fill[name] for lead, name in self.parts) + self.tail

    def display(self) -> str:
        """The template as shown to the model in the prompt, slots written as <question_id>."""
        return self.render({name: f"<{name}>" for name in self.slots})


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")
