"""each caller's own learned figures

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07 05:30:00

What one caller's traffic teaches (the estimate's factor, the template overhead, a
refusal's tightening) sizes that caller's own sends first; the model's shared row moves
only when distinct callers agree. One row per model and caller keeps the caller's own
figures across a restart.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "caller_calibration",
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("caller", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("factor", sa.Float(), nullable=True),
        sa.Column("message_overhead", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model", "caller"),
    )


def downgrade() -> None:
    op.drop_table("caller_calibration")
