"""branches: a run of rows continues an earlier row; a conversation's active leaf

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 10:00:00

Every existing conversation is one run from its first row to its newest, so nothing
stored changes: `parent_seq` and `active_seq` start NULL.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parent_seq", sa.Integer(), nullable=True))
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.add_column(sa.Column("active_seq", sa.Integer(), nullable=True))
    op.create_index(
        "ix_message_run_start",
        "message",
        ["conversation_id", "seq"],
        sqlite_where=sa.text("parent_seq IS NOT NULL"),
        postgresql_where=sa.text("parent_seq IS NOT NULL"),
    )
    op.create_index("ix_message_parent", "message", ["conversation_id", "parent_seq"])


def downgrade() -> None:
    op.drop_index("ix_message_parent", table_name="message")
    op.drop_index("ix_message_run_start", table_name="message")
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.drop_column("active_seq")
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_column("parent_seq")
