"""the window an engine really runs, learned from its refusals

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-08 10:00:00

An engine started with a smaller context than the catalog declares names its window
when it refuses a prompt; the model's calibration row keeps it, so every later send
(after a restart too) is fitted to it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN: nullable, so no table is rebuilt.
    op.add_column("model_calibration", sa.Column("learned_window", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("model_calibration", schema=None) as batch_op:
        batch_op.drop_column("learned_window")
