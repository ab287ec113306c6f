"""Many projects in one studio: the list a user may open, a new project from a form or JSON, archive and
delete, who reviews and who annotates, and which annotator is given which questions or share of items.

Every function that changes a project takes the acting user; the page checks first that they may
(`Scope.require_admin` / `require_reviewer`), and the repository writes the audit event with the change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from diffjev.errors import SchemaError
from diffjev.question_types import QUESTION_TYPES
from diffjev.schema import Schema
from storage import repo
from storage.db import Database

FORM_COLUMNS = ("id", "type", "instructions", "options or levels")


class ProjectInputError(ValueError):
    """Input a person can fix; the message names the field (and the question's row) and the fix."""


@dataclass(frozen=True)
class ProjectSummary:
    name: str
    items: int
    answered: int
    last_activity: datetime
    archived: bool

    @property
    def answered_share(self) -> float:
        return self.answered / self.items if self.items else 0.0

    def label(self) -> str:
        """One line for the picker: name · items · answered share · last activity."""
        archived = " (archived)" if self.archived else ""
        when = self.last_activity.strftime("%Y-%m-%d %H:%M")
        return f"{self.name}{archived} · {self.items} items · {self.answered_share:.0%} answered · {when}"


def may_open(row: repo.ProjectRow, user: str, admin: bool) -> bool:
    """Whether the user has a role in the project, by the scope's own rule (admins: every project; others:
    an open project, or one naming them as a member or reviewer); archiving is the list's filter."""
    return repo.role_in(user, admin, row.members, row.reviewers, None) is not None


def project_list(db: Database, user: str, admin: bool, include_archived: bool = False) -> list[ProjectSummary]:
    """The projects `user` may open, by name; archived ones only for an admin who asks for them."""
    with db.read() as session:
        rows = repo.project_rows(session)
    return [
        ProjectSummary(row.name, row.items, row.answered, row.last_activity, row.archived)
        for row in rows
        if may_open(row, user, admin) and (not row.archived or (admin and include_archived))
    ]


# New project ----------------------------------------------------------------------------------------------


def form_question(row_number: int, row: list[Any]) -> dict[str, Any] | None:
    """One row of the question form as a schema question; None for a row left empty. Options or levels are
    one per line (or separated by ';'), each `name` or `name: description`."""
    cells = [("" if cell is None else str(cell)).strip() for cell in list(row) + [""] * len(FORM_COLUMNS)]
    qid, kind, instructions, answers = cells[: len(FORM_COLUMNS)]
    if not any((qid, kind, instructions, answers)):
        return None
    where = f"question row {row_number}"
    if not qid:
        raise ProjectInputError(f"{where}, id: give the question an id (letters, digits, '_'), such as 'urgent'")
    if kind not in QUESTION_TYPES:
        raise ProjectInputError(f"{where}, type: {kind or 'empty'!r}; choose one of {', '.join(QUESTION_TYPES)}")
    question: dict[str, Any] = {"id": qid, "type": kind, "instructions": instructions}
    names = [part.strip() for line in answers.splitlines() for part in line.split(";") if part.strip()]
    key = QUESTION_TYPES[kind].answers_field
    if key is None:
        if names:
            raise ProjectInputError(f"{where}, options or levels: a {kind} question has none; leave it empty")
        return question
    if not names:
        raise ProjectInputError(f"{where}, options or levels: a {kind} question needs its {key}, one per line")
    answers_of: list[dict[str, str]] = []
    for entry in names:
        name, _, description = entry.partition(":")
        answers_of.append(
            {"name": name.strip(), **({"description": description.strip()} if description.strip() else {})}
        )
    question[key] = answers_of
    return question


def schema_from_form(instructions: str, rows: list[list[Any]], template: str = "") -> Schema:
    questions = [q for n, row in enumerate(rows, start=1) if (q := form_question(n, row)) is not None]
    if not questions:
        raise ProjectInputError("questions: add at least one question (id, type, instructions)")
    data: dict[str, Any] = {"questions": questions}
    if instructions and instructions.strip():
        data["instructions"] = instructions.strip()
    return _schema(data, template)


# What the JSON editor starts from when the form holds no question yet: a schema to edit, not a blank.
EXAMPLE_SCHEMA = {
    "questions": [
        {"id": "urgent", "type": "yes_no", "instructions": "Does the customer need a reply within the hour?"},
        {
            "id": "team",
            "type": "choice",
            "instructions": "Which team should handle it?",
            "options": [{"name": "billing"}, {"name": "technical", "description": "bugs, outages"}],
        },
    ]
}


def form_as_json(rows: list[list[Any]]) -> str:
    """The question form's rows as the schema JSON the editor takes, so switching from the form to JSON
    keeps them; the example schema where the form holds no question that reads."""
    try:
        questions = [q for n, row in enumerate(rows, start=1) if (q := form_question(n, row)) is not None]
    except ProjectInputError:
        questions = []
    return json.dumps({"questions": questions} if questions else EXAMPLE_SCHEMA, indent=2, ensure_ascii=False)


def schema_from_json(text: str, instructions: str = "", template: str = "") -> Schema:
    try:
        data = json.loads(text or "")
    except ValueError as exc:
        raise ProjectInputError(f"schema JSON: not valid JSON ({exc}); paste an object with a 'questions' list")
    if not isinstance(data, dict):
        raise ProjectInputError("schema JSON: give an object with a 'questions' list")
    if instructions and instructions.strip() and "instructions" not in data:
        data["instructions"] = instructions.strip()
    return _schema(data, template)


def _schema(data: dict[str, Any], template: str) -> Schema:
    if template and template.strip():
        data = {**data, "template": template}
    try:
        return Schema.from_dict(data)
    except SchemaError as exc:
        raise ProjectInputError(f"questions: {exc}") from None


def create_project(db: Database, name: str, schema: Schema, actor: str, text_field: str = "text") -> str:
    """A new, empty project whose items' text comes from the column `text_field`; its name as stored. A
    taken or unusable name, or no text column, is a ProjectInputError."""
    name, text_field = (name or "").strip(), (text_field or "").strip()
    if not name:
        raise ProjectInputError("name: give the project a name (letters, digits, spaces, '.', '_' or '-')")
    if not text_field:
        raise ProjectInputError("text column: name the column of your files that holds each item's text, e.g. text")
    try:
        with db.session() as session:
            repo.create_project(session, name, schema, actor, text_field=text_field)
    except repo.Conflict as exc:
        raise ProjectInputError(f"name: {exc}") from None
    return name


# Archive, delete, roles, assignments --------------------------------------------------------------------


def set_archived(db: Database, name: str, archived: bool, actor: str) -> None:
    with db.session() as session:
        repo.set_archived(session, name, archived, actor)


def delete_project(db: Database, name: str, typed_name: str, actor: str) -> dict[str, int]:
    """Remove the project and everything in it, once its name is typed back exactly."""
    if (typed_name or "").strip() != name:
        raise ProjectInputError(f"type the project's name, {name}, to delete it; nothing was deleted")
    with db.session() as session:
        return repo.delete_project(session, name, actor)


def user_list(text: str | None) -> list[str] | None:
    """Names separated by commas or lines; None when empty."""
    names = sorted({part.strip() for line in (text or "").splitlines() for part in line.split(",") if part.strip()})
    return names or None


def set_roles(db: Database, name: str, members: str, reviewers: str, actor: str) -> tuple[list | None, list | None]:
    """A project's members (empty: open to every user who can sign in) and reviewers (among the members;
    empty: none named, so every member runs the project, as before roles existed)."""
    with db.session() as session:
        stored_members = repo.set_members(session, name, user_list(members), actor)
        stored_reviewers = repo.set_reviewers(session, name, user_list(reviewers) or [], actor)
    return stored_members, stored_reviewers


def roles_of(db: Database, name: str) -> tuple[list | None, list | None, list | None]:
    """(members, reviewers, assignments) as stored."""
    with db.read() as session:
        project = repo.get_project(session, name)
        return project.members, project.reviewers, project.assignments


def set_assignments(db: Database, name: str, assignments_json: str, actor: str) -> list[dict[str, Any]] | None:
    """Assignments from their JSON (see `repo.check_assignments` for the shape); empty: none."""
    text = (assignments_json or "").strip()
    try:
        parsed = json.loads(text) if text else None
    except ValueError as exc:
        raise ProjectInputError(f"assignments: not valid JSON ({exc})") from None
    except RecursionError:
        raise ProjectInputError("assignments: nested too deeply; give a flat list of objects") from None
    try:
        with db.session() as session:
            return repo.set_assignments(session, name, parsed, actor)
    except repo.Conflict as exc:
        raise ProjectInputError(str(exc)) from None
