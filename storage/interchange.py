"""The queries behind moving a whole project in and out (diffjev.services.interchange): items with their
every answer and every run's suggestions, page by page, and the item ids an import's records map to."""

from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import and_, exists, insert, select, update
from sqlalchemy.orm import aliased
from sqlalchemy.orm import Session

from storage.models import Adjudication, Event, Item, ItemRead, Response, Run, Suggestion, utcnow


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


def suggestions_of_every_run(
    session: Session, item_ids: Sequence[int], question_ids: Sequence[int], run_id: int | None
) -> list[Suggestion]:
    """The suggestions of every run (or of `run_id`) for these items and questions, oldest run first."""
    query = select(Suggestion).where(Suggestion.item_id.in_(item_ids), Suggestion.question_id.in_(question_ids))
    if run_id is not None:
        query = query.where(Suggestion.run_id == run_id)
    return list(session.scalars(query.order_by(Suggestion.run_id, Suggestion.item_id, Suggestion.id)))


def read_notes(
    session: Session, item_ids: Sequence[int], run_id: int | None
) -> tuple[dict[tuple[int, int], dict], dict[tuple[int, int], list[str]]]:
    """What the reads of these items noted, by (run id, item id): {question key: why the read did not ask
    it} for the reads that skipped one, and the question keys an imported read holds without a score."""
    query = select(ItemRead.run_id, ItemRead.item_id, ItemRead.diagnostics).where(
        ItemRead.item_id.in_(item_ids), ItemRead.status == "ok"
    )
    if run_id is not None:
        query = query.where(ItemRead.run_id == run_id)
    skipped: dict[tuple[int, int], dict] = {}
    unscored: dict[tuple[int, int], list[str]] = {}
    for run, item, diagnostics in session.execute(query).tuples():
        if diagnostics and diagnostics.get("skipped"):
            skipped[run, item] = dict(diagnostics["skipped"])
        if diagnostics and diagnostics.get("unscored"):
            unscored[run, item] = list(diagnostics["unscored"])
    return skipped, unscored


def runs_of(session: Session, project_id: int, run_id: int | None = None) -> list[Run]:
    query = select(Run).where(Run.project_id == project_id)
    if run_id is not None:
        query = query.where(Run.id == run_id)
    return list(session.scalars(query.order_by(Run.id)))


def matching_run(
    session: Session, project_id: int, imported_as: str, own_id: int | None, engine: str, model: str, version: Any
) -> Run | None:
    """The project's run that a file's model run is: the run of this project it was exported from (`own_id`,
    with the same engine, model and version), else one an earlier import of the same model run made."""
    runs = list(session.scalars(select(Run).where(Run.project_id == project_id)))
    for run in runs:
        if run.id == own_id and (run.engine, run.model_name, run.model_version) == (engine, model, version):
            return run
    for run in runs:
        if (run.params or {}).get("imported_as") == imported_as:
            return run
    return None


def texts_of(session: Session, item_ids: Sequence[int]) -> dict[int, str]:
    return dict(session.execute(select(Item.id, Item.text).where(Item.id.in_(item_ids))).all()) if item_ids else {}


def stored_answers(
    session: Session, item_ids: Sequence[int], question_ids: Sequence[int]
) -> dict[tuple[int, int, str], tuple[Any, ...]]:
    """(item, question, annotator) -> (value, status, source, detail) of the stored responses."""
    if not item_ids:
        return {}
    rows = session.execute(
        select(
            Response.item_id,
            Response.question_id,
            Response.annotator,
            Response.value,
            Response.status,
            Response.source,
            Response.detail,
        ).where(Response.item_id.in_(item_ids), Response.question_id.in_(question_ids))
    ).all()
    return {(r[0], r[1], r[2]): tuple(r[3:]) for r in rows}


def stored_adjudications(
    session: Session, item_ids: Sequence[int], question_ids: Sequence[int]
) -> dict[tuple[int, int], tuple[Any, ...]]:
    """(item, question) -> (value, reviewer, comment) of the stored adjudications."""
    if not item_ids:
        return {}
    rows = session.execute(
        select(
            Adjudication.item_id,
            Adjudication.question_id,
            Adjudication.value,
            Adjudication.reviewer,
            Adjudication.comment,
        ).where(Adjudication.item_id.in_(item_ids), Adjudication.question_id.in_(question_ids))
    ).all()
    return {(r[0], r[1]): tuple(r[2:]) for r in rows}


def read_items(session: Session, run_id: int, item_ids: Sequence[int]) -> set[int]:
    """The items this run has read successfully already."""
    if not item_ids:
        return set()
    return set(
        session.scalars(
            select(ItemRead.item_id).where(
                ItemRead.run_id == run_id, ItemRead.item_id.in_(item_ids), ItemRead.status == "ok"
            )
        )
    )


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


def insert_new_responses(session: Session, project_id: int, answers: Sequence[Any]) -> None:
    """Store many people's answers at once, in the caller's transaction, each with its event as
    repo.respond writes them: for a project an import has just made, where no answer and no suggestion
    exists yet (so there is nothing to update, and no queue flag to keep). `answers` are
    repo.ResponseInput."""
    if not answers:
        return
    now = utcnow()
    rows = [
        {
            "item_id": a.item_id,
            "question_id": a.question_id,
            "annotator": a.annotator,
            "value": a.value,
            "source": a.source,
            "status": a.status,
            "suggestion_id": a.suggestion_id,
            "suggestion_shown": a.suggestion_shown,
            "seconds": a.seconds,
            "detail": a.detail,
            "revision": 1,
            "created_at": now,
            "updated_at": now,
        }
        for a in answers
    ]
    ids = session.scalars(insert(Response).returning(Response.id, sort_by_parameter_order=True), rows).all()
    session.execute(
        insert(Event),
        [
            {
                "actor": a.annotator,
                "kind": f"response.{a.status}",
                "project_id": project_id,
                "item_id": a.item_id,
                "question_id": a.question_id,
                "payload": {
                    "response_id": response_id,
                    "value": a.value,
                    "source": a.source,
                    "before": None,
                    "revision": 1,
                },
                "at": now,
            }
            for a, response_id in zip(answers, ids)
        ],
    )


ALIASES_EVENT = "project.annotator_aliases"


def annotator_aliases(session: Session, project_id: int) -> dict[str, str]:
    """Every other name an import has told of one person (Label Studio's "ls-user-<id>" -> their email),
    oldest first, so a later import under either name reaches the same answers."""
    found: dict[str, str] = {}
    payloads = session.scalars(
        select(Event.payload).where(Event.project_id == project_id, Event.kind == ALIASES_EVENT).order_by(Event.id)
    )
    for payload in payloads:
        found.update(payload.get("aliases") or {})
    return found


def rename_annotator(session: Session, project_id: int, old: str, new: str) -> None:
    """The project's answers stored under `old` carried under `new` (one person's other name); an answer
    `new` has already given to the same question of the same item stays, the other is left under `old`."""
    mine = aliased(Response)
    session.execute(
        update(Response)
        .where(
            Response.annotator == old,
            Response.item_id.in_(select(Item.id).where(Item.project_id == project_id)),
            ~exists().where(
                and_(mine.item_id == Response.item_id, mine.question_id == Response.question_id, mine.annotator == new)
            ),
        )
        .values(annotator=new)
        .execution_options(synchronize_session=False)
    )
