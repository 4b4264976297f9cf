"""count gateway calls

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 10:00:00.000000

A call through the OpenAI-compatible gateway that stores no message leaves its owner and
time here, for the window of the rate limit, so that every worker counts it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gateway_call",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("called_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("gateway_call", schema=None) as batch_op:
        batch_op.create_index("ix_gateway_call_owner_time", ["owner", "called_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("gateway_call", schema=None) as batch_op:
        batch_op.drop_index("ix_gateway_call_owner_time")
    op.drop_table("gateway_call")
