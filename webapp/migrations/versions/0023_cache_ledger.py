"""the cache ledger on answers

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07 05:30:00

An answer keeps, beside the prompt tokens its engine served from cache, those it
evaluated and those it wrote to its cache, as the engine said them (NULL: it did not).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("message", sa.Column("evaluated_tokens", sa.Integer(), nullable=True))
    op.add_column("message", sa.Column("cache_write_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_column("cache_write_tokens")
        batch_op.drop_column("evaluated_tokens")
