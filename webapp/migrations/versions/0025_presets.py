"""presets

Revision ID: 0025
Revises: 0023
Create Date: 2026-12-07 06:30:00

A user's presets (a system prompt, a temperature and an answer length over one of the
catalog's configurations), one default at most per user; a conversation names the preset
its sends use, which is set to NULL when the preset is deleted.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "preset",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=60), nullable=False),
        sa.Column("configuration", sa.String(length=100), nullable=False),
        sa.Column("system_prompt", sa.Text(), nullable=False),
        sa.Column("temperature", sa.Float(), nullable=True),
        sa.Column("max_tokens", sa.Integer(), nullable=True),
        sa.Column("is_default", sa.Boolean(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["user_account.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("user_id", "name", name="uq_preset_user_name"),
    )
    op.create_index(
        "ix_preset_one_default",
        "preset",
        ["user_id"],
        unique=True,
        sqlite_where=sa.text("is_default = 1"),
        postgresql_where=sa.text("is_default"),
    )
    # On SQLite a batch: the conversation table is rebuilt (its rows only, not the
    # messages), as adding a reference with ON DELETE there needs.
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.add_column(sa.Column("preset_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            "fk_conversation_preset_id", "preset", ["preset_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.drop_constraint("fk_conversation_preset_id", type_="foreignkey")
        batch_op.drop_column("preset_id")
    op.drop_index("ix_preset_one_default", table_name="preset")
    op.drop_table("preset")
