"""Every query diffjev makes, in one place. Functions take a Session (one unit of work) and plain values."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable, Sequence

from sqlalchemy import Text, and_, case, cast, delete, false, func, insert, or_, select, update
from sqlalchemy.orm import Session, aliased

from diffjev.decide import Decision
from diffjev.schema import Schema, question_to_dict
from diffjev.spans import SpanAnswer, spans_detail
from storage.models import (
    Adjudication,
    Event,
    Item,
    ItemRead,
    Lease,
    Project,
    Question,
    Response,
    Run,
    SchemaQuestion,
    SchemaVersion,
    Suggestion,
    utcnow,
)

QUEUE_ORDER = {
    "in_order": Suggestion.item_id.asc(),
    "least_confidence": Suggestion.confidence.asc(),
    "margin": Suggestion.margin.asc(),
    "entropy": Suggestion.entropy.desc(),
    "stderr": Suggestion.stderr.desc().nulls_last(),
}


class NotFound(LookupError):
    """A project, run or item that does not exist; the message names it."""


class Conflict(ValueError):
    """A write that contradicts what is stored (a project name taken); the message says what to do."""


def stable_hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def log(
    session: Session,
    actor: str,
    kind: str,
    project_id: int | None,
    item_id: int | None = None,
    question_id: int | None = None,
    **payload: Any,
) -> None:
    session.execute(
        insert(Event).values(
            actor=actor,
            kind=kind,
            project_id=project_id,
            item_id=item_id,
            question_id=question_id,
            payload=payload,
            at=utcnow(),
        )
    )


# Projects and schemas ---------------------------------------------------------------------------------


def get_project(session: Session, name: str) -> Project:
    project = session.scalar(select(Project).where(Project.name == name))
    if project is None:
        names = session.scalars(select(Project.name).order_by(Project.name)).all()
        raise NotFound(
            f"no project named {name!r}; the projects are: {', '.join(names) or 'none yet'}"
            + ("" if names else " (create one with `diffjev init`)")
        )
    return project


PROJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,99}")


def create_project(session: Session, name: str, schema: Schema, actor: str, text_field: str = "text") -> Project:
    # A project's name ends up in export file names: no slashes, no leading dot, nothing to escape a folder.
    if not isinstance(name, str) or not PROJECT_NAME.fullmatch(name):
        raise Conflict(
            f"project name {name!r}: use letters, digits, spaces, '.', '_' or '-' (up to 100), "
            f"starting with a letter or digit"
        )
    if session.scalar(select(Project.id).where(Project.name == name)) is not None:
        raise Conflict(
            f"a project named {name!r} already exists; pick another name, or save a new schema version to it"
        )
    project = Project(name=name, text_field=text_field)
    session.add(project)
    session.flush()
    save_schema(session, project, schema, actor)
    log(session, actor, "project.created", project.id, name=name)
    return project


def set_members(session: Session, project_name: str, members: Sequence[str] | None, actor: str) -> list[str] | None:
    """Restrict a project to the named users (None: open to every user who can log in); returns the
    members as stored."""
    project = get_project(session, project_name)
    if members is not None:
        members = sorted({m.strip() for m in members if m.strip()})
        if not members:
            raise Conflict(f"project {project_name!r}: name at least one member, or open it to every user")
    project.members = members
    log(session, actor, "project.members", project.id, members=members)
    return members


def is_member(session: Session, project_name: str, user: str) -> bool:
    """Whether the user may use the project: it is open to every user, or names them. No such project: no."""
    found = session.execute(select(Project.members).where(Project.name == project_name)).first()
    return found is not None and (found.members is None or user in found.members)


def set_reviewers(session: Session, project_name: str, reviewers: Sequence[str] | None, actor: str) -> list[str]:
    """The users who may adjudicate, delete and change the schema of the project besides the studio's
    admins (none: an empty list); returns them as stored."""
    project = get_project(session, project_name)
    kept = sorted({r.strip() for r in reviewers or () if r.strip()})
    outside = [r for r in kept if project.members is not None and r not in project.members]
    if outside:  # a restricted project's reviewers are among its members, or removing a member would not remove them
        raise Conflict(
            f"project {project_name!r}: {', '.join(outside)} not among its members ({', '.join(project.members)}); "
            f"add them as members first"
        )
    project.reviewers = kept or None
    log(session, actor, "project.reviewers", project.id, reviewers=kept)
    return kept


@dataclass(frozen=True)
class Access:
    """What a user may do in a project, and which project it is: its id and when it was made tell it
    apart from a project of the same name made after it was deleted (SQLite reuses a deleted row's id)."""

    project_id: int
    role: str  # "admin", "reviewer" or "annotator"
    created_at: datetime


def project_access(session: Session, project_name: str, user: str, admin: bool) -> Access | None:
    """The user's access to the project, or None where they may not open it: not a member, an annotator of
    an archived project, or no such project (a name no project can have, such as one holding a NUL that
    PostgreSQL cannot even compare, is not looked up).

    A project that restricts its members restricts its reviewers too. A project that names no reviewers
    is run by every member, as before roles existed; naming reviewers leaves the other members answering
    only. An archived project is open to its admins and named reviewers alone."""
    if not isinstance(project_name, str) or not PROJECT_NAME.fullmatch(project_name):
        return None
    found = session.execute(
        select(Project.id, Project.members, Project.reviewers, Project.archived_at, Project.created_at).where(
            Project.name == project_name
        )
    ).first()
    if found is None:
        return None
    role = role_in(user, admin, found.members, found.reviewers, found.archived_at)
    return Access(found.id, role, found.created_at) if role else None


def role_in(user: str, admin: bool, members: list | None, reviewers: list | None, archived_at: Any) -> str | None:
    """The user's role in a project with these members, reviewers and archiving ("admin", "reviewer",
    "annotator"), or None where they may not open it: the one rule of who may do what (see project_access)."""
    if admin:
        return "admin"
    if members is not None and user not in members:
        return None
    if reviewers is None:  # none named: every member runs the project, while it is not archived
        return "reviewer" if archived_at is None else None
    if user in reviewers:
        return "reviewer"
    return "annotator" if archived_at is None else None


def openable_projects(session: Session, user: str, admin: bool) -> list[str]:
    """The names of the projects the user may open, oldest first (archived ones only for those who may)."""
    rows = session.execute(
        select(Project.name, Project.members, Project.reviewers, Project.archived_at).order_by(Project.id)
    )
    return [name for name, members, reviewers, archived in rows if role_in(user, admin, members, reviewers, archived)]


def member_of_any(session: Session, user: str, admin: bool = False) -> bool:
    """Whether the user may open at least one project."""
    return bool(openable_projects(session, user, admin))


def save_schema(session: Session, project: Project, schema: Schema, actor: str) -> SchemaVersion:
    """A new schema version, unless nothing changed. Unchanged questions keep their rows (and answers)."""
    current = latest_version(session, project.id)
    if current is not None and current.schema == schema.to_dict():
        return current
    version = SchemaVersion(
        project_id=project.id,
        version=(current.version + 1) if current else 1,
        schema=schema.to_dict(),
        template_hash=stable_hash(schema.template.text if schema.template else ""),  # span questions alone: none
        created_by=actor,
    )
    session.add(version)
    for position, q in enumerate(schema.questions):
        spec = question_to_dict(q)
        spec_hash = stable_hash(spec)
        row = session.scalar(
            select(Question).where(
                Question.project_id == project.id, Question.key == q.id, Question.spec_hash == spec_hash
            )
        )
        if row is None:
            row = Question(project_id=project.id, key=q.id, kind=q.kind, spec=spec, spec_hash=spec_hash)
            session.add(row)
            session.flush()
        version.members.append(SchemaQuestion(question_id=row.id, position=position))
    session.flush()
    log(session, actor, "schema.saved", project.id, version=version.version)
    return version


def latest_version(session: Session, project_id: int) -> SchemaVersion | None:
    return session.scalar(
        select(SchemaVersion)
        .where(SchemaVersion.project_id == project_id)
        .order_by(SchemaVersion.version.desc())
        .limit(1)
    )


def hidden_fields(session: Session, project_id: int) -> set[str]:
    """The item fields the project's latest schema keeps off the annotator's view (validated when saved,
    so read straight from the stored JSON: this runs for every card)."""
    version = latest_version(session, project_id)
    return set(version.schema.get("hidden_fields", ())) if version is not None else set()


def version_schema(version: SchemaVersion) -> tuple[Schema, dict[str, int]]:
    """The Schema of a stored version, and each question key's row id."""
    return Schema.from_dict(version.schema), {m.question.key: m.question_id for m in version.members}


# Items ------------------------------------------------------------------------------------------------


def existing_keys(
    session: Session, project_id: int, external_ids: Sequence[str], content_hashes: Sequence[str]
) -> tuple[set[str], set[str]]:
    """Which of these external ids, and content hashes of items without one, are stored already."""
    ids = (
        set(
            session.scalars(
                select(Item.external_id).where(Item.project_id == project_id, Item.external_id.in_(external_ids))
            )
        )
        if external_ids
        else set()
    )
    hashes = (
        set(
            session.scalars(
                select(Item.content_hash).where(
                    Item.project_id == project_id, Item.external_id.is_(None), Item.content_hash.in_(content_hashes)
                )
            )
        )
        if content_hashes
        else set()
    )
    return ids, hashes


# The longest external id the items table holds; an import rejects a longer one by its line, since
# PostgreSQL refuses it (and SQLite would store it, so the two would differ).
EXTERNAL_ID_CHARS: int = Item.__table__.c.external_id.type.length


def insert_items(session: Session, project_id: int, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        now = utcnow()
        # Core insert on the session's connection: the ORM's bulk path costs more than SQLite here.
        session.connection().execute(
            insert(Item.__table__), [{**r, "project_id": project_id, "created_at": now} for r in rows]
        )


def count_items(session: Session, project_id: int) -> int:
    return session.scalar(select(func.count()).select_from(Item).where(Item.project_id == project_id)) or 0


# Runs and suggestions ---------------------------------------------------------------------------------


def create_run(
    session: Session,
    project_id: int,
    version: SchemaVersion,
    engine: str,
    model_name: str,
    model_version: str | None,
    params: dict[str, Any],
    actor: str,
) -> Run:
    run = Run(
        project_id=project_id,
        schema_version_id=version.id,
        engine=engine,
        model_name=model_name,
        model_version=model_version,
        template_hash=version.template_hash,
        params=params,
        status="running",
    )
    session.add(run)
    session.flush()
    log(session, actor, "run.started", project_id, run_id=run.id, engine=engine, model=model_name)
    return run


def get_run(session: Session, run_id: int, project_id: int | None = None) -> Run:
    """A run by id; with `project_id`, only a run of that project (another project's run is not found)."""
    run = session.get(Run, run_id) if _is_row_id(run_id) else None
    if run is None or (project_id is not None and run.project_id != project_id):
        raise NotFound(f"no run {run_id} in this project" if project_id is not None else f"no run with id {run_id}")
    return run


def project_item(session: Session, project_id: int, item_id: int) -> Item:
    """An item looked up through its project: another project's id is simply not found."""
    item = session.get(Item, item_id) if _is_row_id(item_id) else None
    if item is None or item.project_id != project_id:
        raise NotFound(f"no item {item_id} in this project")
    return item


def _is_row_id(value: object) -> bool:
    """Whether an id from the outside can name a row at all: a whole number a database integer holds (a
    larger one would make the driver raise instead of finding nothing)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


def latest_run(session: Session, project_id: int, unfinished_only: bool = False) -> Run | None:
    """The newest run whatever it holds (with `unfinished_only`, the newest one to resume). Queues and
    exports never take it as such: see latest_read_run and the suggestions' `is_current`."""
    query = select(Run).where(Run.project_id == project_id)
    if unfinished_only:
        query = query.where(Run.status.in_(("running", "cancelled", "interrupted")))
    return session.scalar(query.order_by(Run.id.desc()).limit(1))


def run_reading(session: Session, project_id: int) -> bool:
    """Whether a run of the project is reading now: the items it has not read yet wait for their read."""
    running = select(Run.id).where(Run.project_id == project_id, Run.status == "running")
    return session.scalar(select(running.exists())) or False


def _has_reads(run_id_column) -> Any:
    return select(ItemRead.id).where(ItemRead.run_id == run_id_column, ItemRead.status == "ok").exists()


def latest_read_run(session: Session, project_id: int, before: int | None = None) -> Run | None:
    """The newest run with at least one successful read (older than run `before`, if given): a run that
    was refused, failed at once, or has stored nothing yet is never the one a queue compares."""
    query = select(Run).where(Run.project_id == project_id, _has_reads(Run.id))
    if before is not None:
        query = query.where(Run.id < before)
    return session.scalar(query.order_by(Run.id.desc()).limit(1))


@dataclass(frozen=True)
class RunRow:
    """One run as the run list shows it."""

    id: int
    engine: str
    model: str
    status: str
    read: int
    failed: int
    started_at: Any
    finished_at: Any
    error: str | None


def list_runs(session: Session, project_id: int) -> list[RunRow]:
    """The project's runs, newest first, each with its count of read and failed items."""
    counts = (
        select(
            ItemRead.run_id,
            func.sum(case((ItemRead.status == "ok", 1), else_=0)).label("read"),
            func.sum(case((ItemRead.status == "failed", 1), else_=0)).label("failed"),
        )
        .group_by(ItemRead.run_id)
        .subquery()
    )
    rows = session.execute(
        select(Run, counts.c.read, counts.c.failed)
        .outerjoin(counts, counts.c.run_id == Run.id)
        .where(Run.project_id == project_id)
        .order_by(Run.id.desc())
    ).all()
    return [
        RunRow(
            run.id,
            run.engine,
            run.model_name,
            run.status,
            int(read or 0),
            int(failed or 0),
            run.started_at,
            run.finished_at,
            run.error,
        )
        for run, read, failed in rows
    ]


def delete_run(session: Session, project_id: int, run_id: int, actor: str) -> dict[str, int]:
    """Delete a run with its reads and suggestions; answers stay (they lose the link to a suggestion they
    were given). Where the run's suggestion was an item's current one, the newest remaining one becomes
    current. Returns the run's counts, which the audit trail keeps."""
    run = get_run(session, run_id, project_id)
    counts = run_counts(session, run_id)
    suggestions = select(Suggestion.id).where(Suggestion.run_id == run_id)
    session.execute(update(Response).where(Response.suggestion_id.in_(suggestions)).values(suggestion_id=None))
    session.execute(delete(Suggestion).where(Suggestion.run_id == run_id))
    session.execute(delete(ItemRead).where(ItemRead.run_id == run_id))
    log(
        session,
        actor,
        "run.deleted",
        project_id,
        run_id=run_id,
        engine=run.engine,
        model=run.model_name,
        status=run.status,
        read=counts.get("ok", 0),
        failed=counts.get("failed", 0),
    )
    session.delete(run)
    session.flush()
    _restore_current(session, project_id)
    return counts


def _restore_current(session: Session, project_id: int) -> None:
    """Give every item and question of the project without a current suggestion its newest one."""
    newer = aliased(Suggestion)
    newest = (
        select(func.max(newer.run_id))
        .where(newer.item_id == Suggestion.item_id, newer.question_id == Suggestion.question_id)
        .scalar_subquery()
    )
    session.execute(
        update(Suggestion)
        .where(
            Suggestion.question_id.in_(select(Question.id).where(Question.project_id == project_id)),
            ~Suggestion.is_current,
            Suggestion.run_id == newest,
        )
        .values(is_current=True)
        .execution_options(synchronize_session=False)
    )


def mark_interrupted(session: Session, actor: str, keep: Sequence[int] = ()) -> list[int]:
    """Runs left "running" by a studio that stopped (killed, restarted) are interrupted: nothing reads
    them any more, and they can be resumed. `keep`: runs still reading. Returns the ids marked."""
    ids = [i for i in session.scalars(select(Run.id).where(Run.status == "running")) if i not in set(keep)]
    for run in session.scalars(select(Run).where(Run.id.in_(ids))):
        run.status = "interrupted"
        log(session, actor, "run.interrupted", run.project_id, run_id=run.id)
    return ids


def _pending(project_id: int, run_id: int, only_unlabeled: bool, unsure_in: tuple[int, float] | None = None) -> list:
    """The conditions on Item for "this run has no successful read of it yet" (and, if asked, "nobody
    has answered it", and "run R's read of it was unsure": a question's entropy above the threshold)."""
    done = select(ItemRead.id).where(ItemRead.run_id == run_id, ItemRead.item_id == Item.id, ItemRead.status == "ok")
    conditions = [Item.project_id == project_id, ~done.exists()]
    if only_unlabeled:
        answered = select(Response.id).where(Response.item_id == Item.id, Response.status == "submitted")
        conditions.append(~answered.exists())
    if unsure_in is not None:
        first_run, threshold = unsure_in
        unsure = select(Suggestion.id).where(
            Suggestion.run_id == first_run, Suggestion.item_id == Item.id, Suggestion.entropy > threshold
        )
        conditions.append(unsure.exists())
    return conditions


def pending_item_ids(
    session: Session,
    project_id: int,
    run_id: int,
    after_id: int,
    limit: int,
    only_unlabeled: bool = False,
    unsure_in: tuple[int, float] | None = None,
) -> list[int]:
    """Items this run has no successful read of yet, in id order, after `after_id`."""
    query = select(Item.id).where(Item.id > after_id, *_pending(project_id, run_id, only_unlabeled, unsure_in))
    return list(session.scalars(query.order_by(Item.id).limit(limit)))


def count_pending(
    session: Session,
    project_id: int,
    run_id: int,
    only_unlabeled: bool = False,
    unsure_in: tuple[int, float] | None = None,
) -> int:
    query = select(func.count()).select_from(Item).where(*_pending(project_id, run_id, only_unlabeled, unsure_in))
    return session.scalar(query) or 0


def reads_mark(session: Session, project_id: int) -> tuple:
    """A mark that changes whenever the project's newest run stores a read or changes its status: a page
    waiting for suggestions compares it to the last one it saw before it looks for them again."""
    run = latest_run(session, project_id)
    if run is None:
        return ()
    last_read = session.scalar(select(func.max(ItemRead.id)).where(ItemRead.run_id == run.id))
    return run.id, run.status, last_read


def count_unsure(session: Session, run_id: int, threshold: float) -> int:
    """Items whose read in the run left an answer unsure: its entropy above `threshold`."""
    query = select(func.count(Suggestion.item_id.distinct())).where(
        Suggestion.run_id == run_id, Suggestion.entropy > threshold
    )
    return session.scalar(query) or 0


def items_by_id(session: Session, ids: Sequence[int]) -> list[Item]:
    by_id = {item.id: item for item in session.scalars(select(Item).where(Item.id.in_(ids)))}
    return [by_id[i] for i in ids]


def store_reads(
    session: Session,
    run_id: int,
    question_rows: dict[str, int],
    results: Sequence[tuple[int, Decision | None, str | None, int, float | None]],
) -> None:
    """One batch of reads, in the caller's transaction: per item, its read row and its suggestions.

    `results` holds (item id, decision or None, error or None, attempts, latency ms). A failed read of
    an earlier attempt at this run is replaced; an item this run already read successfully keeps that
    read and its suggestions (answers may point at them), and the new result for it is dropped. So two
    readers of one run (two studios sharing the database resumed it at once) store each item once.
    """
    already_read = set(
        session.scalars(
            select(ItemRead.item_id).where(
                ItemRead.run_id == run_id, ItemRead.item_id.in_([r[0] for r in results]), ItemRead.status == "ok"
            )
        )
    )
    results = [r for r in results if r[0] not in already_read]
    if not results:
        return
    item_ids = [r[0] for r in results]
    session.execute(delete(ItemRead).where(ItemRead.run_id == run_id, ItemRead.item_id.in_(item_ids)))
    answered = answered_pairs(session, item_ids, list(question_rows.values()))
    now = utcnow()
    reads, suggestions = [], []
    for item_id, decision, error, attempts, latency in results:
        reads.append(
            {
                "run_id": run_id,
                "item_id": item_id,
                "status": "ok" if decision else "failed",
                "attempts": attempts,
                "error": error,
                "latency_ms": latency,
                "created_at": now,
                "diagnostics": decision.diagnostics if decision else None,
            }
        )
        if decision is None:
            continue
        for key, answer in decision.answers.items():
            qid = question_rows[key]
            row = _span_suggestion(answer) if isinstance(answer, SpanAnswer) else _label_suggestion(answer)
            row.update(run_id=run_id, item_id=item_id, question_id=qid, latency_ms=latency)
            row["is_open"] = (item_id, qid) not in answered
            suggestions.append(row)
    # Core inserts, one executemany each: the ORM's bulk insert sent 2,700 statements for 20 batches of
    # 64 reads (measured), more than half the cost of storing a read.
    session.execute(insert(ItemRead.__table__), reads)
    if suggestions:
        _take_current(session, run_id, suggestions)
        session.execute(insert(Suggestion.__table__), suggestions)


def _label_suggestion(answer: Any) -> dict[str, Any]:
    """A label answer's suggestion columns: its distribution over the answer names and what follows from it."""
    return {
        "answer": answer.answer,
        "distribution": answer.probabilities,
        "confidence": answer.confidence,
        "full_vocab_confidence": answer.full_vocab_confidence,
        "entropy": answer.entropy,
        "margin": answer.margin,
        "label_mass": answer.label_mass,
        "stderr": answer.stderr,
        "agreement": answer.agreement,
        "draws": answer.draws,
        "value": answer.value,
        "detail": None,
    }


def _span_suggestion(answer: SpanAnswer) -> dict[str, Any]:
    """A span answer's suggestion columns. It has no distribution over names: the answer name is the spans'
    offsets ("12-18", "none"), the spans themselves go in `detail`, and the queue orders stay meaningful
    with margin = confidence, entropy 0 and the whole mass on the answer."""
    return {
        "answer": answer.answer,
        "distribution": {},
        "confidence": answer.confidence,
        "full_vocab_confidence": answer.confidence,
        "entropy": 0.0,
        "margin": answer.confidence,
        "label_mass": 1.0,
        "stderr": None,
        "agreement": None,
        "draws": answer.reads,
        "value": None,
        "detail": spans_detail(answer.spans),
    }


def _take_current(session: Session, run_id: int, suggestions: list[dict[str, Any]]) -> None:
    """Mark each new suggestion current unless a newer run already read its item and question (a resumed
    older run), and clear the flag on the older runs' suggestions of the items it becomes current for."""
    item_ids = sorted({s["item_id"] for s in suggestions})
    question_ids = sorted({s["question_id"] for s in suggestions})
    newer = set(
        session.execute(
            select(Suggestion.item_id, Suggestion.question_id).where(
                Suggestion.item_id.in_(item_ids), Suggestion.question_id.in_(question_ids), Suggestion.run_id > run_id
            )
        ).tuples()
    )
    for suggestion in suggestions:
        suggestion["is_current"] = (suggestion["item_id"], suggestion["question_id"]) not in newer
    session.execute(
        update(Suggestion)
        .where(
            Suggestion.item_id.in_(item_ids),
            Suggestion.question_id.in_(question_ids),
            Suggestion.run_id < run_id,
            Suggestion.is_current,
        )
        .values(is_current=False)
        .execution_options(synchronize_session=False)
    )


def finish_run(session: Session, run_id: int, status: str, error: str | None, actor: str) -> None:
    run = get_run(session, run_id)
    run.status, run.error, run.finished_at = status, error, utcnow()
    log(session, actor, f"run.{status}", run.project_id, run_id=run_id, error=error)


def run_counts(session: Session, run_id: int) -> dict[str, int]:
    rows = session.execute(
        select(ItemRead.status, func.count()).where(ItemRead.run_id == run_id).group_by(ItemRead.status)
    ).all()
    return {status: n for status, n in rows}


def failed_reads(session: Session, run_id: int, limit: int = 100) -> list[tuple[int, str | None, str]]:
    """(item id, external id, error) of the run's failed items."""
    rows = session.execute(
        select(Item.id, Item.external_id, ItemRead.error)
        .join(Item, Item.id == ItemRead.item_id)
        .where(ItemRead.run_id == run_id, ItemRead.status == "failed")
        .order_by(Item.id)
        .limit(limit)
    ).all()
    return [(i, e, err or "") for i, e, err in rows]


# Queues -----------------------------------------------------------------------------------------------


def of_run(run_id: int | None, suggestion: Any = Suggestion) -> Any:
    """Suggestions of one run, or (None) each item's current suggestion: the latest run that read it."""
    return suggestion.run_id == run_id if run_id is not None else suggestion.is_current


def current_answer(item_id_column: Any, question_id: int, annotator: str, run_id: int | None) -> Any:
    """SQL: an item's current answer to a question, as the annotator's card stands: their own settled
    answer (NULL where they were not asked it), else the model's suggestion (of run `run_id`, or the
    current one; NULL where the model's read skipped it)."""
    own = aliased(Response)
    mine = select(own.value).where(
        own.item_id == item_id_column,
        own.question_id == question_id,
        own.annotator == annotator,
        own.status.in_(DONE_STATUSES),
    )
    model = aliased(Suggestion)
    suggested = select(model.answer).where(
        of_run(run_id, model), model.item_id == item_id_column, model.question_id == question_id
    )
    return case((mine.exists(), mine.limit(1).scalar_subquery()), else_=suggested.limit(1).scalar_subquery())


def answers_meet(conditions: Sequence[tuple[int, Sequence[str]]], annotator: str, run_id: int | None) -> Any:
    """For a queue's `applies`: item id column -> SQL condition that each (question id, wanted answers) of
    a staged question's `ask_if` holds for the item's current answer (see `current_answer`). A question
    not answered, or not asked itself, meets no condition, so the questions after it drop out too."""

    def applies(item_id_column: Any) -> Any:
        return and_(
            *[current_answer(item_id_column, row, annotator, run_id).in_(list(wanted)) for row, wanted in conditions]
        )

    return applies


def current_answers(
    session: Session, item_id: int, question_rows: dict[str, int], annotator: str, run_id: int | None = None
) -> dict[str, str | None]:
    """question key -> an item's current answer, as `current_answer` reads it, for the given questions."""
    rows = list(question_rows.values())
    mine = dict(
        session.execute(
            select(Response.question_id, Response.value).where(
                Response.item_id == item_id,
                Response.question_id.in_(rows),
                Response.annotator == annotator,
                Response.status.in_(DONE_STATUSES),
            )
        ).all()
    )
    suggested = dict(
        session.execute(
            select(Suggestion.question_id, Suggestion.answer).where(
                of_run(run_id), Suggestion.item_id == item_id, Suggestion.question_id.in_(rows)
            )
        ).all()
    )
    return {key: mine[row] if row in mine else suggested.get(row) for key, row in question_rows.items()}


def next_in_queue(
    session: Session,
    run_id: int | None,
    question_id: int,
    strategy: str,
    exclude: Iterable[int] = (),
    start_at: int | None = None,
    shares: Sequence[tuple[int, int]] | None = None,
    applies: Any = None,
) -> int | None:
    """The next open item for one question of one run (None: of each item's current suggestion), by the
    strategy's order; with `start_at`, the first open item at or after that id (wrapping around), which
    is how a random pick stays an index seek."""
    if strategy not in QUEUE_ORDER:
        raise ValueError(f"unknown queue {strategy!r}; choose one of {', '.join(QUEUE_ORDER)}")
    query = select(Suggestion.item_id).where(of_run(run_id), Suggestion.question_id == question_id, Suggestion.is_open)
    query = narrowed(query, Suggestion.item_id, exclude, shares, applies)
    if start_at is not None:
        found = session.scalar(query.where(Suggestion.item_id >= start_at).order_by(Suggestion.item_id).limit(1))
        return found if found is not None else session.scalar(query.order_by(Suggestion.item_id).limit(1))
    return session.scalar(query.order_by(QUEUE_ORDER[strategy], Suggestion.item_id).limit(1))


def open_candidates(
    session: Session,
    run_id: int | None,
    question_id: int,
    strategy: str,
    exclude: Iterable[int],
    limit: int,
    shares: Sequence[tuple[int, int]] | None = None,
    applies: Any = None,
) -> list[tuple[int, str]]:
    """(item id, text) of the first open items by a strategy's order."""
    query = (
        select(Suggestion.item_id, Item.text)
        .join(Item, Item.id == Suggestion.item_id)
        .where(of_run(run_id), Suggestion.question_id == question_id, Suggestion.is_open)
    )
    query = narrowed(query, Suggestion.item_id, exclude, shares, applies)
    return [tuple(r) for r in session.execute(query.order_by(QUEUE_ORDER[strategy], Suggestion.item_id).limit(limit))]


def recent_texts(session: Session, question_id: int, annotator: str, limit: int) -> list[str]:
    return list(
        session.scalars(
            select(Item.text)
            .join(Response, Response.item_id == Item.id)
            .where(Response.question_id == question_id, Response.annotator == annotator)
            .order_by(Response.updated_at.desc())
            .limit(limit)
        )
    )


def previous_run(session: Session, project_id: int, run_id: int) -> int | None:
    """The newest run before this one that read something: the one a comparison of runs sets it against."""
    run = latest_read_run(session, project_id, before=run_id)
    return run.id if run else None


def next_run_disagreement(
    session: Session,
    run_id: int,
    other_run: int,
    question_id: int,
    exclude: Iterable[int],
    shares: Sequence[tuple[int, int]] | None = None,
    applies: Any = None,
) -> int | None:
    """The least confident open item on which two runs give different answers."""
    other = aliased(Suggestion)
    query = (
        select(Suggestion.item_id)
        .join(
            other,
            (other.item_id == Suggestion.item_id)
            & (other.question_id == Suggestion.question_id)
            & (other.run_id == other_run),
        )
        .where(
            Suggestion.run_id == run_id,
            Suggestion.question_id == question_id,
            Suggestion.is_open,
            Suggestion.answer != other.answer,
        )
    )
    query = narrowed(query, Suggestion.item_id, exclude, shares, applies)
    return session.scalar(query.order_by(Suggestion.confidence, Suggestion.item_id).limit(1))


def next_human_disagreement(
    session: Session,
    run_id: int | None,
    question_id: int,
    annotator: str,
    exclude: Iterable[int],
    shares: Sequence[tuple[int, int]] | None = None,
    applies: Any = None,
) -> int | None:
    """An item another annotator answered differently from the model, that this annotator has not answered:
    a second opinion where the first human and the model disagree."""
    own = aliased(Response)
    mine = select(own.id).where(
        own.item_id == Suggestion.item_id, own.question_id == question_id, own.annotator == annotator
    )
    query = (
        select(Suggestion.item_id)
        .join(Response, (Response.item_id == Suggestion.item_id) & (Response.question_id == Suggestion.question_id))
        .where(
            of_run(run_id),
            Suggestion.question_id == question_id,
            Response.status == "submitted",
            Response.annotator != annotator,
            Response.value != Suggestion.answer,
            ~mine.exists(),
        )
    )
    query = narrowed(query, Suggestion.item_id, exclude, shares, applies)
    return session.scalar(query.order_by(Suggestion.item_id).limit(1))


def next_overlap(
    session: Session,
    project_id: int,
    question_id: int,
    annotator: str,
    share_percent: int,
    exclude: Iterable[int],
    shares: Sequence[tuple[int, int]] | None = None,
    applies: Any = None,
) -> int | None:
    """An item in the double-annotation share (a fixed hash of its id below the share) that exactly one
    other annotator has answered and this one has not: the second answer for agreement."""
    own = aliased(Response)
    mine = select(own.id).where(
        own.item_id == Response.item_id, own.question_id == question_id, own.annotator == annotator
    )
    query = (
        select(Response.item_id)
        .join(Item, Item.id == Response.item_id)
        .where(
            Item.project_id == project_id,
            Response.question_id == question_id,
            Response.status == "submitted",
            Response.annotator != annotator,
            (Response.item_id * 7919) % 100 < share_percent,
            ~mine.exists(),
        )
        .group_by(Response.item_id)
        .having(func.count() == 1)
    )
    query = narrowed(query, Response.item_id, exclude, shares, applies)
    return session.scalar(query.order_by(Response.item_id).limit(1))


def next_changed_since_seen(
    session: Session,
    run_id: int,
    question_id: int,
    since,
    exclude: Iterable[int],
    shares: Sequence[tuple[int, int]] | None = None,
    applies: Any = None,
) -> int | None:
    """An answered item whose suggestion in this run differs from the one the human saw, not looked at
    again since this run started: a second look after a new run."""
    seen = aliased(Suggestion)
    query = (
        select(Response.item_id)
        .join(seen, seen.id == Response.suggestion_id)
        .join(
            Suggestion,
            (Suggestion.item_id == Response.item_id)
            & (Suggestion.question_id == Response.question_id)
            & (Suggestion.run_id == run_id),
        )
        .where(
            Response.question_id == question_id,
            Response.status == "submitted",
            seen.run_id != run_id,
            seen.answer != Suggestion.answer,
            Response.updated_at < since,
        )
    )
    query = narrowed(query, Response.item_id, exclude, shares, applies)
    return session.scalar(query.order_by(Response.item_id).limit(1))


def item_id_range(session: Session, project_id: int) -> tuple[int, int] | None:
    low, high = session.execute(select(func.min(Item.id), func.max(Item.id)).where(Item.project_id == project_id)).one()
    return None if low is None else (low, high)


def next_unlabeled_item(
    session: Session,
    project_id: int,
    question_id: int,
    exclude: Iterable[int] = (),
    shares: Sequence[tuple[int, int]] | None = None,
    applies: Any = None,
    without: Any = None,
) -> int | None:
    """The first item in id order that nobody has answered for this question; with `without` (a condition
    on Suggestion: one run's, or the current ones, see `of_run`), the first that has no such suggestion."""
    answered = select(Response.id).where(
        Response.item_id == Item.id, Response.question_id == question_id, Response.status.in_(DONE_STATUSES)
    )
    query = select(Item.id).where(Item.project_id == project_id, ~answered.exists())
    if without is not None:
        suggested = select(Suggestion.id).where(
            Suggestion.item_id == Item.id, Suggestion.question_id == question_id, without
        )
        query = query.where(~suggested.exists())
    query = narrowed(query, Item.id, exclude, shares, applies)
    return session.scalar(query.order_by(Item.id).limit(1))


def kept_temperature(session: Session, run_id: int, question_id: int) -> float | None:
    """The latest temperature kept for a run and question (a `calibration.fitted` event), if any."""
    for payload in session.scalars(
        select(Event.payload)
        .where(Event.kind == "calibration.fitted", Event.question_id == question_id)
        .order_by(Event.id.desc())
    ):
        if payload.get("run_id") == run_id:
            return float(payload["temperature"])
    return None


def inherit_temperatures(session: Session, run: Run, actor: str) -> None:
    """A new run of the same engine and model keeps the temperatures fitted for the last such run, so its
    suggestions show calibrated from the start; refitting on its own answers replaces them."""
    earlier = session.scalar(
        select(Run.id)
        .where(
            Run.project_id == run.project_id,
            Run.id < run.id,
            Run.engine == run.engine,
            Run.model_name == run.model_name,
        )
        .order_by(Run.id.desc())
        .limit(1)
    )
    if earlier is None:
        return
    version = session.get(SchemaVersion, run.schema_version_id)
    for member in version.members:
        temperature = kept_temperature(session, earlier, member.question_id)
        if temperature is not None:
            log(
                session,
                actor,
                "calibration.fitted",
                run.project_id,
                question_id=member.question_id,
                run_id=run.id,
                temperature=temperature,
                inherited_from=earlier,
            )


# Leases -----------------------------------------------------------------------------------------------
#
# A lease row stays behind when its item is answered or given up, expiring at that moment: a pick that
# began before then may have read the item as open and unleased, and the row tells its claim that the
# item changed hands meanwhile. A holder's rows older than TOMBSTONE_AGE are dropped at its next claim.

TOMBSTONE_AGE = timedelta(minutes=1)


def leased_by_others(session: Session, question_id: int, annotator: str, now) -> list[int]:
    return list(
        session.scalars(
            select(Lease.item_id).where(
                Lease.question_id == question_id, Lease.annotator != annotator, Lease.expires_at > now
            )
        )
    )


def take_lease(session: Session, item_id: int, question_id: int, annotator: str, until, picked_at) -> bool:
    """Hold an item for one annotator until `until`, giving up their other lease on the question; True
    when held. `picked_at` is when the pick that chose the item began: the claim fails if another
    annotator holds the item, or held it at any time since then (they may have answered it since).

    The claim is one statement that inserts the lease or takes over a stale one, so of two annotators
    claiming one item at once exactly one wins, on PostgreSQL as on SQLite, and nobody's live lease is
    ever removed."""
    now = utcnow()
    mine = (Lease.question_id == question_id) & (Lease.annotator == annotator) & (Lease.item_id != item_id)
    session.execute(delete(Lease).where(mine, Lease.expires_at < now - TOMBSTONE_AGE))
    session.execute(update(Lease).where(mine, Lease.expires_at > now).values(expires_at=now))
    claim = _dialect_insert(session)(Lease).values(
        item_id=item_id, question_id=question_id, annotator=annotator, expires_at=until
    )
    claim = claim.on_conflict_do_update(
        index_elements=[Lease.item_id, Lease.question_id],
        set_={"annotator": annotator, "expires_at": until},
        where=(Lease.annotator == annotator) | (Lease.expires_at <= picked_at),
    )
    return session.scalar(claim.returning(Lease.id)) is not None


def _dialect_insert(session: Session):
    """The INSERT with ON CONFLICT of the session's database: both dialects spell it the same way."""
    backend = session.get_bind().dialect.name
    if backend == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    elif backend == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    else:
        raise NotImplementedError(f"leases need SQLite or PostgreSQL, not {backend}; set DIFFJEV_DB to one of them")
    return dialect_insert


def release_lease(session: Session, item_id: int, question_id: int, annotator: str) -> None:
    """End the annotator's lease on an item now (see the section's note on why the row stays)."""
    now = utcnow()
    session.execute(
        update(Lease)
        .where(
            Lease.item_id == item_id,
            Lease.question_id == question_id,
            Lease.annotator == annotator,
            Lease.expires_at > now,
        )
        .values(expires_at=now)
    )


# Responses --------------------------------------------------------------------------------------------


def answered_pairs(session: Session, item_ids: Sequence[int], question_ids: Sequence[int]) -> set[tuple[int, int]]:
    rows = session.execute(
        select(Response.item_id, Response.question_id).where(
            Response.item_id.in_(item_ids),
            Response.question_id.in_(question_ids),
            Response.status.in_(DONE_STATUSES),
        )
    )
    return {(i, q) for i, q in rows}


def refresh_open(session: Session, item_id: int, question_id: int) -> None:
    answered = (
        session.scalar(
            select(func.count())
            .select_from(Response)
            .where(Response.item_id == item_id, Response.question_id == question_id, Response.status.in_(DONE_STATUSES))
        )
        or 0
    )
    session.execute(
        update(Suggestion)
        .where(Suggestion.item_id == item_id, Suggestion.question_id == question_id)
        .values(is_open=answered == 0)
    )


@dataclass(frozen=True)
class ResponseInput:
    item_id: int
    question_id: int
    annotator: str
    value: str | None
    source: str  # accepted, corrected, manual
    status: str = "submitted"  # submitted, skipped, draft
    suggestion_id: int | None = None
    suggestion_shown: bool = False
    seconds: float | None = None
    detail: dict[str, Any] | None = None  # a span answer's spans, or why a staged question was not asked


SOURCES = ("accepted", "corrected", "manual")
# "not_asked": a staged question whose condition the annotator's earlier answer does not meet; it holds
# no value, closes the question for the item like an answer, and keeps why in `detail`.
STATUSES = ("submitted", "skipped", "draft", "not_asked")
DONE_STATUSES = ("submitted", "not_asked")


def respond(session: Session, r: ResponseInput, expected_revision: int | None = None) -> Response:
    """Store one answer (insert or update the annotator's own), log it, and keep the queue flag.

    With `expected_revision`, an update only applies if the stored answer is still at that revision:
    a stale write never overwrites a newer one (StaleWrite is raised instead)."""
    if r.source not in SOURCES or r.status not in STATUSES:
        raise ValueError(f"source must be one of {SOURCES} and status one of {STATUSES}")
    # An answer joins an item and a question of one project: an id from another project is not found,
    # so no answer (and no event) ever lands across projects.
    project_id = session.scalar(select(Item.project_id).where(Item.id == r.item_id))
    if project_id is None or project_id != session.scalar(
        select(Question.project_id).where(Question.id == r.question_id)
    ):
        raise NotFound(f"no item {r.item_id} in this project")
    row = session.scalar(
        select(Response).where(
            Response.item_id == r.item_id, Response.question_id == r.question_id, Response.annotator == r.annotator
        )
    )
    before = None
    if row is None:
        row = Response(item_id=r.item_id, question_id=r.question_id, annotator=r.annotator, revision=1)
        session.add(row)
    else:
        if expected_revision is not None and row.revision != expected_revision:
            raise StaleWrite(
                f"item {r.item_id}: the answer changed since it was loaded (revision {row.revision}, "
                f"expected {expected_revision}); reload the item"
            )
        before = {"value": row.value, "status": row.status, "source": row.source, "detail": row.detail}
        row.revision += 1
    row.value, row.source, row.status = r.value, r.source, r.status
    row.suggestion_id, row.suggestion_shown, row.seconds = r.suggestion_id, r.suggestion_shown, r.seconds
    row.detail = r.detail
    row.updated_at = utcnow()
    session.flush()
    log(
        session,
        r.annotator,
        f"response.{r.status}",
        project_id,
        r.item_id,
        r.question_id,
        response_id=row.id,
        value=r.value,
        source=r.source,
        before=before,
        revision=row.revision,
    )
    refresh_open(session, r.item_id, r.question_id)
    return row


def withdraw_not_asked(session: Session, response: Response, actor: str, project_id: int, **payload: Any) -> None:
    """Remove a `not_asked` response whose question applies again, so it is back in the queue, and log a
    `response.reasked` event holding the row (what undo puts back, under the same id)."""
    before = {
        "value": response.value,
        "status": response.status,
        "source": response.source,
        "detail": response.detail,
        "revision": response.revision,
    }
    item_id, question_id, response_id = response.item_id, response.question_id, response.id
    annotator = response.annotator
    session.delete(response)
    session.flush()
    log(
        session,
        actor,
        "response.reasked",
        project_id,
        item_id,
        question_id,
        response_id=response_id,
        annotator=annotator,
        before=before,
        **payload,
    )
    refresh_open(session, item_id, question_id)


def restore_withdrawn(session: Session, event: Event) -> None:
    """Put back the response a `response.reasked` event removed, as it was and under its old id, so the
    events that name it (the answer that stored it, and its undo) still find it."""
    before = event.payload["before"]
    session.add(
        Response(
            id=event.payload["response_id"],
            item_id=event.item_id,
            question_id=event.question_id,
            annotator=event.payload["annotator"],
            value=before["value"],
            source=before["source"],
            status=before["status"],
            detail=before["detail"],
            revision=before["revision"],  # as it was, so the events naming it still match it
            updated_at=utcnow(),
        )
    )
    session.flush()
    refresh_open(session, event.item_id, event.question_id)


def answered_count(session: Session, question_id: int) -> int:
    return (
        session.scalar(
            select(func.count(func.distinct(Response.item_id))).where(
                Response.question_id == question_id, Response.status == "submitted"
            )
        )
        or 0
    )


class StaleWrite(RuntimeError):
    """An answer was changed by someone else after it was loaded."""


# Export -----------------------------------------------------------------------------------------------

# Plain rows through the session's connection, not ORM objects: an export reads millions of them.


def export_page(
    session: Session,
    project_id: int,
    run_id: int | None,
    questions: Sequence[int],
    after_id: int,
    limit: int,
    fields_as_text: bool,
) -> list[Any]:
    """The next items in id order, each as one flat row: (id, external_id, text, fields), then per question
    the run's (answer, confidence, distribution as JSON text, run id, detail as JSON text: a span answer's
    spans with their confidences); with no run, each item's current
    suggestion (the latest run that read it). `fields` comes as stored JSON text if
    asked, which spares decoding it for a file that holds it as text."""
    query = select(
        Item.id, Item.external_id, Item.text, cast(Item.fields, Text) if fields_as_text else Item.fields
    ).where(Item.project_id == project_id, Item.id > after_id)
    for question_id in questions:
        s = aliased(Suggestion)
        query = query.outerjoin(
            s, and_(s.item_id == Item.id, of_run(run_id, s), s.question_id == question_id)
        ).add_columns(s.answer, s.confidence, cast(s.distribution, Text), s.run_id, cast(s.detail, Text))
    return list(session.connection().execute(query.order_by(Item.id).limit(limit)))


def responses_for(
    session: Session, first_item: int, last_item: int, question_ids: Sequence[int], annotator: str | None = None
) -> list[Any]:
    """(item_id, question_id, value, annotator, source) of submitted answers to these questions for items
    in an id range, oldest first. A range, not a list of ids: a page of ten thousand items stays one
    index range scan."""
    query = select(Response.item_id, Response.question_id, Response.value, Response.annotator, Response.source).where(
        Response.item_id.between(first_item, last_item),
        Response.question_id.in_(question_ids),
        Response.status == "submitted",
    )
    if annotator is not None:
        query = query.where(Response.annotator == annotator)
    return list(session.connection().execute(query.order_by(Response.updated_at, Response.id)))


def every_answer_for(
    session: Session, first_item: int, last_item: int, question_ids: Sequence[int], annotator: str | None = None
) -> list[Any]:
    """(item_id, question_id, value, annotator, source, status, seconds, detail) of every response to these
    questions for items in an id range, whatever its status (submitted, skipped, draft, not_asked), oldest
    first: what an export that is to be imported back must hold."""
    query = select(
        Response.item_id,
        Response.question_id,
        Response.value,
        Response.annotator,
        Response.source,
        Response.status,
        Response.seconds,
        Response.detail,
    ).where(Response.item_id.between(first_item, last_item), Response.question_id.in_(question_ids))
    if annotator is not None:
        query = query.where(Response.annotator == annotator)
    return list(session.execute(query.order_by(Response.updated_at, Response.id)))


def not_asked_for(
    session: Session, first_item: int, last_item: int, question_ids: Sequence[int], annotator: str | None = None
) -> dict[tuple[int, int], dict[str, Any]]:
    """(item_id, question_id) -> the skip record {because, was, wanted} of the latest `not_asked` response
    to these staged questions for items in an id range."""
    query = select(Response.item_id, Response.question_id, Response.detail).where(
        Response.item_id.between(first_item, last_item),
        Response.question_id.in_(question_ids),
        Response.status == "not_asked",
    )
    if annotator is not None:
        query = query.where(Response.annotator == annotator)
    out = {}
    for item_id, question_id, detail in session.execute(query.order_by(Response.updated_at, Response.id)):
        out[(item_id, question_id)] = (detail or {}).get("skipped")
    return out


def project_stats(session: Session, project_id: int) -> dict[str, Any]:
    version = latest_version(session, project_id)
    question_ids = [m.question_id for m in version.members] if version else []
    answered = session.execute(
        select(Response.question_id, func.count(func.distinct(Response.item_id)))
        .where(Response.question_id.in_(question_ids), Response.status == "submitted")
        .group_by(Response.question_id)
    ).all()
    runs = session.execute(
        select(Run.id, Run.engine, Run.model_name, Run.status, Run.started_at)
        .where(Run.project_id == project_id)
        .order_by(Run.id)
    ).all()
    return {
        "items": count_items(session, project_id),
        "schema_version": version.version if version else None,
        "answered": {q: n for q, n in answered},
        "runs": [dict(r._mapping) for r in runs],
    }


# Adjudication ----------------------------------------------------------------------------------------
#
# A reviewer's final answer to a question for an item, in its own table (see models.Adjudication): the
# responses stay every annotator's own, and the adjudicated answer is the label where it exists.


def _given(question_ids: Sequence[int]) -> list:
    """The conditions on Response for "a submitted answer with a value to one of these questions"."""
    return [Response.question_id.in_(question_ids), Response.status == "submitted", Response.value.is_not(None)]


ADJUDICATED = "adjudicated"  # the source of an answer a reviewer settled, in events, review and exports


def adjudication_pairs(
    session: Session,
    project_id: int,
    question_ids: Sequence[int],
    any_answered: bool = False,
    settled_too: bool = False,
    limit: int = 200,
) -> list[tuple[int, int]]:
    """(item id, question id) pairs to adjudicate, in item order: where the annotators' submitted answers
    differ (with `any_answered`, every answered pair), not yet adjudicated unless `settled_too`."""
    if not question_ids:
        return []
    query = (
        select(Response.item_id, Response.question_id)
        .join(Item, Item.id == Response.item_id)
        .where(Item.project_id == project_id, *_given(question_ids))
        .group_by(Response.item_id, Response.question_id)
    )
    if not any_answered:
        query = query.having(func.count(func.distinct(Response.value)) > 1)
    if not settled_too:
        settled = select(Adjudication.id).where(
            Adjudication.item_id == Response.item_id, Adjudication.question_id == Response.question_id
        )
        query = query.where(~settled.exists())
    query = query.order_by(Response.item_id, Response.question_id).limit(limit)
    return [(item_id, question_id) for item_id, question_id in session.execute(query)]


def given_answers(session: Session, item_ids: Sequence[int], question_ids: Sequence[int]) -> list[Any]:
    """(item_id, question_id, annotator, value, source, seconds) of every submitted answer to these
    questions for these items, oldest first."""
    if not item_ids or not question_ids:
        return []
    query = select(
        Response.item_id, Response.question_id, Response.annotator, Response.value, Response.source, Response.seconds
    ).where(Response.item_id.in_(item_ids), *_given(question_ids))
    return list(session.execute(query.order_by(Response.updated_at, Response.id)))


def adjudications_of(
    session: Session, item_ids: Sequence[int], question_ids: Sequence[int]
) -> dict[tuple[int, int], Adjudication]:
    """The adjudications of these items and questions, by (item id, question id)."""
    if not item_ids or not question_ids:
        return {}
    rows = session.scalars(
        select(Adjudication).where(Adjudication.item_id.in_(item_ids), Adjudication.question_id.in_(question_ids))
    )
    return {(a.item_id, a.question_id): a for a in rows}


def adjudications_for(session: Session, first_item: int, last_item: int, question_ids: Sequence[int]) -> list[Any]:
    """(item_id, question_id, value, reviewer, comment) of the adjudications of items in an id range (an
    index range scan, as responses_for)."""
    query = select(
        Adjudication.item_id, Adjudication.question_id, Adjudication.value, Adjudication.reviewer, Adjudication.comment
    ).where(Adjudication.item_id.between(first_item, last_item), Adjudication.question_id.in_(question_ids))
    return list(session.connection().execute(query))


def adjudicated_values(session: Session, question_id: int) -> dict[int, str]:
    """Each adjudicated item's final answer to one question, by item id: the human truth where it exists."""
    query = select(Adjudication.item_id, Adjudication.value).where(Adjudication.question_id == question_id)
    return {item_id: value for item_id, value in session.execute(query)}


def adjudicate(
    session: Session, item_id: int, question_id: int, value: str, reviewer: str, comment: str | None
) -> Adjudication:
    """Store the final answer for one item and question (replacing an earlier one: its revision grows)
    and log it with what it replaced. The item and question must be of one project (another project's
    id is not found), and the item must have a submitted answer to settle."""
    project_id = session.scalar(select(Item.project_id).where(Item.id == item_id))
    if project_id is None or project_id != session.scalar(
        select(Question.project_id).where(Question.id == question_id)
    ):
        raise NotFound(f"no item {item_id} in this project")
    row = session.scalar(
        select(Adjudication).where(Adjudication.item_id == item_id, Adjudication.question_id == question_id)
    )
    before = None
    if row is None:
        row = Adjudication(item_id=item_id, question_id=question_id, revision=1, created_at=utcnow())
        session.add(row)
    else:
        before = {"value": row.value, "reviewer": row.reviewer, "comment": row.comment}
        row.revision += 1
    row.value, row.reviewer, row.comment, row.updated_at = value, reviewer, comment, utcnow()
    session.flush()
    log(
        session,
        reviewer,
        "response.adjudicated",
        project_id,
        item_id,
        question_id,
        adjudication_id=row.id,
        value=value,
        source=ADJUDICATED,
        comment=comment,
        before=before,
        revision=row.revision,
    )
    return row


def suggestions_of(
    session: Session, item_ids: Sequence[int], question_ids: Sequence[int], run_id: int | None
) -> dict[tuple[int, int], tuple[str, dict[str, Any], int]]:
    """(answer, distribution, run id) of one run's suggestions (None: each item's current one) for these
    items and questions, by (item id, question id)."""
    if not item_ids or not question_ids:
        return {}
    rows = session.execute(
        select(
            Suggestion.item_id, Suggestion.question_id, Suggestion.answer, Suggestion.distribution, Suggestion.run_id
        ).where(Suggestion.item_id.in_(item_ids), Suggestion.question_id.in_(question_ids), of_run(run_id))
    )
    return {(i, q): (answer, distribution, run) for i, q, answer, distribution, run in rows}


def count_answered_pairs(session: Session, question_ids: Sequence[int]) -> int:
    """How many (item, question) pairs of these questions someone has answered (submitted)."""
    pairs = (
        select(Response.item_id, Response.question_id)
        .where(Response.question_id.in_(question_ids), Response.status == "submitted")
        .distinct()
        .subquery()
    )
    return session.scalar(select(func.count()).select_from(pairs)) or 0


def count_adjudications(session: Session, question_ids: Sequence[int]) -> int:
    query = select(func.count()).select_from(Adjudication).where(Adjudication.question_id.in_(question_ids))
    return session.scalar(query) or 0


# Many projects: the picker, archive, delete, assignments ------------------------------------------------


@dataclass(frozen=True)
class ProjectRow:
    """One project as the picker lists it, with who may open it."""

    id: int
    name: str
    members: list[str] | None
    reviewers: list[str] | None
    archived: bool
    items: int
    answered: int  # items with at least one submitted answer
    last_activity: Any  # the newest event's time, or the creation time


def project_rows(session: Session) -> list[ProjectRow]:
    """Every project with its counts, in one statement: correlated counts that each stay inside one
    project's index range (items by project, answers through the project's questions, events by project)."""
    items = select(func.count(Item.id)).where(Item.project_id == Project.id).scalar_subquery()
    answered = (
        select(func.count(func.distinct(Response.item_id)))
        .join(Question, Question.id == Response.question_id)
        .where(Question.project_id == Project.id, Response.status == "submitted")
        .scalar_subquery()
    )
    newest = aliased(Event)
    last_event = select(func.max(newest.id)).where(newest.project_id == Project.id).correlate(Project).scalar_subquery()
    last_at = select(Event.at).where(Event.id == last_event).scalar_subquery()
    query = select(
        Project.id,
        Project.name,
        Project.members,
        Project.reviewers,
        Project.archived_at,
        items,
        answered,
        last_at,
        Project.created_at,
    ).order_by(Project.name)
    return [
        ProjectRow(pid, name, members, reviewers, archived_at is not None, n or 0, done or 0, at or created)
        for pid, name, members, reviewers, archived_at, n, done, at, created in session.execute(query)
    ]


def set_archived(session: Session, project_name: str, archived: bool, actor: str) -> None:
    project = get_project(session, project_name)
    project.archived_at = utcnow() if archived else None
    log(session, actor, "project.archived" if archived else "project.unarchived", project.id, name=project_name)


def delete_project(session: Session, project_name: str, actor: str) -> dict[str, int]:
    """Remove a project and everything in it. The event that says who deleted it names the project in its
    payload and belongs to no project, so it outlives the project's own events (which go with it).
    Children first, in the order their foreign keys need, so no database defers a check to the end."""
    project = get_project(session, project_name)
    pid = project.id
    of_items = select(Item.id).where(Item.project_id == pid)
    of_runs = select(Run.id).where(Run.project_id == pid)
    counts = {
        "items": count_items(session, pid),
        "responses": session.scalar(select(func.count(Response.id)).where(Response.item_id.in_(of_items))) or 0,
        "runs": session.scalar(select(func.count(Run.id)).where(Run.project_id == pid)) or 0,
    }
    session.execute(delete(Lease).where(Lease.item_id.in_(of_items)))
    session.execute(delete(Response).where(Response.item_id.in_(of_items)))
    session.execute(delete(Suggestion).where(Suggestion.run_id.in_(of_runs)))
    session.execute(delete(ItemRead).where(ItemRead.run_id.in_(of_runs)))
    session.execute(delete(Run).where(Run.project_id == pid))
    session.execute(delete(Item).where(Item.project_id == pid))
    session.execute(delete(Event).where(Event.project_id == pid))
    versions = select(SchemaVersion.id).where(SchemaVersion.project_id == pid)
    session.execute(delete(SchemaQuestion).where(SchemaQuestion.schema_version_id.in_(versions)))
    session.execute(delete(SchemaVersion).where(SchemaVersion.project_id == pid))
    session.execute(delete(Question).where(Question.project_id == pid))
    session.expunge(project)
    session.execute(delete(Project).where(Project.id == pid))  # imports and any other row of it go by cascade
    log(session, actor, "project.deleted", None, project=project_name, deleted_id=pid, **counts)
    return counts


ASSIGNMENT_KEYS = {"annotator", "questions", "share"}


def check_assignments(assignments: Any, question_keys: Sequence[str]) -> list[dict[str, Any]] | None:
    """The assignments as stored, or Conflict naming the entry and field. The shape: a list of
    {"annotator": name, "questions": [question id, ...] or null (all), "share": [lo, hi] or null (all)},
    where a share holds the items whose id modulo 100 is in [lo, hi): a stable split that needs no
    table of its own. An empty list stores None (no assignments: everyone sees everything)."""
    if assignments is None:
        return None
    if not isinstance(assignments, list):
        raise Conflict("assignments: give a JSON list of {annotator, questions, share} objects")
    checked = []
    for n, entry in enumerate(assignments, start=1):
        where = f"assignment #{n}"
        if not isinstance(entry, dict):
            raise Conflict(f"{where}: give an object with 'annotator', 'questions' and 'share'")
        unknown = sorted(set(entry) - ASSIGNMENT_KEYS)
        if unknown:
            raise Conflict(f"{where}: unknown field {unknown[0]!r}; the fields are annotator, questions, share")
        annotator = entry.get("annotator")
        if not isinstance(annotator, str) or not annotator.strip():
            raise Conflict(f"{where}: 'annotator' must name a user")
        questions = entry.get("questions")
        if questions is not None:
            if not isinstance(questions, list) or not questions:
                raise Conflict(f"{where}: 'questions' must be a list of question ids, or null for every question")
            unknown_q = [q for q in questions if q not in question_keys]
            if unknown_q:
                raise Conflict(
                    f"{where}: no question {unknown_q[0]!r} in this project; its questions: {', '.join(question_keys)}"
                )
        share = entry.get("share")
        if share is not None:
            valid = (
                isinstance(share, list)
                and len(share) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in share)
                and 0 <= share[0] < share[1] <= 100
            )
            if not valid:
                raise Conflict(f"{where}: 'share' must be [from, to] with 0 <= from < to <= 100, or null for all items")
        checked.append({"annotator": annotator.strip(), "questions": questions, "share": share})
    return checked or None


def set_assignments(session: Session, project_name: str, assignments: Any, actor: str) -> list[dict[str, Any]] | None:
    project = get_project(session, project_name)
    schema, _ = version_schema(latest_version(session, project.id))
    stored = check_assignments(assignments, [q.id for q in schema.questions])
    project.assignments = stored
    log(session, actor, "project.assignments", project.id, assignments=stored)
    return stored


def assigned_shares(
    assignments: list[dict[str, Any]] | None, annotator: str, question_key: str
) -> list[tuple[int, int]] | None:
    """The item shares an annotator works on for one question: None for every item (no assignments of
    theirs in the project), an empty list for none (their assignments give them other questions)."""
    mine = [a for a in assignments or () if a["annotator"] == annotator]
    if not mine:
        return None
    shares = []
    for entry in mine:
        if entry["questions"] is not None and question_key not in entry["questions"]:
            continue
        if entry["share"] is None:
            return None
        shares.append((entry["share"][0], entry["share"][1]))
    return shares


def in_shares(item_id_column: Any, shares: Sequence[tuple[int, int]]) -> Any:
    """Items whose id modulo 100 falls in one of the shares (no shares: no items)."""
    if not shares:
        return false()
    return or_(*[and_(item_id_column % 100 >= low, item_id_column % 100 < high) for low, high in shares])


def narrowed(
    query: Any,
    item_id_column: Any,
    exclude: Iterable[int],
    shares: Sequence[tuple[int, int]] | None,
    applies: Any = None,
) -> Any:
    """A queue's query without the excluded items and, for an annotator with assignments, inside their
    shares; with `applies` (item id column -> condition, see `answers_meet`), only the items it holds for."""
    if applies is not None:
        query = query.where(applies(item_id_column))
    exclude = list(exclude)
    if exclude:
        query = query.where(item_id_column.not_in(exclude))
    if shares is not None:
        query = query.where(in_shares(item_id_column, shares))
    return query
