"""a record of sends, gateway calls and imports that deleting conversations keeps

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 12:00:00

The rate limit counted a chat send by its stored message, so deleting the conversation
gave the budget back. Now `gateway_call` records every spending of an owner's budget
(kind `send`, `call` or `import`, and an import's size), and the limits count those rows.
The last hour's chat sends are copied in, so an upgrade does not reset anyone's limit.
"""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs with server defaults: the rows there are gateway calls.
    op.add_column(
        "gateway_call",
        sa.Column("kind", sa.String(length=16), nullable=False, server_default="call"),
    )
    op.add_column(
        "gateway_call", sa.Column("size", sa.Integer(), nullable=False, server_default="0")
    )
    op.create_index("ix_gateway_call_time", "gateway_call", ["called_at"], unique=False)
    message = sa.table(
        "message",
        sa.column("conversation_id", sa.String()),
        sa.column("role", sa.String()),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    conversation = sa.table("conversation", sa.column("id", sa.String()), sa.column("owner"))
    call = sa.table(
        "gateway_call",
        sa.column("owner", sa.String()),
        sa.column("called_at", sa.DateTime(timezone=True)),
        sa.column("kind", sa.String()),
    )
    since = datetime.now(UTC) - timedelta(hours=1)
    recent = (
        sa.select(conversation.c.owner, message.c.created_at, sa.literal("send"))
        .select_from(message.join(conversation, conversation.c.id == message.c.conversation_id))
        .where(message.c.role == "user", message.c.created_at > since)
    )
    op.execute(call.insert().from_select(["owner", "called_at", "kind"], recent))


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM gateway_call WHERE kind <> 'call'"))
    op.drop_index("ix_gateway_call_time", table_name="gateway_call")
    with op.batch_alter_table("gateway_call", schema=None) as batch_op:
        batch_op.drop_column("size")
        batch_op.drop_column("kind")
