"""tool calls stored on the turn

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07 14:00:00

A turn with tool calls keeps them as rows of its own (docs/design.md, tools): an assistant
row with the model's `tool_calls`, then one row per result (`role = "tool"`, the call's
id and the tool's name), appended as they happen; a user row's fit gains `cleared`, the
tool results its request carried as stubs. Nullable columns only: old rows are unchanged.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tool_calls", JSON_TYPE, nullable=True))
        batch_op.add_column(sa.Column("tool_call_id", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("tool_name", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("fit_cleared", JSON_TYPE, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_column("fit_cleared")
        batch_op.drop_column("tool_name")
        batch_op.drop_column("tool_call_id")
        batch_op.drop_column("tool_calls")
