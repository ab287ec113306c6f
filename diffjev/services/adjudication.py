"""Adjudication: a reviewer settles the items where annotators disagree (or, on request, any answered
item). Each case shows every annotator's answer with the seconds they spent, the model's distribution
(each item's latest read, or a picked run) and any earlier adjudication; the reviewer picks one of the
given answers or writes another of the question's answers, with an optional comment.

The final answer is stored as its own source, `adjudicated`, apart from the responses (see
storage.models.Adjudication): export marks it as the label and keeps every annotator's answer beside it,
and calibration takes it as the human truth for its item.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diffjev.question_types import QUESTION_TYPES
from diffjev.services.annotation import is_span_question, project_question, project_schema
from diffjev.services.review import checked_answer, refuse_unasked, shown_id, shown_item
from diffjev.spans import span_words
from storage import repo
from storage.db import Database

MAX_COMMENT = 2000
OPEN_COUNTED = 10_000  # the heading counts open cases up to this many ("10000+" beyond)


@dataclass(frozen=True)
class GivenAnswer:
    annotator: str
    value: str
    source: str  # accepted, corrected, manual
    seconds: float | None


@dataclass(frozen=True)
class Settled:
    value: str
    reviewer: str
    comment: str | None
    revision: int


@dataclass
class Case:
    """One item and question to adjudicate."""

    item_id: int
    item: str  # the id its card shows
    text: str
    question: str
    answers: list[GivenAnswer] = field(default_factory=list)
    model_answer: str | None = None
    distribution: dict[str, float] | None = None
    run_id: int | None = None
    settled: Settled | None = None
    kind: str = ""  # the question's kind: a span answer is shown by its words

    def shown(self, value: str | None) -> str | None:
        """An answer as the reviewer reads it: a span answer by its words and offsets, any other as it is."""
        kind_type = QUESTION_TYPES.get(self.kind)
        if value is None or kind_type is None or kind_type.reads != "span":
            return value
        return span_words(value, self.text, self.kind)

    def given(self) -> list[str]:
        """The distinct answers the annotators gave, in the order first given."""
        return list(dict.fromkeys(a.value for a in self.answers))

    def disagree(self) -> bool:
        return len(self.given()) > 1


def cases(
    db: Database,
    project_name: str,
    *,
    any_answered: bool = False,
    settled_too: bool = False,
    run: int | None = None,
    limit: int = 200,
) -> list[Case]:
    """The cases to adjudicate, in item order: the items and questions where annotators' submitted
    answers differ (with `any_answered`, every answered one), those already settled only with
    `settled_too`. `run`: the run whose distribution is shown (None: each item's latest read)."""
    project_id, schema, rows, _ = project_schema(db, project_name)
    key_of = {row: key for key, row in rows.items()}
    question_ids = list(key_of)
    with db.read() as session:
        if run is not None:
            repo.get_run(session, run, project_id)  # another project's run is not found
        pairs = repo.adjudication_pairs(session, project_id, question_ids, any_answered, settled_too, limit)
        item_ids = sorted({i for i, _ in pairs})
        items = {item.id: item for item in repo.items_by_id(session, item_ids)}
        answers = repo.given_answers(session, item_ids, question_ids)
        settled = repo.adjudications_of(session, item_ids, question_ids)
        suggestions = repo.suggestions_of(session, item_ids, question_ids, run)
    found = {}
    for item_id, question_id in pairs:
        item = items[item_id]
        key = key_of[question_id]
        case = Case(item_id, shown_id(item_id, item.external_id), item.text, key, kind=schema.question(key).kind)
        suggestion = suggestions.get((item_id, question_id))
        if suggestion is not None:
            case.model_answer, case.distribution, case.run_id = suggestion
        adjudication = settled.get((item_id, question_id))
        if adjudication is not None:
            case.settled = Settled(
                adjudication.value, adjudication.reviewer, adjudication.comment, adjudication.revision
            )
        found[(item_id, question_id)] = case
    for item_id, question_id, annotator, value, source, seconds in answers:
        case = found.get((item_id, question_id))
        if case is not None:
            case.answers.append(GivenAnswer(annotator, value, source, seconds))
    return list(found.values())


def adjudicate(
    db: Database, project_name: str, item: str, question_key: str, value: str, reviewer: str, comment: str = ""
) -> Settled:
    """Settle one item's answer to a question: `value` must be one of the question's answers (one an
    annotator gave, or another); a second adjudication replaces the first. The item is named by the id
    its card shows. Raises ValueError (a wrong answer or comment) or repo.NotFound (no such item or
    question, or an item nobody has answered yet) with a message that says what to do."""
    project_id, schema, rows, _ = project_schema(db, project_name)
    question = project_question(schema, question_key)
    value = str(value or "").strip()
    if not value:
        raise ValueError(f"{question_key}: pick one of the given answers or write another; none was given")
    if not is_span_question(question) and value not in question.names:
        raise ValueError(
            f"{value!r} is not an answer to {question_key}; pick one of the given answers or write one of "
            f"{', '.join(question.names)}"
        )
    comment = str(comment or "").strip()
    if len(comment) > MAX_COMMENT:
        raise ValueError(f"the comment is {len(comment)} characters; shorten it to at most {MAX_COMMENT}")

    def work(session) -> Settled:
        item_id = shown_item(session, project_id, item)
        if not repo.given_answers(session, [item_id], [rows[question_key]]):
            raise repo.NotFound(
                f"item {item} has no answer to {question_key} yet: adjudication settles the annotators' answers, "
                f"so answer it on the Annotate tab first"
            )
        # a span answer is checked against the item's text and kept in its canonical form ("12-18")
        stored = checked_answer(question, value, repo.project_item(session, project_id, item_id).text)[0]
        refuse_unasked(session, item_id, schema, rows, question)
        row = repo.adjudicate(session, item_id, rows[question_key], stored, reviewer, comment or None)
        return Settled(row.value, row.reviewer, row.comment, row.revision)

    return db.write(work)


def progress(db: Database, project_name: str) -> dict[str, int]:
    """How many disagreements are open, how many cases are settled, and how many items answered (each
    item and question once), for the tab's heading."""
    project_id, _, rows, _ = project_schema(db, project_name)
    question_ids = list(rows.values())
    with db.read() as session:
        open_ = len(repo.adjudication_pairs(session, project_id, question_ids, limit=OPEN_COUNTED))
        settled = repo.count_adjudications(session, question_ids)
        answered = repo.count_answered_pairs(session, question_ids)
    return {"open": open_, "settled": settled, "answered": answered}


def describe(case: Case) -> dict[str, Any]:
    """A case as one row of the tab's list."""
    return {
        "item": case.item,
        "question": case.question,
        "answers": " · ".join(f"{a.annotator}: {case.shown(a.value)}" for a in case.answers),
        "model": case.shown(case.model_answer),
        "adjudicated": case.shown(case.settled.value) if case.settled else None,
    }
