"""per-user settings, feedback on answers

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 19:00:00

Each account keeps its own settings on its row: the configuration new conversations
start with (NULL: the catalog's default), the theme (system, light or dark) and custom
instructions sent with the system prompt. A user row records how many tokens of the
send's head were those instructions; an answer keeps its owner's thumbs up (1) or down
(-1), NULL when not rated.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs, not batch rebuilds: rebuilding user_account on SQLite would lose
    # its AUTOINCREMENT.
    op.add_column(
        "user_account", sa.Column("default_configuration", sa.String(length=100), nullable=True)
    )
    op.add_column(
        "user_account",
        sa.Column("theme", sa.String(length=8), nullable=False, server_default="system"),
    )
    op.add_column(
        "user_account",
        sa.Column("custom_instructions", sa.Text(), nullable=False, server_default=""),
    )
    op.add_column("message", sa.Column("fit_instructions_tokens", sa.Integer(), nullable=True))
    op.add_column("message", sa.Column("feedback", sa.SmallInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_column("feedback")
        batch_op.drop_column("fit_instructions_tokens")
    with op.batch_alter_table("user_account", schema=None) as batch_op:
        batch_op.drop_column("custom_instructions")
        batch_op.drop_column("theme")
        batch_op.drop_column("default_configuration")
