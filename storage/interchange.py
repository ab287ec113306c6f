"""The queries behind moving a whole project in and out (diffjev.services.interchange): items with their
every answer and every run's suggestions, page by page, and the item ids an import's records map to."""

from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.models import Item, ItemRead, Response, Run, Suggestion


def item_page(session: Session, project_id: int, after: int, limit: int) -> list[Any]:
    """(id, external_id, text, fields) of the project's items after `after`, in id order."""
    return list(
        session.execute(
            select(Item.id, Item.external_id, Item.text, Item.fields)
            .where(Item.project_id == project_id, Item.id > after)
            .order_by(Item.id)
            .limit(limit)
        ).tuples()
    )


def responses_of(session: Session, item_ids: Sequence[int], question_ids: Sequence[int]) -> list[Response]:
    """Every person's response to these items and questions, each annotator's in the order given."""
    return list(
        session.scalars(
            select(Response)
            .where(Response.item_id.in_(item_ids), Response.question_id.in_(question_ids))
            .order_by(Response.item_id, Response.created_at, Response.id)
        )
    )


def suggestions_of(
    session: Session, item_ids: Sequence[int], question_ids: Sequence[int], run_id: int | None
) -> list[Suggestion]:
    """The suggestions of every run (or of `run_id`) for these items and questions, oldest run first."""
    query = select(Suggestion).where(Suggestion.item_id.in_(item_ids), Suggestion.question_id.in_(question_ids))
    if run_id is not None:
        query = query.where(Suggestion.run_id == run_id)
    return list(session.scalars(query.order_by(Suggestion.run_id, Suggestion.item_id, Suggestion.id)))


def read_skips(session: Session, item_ids: Sequence[int], run_id: int | None) -> dict[tuple[int, int], dict]:
    """(run id, item id) -> {question key: why the read did not ask it}, for the reads that skipped one."""
    query = select(ItemRead.run_id, ItemRead.item_id, ItemRead.diagnostics).where(
        ItemRead.item_id.in_(item_ids), ItemRead.status == "ok"
    )
    if run_id is not None:
        query = query.where(ItemRead.run_id == run_id)
    return {
        (run, item): dict(diagnostics["skipped"])
        for run, item, diagnostics in session.execute(query).tuples()
        if diagnostics and diagnostics.get("skipped")
    }


def runs_of(session: Session, project_id: int, run_id: int | None = None) -> list[Run]:
    query = select(Run).where(Run.project_id == project_id)
    if run_id is not None:
        query = query.where(Run.id == run_id)
    return list(session.scalars(query.order_by(Run.id)))


def imported_run(session: Session, project_id: int, source_key: str) -> Run | None:
    """The run an earlier import of the same file made for the same model run, so a re-import adds to it."""
    for run in session.scalars(select(Run).where(Run.project_id == project_id)):
        if (run.params or {}).get("imported_as") == source_key:
            return run
    return None


def item_ids_by_key(
    session: Session, project_id: int, external_ids: Sequence[str], content_hashes: Sequence[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """The stored items these keys name: external id -> item id, and (items without one) hash -> item id."""
    by_id = (
        dict(
            session.execute(
                select(Item.external_id, Item.id).where(
                    Item.project_id == project_id, Item.external_id.in_(external_ids)
                )
            ).all()
        )
        if external_ids
        else {}
    )
    by_hash = (
        dict(
            session.execute(
                select(Item.content_hash, Item.id).where(
                    Item.project_id == project_id, Item.external_id.is_(None), Item.content_hash.in_(content_hashes)
                )
            ).all()
        )
        if content_hashes
        else {}
    )
    return by_id, by_hash
