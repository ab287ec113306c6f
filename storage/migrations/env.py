"""Alembic environment: runs on the connection that `storage.db.upgrade` hands over, or on
`sqlalchemy.url` when called from the alembic command line."""

from alembic import context
from sqlalchemy import engine_from_config, pool

from storage.models import Base

config = context.config
target_metadata = Base.metadata


def run(connection) -> None:
    # Batch mode lets later migrations alter SQLite tables (by copy and rename) with the same code.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    engine = engine_from_config(
        config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.", poolclass=pool.NullPool
    )
    with engine.connect() as conn:
        run(conn)
