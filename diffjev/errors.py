"""The one error type for a schema or template that cannot be used."""

from __future__ import annotations


class SchemaError(ValueError):
    """A schema, question or template that cannot be read. The message says where and how to fix it."""

    def __init__(self, message: str, *, question: str | None = None, field: str | None = None):
        self.question = question
        self.field = field
        where = []
        if question is not None:
            where.append(f"question {question!r}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
