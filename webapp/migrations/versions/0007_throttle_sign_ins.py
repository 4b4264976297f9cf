"""throttle sign-ins

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 05:05:00.000000

Each sign-in attempt is kept, by username and client address, until it succeeds or
leaves the throttle's window, so that every worker sees the same count.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sign_in_attempt",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username_key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("client", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("attempted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("sign_in_attempt", schema=None) as batch_op:
        batch_op.create_index(
            "ix_sign_in_attempt_key_client_time",
            ["username_key", "client", "attempted_at"],
            unique=False,
        )
        batch_op.create_index("ix_sign_in_attempt_time", ["attempted_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("sign_in_attempt", schema=None) as batch_op:
        batch_op.drop_index("ix_sign_in_attempt_time")
        batch_op.drop_index("ix_sign_in_attempt_key_client_time")
    op.drop_table("sign_in_attempt")
