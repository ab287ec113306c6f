"""Queries on a project's items as a collection: imports and their undoing, the Items view's pages, one
item's whole record, and deleting items. Every query filters by the project, and every page has a LIMIT,
so the view stays fast on a project of a hundred thousand items and more."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence

from sqlalchemy import delete, exists, func, insert, select, update
from sqlalchemy.orm import Session

from storage import images as image_store
from storage.models import Import, Item, Question, Response, Run, Suggestion, utcnow

ANSWERED = "submitted"  # a skip or a draft is no answer: the item can go without losing anyone's work
COUNT_CAP = 10_000  # a page says "more than 10,000" rather than count a whole large project on each page


def create_import(
    session: Session, project_id: int, source: str, text_field: str, actor: str, id_field: str | None = None
) -> int:
    values = {"source": source[:500], "text_field": text_field[:200], "actor": actor[:200]}
    # a name the column cannot hold whole is not kept: an export would name the ids by a cut name
    values["id_field"] = id_field if id_field and len(id_field) <= 200 else None
    return session.execute(insert(Import).values(project_id=project_id, **values).returning(Import.id)).scalar_one()


def id_field_of(session: Session, project_id: int) -> str | None:
    """The column name the project's items' ids came under: the one id field its imports used, or None
    where they used none, or more than one."""
    names = session.scalars(
        select(Import.id_field).where(Import.project_id == project_id, Import.id_field.is_not(None)).distinct()
    ).all()
    return names[0] if len(names) == 1 else None


@dataclass(frozen=True)
class ImportSummary:
    id: int
    source: str
    text_field: str
    actor: str
    created_at: datetime
    items: int


def recent_imports(session: Session, project_id: int, limit: int = 20) -> list[ImportSummary]:
    """The project's latest imports not undone that created items, newest first, with how many each created.
    An import that stored nothing new (the same file again) has nothing to undo."""
    created = (
        select(func.count()).select_from(Item).where(Item.import_id == Import.id).correlate(Import).scalar_subquery()
    )
    rows = session.execute(
        select(Import, created)
        .where(Import.project_id == project_id, Import.undone_at.is_(None), created > 0)
        .order_by(Import.id.desc())
        .limit(limit)
    )
    return [ImportSummary(i.id, i.source, i.text_field, i.actor, i.created_at, n) for i, n in rows]


def get_import(session: Session, project_id: int, import_id: int) -> Import | None:
    found = session.get(Import, import_id) if isinstance(import_id, int) and 0 < import_id < 2**63 else None
    return found if found is not None and found.project_id == project_id else None


def import_item_counts(session: Session, project_id: int, import_id: int) -> tuple[int, int]:
    """(items the import created, those among them with an answer)."""
    items = select(Item.id).where(Item.project_id == project_id, Item.import_id == import_id)
    total = session.scalar(select(func.count()).select_from(items.subquery())) or 0
    answered = session.scalar(select(func.count()).select_from(items.where(_is_answered()).subquery())) or 0
    return total, answered


def undo_import(session: Session, project_id: int, import_id: int) -> int:
    """Remove the items an import created (their suggestions, reads and leases go with them); returns how many."""
    removed = _delete_items_and_their_images(session, project_id, Item.import_id == import_id)
    session.execute(update(Import).where(Import.id == import_id).values(undone_at=utcnow()))
    return removed


def _is_answered():
    return exists().where(Response.item_id == Item.id, Response.status == ANSWERED)


# The Items view -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ItemRow:
    id: int
    external_id: str | None
    text: str
    answers: int


def _filtered(project_id: int, search: str, answered: bool | None):
    query = select(Item).where(Item.project_id == project_id)
    if search:
        query = query.where(Item.text.icontains(search, autoescape=True) | (Item.external_id == search))
    if answered is not None:
        query = query.where(_is_answered() if answered else ~_is_answered())
    return query


def item_page(
    session: Session, project_id: int, search: str, answered: bool | None, offset: int, limit: int
) -> tuple[list[ItemRow], int]:
    """One page of items in import order, and how many match (at most COUNT_CAP + 1: "more than")."""
    answers = (
        select(func.count())
        .select_from(Response)
        .where(Response.item_id == Item.id, Response.status == ANSWERED)
        .correlate(Item)
        .scalar_subquery()
    )
    query = _filtered(project_id, search, answered)
    page = session.execute(
        query.with_only_columns(Item.id, Item.external_id, func.substr(Item.text, 1, 200), answers)
        .order_by(Item.id)
        .offset(offset)
        .limit(limit)
    )
    rows = [ItemRow(*row) for row in page]
    capped = query.with_only_columns(Item.id).limit(COUNT_CAP + 1).subquery()
    return rows, session.scalar(select(func.count()).select_from(capped)) or 0


def find_item(session: Session, project_id: int, key: str) -> Item | None:
    """An item by its own id (as imported), else by its number in the Items table."""
    item = session.scalar(select(Item).where(Item.project_id == project_id, Item.external_id == key))
    if item is None and key.isdigit() and 0 < int(key) < 2**63:
        item = session.scalar(select(Item).where(Item.project_id == project_id, Item.id == int(key)))
    return item


def item_answers(session: Session, item_id: int) -> list[dict[str, Any]]:
    rows = session.execute(
        select(Question.key, Response.annotator, Response.value, Response.status, Response.source, Response.updated_at)
        .join(Question, Question.id == Response.question_id)
        .where(Response.item_id == item_id)
        .order_by(Question.key, Response.annotator)
    )
    names = ("question", "annotator", "answer", "status", "source", "at")
    return [dict(zip(names, row)) for row in rows]


def item_suggestions(session: Session, item_id: int) -> list[dict[str, Any]]:
    rows = session.execute(
        select(Suggestion.run_id, Run.model_name, Question.key, Suggestion.answer, Suggestion.confidence)
        .join(Question, Question.id == Suggestion.question_id)
        .join(Run, Run.id == Suggestion.run_id)
        .where(Suggestion.item_id == item_id)
        .order_by(Suggestion.run_id.desc(), Question.key)
    )
    names = ("run", "model", "question", "suggestion", "confidence")
    return [dict(zip(names, row)) for row in rows]


def project_items(session: Session, project_id: int, ids: Sequence[int]) -> list[int]:
    """Which of these item numbers are this project's (another project's number is simply not found)."""
    wanted = [i for i in ids if 0 < i < 2**63]
    if not wanted:
        return []
    return list(session.scalars(select(Item.id).where(Item.project_id == project_id, Item.id.in_(wanted))))


def answered_counts(session: Session, item_ids: Sequence[int]) -> tuple[int, int]:
    """(items among these with an answer, their answers)."""
    if not item_ids:
        return 0, 0
    answers = select(Response.item_id).where(Response.item_id.in_(item_ids), Response.status == ANSWERED)
    items = session.scalar(select(func.count(func.distinct(answers.subquery().c.item_id)))) or 0
    total = session.scalar(select(func.count()).select_from(answers.subquery())) or 0
    return items, total


def delete_items(session: Session, project_id: int, item_ids: Sequence[int]) -> int:
    """Delete items with everything attached to them (answers, suggestions, reads, leases); returns how many."""
    if not item_ids:
        return 0
    return _delete_items_and_their_images(session, project_id, Item.id.in_(item_ids))


def _delete_items_and_their_images(session: Session, project_id: int, which: Any) -> int:
    """Delete the project's items `which` chooses, and the images no item of the project shows after."""
    keys = image_store.image_keys_of(session, project_id, which)
    removed = session.execute(delete(Item).where(Item.project_id == project_id, which)).rowcount
    image_store.drop_unshown_images(session, project_id, keys)
    return removed
