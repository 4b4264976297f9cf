"""turn numbers on user rows

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 23:00:00

A user row keeps its turn's place on its branch (failed turns counted), so the page names
every turn's controls apart ("Pin turn 3"); `prior_turns` counts only what a send can
replay, and two turns around a failed one shared it. Rows stored before stay NULL: the
page counts them from `prior_turns`, as it did.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("message", sa.Column("turn_number", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_column("turn_number")
