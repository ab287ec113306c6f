"""Annotating: the next item from a queue (held by a lease), answers, skips and undo.

Queues, for one question (see `diffjev.active` for what each measure is for):
- `in_order`: unlabeled items in import order;
- `least_confidence`, `margin`, `entropy`: the model's least sure first (lowest top probability;
  smallest gap between the top two answers; highest entropy);
- `stderr`: the items whose top probability moved most across noise draws;
- `diverse`: the least confident, spread across clusters of the item texts, so one near-duplicate
  template cannot fill the queue;
- `run_disagreement`: items the run (the picked one, else the latest that read anything) and the one
  before it answer differently;
- `second_opinion`: items another annotator answered differently from the model, for a second human;
- `overlap`: the double-annotation share ($DIFFJEV_OVERLAP percent of items, default 10) answered once by
  someone else, for annotator agreement;
- `changed`: answered items whose suggestion changed in the run (as above) since the human saw it;
- `blind`: a random open item with the suggestion hidden, so answers there measure the model's
  calibration without the pull of its suggestion.

Unless a run is picked, a queue reads each item's current suggestion: the one from the latest run that
read the item. A refused or failed run, or one still reading, never empties a queue or hides the
suggestions already there.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from diffjev import active
from diffjev import calibration as cal
from diffjev.schema import Question, Schema
from diffjev.storage import repo
from diffjev.storage.db import Database
from diffjev.storage.models import Event, Response, Suggestion, utcnow

STRATEGIES = (
    "in_order",
    "least_confidence",
    "margin",
    "entropy",
    "stderr",
    "diverse",
    "run_disagreement",
    "second_opinion",
    "overlap",
    "changed",
    "blind",
)
DIVERSE_CANDIDATES = 200  # the least confident open items the diverse queue spreads over
DIVERSE_CLUSTERS = 8
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
    """(project id, schema, question rows, id of the latest run that read anything) of a project."""
    with db.read() as session:
        project = repo.get_project(session, project_name)
        schema, rows = repo.version_schema(repo.latest_version(session, project.id))
        run = repo.latest_read_run(session, project.id)
        return project.id, schema, rows, run.id if run else None


def project_question(schema: Schema, key: str) -> Question:
    """A question of the project's schema by id; any other id is not found, with the ids there are."""
    try:
        return schema.question(key)
    except KeyError:
        raise repo.NotFound(
            f"no question {key!r} in this project; its questions: {', '.join(q.id for q in schema.questions)}"
        ) from None


def next_card(
    db: Database,
    project_name: str,
    question_key: str,
    strategy: str,
    annotator: str,
    skip_item: int | None = None,
    run: int | None = None,
) -> Card | None:
    """Lease and return the next item for this annotator, or None when the queue is empty. With `run`, the
    queue reads that run's suggestions; without, each item's current one."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown queue {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    project_id, schema, rows, latest = project_schema(db, project_name)
    if run is not None:
        with db.read() as session:
            repo.get_run(session, run, project_id)  # another project's run is not found
    compared = run if run is not None else latest  # the run the run-comparing queues start from
    run_id = run  # None: each item's current suggestion
    question = project_question(schema, question_key)
    row = rows[question_key]
    claimed_by_others: list[int] = []  # picked, but another annotator's claim on it won

    def pick(session) -> int | None:
        now = utcnow()
        exclude = repo.leased_by_others(session, row, annotator, now) + claimed_by_others
        if skip_item is not None:
            exclude.append(skip_item)
        if compared is None:  # no run has read anything: items in order
            item_id = repo.next_unlabeled_item(session, project_id, row, exclude)
        elif strategy == "blind":
            span = repo.item_id_range(session, project_id)
            start = random.randint(*span) if span else None
            item_id = repo.next_in_queue(session, run_id, row, "in_order", exclude, start_at=start)
        elif strategy == "diverse":
            item_id = _diverse_pick(session, run_id, row, annotator, exclude)
        elif strategy == "run_disagreement":
            other = repo.previous_run(session, project_id, compared)
            item_id = None if other is None else repo.next_run_disagreement(session, compared, other, row, exclude)
        elif strategy == "second_opinion":
            item_id = repo.next_human_disagreement(session, run_id, row, annotator, exclude)
        elif strategy == "overlap":
            item_id = repo.next_overlap(session, project_id, row, annotator, overlap_percent(), exclude)
        elif strategy == "changed":
            since = repo.get_run(session, compared, project_id).started_at
            item_id = repo.next_changed_since_seen(session, compared, row, since, exclude)
        else:
            item_id = repo.next_in_queue(session, run_id, row, strategy, exclude)
        return item_id

    def claim(session) -> int | None:
        # On PostgreSQL another annotator can claim (and even answer) the picked item between the pick
        # and the lease; the lease refuses then, and the queue is asked again without that item.
        while True:
            picked_at = utcnow()
            item_id = pick(session)
            if item_id is None or repo.take_lease(session, item_id, row, annotator, utcnow() + LEASE, picked_at):
                return item_id
            claimed_by_others.append(item_id)

    item_id = db.write(claim)
    if item_id is None:
        return None
    shown_run = compared if strategy in ("run_disagreement", "changed") else run_id
    return load_card(db, project_id, item_id, question, row, shown_run, annotator, blind=strategy == "blind")


def overlap_percent() -> int:
    """The share of items that go to two annotators, in percent ($DIFFJEV_OVERLAP, default 10)."""
    raw = os.environ.get("DIFFJEV_OVERLAP", "10")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"DIFFJEV_OVERLAP must be a whole percentage from 0 to 100, not {raw!r}") from None
    return max(0, min(100, value))


def _diverse_pick(session, run_id: int, row: int, annotator: str, exclude: list[int]) -> int | None:
    """The most uncertain candidate from a cluster this annotator has not seen in their last answers."""
    candidates = repo.open_candidates(session, run_id, row, "least_confidence", exclude, DIVERSE_CANDIDATES)
    if not candidates:
        return None
    recent = repo.recent_texts(session, row, annotator, DIVERSE_CLUSTERS - 1)
    clusters = active.cluster_texts([text for _, text in candidates] + recent, DIVERSE_CLUSTERS)
    seen = set(clusters[len(candidates) :])
    fresh = [item_id for (item_id, _), c in zip(candidates, clusters) if c not in seen]
    return fresh[0] if fresh else candidates[0][0]


def load_card(
    db: Database,
    project_id: int,
    item_id: int,
    question: Question,
    row: int,
    run_id: int | None,
    annotator: str,
    blind: bool = False,
) -> Card:
    """The card of one item; the suggestion shown is run `run_id`'s, or (None) the item's current one."""
    with db.read() as session:
        item = repo.project_item(session, project_id, item_id)
        suggestion = None
        if not blind:
            of_run = Suggestion.run_id == run_id if run_id is not None else Suggestion.is_current
            s = session.scalar(
                select(Suggestion).where(of_run, Suggestion.item_id == item_id, Suggestion.question_id == row)
            )
            if s is not None:
                suggestion = {
                    "id": s.id,
                    "answer": s.answer,
                    "distribution": dict(s.distribution),
                    "confidence": s.confidence,
                    "stderr": s.stderr,
                    "draws": s.draws,
                    "run": s.run_id,
                    "calibrated": calibrated_confidence(session, s.run_id, row, s.distribution, question),
                }
        mine = session.scalar(
            select(Response).where(
                Response.item_id == item_id, Response.question_id == row, Response.annotator == annotator
            )
        )
        return Card(
            project_id,
            item.id,
            item.external_id,
            item.text,
            dict(item.fields),
            question,
            row,
            suggestion,
            blind,
            mine.revision if mine else None,
            mine.value if mine else None,
        )


def calibrated_confidence(session, run_id: int, row: int, distribution: dict, question: Question) -> float | None:
    """The top answer's probability under the temperature kept for this run and question, if any."""
    temperature = repo.kept_temperature(session, run_id, row)
    if temperature is None:
        return None
    scaled = cal.scale([[distribution.get(n, 0.0) for n in question.names]], temperature)[0]
    return float(scaled.max())


def answer(
    db: Database, card: Card, annotator: str, value: str | None, seconds: float | None, status: str = "submitted"
) -> int:
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
        response = repo.respond(
            session,
            repo.ResponseInput(
                card.item_id,
                card.question_row,
                annotator,
                value,
                source,
                status,
                suggestion_id=card.suggestion["id"] if shown else None,
                suggestion_shown=shown,
                seconds=seconds,
            ),
            expected_revision=card.revision,
        )
        repo.release_lease(session, card.item_id, card.question_row, annotator)
        return response.id

    return db.write(work)


def undo_last(db: Database, project_id: int, annotator: str) -> tuple[int, int] | None:
    """Take back the annotator's last answer still standing; returns its (item id, question row)."""

    def work(session) -> tuple[int, int] | None:
        undone = {
            e.payload.get("undoes")
            for e in session.scalars(
                select(Event).where(
                    Event.project_id == project_id, Event.actor == annotator, Event.kind == "response.undone"
                )
            )
        }
        for event in session.scalars(
            select(Event)
            .where(
                Event.project_id == project_id,
                Event.actor == annotator,
                Event.kind.in_(("response.submitted", "response.skipped")),
            )
            .order_by(Event.id.desc())
            .limit(200)
        ):
            if event.id in undone:
                continue
            response = session.get(Response, event.payload["response_id"])
            before = event.payload.get("before")
            if response is not None:
                if before is None:
                    session.delete(response)
                else:
                    response.value, response.status, response.source = (
                        before["value"],
                        before["status"],
                        before["source"],
                    )
                    response.revision += 1
                session.flush()
            repo.refresh_open(session, event.item_id, event.question_id)
            repo.log(
                session, annotator, "response.undone", project_id, event.item_id, event.question_id, undoes=event.id
            )
            return event.item_id, event.question_id
        return None

    return db.write(work)


def progress(db: Database, project_id: int, question_row: int) -> tuple[int, int]:
    """(items with an answer to this question, items in the project)."""
    with db.read() as session:
        return repo.answered_count(session, question_row), repo.count_items(session, project_id)
