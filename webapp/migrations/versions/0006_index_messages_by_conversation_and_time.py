"""index messages by conversation and time, for the rate limit's count

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 04:20:00.000000

Counting an owner's recent sends used to walk every message of each of the owner's
conversations; with this index it reads only the messages inside the window.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.create_index(
            "ix_message_conversation_created", ["conversation_id", "created_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_index("ix_message_conversation_created")
