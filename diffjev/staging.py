"""Staged questions: `depends_on`, `ask_if` and `alone`, checked across a schema's questions."""

from __future__ import annotations

from typing import Sequence

from diffjev.question_types import Question


def check_stages(questions: Sequence[Question]) -> None:
    """Raise SchemaError where the questions' staging does not fit together."""
