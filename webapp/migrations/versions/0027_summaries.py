"""summaries of what the cut left out

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07 14:00:00

Versioned summaries on their branch (the rows they cover, the model that wrote them,
their tokens and their call's cache figures); a conversation's own `summarize` choice
(NULL: its configuration's); the version a send carried, on its user row.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "summary",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("first_seq", sa.Integer(), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("model", sa.String(length=100), nullable=True),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("cached_tokens", sa.Integer(), nullable=True),
        sa.Column("evaluated_tokens", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("edited", sa.Boolean(), nullable=False, server_default="0"),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversation.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_summary_conversation_version", "summary", ["conversation_id", "version"], unique=False
    )
    op.add_column("conversation", sa.Column("summarize", sa.Boolean(), nullable=True))
    op.add_column("message", sa.Column("fit_summary", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_column("fit_summary")
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.drop_column("summarize")
    op.drop_index("ix_summary_conversation_version", table_name="summary")
    op.drop_table("summary")
