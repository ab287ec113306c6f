"""Calibration of a run's suggestions against human answers, per question, and the comparison of runs.

Only items with a human answer count. Blind-slice answers (given with the suggestion hidden) are free of
the pull of the suggestion, so they are used alone when there are enough of them; otherwise every answer
is used, and the result says which.
"""

from __future__ import annotations

import statistics
from operator import itemgetter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from sqlalchemy import Text, cast, func, select

from diffjev import calibration as cal
from diffjev.services.annotation import project_question, project_schema
from storage import repo
from storage.db import Database
from storage.models import ItemRead, Response, Run, Suggestion

MIN_BLIND = 20


@dataclass
class QuestionCalibration:
    question: str
    run_id: int
    answers_used: str  # "blind" or "all"
    n: int
    blind_n: int
    accuracy: float
    ece: float
    brier: float
    nll: float
    bins: list[cal.Bin]
    curve: list[cal.AcceptPoint]
    temperature: float | None = None  # median of the cross-validation folds' fits
    calibrated: dict[str, float] = field(default_factory=dict)  # ece, brier, nll after temperature scaling
    mae: float | None = None  # score questions
    kappa: float | None = None  # score questions: quadratic-weighted

    def summary(self) -> dict[str, Any]:
        row = {
            "question": self.question,
            "run": self.run_id,
            "answers used": self.answers_used,
            "items": self.n,
            "accuracy": round(self.accuracy, 3),
            "ECE": round(self.ece, 3),
            "Brier": round(self.brier, 3),
            "NLL": round(self.nll, 3),
        }
        if self.temperature is not None:
            row.update(
                {
                    "temperature": round(self.temperature, 3),
                    "calibrated ECE": round(self.calibrated["ece"], 3),
                    "calibrated Brier": round(self.calibrated["brier"], 3),
                }
            )
        if self.mae is not None:
            row.update({"MAE": round(self.mae, 3), "QWK": round(self.kappa, 3)})
        return row


def _pairs(db: Database, run_id: int, question_row: int) -> list[tuple[dict, str, bool]]:
    """(distribution, human answer, blind) per answered item: the item's earliest blind answer if it has
    one, else its earliest answer; where a reviewer adjudicated the item, the adjudicated answer is its
    human answer. The item stays in the blind slice if it has a blind answer: the slice is a sample of
    items drawn with the suggestion hidden, and the adjudication only settles which answer is right."""
    with db.read() as session:  # plain rows, distribution as JSON text: this reads every answered item
        rows = (
            session.connection()
            .execute(
                select(
                    Suggestion.item_id,
                    cast(Suggestion.distribution, Text),
                    Response.value,
                    Response.suggestion_shown,
                    Response.id,
                )
                .join(
                    Response,
                    (Response.item_id == Suggestion.item_id) & (Response.question_id == Suggestion.question_id),
                )
                .where(
                    Suggestion.run_id == run_id,
                    Suggestion.question_id == question_row,
                    Response.status == "submitted",
                    Response.value.is_not(None),
                )
            )
            .all()
        )
        adjudicated = repo.adjudicated_values(session, question_row)
    best: dict[int, tuple] = {}
    for item_id, distribution, value, shown, response_id in rows:
        key = (bool(shown), response_id)  # blind first, then the earliest (ids grow with time)
        if item_id not in best or key < best[item_id][0]:
            best[item_id] = (key, distribution, adjudicated.get(item_id, value), not shown)
    return [(orjson.loads(d), value, blind) for _, d, value, blind in (best[i] for i in sorted(best))]


def calibrate(
    db: Database, project_name: str, run_id: int, question_key: str, folds: int = 5, full: bool = True
) -> QuestionCalibration | None:
    """The run's calibration on one question, or None before any item has a human answer. With
    `full=False`, only the headline numbers (no curve, no temperature), for the comparison table."""
    project_id, schema, rows, _ = project_schema(db, project_name)
    question = project_question(schema, question_key)
    with db.read() as session:
        repo.get_run(session, run_id, project_id)  # another project's run is not found
    if question.type.reads != "slot":  # a span answer has no distribution over answers to calibrate
        return None
    pairs = _pairs(db, run_id, rows[question_key])
    blind = [p for p in pairs if p[2]]
    used, pairs = ("blind", blind) if len(blind) >= MIN_BLIND else ("all", pairs)
    if not pairs:
        return None
    names = list(question.names)
    in_order = itemgetter(*names)  # stored distributions hold every answer name
    probs = np.array([in_order(d) for d, _, _ in pairs], dtype=float)
    labels = [names.index(v) for _, v, _ in pairs]
    result = QuestionCalibration(
        question_key,
        run_id,
        used,
        len(pairs),
        len(blind),
        cal.accuracy(probs, labels),
        cal.ece(probs, labels),
        cal.brier(probs, labels),
        cal.nll(probs, labels),
        cal.reliability_bins(probs, labels),
        cal.auto_accept_curve(probs, labels) if full else [],
    )
    if full and len(pairs) >= 2 * folds:  # enough for every fold to fit on others and be scored on its own
        calibrated, temperatures = cal.cross_validated_temperature(probs, labels, folds)
        result.temperature = statistics.median(temperatures)
        result.calibrated = {
            "ece": cal.ece(calibrated, labels),
            "brier": cal.brier(calibrated, labels),
            "nll": cal.nll(calibrated, labels),
        }
    if question.type.ordinal:
        result.mae, result.kappa = cal.score_errors(probs, labels)
    return result


def compare_runs(db: Database, project_name: str) -> list[dict[str, Any]]:
    """One row per run and question: accuracy, ECE and Brier against human answers, with model passes
    and latency per item, so engines read over the same items can be set side by side."""
    project_id, schema, rows, _ = project_schema(db, project_name)
    with db.read() as session:
        runs = session.execute(
            select(Run.id, Run.engine, Run.model_name).where(Run.project_id == project_id).order_by(Run.id)
        ).all()
        costs = {}
        passes = ItemRead.diagnostics["model_passes"].as_float()  # JSON path, the same on SQLite and PostgreSQL
        for run_id, _, _ in runs:
            costs[run_id] = session.execute(
                select(func.avg(passes), func.avg(ItemRead.latency_ms), func.count()).where(
                    ItemRead.run_id == run_id, ItemRead.status == "ok"
                )
            ).one()
    table = []
    for run_id, engine, model in runs:
        passes, latency, read_items = costs[run_id]
        for q in (q for q in schema.questions if q.type.reads == "slot"):  # span answers have no distribution
            found = calibrate(db, project_name, run_id, q.id, full=False)
            table.append(
                {
                    "run": run_id,
                    "engine": engine,
                    "model": model,
                    "question": q.id,
                    "items read": read_items,
                    "answered": found.n if found else 0,
                    "accuracy": round(found.accuracy, 3) if found else None,
                    "ECE": round(found.ece, 3) if found else None,
                    "Brier": round(found.brier, 3) if found else None,
                    "passes / item": round(passes, 2) if passes is not None else None,
                    "mean latency ms / item": round(latency, 1) if latency is not None else None,
                }
            )
    return table


def store_temperature(
    db: Database, project_id: int, run_id: int, question_row: int, temperature: float, fitted_on: int, actor: str
) -> None:
    """Attach a fitted temperature to one of the project's runs, in the audit log, so later screens can show it."""
    with db.session() as session:
        run = repo.get_run(session, run_id, project_id)
        repo.log(
            session,
            actor,
            "calibration.fitted",
            run.project_id,
            question_id=question_row,
            run_id=run_id,
            temperature=temperature,
            fitted_on=fitted_on,
        )
