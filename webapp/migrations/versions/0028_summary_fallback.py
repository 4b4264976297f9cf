"""summaries written by the uncached fallback call

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07 15:40:00

A summary version says whether its call replayed the cached request (false) or, because
that could not fit the window, summarized the previous summary and the turns left out in
a request of its own (true: the engine's cache could not serve it).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "summary", sa.Column("fallback", sa.Boolean(), nullable=False, server_default="0")
    )


def downgrade() -> None:
    with op.batch_alter_table("summary", schema=None) as batch_op:
        batch_op.drop_column("fallback")
