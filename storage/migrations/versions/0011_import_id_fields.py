"""an import's id field and another tool's settings, so an export gives them back as they came; sign-outs kept

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07 22:00:00

- `imports.id_field`: the column of the file that held each item's id (None: items keyed on content).
- `projects.tool_settings`: what another tool's file said of the dataset that diffjev's schema does not hold
  (an Argilla dataset's settings and name), by tool, for an export to that tool.
- `signed_out_sessions`: Hub session cookies whose user signed out (their sha256), refused until they would
  have expired, across restarts and studio processes.
"""

from alembic import op
import sqlalchemy as sa


revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("imports") as batch:
        batch.add_column(sa.Column("id_field", sa.String(length=200), nullable=True))
    with op.batch_alter_table("projects") as batch:
        batch.add_column(sa.Column("tool_settings", sa.JSON(), nullable=True))
    op.create_table(
        "signed_out_sessions",
        sa.Column("cookie_sha256", sa.String(length=64), nullable=False),
        sa.Column("until", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("cookie_sha256", name=op.f("pk_signed_out_sessions")),
    )


def downgrade() -> None:
    op.drop_table("signed_out_sessions")
    with op.batch_alter_table("projects") as batch:
        batch.drop_column("tool_settings")
    with op.batch_alter_table("imports") as batch:
        batch.drop_column("id_field")
