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
  calibration without the pull of its suggestion;
- `skipped`: the items this annotator skipped, the longest-skipped first. A skipped item leaves every
  other queue of this annotator (others still get it) until it is answered here, or the skip is undone.

Unless a run is picked, a queue reads each item's current suggestion: the one from the latest run that
read the item. A refused or failed run, or one still reading, never empties a queue or hides the
suggestions already there. An item no run has read is in the unlabeled queues (`in_order`, in both views),
after the read ones, with nothing chosen, except while a run is reading: then it waits for its read.
An empty queue has a reason a person can act on: `empty_queue_reason`.
"""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import aliased

from diffjev import active
from diffjev import calibration as cal
from diffjev.schema import Question, Schema
from diffjev.spans import parse_span_value
from diffjev.staging import skip_record, skips, waiting_on
from storage import repo
from storage.db import Database
from storage.models import Event, Item, ItemRead, Project, Response, Run, Suggestion, utcnow

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
    "skipped",
)
DIVERSE_CANDIDATES = 200  # the least confident open items the diverse queue spreads over
DIVERSE_CLUSTERS = 8
LEASE = timedelta(minutes=10)


class ItemRemoved(repo.NotFound):
    """The card's item left the project while the annotator held it: its import was undone, or it was
    deleted from the Items view. Nothing was stored for it."""


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
    shares = assigned_shares(db, project_id, annotator, question_key)  # None: every item
    if shares == []:  # the project gives this annotator other questions only
        return None
    claimed_by_others: list[int] = []  # picked, but another annotator's claim on it won
    # A staged question's queue holds only the items it applies to, as their answers stand now.
    applies = _applies(question, rows, annotator, run_id)

    def pick(session) -> int | None:
        now = utcnow()
        exclude = repo.leased_by_others(session, row, annotator, now) + claimed_by_others
        if skip_item is not None:
            exclude.append(skip_item)
        if strategy == "skipped":
            return _next_skipped(session, row, annotator, exclude, shares, applies)
        exclude += _skipped_items(session, row, annotator)  # out of this annotator's queues until answered
        if compared is None:  # no run has read anything: items in order
            item_id = repo.next_unlabeled_item(session, project_id, row, exclude, shares, applies)
        elif strategy == "blind":
            span = repo.item_id_range(session, project_id)
            start = random.randint(*span) if span else None
            item_id = repo.next_in_queue(
                session, run_id, row, "in_order", exclude, start_at=start, shares=shares, applies=applies
            )
        elif strategy == "diverse":
            item_id = _diverse_pick(session, run_id, row, annotator, exclude, shares, applies)
        elif strategy == "run_disagreement":
            other = repo.previous_run(session, project_id, compared)
            item_id = (
                None
                if other is None
                else repo.next_run_disagreement(session, compared, other, row, exclude, shares, applies)
            )
        elif strategy == "second_opinion":
            item_id = repo.next_human_disagreement(session, run_id, row, annotator, exclude, shares, applies)
        elif strategy == "overlap":
            item_id = repo.next_overlap(
                session, project_id, row, annotator, overlap_percent(), exclude, shares, applies
            )
        elif strategy == "changed":
            since = repo.get_run(session, compared, project_id).started_at
            item_id = repo.next_changed_since_seen(session, compared, row, since, exclude, shares, applies)
        else:
            item_id = repo.next_in_queue(session, run_id, row, strategy, exclude, shares=shares, applies=applies)
            if item_id is None and strategy == "in_order" and _unread_offered(session, project_id, run_id):
                item_id = _first_unread(session, project_id, row, exclude, shares, applies)
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


def _unread_offered(session, project_id: int, run_id: int | None) -> bool:
    """Whether the unlabeled queue offers the items no run has read, with nothing chosen: yes unless a run
    is picked (its queue is its reads) or one is reading now (its items wait for their read rather than
    being shown bare; the page picks each read up by itself). An item imported after the last run, or a
    task no model predicted in an imported project, gets no read by waiting."""
    return run_id is None and not repo.run_reading(session, project_id)


def _first_unread(session, project_id: int, row: int, exclude, shares=None, applies=None) -> int | None:
    """The first unanswered item with no suggestion for the question, in item order. The unlabeled queue
    serves these once its read items are answered: looked for only then, the search (a scan past the
    answered items) costs nothing while read items remain, however large the project."""
    return repo.next_unlabeled_item(session, project_id, row, exclude, shares, applies, without=repo.of_run(None))


def _applies(question: Question, rows: dict[str, int], annotator: str, run_id: int | None) -> Any:
    """The queue condition of a staged question (None for one asked of every item): each question its
    `ask_if` names has, on the item, an answer it wants: this annotator's, else the model's."""
    if not question.ask_if:
        return None
    return repo.answers_meet([(rows[other], wanted) for other, wanted in question.ask_if], annotator, run_id)


def assigned_shares(db: Database, project_id: int, annotator: str, question_key: str) -> list[tuple[int, int]] | None:
    """The item shares the project's assignments give this annotator for a question (None: every item;
    an annotator without assignments sees everything, so a project without any works as before)."""
    with db.read() as session:
        assignments = session.scalar(select(Project.assignments).where(Project.id == project_id))
    return repo.assigned_shares(assignments, annotator, question_key)


def overlap_percent() -> int:
    """The share of items that go to two annotators, in percent ($DIFFJEV_OVERLAP, default 10)."""
    raw = os.environ.get("DIFFJEV_OVERLAP", "10")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"DIFFJEV_OVERLAP must be a whole percentage from 0 to 100, not {raw!r}") from None
    return max(0, min(100, value))


def _skipped_items(session, row: int, annotator: str) -> list[int]:
    """The items this annotator skipped for a question and has not answered since."""
    return list(
        session.scalars(
            select(Response.item_id).where(
                Response.question_id == row, Response.annotator == annotator, Response.status == "skipped"
            )
        )
    )


def _open_skips(row: int, annotator: str):
    """The items this annotator skipped for a question that nobody has answered since, oldest skip first."""
    other = aliased(Response)
    answered = select(other.id).where(
        other.item_id == Response.item_id, other.question_id == row, other.status == "submitted"
    )
    return (
        select(Response.item_id)
        .where(
            Response.question_id == row,
            Response.annotator == annotator,
            Response.status == "skipped",
            ~answered.exists(),
        )
        .order_by(Response.updated_at, Response.id)
    )


def _next_skipped(session, row: int, annotator: str, exclude: list[int], shares=None, applies=None) -> int | None:
    """The item this annotator skipped longest ago (skipping it again sends it to the end)."""
    query = repo.narrowed(_open_skips(row, annotator), Response.item_id, exclude, shares, applies)
    return session.scalar(query.limit(1))


def _diverse_pick(
    session, run_id: int, row: int, annotator: str, exclude: list[int], shares=None, applies=None
) -> int | None:
    """The most uncertain candidate from a cluster this annotator has not seen in their last answers."""
    candidates = repo.open_candidates(
        session, run_id, row, "least_confidence", exclude, DIVERSE_CANDIDATES, shares, applies
    )
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
        hidden = repo.hidden_fields(session, project_id)
        suggestion = None
        if not blind:
            of_run = repo.of_run(run_id)
            s = session.scalar(
                select(Suggestion).where(of_run, Suggestion.item_id == item_id, Suggestion.question_id == row)
            )
            if s is not None:
                suggestion = _suggestion_view(session, s, row, question)
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
            {name: value for name, value in item.fields.items() if name not in hidden},
            question,
            row,
            suggestion,
            blind,
            mine.revision if mine else None,
            mine.value if mine else None,
        )


def calibrated_confidence(session, run_id: int, row: int, distribution: dict, question: Question) -> float | None:
    """The top answer's probability under the temperature kept for this run and question, if any."""
    if is_span_question(question):  # no distribution over answer names to scale
        return None
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
    detail = None
    if value is not None and is_span_question(card.question):
        value, detail = span_answer(card.question, value, card.text)
    elif value is not None and value not in card.question.names:
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
        mark = session.scalar(select(func.max(Event.id))) or 0
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
                detail=detail,
            ),
            expected_revision=card.revision,
        )
        repo.release_lease(session, card.item_id, card.question_row, annotator)
        if status == "submitted":
            _follow_later_questions(session, card, annotator, mark)
        return response.id

    try:
        return db.write(work)
    except repo.NotFound:
        # the card came from this project's queue, so an item not found now was removed since it was shown
        raise ItemRemoved(
            f"item {card.external_id or card.item_id} was removed from the project (its import was undone or "
            f"it was deleted); nothing was stored for it"
        ) from None


def _follow_later_questions(session, card: Card, annotator: str, mark: int) -> None:
    """After an answer in the one-question view, the later staged questions follow it, as the item view
    does on Enter: one the item's answers ask again loses the annotator's `not_asked` (it is back in its
    queue), one they no longer ask is stored as `not_asked` with why (it leaves its queue, and the export
    says why it has no label). A `response.followed` event ties these changes to the answer (event ids
    after `mark`), so undo takes them back with it."""
    schema, rows = repo.version_schema(repo.latest_version(session, card.project_id))
    later = waiting_on(schema.questions, card.question.id)
    if not later:
        return
    _ask_again(session, card, annotator, schema, rows, later)
    _drop(session, card, annotator, schema, rows, later)
    changes = session.execute(
        select(Event.id, Event.kind, Event.question_id).where(
            Event.project_id == card.project_id,
            Event.actor == annotator,
            Event.id > mark,
            Event.item_id == card.item_id,
            Event.kind.in_(("response.submitted", "response.not_asked", "response.reasked")),
        )
    ).all()
    answer_event = max(e.id for e in changes if e.question_id == card.question_row and e.kind == "response.submitted")
    followed = [e.id for e in changes if e.id != answer_event]
    if followed:
        repo.log(
            session, annotator, "response.followed", card.project_id, card.item_id, answer=answer_event, events=followed
        )


def _mine(session, item_id: int, row: int, annotator: str) -> Response | None:
    of_item = select(Response).where(Response.item_id == item_id, Response.question_id == row)
    return session.scalar(of_item.where(Response.annotator == annotator))


def _not_asked_of(session, item_id: int, row: int, annotator: str) -> Response | None:
    mine = _mine(session, item_id, row, annotator)
    return mine if mine is not None and mine.status == "not_asked" else None


def _ask_again(session, card: Card, annotator: str, schema: Schema, rows: dict[str, int], later: list) -> None:
    """Remove the annotator's `not_asked` of each later question the answers ask again. Stage by stage
    until none is left: a question asked again counts by the model's answer now, which may ask the
    questions after it again too."""
    while True:
        dropped = skips(schema.questions, repo.current_answers(session, card.item_id, rows, annotator))
        stale = [
            (question, mine)
            for question in later
            if question.id not in dropped
            and (mine := _not_asked_of(session, card.item_id, rows[question.id], annotator)) is not None
        ]
        if not stale:
            return
        for question, mine in stale:
            repo.withdraw_not_asked(session, mine, annotator, card.project_id, asked_by=card.question.id)


def _drop(session, card: Card, annotator: str, schema: Schema, rows: dict[str, int], later: list) -> None:
    """Store each later question the answers no longer ask as `not_asked`, with why."""
    dropped = skips(schema.questions, repo.current_answers(session, card.item_id, rows, annotator))
    for question in later:
        record = dropped.get(question.id)
        if record is None:
            continue
        mine = _not_asked_of(session, card.item_id, rows[question.id], annotator)
        if mine is not None and (mine.detail or {}).get("skipped") == record:
            continue  # already stored with this reason
        repo.respond(
            session,
            repo.ResponseInput(
                card.item_id, rows[question.id], annotator, None, "manual", "not_asked", detail={"skipped": record}
            ),
        )


def undo_mark(db: Database, project_id: int) -> int:
    """Where an annotating session starts: the project's newest event. Undo never goes back past it."""
    with db.read() as session:
        return session.scalar(select(func.max(Event.id)).where(Event.project_id == project_id)) or 0


def undo_last(
    db: Database, project_id: int, annotator: str, question_row: int | None = None, since_event: int | None = None
) -> tuple[int, int] | None:
    """Take back the annotator's last answer still standing; returns its (item id, question row), or None
    when nothing is left. With `question_row` and `since_event` (an `undo_mark`), only an answer to that
    question given in that session: undo never switches question or reaches into an earlier session."""
    answers = select(Event).where(
        Event.project_id == project_id,
        Event.actor == annotator,
        Event.kind.in_(("response.submitted", "response.skipped")),
    )
    if question_row is not None:
        answers = answers.where(Event.question_id == question_row)
    if since_event is not None:
        answers = answers.where(Event.id > since_event)

    undos = select(Event).where(
        Event.project_id == project_id, Event.actor == annotator, Event.kind == "response.undone"
    )
    if since_event is not None:
        undos = undos.where(Event.id > since_event)

    def work(session) -> tuple[int, int] | None:
        undone = {e.payload.get("undoes") for e in session.scalars(undos)}
        for event in session.scalars(answers.order_by(Event.id.desc()).limit(200)):
            if event.id in undone:
                continue
            _take_back_followers(session, event, annotator, project_id)
            _take_back(session, event, annotator, project_id)
            return event.item_id, event.question_id
        return None

    return db.write(work)


def _take_back_followers(session, answer: Event, annotator: str, project_id: int) -> None:
    """Undo what an answer changed in the later staged questions (its `response.followed` event), newest
    first: a `not_asked` it stored goes, one it removed is back."""
    followed = session.scalars(
        select(Event).where(
            Event.project_id == project_id,
            Event.actor == annotator,
            Event.item_id == answer.item_id,
            Event.kind == "response.followed",
            Event.id > answer.id,
        )
    )
    for follow in followed:
        if follow.payload.get("answer") != answer.id:
            continue
        changes = session.scalars(select(Event).where(Event.id.in_(follow.payload["events"])).order_by(Event.id.desc()))
        for change in changes:
            if _still_as_left(session, change):
                _take_back(session, change, annotator, project_id)


def _still_as_left(session, change: Event) -> bool:
    """Whether the response an answer's follow-up change left is still as it left it: an answer given to
    that question since is newer, and undo of the earlier question's answer keeps it."""
    if change.kind == "response.reasked":
        return _mine(session, change.item_id, change.question_id, change.payload["annotator"]) is None
    response = session.get(Response, change.payload["response_id"])
    return response is not None and response.revision == change.payload["revision"]


def _take_back(session, event: Event, annotator: str, project_id: int) -> None:
    """Undo one stored answer, skip or `not_asked` (a `response.*` event): the answer before it is back,
    or none; a `not_asked` an answer removed (`response.reasked`) is back."""
    if event.kind == "response.reasked":
        repo.restore_withdrawn(session, event)
        repo.log(session, annotator, "response.undone", project_id, event.item_id, event.question_id, undoes=event.id)
        return
    response = session.get(Response, event.payload["response_id"])
    before = event.payload.get("before")
    if response is not None:
        if before is None:
            session.delete(response)
        else:
            response.value, response.status, response.source = before["value"], before["status"], before["source"]
            response.detail = before.get("detail")  # a span answer's spans go back with its value
            response.revision += 1
        session.flush()
    repo.refresh_open(session, event.item_id, event.question_id)
    repo.log(session, annotator, "response.undone", project_id, event.item_id, event.question_id, undoes=event.id)


def last_undo_was_a_skip(db: Database, project_id: int, annotator: str) -> bool:
    """Whether the annotator's latest undo took back a skip (not an answer): the page says which it was."""

    undos = select(Event).where(
        Event.project_id == project_id, Event.actor == annotator, Event.kind == "response.undone"
    )
    with db.read() as session:
        undo = session.scalar(undos.order_by(Event.id.desc()).limit(1))
        undone = session.get(Event, undo.payload.get("undoes")) if undo is not None else None
        return undone is not None and undone.kind == "response.skipped"


TWO_RUN_QUEUES = {
    "run_disagreement": "compares the answers of the two latest pre-label runs",
    "changed": "brings back answered items whose suggestion changed in a newer pre-label run",
}


def empty_queue_reason(
    db: Database, project_name: str, question_key: str, strategy: str, annotator: str, run: int | None = None
) -> str:
    """Why a queue has no item for this annotator now, and what to do about it: one or two sentences for
    the page, asked for when `next_card` returned None (with the same `run`: a picked run, or None for
    each item's current suggestion)."""
    project_id, schema, rows, _ = project_schema(db, project_name)
    question = project_question(schema, question_key)
    row, qid = rows[question_key], question.id
    if assigned_shares(db, project_id, annotator, question_key) == []:
        return (
            f"{qid} is not assigned to you in this project: pick one of the questions you were given, "
            "or ask a reviewer to assign this one to you."
        )
    with db.read() as session:
        items = repo.count_items(session, project_id)
        runs = session.scalar(select(func.count()).select_from(Run).where(Run.project_id == project_id)) or 0
        latest = repo.latest_run(session, project_id)
        picked = repo.get_run(session, run, project_id) if run is not None else None
        # What the queue reads: the picked run's suggestions, or each item's current one.
        source = repo.of_run(picked.id if picked is not None else None)
        others = _answers_by_others(session, row, annotator)
        skipped = len(session.scalars(_open_skips(row, annotator)).all())
        if items == 0:
            return "The project has no items yet: import some in the Import tab."
        if strategy == "skipped":
            return f"You have no skipped items for {qid}: an item you skip (S) waits here until you answer it."
        structural = _structural_reason(strategy, qid, runs, others)
        if structural:
            return structural
        if latest is not None and latest.status == "running" and picked in (None, latest):
            read = session.scalar(select(func.count()).select_from(ItemRead).where(ItemRead.run_id == latest.id)) or 0
            return (
                f"Pre-labels are still being read: {read} of {items} items done. This queue fills as the reads "
                "are stored, and the first item shows here by itself; or choose 'Unlabeled, in order' to "
                "answer meanwhile."
            )
        explained = picked or latest
        if explained is not None and strategy not in ("second_opinion", "overlap"):
            reason = _run_reason(session, explained, row, qid, source)
            if reason:
                return reason
        unanswered = _unanswered(session, project_id, row)
        # Items without a suggestion are in the unlabeled queue itself (unless a run is picked or reading),
        # so there they are counted only as skipped or held; every other queue orders by the model's reads.
        offered = strategy == "in_order" and _unread_offered(session, project_id, run)
        unread = _unanswered(session, project_id, row, without=source) if latest is not None and not offered else 0
        held = len(repo.leased_by_others(session, row, annotator, utcnow()))
    if unanswered == 0 and strategy not in ("second_opinion", "overlap"):
        return f"Every item has an answer to {qid}. Choose another question, or review the answers."
    return _leftover_reason(strategy, qid, unanswered, skipped, held, unread, picked.id if picked else None)


def _structural_reason(strategy: str, qid: str, runs: int, others: int) -> str | None:
    """A queue that cannot have items yet, whatever has been answered: it needs a second run or another
    annotator's answers."""
    if strategy in TWO_RUN_QUEUES and runs < 2:
        there = "there is one" if runs == 1 else "there are none"
        return (
            f"This queue {TWO_RUN_QUEUES[strategy]}; {there}. Start another run in the Pre-label tab "
            "(another model, or after a schema change), then come back."
        )
    if strategy == "second_opinion" and others == 0:
        return (
            f"This queue needs a second annotator's answers: it serves items another annotator answered "
            f"differently from the model, and nobody else has answered {qid} yet."
        )
    if strategy == "overlap":
        share = overlap_percent()
        if share == 0:
            return "DIFFJEV_OVERLAP is 0, so no item is shared between annotators; set it (e.g. 10) and restart."
        if others == 0:
            return (
                f"This queue needs a second annotator's answers: it gives you the {share}% of items another "
                f"annotator has answered once, and nobody else has answered {qid} yet."
            )
    return None


def _run_reason(session, run: Run, row: int, qid: str, source) -> str | None:
    """The queue's suggestions (`source`) hold none for this question: say why from `run` (the picked or
    the latest run): it failed, or read an older schema."""
    suggested = session.scalar(select(Suggestion.id).where(source, Suggestion.question_id == row).limit(1))
    if suggested is not None:
        return None
    if run.status == "failed":
        return (
            f"Pre-label run #{run.id} failed with no reads: {run.error or 'no error was kept'}. "
            "Start another in the Pre-label tab."
        )
    return (
        f"Pre-label run #{run.id} has no suggestions for {qid} (it read an older schema, or "
        "was stopped). Start a run in the Pre-label tab."
    )


def _leftover_reason(
    strategy: str, qid: str, unanswered: int, skipped: int, held: int, unread: int, picked: int | None = None
) -> str:
    """Open items remain, but none for this annotator in this queue: say where they are. `unread` items have
    no suggestion from the picked run (`picked`), or from any run."""
    parts = []
    if unread and strategy not in ("second_opinion", "overlap", "changed"):
        one = unread == 1
        it = "it" if one else "them"
        if picked is None:
            parts.append(
                f"{unread} {'has' if one else 'have'} no suggestion from any run (choose 'Unlabeled, in order' "
                f"to answer {it} with nothing chosen, or pre-label {it} in the Pre-label tab)"
            )
        else:
            parts.append(
                f"{unread} {'has' if one else 'have'} no suggestion from run #{picked} (choose "
                f"'Latest reads per item' to answer {it}, or pre-label {it} in the Pre-label tab)"
            )
    if skipped:
        parts.append(
            f"you skipped {skipped} (choose the 'Skipped' queue to see {'it' if skipped == 1 else 'them'} again)"
        )
    if held:
        parts.append(f"{held} {'is' if held == 1 else 'are'} being answered by other annotators right now")
    items = "item" if unanswered == 1 else "items"
    where = f" Of the {unanswered} {items} without an answer to {qid}, " + " and ".join(parts) + "." if parts else ""
    if strategy == "run_disagreement":
        return "The two latest runs agree on every open item." + where
    if strategy == "changed":
        return "No answered item's suggestion changed in the latest run." + where
    if strategy == "second_opinion":
        return "Where another annotator disagrees with the model, you have answered already." + where
    if strategy == "overlap":
        return f"Every item in the {overlap_percent()}% double-annotation share has its second answer." + where
    return f"No open item is left for you in this queue.{where}"


def _answers_by_others(session, row: int, annotator: str) -> int:
    return (
        session.scalar(
            select(func.count())
            .select_from(Response)
            .where(Response.question_id == row, Response.annotator != annotator, Response.status == "submitted")
        )
        or 0
    )


def _unanswered(session, project_id: int, row: int, without=None) -> int:
    """Items nobody has answered for a question; with `without` (a condition on Suggestion: one run's, or
    the current ones), only the items that have no such suggestion."""
    answered = select(Response.id).where(
        Response.item_id == Item.id, Response.question_id == row, Response.status == "submitted"
    )
    query = select(func.count()).select_from(Item).where(Item.project_id == project_id, ~answered.exists())
    if without is not None:
        suggested = select(Suggestion.id).where(Suggestion.item_id == Item.id, Suggestion.question_id == row, without)
        query = query.where(~suggested.exists())
    return session.scalar(query) or 0


def progress(db: Database, project_id: int, question_row: int) -> tuple[int, int]:
    """(items with an answer to this question, items in the project)."""
    with db.read() as session:
        return repo.answered_count(session, question_row), repo.count_items(session, project_id)


def reads_mark(db: Database, project_id: int) -> tuple:
    """Changes whenever a read of the project is stored or its newest run starts or ends (repo.reads_mark)."""
    with db.read() as session:
        return repo.reads_mark(session, project_id)


# The item view: every question of one item on one screen -------------------------------------------------
#
# An item is in the item view's queues while any of its questions is open (nobody has answered it): an item
# whose every question this annotator answered leaves them. Leases: the item view holds the lease of every
# question of the item (the per-question leases above, no table of its own), so neither the item view nor the
# one-question view of another annotator hands out the item meanwhile. Accepting an item stores every
# question's answer in one transaction and logs an `item.answered` event naming them; undo takes back that
# event's answers as one unit.

ITEM_STRATEGIES = ("in_order", "least_confidence", "skipped")


def empty_item_queue_reason(db: Database, project_name: str, strategy: str, annotator: str) -> str:
    """Why the item view's queue has no item for this annotator now: the reason of the first question
    given to them that still has items without an answer (held by others, skipped, still being read),
    else that every question is answered."""
    project_id, schema, rows, _ = project_schema(db, project_name)
    given = given_questions(db, project_id, annotator, schema, rows)
    keys = [q.id for q in schema.questions if rows[q.id] in given]
    with db.read() as session:
        items = repo.count_items(session, project_id)
        for key in keys:
            if items and repo.answered_count(session, rows[key]) < items:
                break
        else:
            return "Every item has an answer to each of your questions." if items and keys else ""
    return empty_queue_reason(db, project_name, key, strategy, annotator)


class MissingAnswer(ValueError):
    """A question of the item has no answer chosen (no suggestion to preselect, nothing picked)."""


@dataclass(frozen=True)
class Entry:
    """One question of an item as the item view shows it. `applies` is False for a question not asked of
    this item (a staged question whose condition an earlier answer does not meet): it is hidden and
    nothing is stored for it."""

    question: Question
    row: int
    applies: bool
    suggestion: dict[str, Any] | None
    revision: int | None  # this annotator's stored answer's revision, for the stale-write guard
    current: str | None  # this annotator's submitted answer, if any
    skipped: bool  # this annotator skipped the question for this item and has not answered it since
    given: bool = True  # the project's assignments give this question to this annotator
    not_asked: dict[str, Any] | None = None  # why a staged question's condition is not met: {because, was, wanted}

    @property
    def preselected(self) -> str | None:
        """What the view shows chosen: the annotator's own answer, else the model's, else nothing."""
        if self.current is not None:
            return self.current
        return self.suggestion["answer"] if self.suggestion else None


@dataclass(frozen=True)
class ItemCard:
    """One item and every question of the schema."""

    project_id: int
    item_id: int
    external_id: str | None
    text: str
    fields: dict[str, Any]
    entries: tuple[Entry, ...]

    @property
    def asked(self) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if e.applies)


def next_item_card(
    db: Database,
    project_name: str,
    strategy: str,
    annotator: str,
    skip_item: int | None = None,
    run: int | None = None,
) -> ItemCard | None:
    """Lease every question of the next item for this annotator and return it, or None when the queue is
    empty. `least_confidence` orders items by their least confident open question."""
    if strategy not in ITEM_STRATEGIES:
        raise ValueError(f"unknown item queue {strategy!r}; choose one of {', '.join(ITEM_STRATEGIES)}")
    project_id, schema, rows, latest = project_schema(db, project_name)
    if run is not None:
        with db.read() as session:
            repo.get_run(session, run, project_id)  # another project's run is not found
    shares = given_questions(db, project_id, annotator, schema, rows)  # the rows given to this annotator
    question_rows = list(shares)
    if not question_rows:  # the project's assignments give this annotator none of its questions
        return None
    claimed_by_others: list[int] = []

    def pick(session) -> int | None:
        now = utcnow()
        exclude = set(claimed_by_others)
        for row in question_rows:
            exclude.update(repo.leased_by_others(session, row, annotator, now))
        if skip_item is not None:
            exclude.add(skip_item)
        if strategy == "skipped":
            return _oldest_skipped_item(session, shares, annotator, exclude)
        for row in question_rows:
            exclude.update(_skipped_items(session, row, annotator))
        if latest is None and run is None:  # no run has read anything: items in order
            found = [repo.next_unlabeled_item(session, project_id, row, exclude, shares[row]) for row in question_rows]
            return min((i for i in found if i is not None), default=None)
        found = _first_open_item(session, run, shares, strategy, exclude)
        if found is None and strategy == "in_order" and _unread_offered(session, project_id, run):
            # an item is open while any question is: one without a read counts
            unread = [_first_unread(session, project_id, row, exclude, shares[row]) for row in question_rows]
            found = min((i for i in unread if i is not None), default=None)
        return found

    def claim(session) -> int | None:
        while True:
            picked_at = utcnow()
            item_id = pick(session)
            if item_id is None or _lease_item(session, item_id, question_rows, annotator, picked_at):
                return item_id
            claimed_by_others.append(item_id)

    item_id = db.write(claim)
    if item_id is None:
        return None
    return load_item_card(db, project_id, item_id, schema, rows, run, annotator, given=set(question_rows))


def given_questions(
    db: Database, project_id: int, annotator: str, schema: Schema, rows: dict[str, int]
) -> dict[int, list[tuple[int, int]] | None]:
    """The question rows the project's assignments give this annotator, each with its item shares (None:
    every item). An annotator without assignments is given every question."""
    with db.read() as session:
        assignments = session.scalar(select(Project.assignments).where(Project.id == project_id))
    found = {rows[q.id]: repo.assigned_shares(assignments, annotator, q.id) for q in schema.questions}
    return {row: shares for row, shares in found.items() if shares != []}


def _first_open_item(session, run_id: int | None, shares: dict, strategy: str, exclude: set[int]):
    """The first item by the queue's order over every given question's open suggestions: one index seek per
    question, then the best of those (the lowest confidence, or the lowest item id)."""
    order = repo.QUEUE_ORDER[strategy]
    best: tuple | None = None
    for row, row_shares in shares.items():
        query = select(Suggestion.item_id, Suggestion.confidence).where(
            repo.of_run(run_id), Suggestion.question_id == row, Suggestion.is_open
        )
        query = repo.narrowed(query, Suggestion.item_id, exclude, row_shares)
        found = session.execute(query.order_by(order, Suggestion.item_id).limit(1)).first()
        if found is None:
            continue
        key = (found.confidence, found.item_id) if strategy == "least_confidence" else (found.item_id,)
        best = min(best, key) if best is not None else key
    return None if best is None else best[-1]


def _oldest_skipped_item(session, shares: dict, annotator: str, exclude: set[int]) -> int | None:
    """The item this annotator skipped longest ago, over every question given to them (within its shares)."""
    oldest: tuple | None = None
    for row, row_shares in shares.items():
        query = _open_skips(row, annotator).add_columns(Response.updated_at, Response.id)
        query = repo.narrowed(query, Response.item_id, exclude, row_shares)
        found = session.execute(query.limit(1)).first()
        if found is not None:
            key = (found.updated_at, found.id, found.item_id)
            oldest = min(oldest, key) if oldest is not None else key
    return None if oldest is None else oldest[-1]


def _lease_item(session, item_id: int, question_rows: list[int], annotator: str, picked_at) -> bool:
    """Hold the item for every question, or for none: a question another annotator holds gives back the
    others taken here, and the item is not this annotator's."""
    until = utcnow() + LEASE
    taken = []
    for row in question_rows:
        if not repo.take_lease(session, item_id, row, annotator, until, picked_at):
            for row_taken in taken:
                repo.release_lease(session, item_id, row_taken, annotator)
            return False
        taken.append(row)
    return True


def question_applies(question: Question, answers: dict[str, str | None]) -> bool:
    """Whether a question is asked of an item given the answers chosen so far: a staged question is asked
    only when each earlier answer its `ask_if` names is one it wants."""
    return skip_record(question, answers) is None


def card_with_choices(card: ItemCard, choices: dict[str, Any]) -> ItemCard:
    """The card as it stands with `choices` (question id -> answer) over what it preselected: a staged
    question whose condition the chosen answers no longer meet is dropped (and says why), one they now
    meet is asked. Questions are settled stage by stage, so a question dropped counts as unanswered."""
    chosen = {e.question.id: choices.get(e.question.id, e.preselected) for e in card.entries}
    not_asked = skips([e.question for e in card.entries], chosen)
    settled = {qid: None if qid in not_asked else value for qid, value in chosen.items()}
    entries = tuple(
        dataclasses.replace(
            e,
            applies=e.given and e.question.id not in not_asked and question_applies(e.question, settled),
            not_asked=not_asked.get(e.question.id),
        )
        for e in card.entries
    )
    return dataclasses.replace(card, entries=entries)


def load_item_card(
    db: Database,
    project_id: int,
    item_id: int,
    schema: Schema,
    rows: dict[str, int],
    run_id: int | None,
    annotator: str,
    given: set[int] | None = None,
) -> ItemCard:
    """The item with every question, its suggestion (run `run_id`'s, or the current one) and this
    annotator's answer: three reads, whatever the number of questions. Questions outside `given` (the
    rows the project's assignments give this annotator; None: all) are not asked."""
    question_rows = [rows[q.id] for q in schema.questions]
    with db.read() as session:
        item = repo.project_item(session, project_id, item_id)
        hidden = repo.hidden_fields(session, project_id)
        suggestions = {
            s.question_id: s
            for s in session.scalars(
                select(Suggestion).where(
                    repo.of_run(run_id), Suggestion.item_id == item_id, Suggestion.question_id.in_(question_rows)
                )
            )
        }
        mine = {
            r.question_id: r
            for r in session.scalars(
                select(Response).where(
                    Response.item_id == item_id,
                    Response.question_id.in_(question_rows),
                    Response.annotator == annotator,
                )
            )
        }
        entries = []
        for question in schema.questions:
            row = rows[question.id]
            s, r = suggestions.get(row), mine.get(row)
            suggestion = None if s is None else _suggestion_view(session, s, row, question)
            entry = Entry(
                question,
                row,
                given is None or row in given,
                suggestion,
                r.revision if r else None,
                r.value if r is not None and r.status == "submitted" else None,
                r is not None and r.status == "skipped",
                given=given is None or row in given,
            )
            entries.append(entry)
        card = ItemCard(
            project_id,
            item.id,
            item.external_id,
            item.text,
            {name: value for name, value in item.fields.items() if name not in hidden},
            tuple(entries),
        )
        return card_with_choices(card, {})  # staged questions: asked as the preselected answers have it


def _suggestion_view(session, s: Suggestion, row: int, question: Question) -> dict[str, Any]:
    """A stored suggestion as a card shows it, with its calibrated confidence where a temperature was kept,
    and the model of the run that made it (an imported run's is another tool's model, not the studio's)."""
    run = session.get(Run, s.run_id)  # once per run in a session: its identity map holds it after
    return {
        "id": s.id,
        "model": run_model(run.engine, run.model_name),
        "answer": s.answer,
        "distribution": dict(s.distribution),
        "confidence": s.confidence,
        "label_mass": s.label_mass,
        "stderr": s.stderr,
        "draws": s.draws,
        "run": s.run_id,
        "calibrated": calibrated_confidence(session, s.run_id, row, s.distribution, question),
        "detail": s.detail,  # a span suggestion's spans, with their confidence
    }


def run_model(engine: str, model_name: str | None) -> str:
    """What a run's suggestions are said to come from: its model, else its engine where it names none."""
    return model_name or engine


def is_span_question(question: Question) -> bool:
    """Whether the question's answer is spans of the item text rather than one of its answer names."""
    return question.type.reads == "span"


def span_answer(question: Question, value: Any, text: str) -> tuple[str, dict[str, Any]]:
    """A person's answer to a span question ("12-18", "12-18,30-35" or "none": code point offsets into the
    item text, end exclusive), checked against the text: (its canonical answer name, the response's
    detail). A wrong one is refused with a ValueError naming the question and the fix."""
    if not isinstance(value, str):
        raise ValueError(f'{question.id}: give the span as start-end character offsets, e.g. "12-18", or "none"')
    try:
        spans = parse_span_value(value, text, question.kind)
    except ValueError as exc:
        raise ValueError(f"{question.id}: {exc}") from None
    if question.max_items is not None and len(spans) > question.max_items:
        raise ValueError(
            f"{question.id}: {len(spans)} spans, but this question takes at most {question.max_items}; drop some"
        )
    try:
        stored = question.type.human_value(question, value, text)  # refuses a list the answer column would cut
    except ValueError as exc:
        raise ValueError(str(exc) if str(exc).startswith(f"{question.id}:") else f"{question.id}: {exc}") from None
    # a person's span has no confidence: only where it is and what it says
    return stored, {"spans": [{"start": s.start, "end": s.end, "text": s.text} for s in spans]}


def chosen_answers(card: ItemCard, choices: dict[str, Any]) -> dict[str, str]:
    """Every asked question's answer from `choices` (question id -> answer; a question left out keeps
    what the view preselected). A question with nothing chosen, or an answer that is not one of the
    question's, is refused by name."""
    answers = {}
    for entry in card.asked:
        value = choices[entry.question.id] if entry.question.id in choices else entry.preselected
        if value is None and entry.question.id not in choices:
            raise MissingAnswer(
                f"{entry.question.id} has no answer chosen (no suggestion for this item): pick one with its "
                "number or a click, then press Enter"
            )
        if is_span_question(entry.question):
            answers[entry.question.id] = span_answer(entry.question, value, card.text)[0]
            continue
        if not isinstance(value, str) or value not in entry.question.names:
            raise ValueError(
                f"{value!r} is not an answer to {entry.question.id}; answers: {', '.join(entry.question.names)}"
            )
        answers[entry.question.id] = value
    return answers


def accept_item(db: Database, card: ItemCard, annotator: str, choices: dict[str, Any], seconds: float | None) -> int:
    """Store every asked question's answer to the item in one transaction, release the item's leases and
    log one `item.answered` event naming the answers (what undo takes back). The seconds spent on the
    item are shared evenly between its answers, so sums of time per annotator stay right. Returns that
    event's id. A staged question the chosen answers do not ask gets a `not_asked` response saying why."""
    card = card_with_choices(card, choices)
    answers = chosen_answers(card, choices)
    share = None if seconds is None else seconds / max(1, len(answers))
    stored = [(_not_asked_input(card, entry, annotator), entry.revision) for entry in card.entries if _dropped(entry)]
    for entry in card.asked:
        value, shown = answers[entry.question.id], entry.suggestion is not None
        detail = span_answer(entry.question, value, card.text)[1] if is_span_question(entry.question) else None
        if shown and value == entry.suggestion["answer"]:
            source = "accepted"
        else:
            source = "corrected" if shown else "manual"
        stored.append(
            (
                repo.ResponseInput(
                    card.item_id,
                    entry.row,
                    annotator,
                    value,
                    source,
                    "submitted",
                    suggestion_id=entry.suggestion["id"] if shown else None,
                    suggestion_shown=shown,
                    seconds=share,
                    detail=detail,
                ),
                entry.revision,
            )
        )
    return _store_item(db, card, annotator, stored, "submitted", seconds)


def _dropped(entry: Entry) -> bool:
    """A question given to the annotator that the item's answers do not ask (its condition is not met)."""
    return entry.given and entry.not_asked is not None


def _not_asked_input(card: ItemCard, entry: Entry, annotator: str) -> repo.ResponseInput:
    return repo.ResponseInput(
        card.item_id, entry.row, annotator, None, "manual", "not_asked", detail={"skipped": entry.not_asked}
    )


def skip_item(db: Database, card: ItemCard, annotator: str, seconds: float | None) -> int:
    """Skip the item: a skip for every asked question this annotator has not answered (an answer given
    stays), in one transaction, so the item waits in the Skipped queue. Returns the event's id."""
    stored = [
        (repo.ResponseInput(card.item_id, entry.row, annotator, None, "manual", "skipped"), entry.revision)
        for entry in card.asked
        if entry.current is None
    ]
    return _store_item(db, card, annotator, stored, "skipped", seconds)


def _store_item(db: Database, card: ItemCard, annotator: str, stored: list, status: str, seconds: float | None) -> int:
    def work(session) -> int:
        mark = session.scalar(select(func.max(Event.id))) or 0
        for response, revision in stored:
            repo.respond(session, response, expected_revision=revision)
        for entry in card.entries:
            repo.release_lease(session, card.item_id, entry.row, annotator)
        answered = list(
            session.scalars(
                select(Event.id).where(
                    Event.project_id == card.project_id,
                    Event.actor == annotator,
                    Event.id > mark,
                    Event.item_id == card.item_id,
                    # a `not_asked` stored with the answers goes back with them on undo
                    Event.kind.in_(("response.submitted", "response.skipped", "response.not_asked")),
                )
            )
        )
        repo.log(
            session,
            annotator,
            "item.answered",
            card.project_id,
            card.item_id,
            events=answered,
            status=status,
            seconds=seconds,
        )
        mine = select(func.max(Event.id)).where(Event.project_id == card.project_id, Event.actor == annotator)
        return session.scalar(mine)

    try:
        return db.write(work)
    except repo.NotFound:
        raise ItemRemoved(
            f"item {card.external_id or card.item_id} was removed from the project (its import was undone or "
            f"it was deleted); nothing was stored for it"
        ) from None


def undo_last_item(
    db: Database, project_id: int, annotator: str, since_event: int | None = None
) -> tuple[int, str] | None:
    """Take back the annotator's last item still standing (every answer or skip stored with it, as one
    unit); returns (item id, "submitted" or "skipped"), or None when nothing is left. With `since_event`
    (an `undo_mark`), only an item answered since then."""
    items = select(Event).where(Event.project_id == project_id, Event.actor == annotator, Event.kind == "item.answered")
    undos = select(Event).where(
        Event.project_id == project_id,
        Event.actor == annotator,
        Event.kind.in_(("item.undone", "response.undone")),
    )
    if since_event is not None:
        items, undos = items.where(Event.id > since_event), undos.where(Event.id > since_event)

    def work(session) -> tuple[int, str] | None:
        undone = {e.payload.get("undoes") for e in session.scalars(undos)}
        for item_event in session.scalars(items.order_by(Event.id.desc()).limit(200)):
            if item_event.id in undone:
                continue
            answers = session.scalars(
                select(Event).where(Event.id.in_(item_event.payload["events"])).order_by(Event.id.desc())
            )
            for event in answers:
                if event.id not in undone:  # one answer of it may have been undone in the one-question view
                    _take_back(session, event, annotator, project_id)
            repo.log(session, annotator, "item.undone", project_id, item_event.item_id, undoes=item_event.id)
            return item_event.item_id, item_event.payload.get("status", "submitted")
        return None

    return db.write(work)


def item_progress(db: Database, project_id: int, rows: dict[str, int]) -> tuple[dict[str, int], int]:
    """(items with an answer, per question id; items in the project)."""
    with db.read() as session:
        return {key: repo.answered_count(session, row) for key, row in rows.items()}, repo.count_items(
            session, project_id
        )
