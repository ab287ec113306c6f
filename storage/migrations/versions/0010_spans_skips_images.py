"""spans, staged skips and images: a detail column on suggestions and responses, images stored once

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 20:00:00

- `suggestions.detail`, `responses.detail`: what a plain answer name cannot hold: a span answer's
  character offsets (`{"spans": [{"start", "end", "text", ...}]}`), or why a staged question was not
  asked (`{"skipped": {"because", "was", "wanted"}}`).
- `images`: each image of a project stored once, keyed by the sha256 of its bytes; `items.image` names it.
"""

from alembic import op
import sqlalchemy as sa


revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("suggestions") as batch:
        batch.add_column(sa.Column("detail", sa.JSON(), nullable=True))
    with op.batch_alter_table("responses") as batch:
        batch.add_column(sa.Column("detail", sa.JSON(), nullable=True))
    op.create_table(
        "images",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("mime", sa.String(length=100), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_images_project_id_projects"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("project_id", "sha256", name=op.f("pk_images")),
    )
    with op.batch_alter_table("items") as batch:
        batch.add_column(sa.Column("image", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("items") as batch:
        batch.drop_column("image")
    op.drop_table("images")
    with op.batch_alter_table("responses") as batch:
        batch.drop_column("detail")
    with op.batch_alter_table("suggestions") as batch:
        batch.drop_column("detail")
