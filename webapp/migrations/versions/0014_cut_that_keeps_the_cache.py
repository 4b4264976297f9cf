"""a cut that keeps the engine's prompt cache, and what the cache served

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 23:10:00

User rows say which share of the budget a moved cut goes down to and whether the send
moved it; answers say how many prompt tokens the engine served from its cache; a
conversation says when its next send must start its cut afresh.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs: nullable or with a server default, so no table is rebuilt.
    op.add_column("message", sa.Column("fit_trim_to", sa.Float(), nullable=True))
    op.add_column("message", sa.Column("fit_cut_moved", sa.Boolean(), nullable=True))
    op.add_column("message", sa.Column("cached_tokens", sa.Integer(), nullable=True))
    op.add_column(
        "conversation",
        sa.Column("cut_reset", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.drop_column("cut_reset")
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_column("cached_tokens")
        batch_op.drop_column("fit_cut_moved")
        batch_op.drop_column("fit_trim_to")
