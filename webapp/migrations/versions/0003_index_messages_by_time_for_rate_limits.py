"""index messages by time for rate limits

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 01:22:11.542573
"""

from collections.abc import Sequence

import sqlmodel  # noqa: F401  (column types in generated code)
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.create_index("ix_message_created_at", ["created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_index("ix_message_created_at")
