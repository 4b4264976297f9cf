"""organising and sharing conversations

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07 05:00:00

A conversation can be pinned (listed first) and archived (out of the sidebar), and says
where it came from (`kind`: original, fork or import; read from the title's mark for the
conversations stored before). Tags are rows of their own, one per tag and conversation.
A share is a read-only link: its token's hash, the conversation and the branch's newest
row when shared; deleting the conversation deletes its tags and shares.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs with server defaults: no table is rebuilt.
    op.add_column(
        "conversation",
        sa.Column("pinned", sa.Boolean(), nullable=False, server_default="0"),
    )
    op.add_column(
        "conversation",
        sa.Column("archived", sa.Boolean(), nullable=False, server_default="0"),
    )
    op.add_column(
        "conversation",
        sa.Column("kind", sa.String(length=8), nullable=False, server_default="original"),
    )
    op.execute("UPDATE conversation SET kind = 'fork' WHERE title LIKE '_% (fork)'")
    op.execute("UPDATE conversation SET kind = 'import' WHERE title LIKE '_% (imported)'")
    op.create_index(
        "ix_conversation_owner_listed",
        "conversation",
        ["owner", "archived", "pinned", "updated_at"],
    )
    op.create_table(
        "conversation_tag",
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.Column("tag", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversation.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("conversation_id", "tag"),
    )
    op.create_index("ix_conversation_tag_tag", "conversation_tag", ["tag"])
    op.create_table(
        "share",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("conversation_id", sa.String(length=32), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("upto_seq", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("author", sa.String(length=100), nullable=True),
        sa.Column("with_attachments", sa.Boolean(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversation.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_index("ix_share_owner_created", "share", ["owner", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_share_owner_created", table_name="share")
    op.drop_table("share")
    op.drop_index("ix_conversation_tag_tag", table_name="conversation_tag")
    op.drop_table("conversation_tag")
    op.drop_index("ix_conversation_owner_listed", table_name="conversation")
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.drop_column("kind")
        batch_op.drop_column("archived")
        batch_op.drop_column("pinned")
