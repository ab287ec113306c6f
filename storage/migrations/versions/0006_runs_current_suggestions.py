"""current suggestions: each item and question's suggestion from the latest run that read it

Revision ID: 0006_runs
Revises: 0005
Create Date: 2026-12-10 09:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0006_runs"
down_revision = "0005"
branch_labels = None
depends_on = None

MEASURES = ("confidence", "margin", "entropy", "stderr", "item_id")


def _name(measure: str) -> str:
    return "ix_suggestions_current_" + ("item" if measure == "item_id" else measure)


def upgrade() -> None:
    with op.batch_alter_table("suggestions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("is_current", sa.Boolean(), server_default=sa.text("true"), nullable=False))
    # Until now the newest run was taken whole; from now on each item's latest suggestion is current.
    op.execute(
        "UPDATE suggestions SET is_current = (run_id = (SELECT max(s.run_id) FROM suggestions s "
        "WHERE s.item_id = suggestions.item_id AND s.question_id = suggestions.question_id))"
    )
    with op.batch_alter_table("suggestions", schema=None) as batch_op:
        for measure in MEASURES:
            batch_op.create_index(
                _name(measure),
                ["question_id", measure],
                unique=False,
                sqlite_where=sa.text("is_open = 1 AND is_current = 1"),
                postgresql_where=sa.text("is_open AND is_current"),
            )


def downgrade() -> None:
    with op.batch_alter_table("suggestions", schema=None) as batch_op:
        for measure in MEASURES:
            batch_op.drop_index(_name(measure))
        batch_op.drop_column("is_current")
