"""adjudications: the final answer a reviewer settles for an item and question

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05 09:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0009"
# Written on 0007 while 0008 (project roles) was not yet on main; it follows 0008 once both are merged.
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "adjudications",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("question_id", sa.Integer(), nullable=False),
        sa.Column("value", sa.String(length=500), nullable=False),
        sa.Column("reviewer", sa.String(length=200), nullable=False),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["item_id"], ["items.id"], name=op.f("fk_adjudications_item_id_items"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["question_id"], ["questions.id"], name=op.f("fk_adjudications_question_id_questions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_adjudications")),
        sa.UniqueConstraint("item_id", "question_id", name=op.f("uq_adjudications_item_id_question_id")),
    )
    op.create_index(op.f("ix_adjudications_question_id"), "adjudications", ["question_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_adjudications_question_id"), table_name="adjudications")
    op.drop_table("adjudications")
