"""Annotating: the next item from a queue (held by a lease), answers, skips and undo.

Queues, for one question:
- `in_order`: unlabeled items in import order;
- `least_confidence`, `margin`, `entropy`: the model's least sure first (lowest top probability;
  smallest gap between the top two answers; highest entropy);
- `blind`: a random open item with the suggestion hidden, so answers there measure the model's
  calibration without the pull of its suggestion.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from diffjev.schema import Question, Schema
from diffjev.storage import repo
from diffjev.storage.db import Database
from diffjev.storage.models import Event, Item, Response, Suggestion, utcnow

STRATEGIES = ("in_order", "least_confidence", "margin", "entropy", "blind")
LEASE = timedelta(minutes=10)


@dataclass(frozen=True)
class Card:
    """One item and one question, as an annotator sees them."""

    project_id: int
    item_id: int
    external_id: str | None
    text: str
    fields: dict[str, Any]
    question: Question
    question_row: int
    suggestion: dict[str, Any] | None  # id, answer, distribution, confidence, stderr, draws; None when hidden
    blind: bool
    revision: int | None  # the annotator's stored answer's revision, for the stale-write guard
    current: str | None  # the annotator's stored answer, if any


def project_schema(db: Database, project_name: str) -> tuple[int, Schema, dict[str, int], int | None]:
    """(project id, schema, question rows, latest run id) of a project."""
    with db.read() as session:
        project = repo.get_project(session, project_name)
        schema, rows = repo.version_schema(repo.latest_version(session, project.id))
        run = repo.latest_run(session, project.id)
        return project.id, schema, rows, run.id if run else None


def next_card(db: Database, project_name: str, question_key: str, strategy: str, annotator: str,
              skip_item: int | None = None) -> Card | None:
    """Lease and return the next item for this annotator, or None when the queue is empty."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown queue {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    project_id, schema, rows, run_id = project_schema(db, project_name)
    question = schema.question(question_key)
    row = rows[question_key]

    def pick(session) -> int | None:
        now = utcnow()
        exclude = repo.leased_by_others(session, row, annotator, now)
        if skip_item is not None:
            exclude.append(skip_item)
        if run_id is None:
            item_id = repo.next_unlabeled_item(session, project_id, row, exclude)
        elif strategy == "blind":
            span = repo.item_id_range(session, project_id)
            start = random.randint(*span) if span else None
            item_id = repo.next_in_queue(session, run_id, row, "in_order", exclude, start_at=start)
        else:
            item_id = repo.next_in_queue(session, run_id, row, strategy, exclude)
        if item_id is not None:
            repo.take_lease(session, item_id, row, annotator, now + LEASE)
        return item_id

    item_id = db.write(pick)
    if item_id is None:
        return None
    return load_card(db, project_id, item_id, question, row, run_id, annotator, blind=strategy == "blind")


def load_card(db: Database, project_id: int, item_id: int, question: Question, row: int, run_id: int | None,
              annotator: str, blind: bool = False) -> Card:
    with db.read() as session:
        item = session.get(Item, item_id)
        suggestion = None
        if run_id is not None and not blind:
            s = session.scalar(select(Suggestion).where(Suggestion.run_id == run_id, Suggestion.item_id == item_id,
                                                        Suggestion.question_id == row))
            if s is not None:
                suggestion = {"id": s.id, "answer": s.answer, "distribution": dict(s.distribution),
                              "confidence": s.confidence, "stderr": s.stderr, "draws": s.draws}
        mine = session.scalar(select(Response).where(Response.item_id == item_id, Response.question_id == row,
                                                     Response.annotator == annotator))
        return Card(project_id, item.id, item.external_id, item.text, dict(item.fields), question, row, suggestion,
                    blind, mine.revision if mine else None, mine.value if mine else None)


def answer(db: Database, card: Card, annotator: str, value: str | None, seconds: float | None,
           status: str = "submitted") -> int:
    """Store the annotator's answer to a card: accepted (the suggestion's answer), corrected (another
    answer to a shown suggestion) or manual (no suggestion shown); or a skip. Returns the response id."""
    if value is not None and value not in card.question.names:
        raise ValueError(f"{value!r} is not an answer to {card.question.id}; answers: {', '.join(card.question.names)}")
    shown = card.suggestion is not None
    if status == "skipped":
        source = "manual"
    elif shown and value == card.suggestion["answer"]:
        source = "accepted"
    elif shown:
        source = "corrected"
    else:
        source = "manual"

    def work(session) -> int:
        response = repo.respond(session, repo.ResponseInput(
            card.item_id, card.question_row, annotator, value, source, status,
            suggestion_id=card.suggestion["id"] if shown else None, suggestion_shown=shown, seconds=seconds),
            expected_revision=card.revision)
        repo.release_lease(session, card.item_id, card.question_row, annotator)
        return response.id

    return db.write(work)


def undo_last(db: Database, project_id: int, annotator: str) -> tuple[int, int] | None:
    """Take back the annotator's last answer still standing; returns its (item id, question row)."""

    def work(session) -> tuple[int, int] | None:
        undone = {e.payload.get("undoes") for e in session.scalars(
            select(Event).where(Event.project_id == project_id, Event.actor == annotator,
                                Event.kind == "response.undone"))}
        for event in session.scalars(select(Event).where(
                Event.project_id == project_id, Event.actor == annotator,
                Event.kind.in_(("response.submitted", "response.skipped"))).order_by(Event.id.desc()).limit(200)):
            if event.id in undone:
                continue
            response = session.get(Response, event.payload["response_id"])
            before = event.payload.get("before")
            if response is not None:
                if before is None:
                    session.delete(response)
                else:
                    response.value, response.status, response.source = before["value"], before["status"], \
                        before["source"]
                    response.revision += 1
                session.flush()
            repo.refresh_open(session, event.item_id, event.question_id)
            repo.log(session, annotator, "response.undone", project_id, event.item_id, event.question_id,
                     undoes=event.id)
            return event.item_id, event.question_id
        return None

    return db.write(work)


def progress(db: Database, project_id: int, question_row: int) -> tuple[int, int]:
    """(items with an answer to this question, items in the project)."""
    with db.read() as session:
        return repo.answered_count(session, question_row), repo.count_items(session, project_id)
