"""deactivate users

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 10:35:00

An admin can deactivate an account instead of deleting it: it keeps its conversations,
but can no longer sign in, and its sessions and tokens stop working.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN, not a batch rebuild: rebuilding user_account on SQLite would lose
    # its AUTOINCREMENT, and ids of deleted accounts would be given out again.
    op.add_column(
        "user_account",
        sa.Column("active", sa.Boolean(), nullable=False, server_default=sa.true()),
    )


def downgrade() -> None:
    with op.batch_alter_table("user_account", schema=None) as batch_op:
        batch_op.drop_column("active")
