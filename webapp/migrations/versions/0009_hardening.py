"""hardening: embed sends for the quotas

Revision ID: 0009
Revises: 0007
Create Date: 2026-12-01 09:40:00.000000

Every send through an embed is kept, by embed and client address, for the rate limit's
window, so that a visitor's quota does not reset with a new visitor id.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0009"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "embed_send",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("embed_name", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("client", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("embed_send", schema=None) as batch_op:
        batch_op.create_index(
            "ix_embed_send_embed_client_time", ["embed_name", "client", "sent_at"], unique=False
        )
        batch_op.create_index("ix_embed_send_embed_time", ["embed_name", "sent_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("embed_send", schema=None) as batch_op:
        batch_op.drop_index("ix_embed_send_embed_time")
        batch_op.drop_index("ix_embed_send_embed_client_time")
    op.drop_table("embed_send")
