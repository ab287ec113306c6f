"""Moving a whole project in and out: a Bundle (diffjev.formats.bundle), read from another tool's file,
is stored in one transaction; a project is read back into a Bundle for a format to write.

One transaction per file: every record is checked against the schema first, and a file any of whose
records cannot be held is refused whole, with one line naming the file, the record and the field, so
nothing is ever half imported. A second import of the same file adds nothing twice: items are keyed as
plain imports key them (external id, else content), answers are each annotator's own (updated in place),
and a run keeps to the run an earlier import of the same file made.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable

from diffjev.decide import Answer, Decision, entropy
from diffjev.formats.bundle import (
    Adjudication,
    Bundle,
    HumanAnswer,
    InterchangeError,
    ModelAnswer,
    Record,
    RunInfo,
    SpanMark,
)
from diffjev.io import Limits, Row, SourceError, item_problem
from diffjev.schema import Question, Schema
from diffjev.spans import Span, SpanAnswer, parse_span_value, span_value, spans_from_detail
from diffjev.services.annotation import span_answer
from diffjev.services.importing import max_item_chars
from storage import interchange as store
from storage import repo
from storage.db import Database

PAGE = 2_000
IMPORTED_ENGINE = "imported"  # what a run made by an import names as its engine when the file names none


@dataclass
class BundleReport:
    project: str
    created: bool
    items: int  # items added
    duplicates: int  # records whose item was stored already
    answers: int
    runs: int
    suggestions: int
    notes: tuple[str, ...] = ()  # what the file held that was not taken, and how to bring it

    def summary(self) -> str:
        made = "created" if self.created else "added to"
        said = (
            f"{made} project {self.project!r}: {self.items} items ({self.duplicates} already there), "
            f"{self.answers} answers, {self.suggestions} suggestions in {self.runs} runs"
        )
        return "\n".join([said, *(f"note: {note}" for note in self.notes)])


# In ---------------------------------------------------------------------------------------------------------


def import_bundle(
    db: Database, project_name: str, bundle: Bundle, actor: str, new_project: bool = False
) -> BundleReport:
    """Store `bundle` into `project_name` (made with the bundle's schema where it does not exist) in one
    transaction. Raises InterchangeError, having stored nothing, for a record the schema cannot hold.
    With `new_project`, a project of that name is refused (repo.Conflict), checked inside the transaction."""
    file = bundle.source or "the file"
    _check_ids(bundle, file)
    with db.read() as session:  # a file asking other questions than the project's is told so first
        try:
            project = repo.get_project(session, project_name)
        except repo.NotFound:
            pass
        else:
            if new_project:
                raise repo.Conflict(f"a project named {project_name!r} already exists; pick another name")
            _check_fits(
                repo.version_schema(repo.latest_version(session, project.id))[0], bundle.schema, file, project_name
            )
    limits = Limits(max_text_chars=max_item_chars(), max_id_chars=repo.EXTERNAL_ID_CHARS)
    # Every record is checked against the file's own questions before the transaction, so a large file's
    # checks never hold the database; an existing project's questions are checked again inside it.
    checked = [_checked(record, {q.id: q for q in bundle.schema.questions}, file, limits) for record in bundle.records]

    def work(session) -> BundleReport:
        created = False
        try:
            project = repo.get_project(session, project_name)
            if new_project:
                raise repo.Conflict(f"a project named {project_name!r} already exists; pick another name")
        except repo.NotFound:
            project = repo.create_project(session, project_name, bundle.schema, actor, text_field=bundle.text_field)
            created = True
        version = repo.latest_version(session, project.id)
        schema, rows = repo.version_schema(version)
        if not created:
            _check_fits(schema, bundle.schema, file, project_name)
        questions = {q.id: q for q in schema.questions}
        rows_checked = checked if created else [_checked(r, questions, file, limits) for r in bundle.records]
        records = list(zip(bundle.records, rows_checked))
        item_ids, added, duplicates = _store_items(session, project.id, records, file)
        aliases = _meet_aliases(session, project.id, bundle.aliases, actor)
        if bundle.tool_settings:  # the latest file's word on its tool's settings
            project.tool_settings = {**(project.tool_settings or {}), **bundle.tool_settings}
        stored = store.stored_answers(session, item_ids, list(rows.values()))
        settled_before = store.stored_adjudications(session, item_ids, list(rows.values()))
        answers, fresh = 0, {}
        for (record, _), item_id in zip(records, item_ids):
            for answer in record.answers:
                predicted = any(m.question == answer.question for ms in record.predictions.values() for m in ms)
                given = _response(answer, questions[answer.question], item_id, rows, record.text, predicted)
                given = dataclasses.replace(given, annotator=aliases.get(given.annotator, given.annotator))
                if stored.get((item_id, given.question_id, given.annotator)) == _as_stored(given):
                    continue  # held already, as it is: no new revision
                answers += 1
                if created:  # nothing to update yet: stored together below (one person's last word kept)
                    fresh[(item_id, given.question_id, given.annotator)] = given
                else:
                    repo.respond(session, given)
        store.insert_new_responses(session, project.id, list(fresh.values()))
        for (record, _), item_id in zip(records, item_ids):
            for settled in record.adjudications:
                value = _settled_value(settled, questions[settled.question], record.text)
                row = rows[settled.question]
                reviewer = aliases.get(settled.reviewer, settled.reviewer)
                if settled_before.get((item_id, row)) == (value, reviewer, settled.comment):
                    continue
                repo.adjudicate(session, item_id, row, value, reviewer, settled.comment)
        suggestions = 0
        for key, info in bundle.runs.items():
            suggestions += _store_run(
                session, project.id, version, schema, rows, bundle, key, info, records, item_ids, actor
            )
        repo.log(
            session,
            actor,
            "project.imported",
            project.id,
            source=file[:500],
            items=added,
            duplicates=duplicates,
            answers=answers,
            runs=len(bundle.runs),
            suggestions=suggestions,
        )
        return BundleReport(
            project_name, created, added, duplicates, answers, len(bundle.runs), suggestions, tuple(bundle.notes)
        )

    return db.write(work)


def _meet_aliases(session, project_id: int, new: dict[str, str], actor: str) -> dict[str, str]:
    """Every name of one person this project has heard of (bundle.aliases, now and from earlier imports),
    with the answers stored under a person's other name carried under the one their answers carry."""
    known = store.annotator_aliases(session, project_id)
    told = {other: name for other, name in new.items() if known.get(other) != name}  # a re-import tells nothing
    if told:
        repo.log(session, actor, store.ALIASES_EVENT, project_id, aliases=told)
        for other, name in told.items():
            store.rename_annotator(session, project_id, other, name)
    return known | told


def _check_ids(bundle: Bundle, file: str) -> None:
    """Each id once in a file: two records under one id would share one item's answers and reads."""
    seen: dict[str, str] = {}
    for n, record in enumerate(bundle.records):
        if record.external_id is None:
            continue
        where = record.where or f"record {n + 1}"
        if record.external_id in seen:
            shown = record.external_id if len(record.external_id) <= 80 else record.external_id[:80] + "..."
            raise InterchangeError(
                file, where, "id", f"the id {shown!r} is {seen[record.external_id]}'s too; give each item its own id"
            )
        seen[record.external_id] = where


def _check_fits(stored: Schema, incoming: Schema, file: str, project: str) -> None:
    """An existing project takes a file only where every question of the file is one of its own, alike."""
    have = {q.id: q for q in stored.questions}
    for q in incoming.questions:
        mine = have.get(q.id)
        if mine is None:
            raise InterchangeError(
                file, None, q.id, f"project {project!r} has no such question; import into a new project instead"
            )
        if mine.kind != q.kind or mine.names != q.names:
            raise InterchangeError(
                file,
                None,
                q.id,
                f"project {project!r} asks it as a {mine.kind} question with answers {', '.join(mine.names) or '-'}, "
                f"the file as a {q.kind} question with answers {', '.join(q.names) or '-'}; import into a new project",
            )


def _checked(record: Record, questions: dict[str, Question], file: str, limits: Limits) -> Row:
    """The record as an import row, once every answer and suggestion in it fits its question."""
    where = record.where or f"item {record.external_id}"
    if not isinstance(record.text, str) or not record.text.strip():
        raise InterchangeError(file, where, "text", "the item has no text; give every item its text")
    if record.external_id is not None and not isinstance(record.external_id, str):
        raise InterchangeError(file, where, "id", "an item's id is text")
    found = item_problem(record.text, record.external_id, limits)
    if found is not None:
        raise InterchangeError(file, where, *found)
    for answer in record.answers:
        question = _question(questions, answer.question, file, where)
        try:
            _check_person(answer.annotator, "annotator")
            if answer.seconds is not None and not (
                isinstance(answer.seconds, (int, float)) and math.isfinite(answer.seconds) and answer.seconds >= 0
            ):
                raise ValueError(f"seconds {answer.seconds!r}: the time spent is a number of seconds, 0 or more")
            _human_value(answer, question, record.text)
        except ValueError as exc:
            shown = answer.annotator if isinstance(answer.annotator, str) and len(answer.annotator) <= 200 else "an"
            raise InterchangeError(file, where, answer.question, f"{shown!r}'s answer: {exc}") from None
    for settled in record.adjudications:
        question = _question(questions, settled.question, file, where)
        if not any(a.question == settled.question and a.status == "submitted" for a in record.answers):
            raise InterchangeError(
                file, where, settled.question, f"{settled.reviewer}'s adjudication settles no annotator's answer"
            )
        try:
            _check_person(settled.reviewer, "reviewer")
            _settled_value(settled, question, record.text)
        except ValueError as exc:
            raise InterchangeError(file, where, settled.question, f"{settled.reviewer}'s adjudication: {exc}") from None
    for key, answers in record.predictions.items():
        for answer in answers:
            question = _question(questions, answer.question, file, where)
            try:
                _model_answer(answer, question, record.text)
            except ValueError as exc:
                raise InterchangeError(file, where, answer.question, f"the prediction of {key!r}: {exc}") from None
    return Row(0, record.text, record.external_id, dict(record.fields))


PERSON_CHARS = 200  # the longest annotator or reviewer name the responses and adjudications tables hold


def _check_person(name: Any, role: str) -> None:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"the {role} is not named; every answer names who gave it")
    if len(name) > PERSON_CHARS:
        raise ValueError(f"the {role}'s name has {len(name):,} characters, over {PERSON_CHARS} characters; shorten it")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in name):
        raise ValueError(f"the {role}'s name holds a control character (a line break, NUL, ...); remove it")


def _question(questions: dict[str, Question], qid: str, file: str, where: str) -> Question:
    if qid not in questions:
        raise InterchangeError(file, where, qid, f"no such question; the questions are {', '.join(questions)}")
    return questions[qid]


def _spans(
    marks: tuple[SpanMark, ...] | None, value: str | None, question: Question, text: str, confidence: float = 1.0
) -> tuple[Span, ...]:
    """A span answer's spans, each checked against the item text; from the offsets in `value` where the file
    gave no spans of their own."""
    if marks is None:
        return parse_span_value(value or "", text, question.kind)
    spans = []
    for mark in marks:
        if not (0 <= mark.start < mark.end <= len(text)) or text[mark.start : mark.end] != mark.text:
            raise ValueError(
                f"the span {mark.start}-{mark.end} ({mark.text!r}) is not that text of the item: "
                f"the item holds {text[mark.start : mark.end]!r} there"
            )
        spans.append(Span(mark.start, mark.end, mark.text, confidence if mark.confidence is None else mark.confidence))
    if question.kind == "span" and len(spans) > 1:
        raise ValueError(f"a span question takes one span, not {len(spans)}")
    return tuple(sorted(spans, key=lambda s: (s.start, s.end)))


def _human_value(answer: HumanAnswer, question: Question, text: str) -> tuple[str | None, dict | None]:
    """The stored value and detail of a person's answer; ValueError says what does not fit."""
    if answer.status not in repo.STATUSES or answer.source not in repo.SOURCES:
        raise ValueError(f"status {answer.status!r} / source {answer.source!r} is not one diffjev keeps")
    if not isinstance(answer.annotator, str) or not answer.annotator.strip():
        raise ValueError("the answer names no annotator")
    if answer.status == "not_asked":
        return None, {"skipped": answer.skipped or {}}
    if answer.status == "skipped" or (answer.value is None and answer.spans is None):
        return None, None
    if question.type.reads == "span":
        spans = _spans(answer.spans, answer.value, question, text)
        return span_answer(question, span_value(spans), text)  # stored as the studio stores a person's spans
    return question.type.human_value(question, answer.value, text), None


def _as_stored(given: repo.ResponseInput) -> tuple[Any, ...]:
    return (given.value, given.status, given.source, given.detail)


def _settled_value(settled: Adjudication, question: Question, text: str) -> str:
    if question.type.reads == "span":
        return span_value(_spans(settled.spans, settled.value, question, text))
    return question.type.human_value(question, settled.value, text)


def _response(
    answer: HumanAnswer, question: Question, item_id: int, rows: dict[str, int], text: str, predicted: bool
) -> repo.ResponseInput:
    """`predicted`: the file holds a model's answer to the question for this item. The other tools show a
    prediction to whoever annotates (Label Studio's pre-annotations, Argilla's suggestions), so such an
    answer is not counted as a blind one: calibration's blind slice keeps to answers given without a
    suggestion in sight."""
    value, detail = _human_value(answer, question, text)
    status = "skipped" if answer.status == "submitted" and value is None and detail is None else answer.status
    return repo.ResponseInput(
        item_id,
        rows[question.id],
        answer.annotator,
        value,
        answer.source,
        status,
        suggestion_shown=predicted,
        seconds=answer.seconds,
        detail=detail,
    )


def _model_answer(answer: ModelAnswer, question: Question, text: str) -> Answer | SpanAnswer:
    """A model's answer as diffjev's read gives it; ValueError says what does not fit.

    An answer the file gave no score is stored as certain (the tool asserted it), so the queues rank it
    last; the read's diagnostics list it as unscored, and an export writes no score for it."""
    if answer.confidence is None:
        answer = dataclasses.replace(answer, confidence=1.0, distribution={answer.answer: 1.0})
    if not isinstance(answer.confidence, (int, float)) or not 0 <= answer.confidence <= 1:
        raise ValueError(f"confidence {answer.confidence!r} is not a probability from 0 to 1")
    if question.type.reads == "span":
        spans = _spans(answer.spans, answer.answer, question, text, answer.confidence)
        return SpanAnswer(question.id, question.kind, spans, float(answer.confidence), reads=1)
    if answer.answer not in question.names:
        raise ValueError(f"{answer.answer!r} is not an answer; answers: {', '.join(question.names)}")
    unknown = sorted(set(answer.distribution) - set(question.names))
    if unknown:
        raise ValueError(f"the distribution names {unknown[0]!r}, not an answer; answers: {', '.join(question.names)}")
    raw = [answer.distribution.get(name, 0.0) for name in question.names]
    if any(not isinstance(p, (int, float)) or math.isnan(p) or p < 0 for p in raw) or sum(raw) <= 0:
        raise ValueError("the distribution must give each answer a probability of 0 or more, not all 0")
    total = sum(raw)
    # a distribution that sums to 1 is kept as given (a round trip gives back the same numbers)
    probs = raw if abs(total - 1) < 1e-6 else [p / total for p in raw]
    ordered = sorted(probs, reverse=True)
    distribution = dict(zip(question.names, probs))
    return Answer(
        question_id=question.id,
        kind=question.kind,
        answer=answer.answer,
        probabilities=distribution,
        confidence=float(answer.confidence),  # the tool's score as given
        entropy=entropy(probs),
        margin=ordered[0] - (ordered[1] if len(ordered) > 1 else 0.0),
        label_mass=1.0,
        draws=1,
    )


def _store_items(session, project_id: int, records: list[tuple[Record, Row]], file: str) -> tuple[list[int], int, int]:
    """Each record's item id, storing those not stored yet (file order); and how many were added / there.
    A record whose id names a stored item of another text is refused: its answers and span offsets were
    given on its own text, not on the stored one."""
    rows = [row for _, row in records]
    by_id, by_hash = store.item_ids_by_key(
        session,
        project_id,
        [r.external_id for r in rows if r.external_id is not None],
        [r.content_hash for r in rows if r.external_id is None],
    )

    def known(row: Row) -> int | None:
        return by_id.get(row.external_id) if row.external_id is not None else by_hash.get(row.content_hash)

    stored_texts = store.texts_of(session, list(by_id.values()))
    for record, row in records:
        if row.external_id in by_id and stored_texts[by_id[row.external_id]] != row.text:
            raise InterchangeError(
                file,
                record.where or None,
                "id",
                f"an item with id {row.external_id!r} is stored already with another text; give the item "
                f"another id, or import into a new project",
            )

    fresh, seen = [], set()
    for row in rows:
        key = row.external_id if row.external_id is not None else row.content_hash
        if known(row) is None and key not in seen:
            seen.add(key)
            fresh.append(
                {
                    "external_id": row.external_id,
                    "content_hash": row.content_hash,
                    "text": row.text,
                    "fields": row.fields,
                    "import_id": None,
                    "image": None,
                }
            )
    repo.insert_items(session, project_id, fresh)
    by_id, by_hash = store.item_ids_by_key(
        session,
        project_id,
        [r.external_id for r in rows if r.external_id is not None],
        [r.content_hash for r in rows if r.external_id is None],
    )
    return [known(row) for row in rows], len(fresh), len(rows) - len(fresh)


def _store_run(
    session,
    project_id: int,
    version,
    schema: Schema,
    rows: dict[str, int],
    bundle: Bundle,
    key: str,
    info: RunInfo,
    records: list[tuple[Record, Row]],
    item_ids: list[int],
    actor: str,
) -> int:
    questions = {q.id: q for q in schema.questions}
    engine = info.engine or IMPORTED_ENGINE
    # A model run is one run of the project whichever file (or path to it) brings it: the run it was
    # exported from, else the run an earlier import of the same engine, model, version and key made.
    imported_as = "\x1f".join(map(str, (engine, info.model, info.model_version, key)))
    own = RUN_KEY.fullmatch(key)
    run = store.matching_run(
        session, project_id, imported_as, int(own[1]) if own else None, engine, info.model, info.model_version
    )
    if run is None:
        params = {"imported_as": imported_as, "imported_from": bundle.source, "key": key}
        run = repo.create_run(session, project_id, version, engine, info.model, info.model_version, params, actor)
    already = store.read_items(session, run.id, item_ids)
    results, count = [], 0
    for (record, _), item_id in zip(records, item_ids):
        answers = record.predictions.get(key)
        skipped = record.model_skipped.get(key) or {}
        if (not answers and not skipped) or item_id in already:
            continue
        read = {a.question: _model_answer(a, questions[a.question], record.text) for a in answers or ()}
        diagnostics: dict[str, Any] = {"imported": True}
        if skipped:
            diagnostics["skipped"] = skipped
        unscored = [a.question for a in answers or () if a.confidence is None]
        if unscored:
            diagnostics["unscored"] = unscored
        results.append((item_id, Decision(read, schema, diagnostics), None, 1, None))
        count += len(read)
    if results:
        repo.store_reads(session, run.id, rows, results)
    if run.status != "completed":
        repo.finish_run(session, run.id, "completed", None, actor)
    return count


# Out --------------------------------------------------------------------------------------------------------


RUN_KEY = re.compile(r"run-(\d{1,18})")


def run_key(run_id: int) -> str:
    """How a diffjev run is named in another tool's file (Label Studio's model_version, Argilla's agent)."""
    return f"run-{run_id}"


def project_bundle(
    db: Database,
    project_name: str,
    run_id: int | None = None,
    reviewed_only: bool = False,
    progress: Callable[[int], None] | None = None,
) -> Bundle:
    """The project as a Bundle: every item (or, with `reviewed_only`, those a person answered), each
    annotator's responses (submitted, skipped, draft and not asked, with why), and the suggestions of
    every run, or of `run_id` alone, with the questions each run's read skipped."""
    with db.read() as session:
        project = repo.get_project(session, project_name)
        if run_id is not None:
            repo.get_run(session, run_id, project.id)  # another project's run is not found
        schema, rows = repo.version_schema(repo.latest_version(session, project.id))
        runs = {
            run.id: RunInfo(run_key(run.id), run.engine, run.model_name, run.model_version)
            for run in store.runs_of(session, project.id, run_id)
        }
        project_id, text_field, tool_settings = project.id, project.text_field, dict(project.tool_settings or {})
    key_of = {row: key for key, row in rows.items()}
    kinds = {q.id: q for q in schema.questions}
    records: list[Record] = []
    after = 0
    while True:
        with db.read() as session:
            page = store.item_page(session, project_id, after, PAGE)
            if not page:
                break
            after = page[-1][0]
            ids = [item_id for item_id, *_ in page]
            responses = repo.every_answer_for(session, ids[0], ids[-1], list(rows.values()))
            settled = repo.adjudications_for(session, ids[0], ids[-1], list(rows.values()))
            suggestions = store.suggestions_of_every_run(session, ids, list(rows.values()), run_id)
            skipped, unscored = store.read_notes(session, ids, run_id)
        by_item: dict[int, Record] = {}
        for item_id, external_id, text, fields in page:
            by_item[item_id] = Record(text, external_id, dict(fields or {}), where=f"item {external_id or item_id}")
        for r in responses:
            question = kinds[key_of[r.question_id]]
            by_item[r.item_id].answers.append(_human_answer(r, question, by_item[r.item_id].text))
        for item_id, question_id, value, reviewer, comment in settled:
            question, record = kinds[key_of[question_id]], by_item[item_id]
            spans = None
            if question.type.reads == "span":
                spans = tuple(
                    SpanMark(s.start, s.end, s.text) for s in _stored_spans(value, None, question, record.text)
                )
            record.adjudications.append(Adjudication(question.id, reviewer, value, comment, spans))
        for s in suggestions:
            if s.run_id not in runs:
                continue
            question = kinds[key_of[s.question_id]]
            record = by_item[s.item_id]
            answer = _model_out(s, question, record.text)
            if question.id in unscored.get((s.run_id, s.item_id), ()):
                answer = _unscored(answer)
            record.predictions.setdefault(run_key(s.run_id), []).append(answer)
        for (run, item_id), record in skipped.items():
            if run in runs:
                by_item[item_id].model_skipped[run_key(run)] = record
        for record in by_item.values():
            if reviewed_only and not any(a.status in repo.DONE_STATUSES for a in record.answers):
                continue
            records.append(record)
        if progress:
            progress(len(records))
    runs_by_key = {info.key: info for info in runs.values()}
    return Bundle(schema, records, runs_by_key, text_field, project_name, tool_settings=tool_settings)


def _marks(spans: tuple[Span, ...]) -> tuple[SpanMark, ...]:
    return tuple(SpanMark(s.start, s.end, s.text, s.confidence) for s in spans)


def _human_answer(response, question: Question, text: str) -> HumanAnswer:
    skipped = (response.detail or {}).get("skipped") if response.status == "not_asked" else None
    spans = None
    if question.type.reads == "span" and response.value is not None:
        spans = tuple(
            SpanMark(s.start, s.end, s.text) for s in _stored_spans(response.value, response.detail, question, text)
        )
    return HumanAnswer(
        question.id,
        response.annotator,
        response.value,
        response.source,
        response.status,
        spans,
        skipped,
        response.seconds,
    )


def _stored_spans(value: str, detail: dict | None, question: Question, text: str) -> tuple[Span, ...]:
    """A stored span answer's spans: from its detail, else (an answer written without one) its offsets."""
    try:
        if detail and detail.get("spans") is not None:
            return spans_from_detail(detail, text)
        return parse_span_value(value, text, question.kind)
    except ValueError:
        return ()


def _model_out(suggestion, question: Question, text: str) -> ModelAnswer:
    spans = (
        _marks(_stored_spans(suggestion.answer, suggestion.detail, question, text))
        if question.type.reads == "span"
        else None
    )
    return ModelAnswer(
        question.id, suggestion.answer, dict(suggestion.distribution or {}), float(suggestion.confidence), spans
    )


def _unscored(answer: ModelAnswer) -> ModelAnswer:
    """An answer stored with the stand-in score of one a file gave without: without it again."""
    spans = None if answer.spans is None else tuple(dataclasses.replace(m, confidence=None) for m in answer.spans)
    return dataclasses.replace(answer, distribution={}, confidence=None, spans=spans)


# Files ------------------------------------------------------------------------------------------------------

IMPORT_FORMATS = ("labelstudio", "argilla", "hf")
EXPORT_FORMATS = ("labelstudio", "argilla")


def read_file(fmt: str, source: str | os.PathLike, config: str | os.PathLike | None = None) -> Bundle:
    """Another tool's file as a Bundle: a Label Studio JSON export (with its labeling config), an Argilla
    dataset folder as `Dataset.to_disk` writes it, or a Hugging Face dataset diffjev exported (its folder,
    or its Hub name)."""
    if fmt == "labelstudio":
        from diffjev.formats.labelstudio import read_labelstudio

        return read_labelstudio(source, config)
    if config is not None:
        raise SourceError(f"--config is for Label Studio exports; a {fmt} source carries its own settings")
    if fmt == "argilla":
        from diffjev.formats.argilla import read_argilla

        return read_argilla(source)
    if fmt == "hf":
        from diffjev.formats.hub import read_diffjev_export

        return read_diffjev_export(source)
    raise SourceError(f"unknown format {fmt!r}; use one of {', '.join(IMPORT_FORMATS)}")


def import_file(
    db: Database,
    project_name: str,
    fmt: str,
    source: str | os.PathLike,
    actor: str,
    config: str | os.PathLike | None = None,
) -> BundleReport:
    """Read the file whole, then store it in one transaction: a file that cannot be held stores nothing."""
    return import_bundle(db, project_name, read_file(fmt, source, config), actor)


def export_file(
    db: Database,
    project_name: str,
    fmt: str,
    target: str | os.PathLike,
    actor: str,
    run_id: int | None = None,
    reviewed_only: bool = True,
    ls_user_ids: bool = False,
) -> int:
    """Write the project for another tool (every run's suggestions, or `run_id`'s); returns the items written.
    `ls_user_ids`: Label Studio's `completed_by` as each annotator's user id (write_labelstudio)."""
    if fmt not in EXPORT_FORMATS:
        raise SourceError(f"unknown format {fmt!r}; use one of {', '.join(EXPORT_FORMATS)}")
    bundle = project_bundle(db, project_name, run_id=run_id, reviewed_only=reviewed_only)
    if fmt == "labelstudio":
        from diffjev.formats.labelstudio import write_labelstudio

        write_labelstudio(bundle, target, user_ids=ls_user_ids)
    else:
        from diffjev.formats.argilla import write_argilla

        write_argilla(bundle, target)
    with db.session() as session:
        project_id = repo.get_project(session, project_name).id
        repo.log(
            session, actor, "export.written", project_id, target=str(target), format=fmt, items=len(bundle.records)
        )
    return len(bundle.records)
