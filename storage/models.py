"""The tables, in SQLAlchemy 2.0's typed declarative style. Alembic owns their creation
(`storage/migrations`); a test checks that the two never drift apart.

A question row is one version of one question: saving a schema reuses the rows of questions that did
not change and adds rows for those that did, so an answer stays attached to the exact question it
answered, and a changed question is asked again.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    LargeBinary,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# Stable constraint names, so migrations can refer to them on every database.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


Timestamp = DateTime(timezone=True)


class Project(Base):
    __tablename__ = "projects"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    text_field: Mapped[str] = mapped_column(String(200), default="text")
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    # The users who may open the project in the studio; None: every user who can log in.
    members: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    # The users who may adjudicate, delete and change the schema besides the studio's admins; None: nobody else.
    reviewers: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    # Work given to named annotators (a question, a share of the items); None: everyone sees everything.
    assignments: Mapped[list[Any] | None] = mapped_column(JSON, default=None)
    # What another tool's file said of the dataset beyond diffjev's schema, by tool ({"argilla": {"settings",
    # "name"}}), written back by an export to that tool where it still fits the questions; None: nothing.
    tool_settings: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    # Archived projects leave the picker and take no answers; None: active.
    archived_at: Mapped[datetime | None] = mapped_column(Timestamp, default=None)
    versions: Mapped[list["SchemaVersion"]] = relationship(back_populates="project", order_by="SchemaVersion.version")


class Question(Base):
    """One version of one question: its key (the question id in the schema) and full spec."""

    __tablename__ = "questions"
    __table_args__ = (UniqueConstraint("project_id", "key", "spec_hash"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(20))
    spec: Mapped[dict[str, Any]]
    spec_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)


class SchemaVersion(Base):
    __tablename__ = "schema_versions"
    __table_args__ = (UniqueConstraint("project_id", "version"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    version: Mapped[int]
    schema: Mapped[dict[str, Any]]  # the whole schema, as Schema.to_dict() writes it
    template_hash: Mapped[str] = mapped_column(String(64))
    created_by: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    project: Mapped[Project] = relationship(back_populates="versions")
    members: Mapped[list["SchemaQuestion"]] = relationship(
        order_by="SchemaQuestion.position", cascade="all, delete-orphan"
    )


class SchemaQuestion(Base):
    __tablename__ = "schema_questions"
    schema_version_id: Mapped[int] = mapped_column(
        ForeignKey("schema_versions.id", ondelete="CASCADE"), primary_key=True
    )
    question_id: Mapped[int] = mapped_column(ForeignKey("questions.id"), primary_key=True)
    position: Mapped[int]
    question: Mapped[Question] = relationship()


class Item(Base):
    __tablename__ = "items"
    __table_args__ = (
        UniqueConstraint("project_id", "external_id"),
        # Items without an external id are told apart by their content. A partial index: the same
        # statement on SQLite and PostgreSQL.
        Index(
            "uq_items_project_id_content_hash_no_external_id",
            "project_id",
            "content_hash",
            unique=True,
            sqlite_where=text("external_id IS NULL"),
            postgresql_where=text("external_id IS NULL"),
        ),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    external_id: Mapped[str | None] = mapped_column(String(500))
    content_hash: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    fields: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    # The import that created it (None for items from before imports were recorded): what undoing it removes.
    import_id: Mapped[int | None] = mapped_column(Integer, index=True)
    # The sha256 of the item's image, stored once per project in `images`; None for a text-only item.
    image: Mapped[str | None] = mapped_column(String(64))


class Image(Base):
    """One image of a project, stored once however many items show it: keyed by the sha256 of its bytes,
    and kept in the database so a backup of the database is a backup of the images."""

    __tablename__ = "images"
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    mime: Mapped[str] = mapped_column(String(100))
    size: Mapped[int]
    width: Mapped[int]
    height: Mapped[int]
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)


class Import(Base):
    """One import into a project: the file it read (its name, never a server path) and who ran it."""

    __tablename__ = "imports"
    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    source: Mapped[str] = mapped_column(String(500))
    text_field: Mapped[str] = mapped_column(String(200))
    # the file's column that held each item's id (None: the items were keyed on their content); an export
    # gives the ids back under this name
    id_field: Mapped[str | None] = mapped_column(String(200))
    actor: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    undone_at: Mapped[datetime | None] = mapped_column(Timestamp)


class SignedOutSession(Base):
    """A Hub session cookie whose user signed out (storage.signouts), by the sha256 of the cookie."""

    __tablename__ = "signed_out_sessions"
    cookie_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    until: Mapped[float]  # epoch seconds: when the cookie would have expired anyway


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    schema_version_id: Mapped[int] = mapped_column(ForeignKey("schema_versions.id"))
    engine: Mapped[str] = mapped_column(String(100))
    model_name: Mapped[str] = mapped_column(String(500))
    model_version: Mapped[str | None] = mapped_column(String(200))
    template_hash: Mapped[str] = mapped_column(String(64))
    params: Mapped[dict[str, Any]]
    # running, completed, cancelled, failed, or interrupted (left running by a studio that stopped)
    status: Mapped[str] = mapped_column(String(20), default="running")
    started_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(Timestamp)
    error: Mapped[str | None] = mapped_column(Text)


class ItemRead(Base):
    """One item's read in one run: its diagnostics, or why it failed."""

    __tablename__ = "item_reads"
    __table_args__ = (UniqueConstraint("run_id", "item_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(10))  # ok, failed
    attempts: Mapped[int] = mapped_column(default=1)
    error: Mapped[str | None] = mapped_column(Text)
    latency_ms: Mapped[float | None]
    # none_as_null: None is SQL NULL, as for any column, also where reads are inserted in bulk (Core).
    diagnostics: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)


QUEUE_MEASURES = ("confidence", "margin", "entropy", "stderr", "item_id")


def _queue_indexes(scope: str) -> list[Index]:
    """One partial index per queue order: by run and question over open suggestions (`run`), or by
    question over open current suggestions (`current`). In item order: the "unlabeled in order" queue
    and the random blind slice's seek."""
    indexes = []
    for measure in QUEUE_MEASURES:
        name = "item" if measure == "item_id" else measure
        if scope == "run":
            columns, sqlite_where, postgresql_where = ("run_id", "question_id", measure), "is_open = 1", "is_open"
        else:
            columns = ("question_id", measure)
            sqlite_where, postgresql_where = "is_open = 1 AND is_current = 1", "is_open AND is_current"
        indexes.append(
            Index(
                f"ix_suggestions_{'queue' if scope == 'run' else 'current'}_{name}",
                *columns,
                sqlite_where=text(sqlite_where),
                postgresql_where=text(postgresql_where),
            )
        )
    return indexes


class Suggestion(Base):
    """The model's answer to one question for one item under one run, with its whole distribution."""

    __tablename__ = "suggestions"
    __table_args__ = (
        UniqueConstraint("item_id", "question_id", "run_id"),
        # The queues: the next open item by least confidence, margin or entropy, for one question and run.
        # Partial on `is_open` so answered items cost nothing to skip. SQLite only uses a partial index
        # when the query repeats its condition as written, and SQLAlchemy writes a boolean test there as
        # `is_open = 1`; PostgreSQL has a real boolean. A test checks both plans use the index.
        *_queue_indexes("run"),
        # The same queues over each item's current suggestion (the latest run that read it), which is what
        # Annotate and Export use unless a run is picked.
        *_queue_indexes("current"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    question_id: Mapped[int] = mapped_column(ForeignKey("questions.id"))
    answer: Mapped[str] = mapped_column(String(500))
    distribution: Mapped[dict[str, Any]]  # answer name -> probability, in answer order
    confidence: Mapped[float]
    full_vocab_confidence: Mapped[float]
    entropy: Mapped[float]
    margin: Mapped[float]
    label_mass: Mapped[float]
    stderr: Mapped[float | None]
    agreement: Mapped[float | None]
    draws: Mapped[int]
    value: Mapped[float | None]  # P(yes), or the expected score level
    latency_ms: Mapped[float | None]
    # True while no human has submitted an answer to this item and question; kept by the repository in
    # the same transaction as the response, so the queue indexes only hold open work.
    is_open: Mapped[bool] = mapped_column(Boolean, default=True, server_default=text("true"))
    # True for the suggestion of the latest run that read this item and question: a run that is still
    # reading, or one that failed before reading the item, never hides an earlier run's suggestion. Kept
    # by the repository when reads are stored and when a run is deleted.
    is_current: Mapped[bool] = mapped_column(Boolean, default=True, server_default=text("true"))
    # What the answer name cannot hold: a span answer's offsets, or why a staged question was not read.
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)


class Response(Base):
    """A human's answer to one question for one item."""

    __tablename__ = "responses"
    __table_args__ = (
        UniqueConstraint("item_id", "question_id", "annotator"),
        # covers "how many items are answered for this question", asked on every card
        Index("ix_responses_question_id_status_item_id", "question_id", "status", "item_id"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"))
    question_id: Mapped[int] = mapped_column(ForeignKey("questions.id"), index=True)
    annotator: Mapped[str] = mapped_column(String(200), index=True)
    value: Mapped[str | None] = mapped_column(String(500))  # the answer name; None when skipped
    source: Mapped[str] = mapped_column(String(20))  # accepted, corrected, manual
    suggestion_id: Mapped[int | None] = mapped_column(ForeignKey("suggestions.id", ondelete="SET NULL"))
    suggestion_shown: Mapped[bool] = mapped_column(Boolean, default=False)
    seconds: Mapped[float | None]
    status: Mapped[str] = mapped_column(String(20))  # submitted, skipped, draft
    revision: Mapped[int] = mapped_column(Integer, default=1)  # bumped on every change: guards stale writes
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    # What the answer name cannot hold: a span answer's offsets, or why a staged question was not asked.
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)


class Event(Base):
    """Append-only: who did what, and when. The audit trail and the source of undo."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_project_id_actor_id", "project_id", "actor", "id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    actor: Mapped[str] = mapped_column(String(200))
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(50))
    item_id: Mapped[int | None]
    question_id: Mapped[int | None]
    payload: Mapped[dict[str, Any]]


class Lease(Base):
    """An item held by one annotator for one question until `expires_at`, so two annotators never get
    the same item at once; an expired lease is free for anyone."""

    __tablename__ = "leases"
    __table_args__ = (
        UniqueConstraint("item_id", "question_id"),
        Index("ix_leases_question_id_expires_at", "question_id", "expires_at"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"))
    question_id: Mapped[int] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"))
    annotator: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[datetime] = mapped_column(Timestamp)


class Adjudication(Base):
    """The final answer to one question for one item, settled by a reviewer over the annotators' answers:
    its own source (`adjudicated`), kept apart from the responses so that a reviewer who also annotated
    the item keeps their own answer beside the one they settled, and no count of annotators ever takes
    it for another annotator. A second adjudication replaces the first (its revision grows; the events
    keep every earlier one)."""

    __tablename__ = "adjudications"
    __table_args__ = (UniqueConstraint("item_id", "question_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"))
    question_id: Mapped[int] = mapped_column(ForeignKey("questions.id"), index=True)
    value: Mapped[str] = mapped_column(String(500))
    reviewer: Mapped[str] = mapped_column(String(200))
    comment: Mapped[str | None] = mapped_column(Text)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
