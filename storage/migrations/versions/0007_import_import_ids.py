"""imports: which import created each item, so an import can be undone

Revision ID: 0007_import
Revises: 0006_runs
Create Date: 2026-12-04 10:30:00
"""

from alembic import op
import sqlalchemy as sa


revision = "0007_import"
down_revision = "0006_runs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "imports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=500), nullable=False),
        sa.Column("text_field", sa.String(length=200), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("undone_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_imports_project_id_projects"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_imports")),
    )
    op.create_index(op.f("ix_imports_project_id"), "imports", ["project_id"], unique=False)
    # A plain column (no foreign key): SQLite adds it in place, without copying a large items table.
    op.add_column("items", sa.Column("import_id", sa.Integer(), nullable=True))
    op.create_index(op.f("ix_items_import_id"), "items", ["import_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_items_import_id"), table_name="items")
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.drop_column("import_id")
    op.drop_index(op.f("ix_imports_project_id"), table_name="imports")
    op.drop_table("imports")
