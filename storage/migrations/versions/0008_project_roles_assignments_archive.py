"""project roles, assignments and archiving: a project's reviewers, the work given to named annotators,
and when it was archived

Revision ID: 0008
Revises: 0007_import
Create Date: 2026-12-04 17:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0008"
down_revision = "0007_import"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reviewers", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("assignments", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_column("archived_at")
        batch_op.drop_column("assignments")
        batch_op.drop_column("reviewers")
