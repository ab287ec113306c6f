"""Opening a database: the URL, SQLite's settings, sessions per unit of work, and migrations.

The default is a SQLite file in write-ahead-log mode with foreign keys on and a busy timeout, so
readers never block the writer and a writer waits for a lock instead of failing. Any SQLAlchemy URL
works too (`DIFFJEV_DB`), PostgreSQL included, through the same code.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import orjson
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).with_name("migrations")
BUSY_TIMEOUT_MS = 30_000
# PostgreSQL's codes for a transaction that lost a race to a concurrent one and would succeed if run
# again: a unique key taken meanwhile, a serialization failure, a deadlock.
RACE_SQLSTATES = {"23505", "40001", "40P01"}
T = TypeVar("T")


def database_url(location: str | os.PathLike | None = None) -> str:
    """A SQLAlchemy URL from a URL, a file path, or `DIFFJEV_DB`, else `./diffjev.db`."""
    location = location or os.environ.get("DIFFJEV_DB") or "diffjev.db"
    text = str(location)
    if "://" in text:
        return text
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def _sqlite_settings(dbapi_connection, _record) -> None:
    # The sqlite3 driver's own transaction handling would start transactions late; let SQLAlchemy's
    # BEGIN (below) decide, so a batch really is one transaction.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")  # durable across application crashes in WAL mode
    # 64 MiB of page cache per connection instead of 2: index pages stay cached as a project grows
    # past a million items, which keeps imports and queues fast there.
    cursor.execute("PRAGMA cache_size=-65536")
    cursor.close()


def _sqlite_begin(conn) -> None:
    # A writer takes the write lock at BEGIN (IMMEDIATE), so two writers queue on the busy timeout
    # instead of one failing halfway through with "database is locked". Readers begin deferred and,
    # in WAL mode, never wait for a writer.
    conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get("read_only") else "BEGIN IMMEDIATE")


def _dumps(value) -> str:
    return orjson.dumps(value).decode()


def make_engine(location: str | os.PathLike | None = None) -> Engine:
    url = make_url(database_url(location))
    # orjson for the JSON columns: an import or export of a million rows encodes or decodes a million
    # field objects and distributions.
    # hide_parameters: a failed statement's error names the statement, never its values. An import's
    # INSERT carries every item text of its chunk, and errors end up in logs and on stderr.
    json_kwargs = {"json_serializer": _dumps, "json_deserializer": orjson.loads, "hide_parameters": True}
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}, **json_kwargs
        )
        event.listen(engine, "connect", _sqlite_settings)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    return create_engine(url, pool_pre_ping=True, **json_kwargs)


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database's tables to `revision` with Alembic."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


class Database:
    """A migrated database and its session factory."""

    def __init__(self, location: str | os.PathLike | Engine | None = None, migrate: bool = True):
        self.engine = location if isinstance(location, Engine) else make_engine(location)
        if migrate:
            upgrade(self.engine)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.read_sessions = sessionmaker(self.engine.execution_options(read_only=True), expire_on_commit=False)

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One unit of work: committed when the block ends, rolled back if it raises."""
        with self.sessions.begin() as session:
            yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only unit of work; on SQLite it takes no write lock."""
        with self.read_sessions() as session:
            yield session

    def write(self, work: Callable[[Session], T], attempts: int = 5) -> T:
        """Run `work` in one transaction, and again (with backoff) if it lost a race to another writer:
        SQLite stayed locked past the busy timeout, or PostgreSQL refused it for a concurrent
        transaction's sake. A caller never sees a transient conflict; a lasting one is raised."""
        for attempt in range(attempts):
            try:
                with self.session() as session:
                    return work(session)
            except (OperationalError, IntegrityError) as exc:
                if not lost_a_race(exc) or attempt == attempts - 1:
                    raise
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def dispose(self) -> None:
        self.engine.dispose()


def lost_a_race(exc: DBAPIError) -> bool:
    """Whether running the transaction again may succeed: SQLite's lock, or PostgreSQL's race codes."""
    if isinstance(exc, OperationalError) and "locked" in str(exc):
        return True
    return getattr(exc.orig, "sqlstate", None) in RACE_SQLSTATES
