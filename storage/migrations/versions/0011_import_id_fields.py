"""the id field an import keyed its items on, so an export gives the id column back under its own name

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07 22:00:00

- `imports.id_field`: the column of the file that held each item's id (None: items keyed on content).
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


def downgrade() -> None:
    with op.batch_alter_table("imports") as batch:
        batch.drop_column("id_field")
