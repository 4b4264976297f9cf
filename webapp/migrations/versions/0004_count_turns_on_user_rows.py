"""count turns on user rows, so a send never counts history

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 01:32:39.948815
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prior_turns", sa.Integer(), nullable=True))
        batch_op.create_index(
            "ix_message_prior_turns", ["conversation_id", "prior_turns", "seq"], unique=False
        )

    # Existing user rows: count the replayable turns before each (the rule of chat.history).
    op.execute(
        """
        UPDATE message SET prior_turns = (
            SELECT count(*) FROM message u JOIN message a
              ON a.conversation_id = u.conversation_id AND a.seq = u.seq + 1
            WHERE u.conversation_id = message.conversation_id AND u.role = 'user'
              AND u.seq < message.seq AND a.role = 'assistant'
              AND a.status IN ('complete', 'stopped', 'interrupted') AND a.content != ''
        )
        WHERE role = 'user'
        """
    )


def downgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_index("ix_message_prior_turns")
        batch_op.drop_column("prior_turns")
