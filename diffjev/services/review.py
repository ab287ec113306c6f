"""Review: where the model and the humans disagree, what was accepted while the model was unsure, and
per question how often suggestions are accepted and how often the model is right."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from diffjev.calibration import kappa as calibration_kappa
from diffjev.schema import Question, Schema
from diffjev.services.annotation import is_span_question, project_question, project_schema, span_answer
from diffjev.staging import skips
from storage import repo
from storage.db import Database
from storage.models import Adjudication, Item, Response, Suggestion

LOW_CONFIDENCE = 0.6


def _pairs(db: Database, project_name: str, run: int | None = None) -> tuple[list[Any], dict[int, str]]:
    """Submitted answers joined to the suggestion for the same item and question: run `run`'s, or (None)
    each item's current one (the latest run that read it), as the queues and exports take it."""
    project_id, schema, rows, _ = project_schema(db, project_name)
    if run is not None:
        with db.read() as session:
            repo.get_run(session, run, project_id)  # another project's run is not found
    of_run = repo.of_run(run)
    key_of = {row: key for key, row in rows.items()}
    with db.read() as session:
        query = (
            select(
                Response.item_id,
                Item.external_id,
                Response.question_id,
                Response.value,
                # An adjudicated answer is the item's truth, as Calibrate takes it (see `_judged`).
                Adjudication.value.label("settled"),
                Adjudication.reviewer,
                Response.annotator,
                Response.source,
                Response.suggestion_shown,
                Suggestion.answer,
                Suggestion.confidence,
            )
            .join(Item, Item.id == Response.item_id)
            .outerjoin(
                Adjudication,
                (Adjudication.item_id == Response.item_id) & (Adjudication.question_id == Response.question_id),
            )
            .outerjoin(
                Suggestion,
                (Suggestion.item_id == Response.item_id) & (Suggestion.question_id == Response.question_id) & of_run,
            )
            .where(Response.question_id.in_(list(key_of)), Response.status == "submitted")
            .order_by(Response.item_id)
        )
        return list(session.execute(query)), key_of


def question_report(db: Database, project_name: str, run: int | None = None) -> list[dict[str, Any]]:
    pairs, key_of = _pairs(db, project_name, run)
    report = []
    for row, key in key_of.items():
        mine = [p for p in pairs if p.question_id == row]
        shown = [p for p in mine if p.suggestion_shown]
        judged = [p for p in _judged(mine) if p.answer is not None]
        blind = [p for p in judged if not p.suggestion_shown]
        report.append(
            {
                "question": key,
                "answered": len(mine),
                "acceptance": _rate(sum(p.source == "accepted" for p in shown), len(shown)),
                "model accuracy": _rate(sum(p.answer == _truth(p) for p in judged), len(judged)),
                "blind answers": len(blind),
                "blind accuracy": _rate(sum(p.answer == _truth(p) for p in blind), len(blind)),
            }
        )
    return report


def disagreements(db: Database, project_name: str, limit: int = 200, run: int | None = None) -> list[dict[str, Any]]:
    pairs, key_of = _pairs(db, project_name, run)
    return [_row(p, key_of) for p in _judged(pairs) if p.answer is not None and p.answer != _truth(p)][:limit]


def low_confidence_accepts(
    db: Database, project_name: str, below: float = LOW_CONFIDENCE, limit: int = 200, run: int | None = None
) -> list[dict[str, Any]]:
    pairs, key_of = _pairs(db, project_name, run)
    return [  # what each annotator accepted, settled since or not
        _row(p, key_of, as_answered=True)
        for p in pairs
        if p.source == "accepted" and p.confidence is not None and p.confidence < below
    ][:limit]


ANSWER_FIRST = "No item has a human answer yet: answer some on the Annotate tab, then press Refresh."
NO_RUN = "No run has pre-labeled this project's items: start one on the Pre-label tab, then press Refresh."


def why_empty(db: Database, project_name: str, run: int | None = None) -> dict[str, str]:
    """Per review table, the sentence that says why it has no rows and what to do: shown in place of
    an empty table. `run`: the run the tables compare with (None: each item's latest read)."""
    project_id, _, rows, run_id = project_schema(db, project_name)
    agree = (
        f"The model (run {run}) and the humans agree on every answered item that run read."
        if run is not None
        else "The model and the humans agree on every answered item the model read (each item's latest read; "
        f"latest run {run_id})."
    )
    with db.read() as session:
        answered = session.scalar(
            select(func.count())
            .select_from(Response)
            .where(Response.question_id.in_(list(rows.values())), Response.status == "submitted")
        )
    prior = ANSWER_FIRST if not answered else NO_RUN if run_id is None else None
    return {
        "disagreements": prior or agree,
        "unsure": prior or f"No suggestion was accepted while the model's confidence was below {LOW_CONFIDENCE}.",
        "agreement": "No item has answers from two annotators yet: the *Second opinion* and *Double annotation* "
        "queues on the Annotate tab send items to a second annotator.",
        "agreement differ": "The annotators agree on every item they both answered.",
        "comparison": "No run yet: start one on the Pre-label tab, then compare.",
    }


def agreement(db: Database, project_name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Between every two annotators, per question: the items both answered, Cohen's kappa (quadratic-
    weighted for scores), and the items where they differ."""
    from itertools import combinations

    _, schema, rows, _ = project_schema(db, project_name)
    with db.read() as session:
        answers = session.execute(
            select(Response.item_id, Response.question_id, Response.annotator, Response.value, Item.external_id)
            .join(Item, Item.id == Response.item_id)
            .where(
                Response.question_id.in_(list(rows.values())),
                Response.status == "submitted",
                Response.value.is_not(None),
            )
        ).all()
    external = {a.item_id: a.external_id for a in answers}
    table, differing = [], []
    for q in schema.questions:
        by_annotator: dict[str, dict[int, str]] = {}
        for item_id, question_id, who, value, _ in answers:
            if question_id == rows[q.id]:
                by_annotator.setdefault(who, {})[item_id] = value
        for a, b in combinations(sorted(by_annotator), 2):
            shared = sorted(set(by_annotator[a]) & set(by_annotator[b]))
            if not shared:
                continue
            # Label kinds: their answer names, in order (a score's order weighs near misses). A span answer
            # has no fixed set: the answers given are its categories, and two agree when they match exactly.
            names = list(q.names) or sorted({by_annotator[who][i] for who in (a, b) for i in shared})
            x = [names.index(by_annotator[a][i]) for i in shared]
            y = [names.index(by_annotator[b][i]) for i in shared]
            weights = "quadratic" if q.type.ordinal else None
            kappa = calibration_kappa(x, y, list(range(len(names))), weights=weights)
            table.append(
                {
                    "question": q.id,
                    "annotators": f"{a} / {b}",
                    "items": len(shared),
                    "agreement": _rate(sum(i == j for i, j in zip(x, y)), len(shared)),
                    "kappa": None if kappa != kappa else round(float(kappa), 3),
                }
            )
            differing += [
                {"item": shown_id(i, external[i]), "question": q.id, a: by_annotator[a][i], b: by_annotator[b][i]}
                for i in shared
                if by_annotator[a][i] != by_annotator[b][i]
            ]
    return table, differing


def reopen(db: Database, project_name: str, item: str, question_key: str, value: str, reviewer: str) -> int:
    """Change an item's answer from the review screen, the item named by the id its card shows; recorded
    as the reviewer's answer and an event. A span answer ("12-18") is checked against the item's text and
    stored with its spans; a staged question the item's answers do not ask is refused. Returns the item's
    row id."""
    project_id, schema, rows, _ = project_schema(db, project_name)
    question = project_question(schema, question_key)
    if not is_span_question(question):  # a span answer is checked against the item's text, once it is found
        question.type.human_value(question, value)

    def work(session) -> int:
        item_id = shown_item(session, project_id, item)
        stored, detail = checked_answer(question, value, repo.project_item(session, project_id, item_id).text)
        refuse_unasked(session, item_id, schema, rows, question)
        repo.respond(
            session, repo.ResponseInput(item_id, rows[question_key], reviewer, stored, "manual", detail=detail)
        )
        return item_id

    return db.write(work)


def checked_answer(question: Question, value: Any, text: str) -> tuple[str, dict[str, Any] | None]:
    """A reviewer's answer as stored, with its `detail`: a span answer's spans, as the annotators' are
    stored. ValueError names the question and the answers it takes."""
    if is_span_question(question):
        return span_answer(question, value, text)
    return question.type.human_value(question, value, text), None


def final_answers(session, item_id: int, schema: Schema, rows: dict[str, int]) -> dict[str, str | None]:
    """An item's answers as a reviewer sees them, by question id: the adjudicated one, else the annotators'
    latest submitted one (their agreed one where they agree), else the model's current one."""
    key_of = {row: key for key, row in rows.items()}
    question_rows = [rows[q.id] for q in schema.questions]
    answers: dict[str, str | None] = {}
    for (_, row), (model_answer, _, _) in repo.suggestions_of(session, [item_id], question_rows, None).items():
        answers[key_of[row]] = model_answer
    for _, row, _, value, _, _ in repo.given_answers(session, [item_id], question_rows):  # oldest first
        answers[key_of[row]] = value
    for (_, row), settled in repo.adjudications_of(session, [item_id], question_rows).items():
        answers[key_of[row]] = settled.value
    return answers


def refuse_unasked(session, item_id: int, schema: Schema, rows: dict[str, int], question: Question) -> None:
    """Raise ValueError when the item's answers do not ask `question` (a staged question whose condition
    an earlier answer does not meet): an answer to it would contradict the skip the export keeps. The
    message names the earlier question, the answers the question is asked under, and what to do."""
    if not question.ask_if:
        return
    record = skips(schema.questions, final_answers(session, item_id, schema, rows)).get(question.id)
    if record is None:
        return
    because, was = record["because"], record["was"]
    has = f"the item's {because} is {was}" if was is not None else f"the item has no answer to {because}"
    raise ValueError(
        f"{question.id} is asked only when {because} is {' or '.join(record['wanted'])}; {has}: change {because} first"
    )


def shown_item(session, project_id: int, item: str) -> int:
    """The row id of the item named by the id its card shows: the item's own (external) id, or, for an item
    imported without one, its number (what its card shows then). A number never names an item that has an
    own id (its card never shows the number), so a mistyped id cannot change another item's answer."""
    item = str(item).strip()
    in_project = select(Item.id).where(Item.project_id == project_id)
    found = None
    if "\x00" not in item:  # PostgreSQL text cannot hold NUL, and no stored id has one
        found = session.scalar(in_project.where(Item.external_id == item))
    # ASCII digits only ("٢" is decimal too), and a number a database integer holds.
    if found is None and item.isascii() and item.isdigit() and len(item) < 19:
        found = session.scalar(in_project.where(Item.id == int(item), Item.external_id.is_(None)))
    if found is None:
        raise repo.NotFound(f"no item {item} in this project")
    return found


def shown_id(item_id: int, external_id: str | None) -> str:
    """The id an item's card shows: its own, else its number."""
    return external_id if external_id is not None else str(item_id)


def _judged(pairs: list[Any]) -> list[Any]:
    """The answers the model is judged against: an adjudicated item and question once, by its settled answer
    (as Calibrate takes it: one truth an item), else each annotator's submitted answer."""
    settled_seen, judged = set(), []
    for p in pairs:
        if p.settled is not None:
            if (p.item_id, p.question_id) in settled_seen:
                continue
            settled_seen.add((p.item_id, p.question_id))
        judged.append(p)
    return judged


def _truth(p: Any) -> str:
    return p.settled if p.settled is not None else p.value


def _row(p: Any, key_of: dict[int, str], as_answered: bool = False) -> dict[str, Any]:
    """A review table's row: the human side is the settled answer where there is one, unless `as_answered`
    (what the annotator gave)."""
    settled = p.settled is not None and not as_answered
    return {
        "item": shown_id(p.item_id, p.external_id),  # as on the card, and as "Change an answer" takes it
        "question": key_of[p.question_id],
        "model": p.answer,
        "confidence": round(p.confidence, 3) if p.confidence is not None else None,
        "human": p.settled if settled else p.value,
        "annotator": p.reviewer if settled else p.annotator,
        "source": repo.ADJUDICATED if settled else p.source,
    }


def _rate(hits: int, total: int) -> float | None:
    return round(hits / total, 3) if total else None
