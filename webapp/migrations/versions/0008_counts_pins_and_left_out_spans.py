"""token counts per tokenizer, pins, and what each send left out as stored spans

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 09:50:00

Existing trimmed sends get their spans written from the rule that bounded them (the
head kept, the `dropped_turns` oldest replayable turns after it left out), so the
record no longer depends on that rule.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.add_column(sa.Column("token_counts", JSON_TYPE, nullable=True))
        batch_op.add_column(
            sa.Column("pinned", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(sa.Column("fit_counted_by", sa.String(length=300), nullable=True))
        batch_op.add_column(sa.Column("fit_left_out", JSON_TYPE, nullable=True))
        batch_op.add_column(sa.Column("fit_pins_dropped", sa.Integer(), nullable=True))
    op.create_index(
        "ix_message_pinned",
        "message",
        ["conversation_id", "seq"],
        sqlite_where=sa.text("pinned = 1"),
        postgresql_where=sa.text("pinned"),
    )
    with op.batch_alter_table("model_calibration", schema=None) as batch_op:
        batch_op.add_column(sa.Column("message_overhead", sa.Float(), nullable=True))
    _write_spans_of_old_sends()


def _write_spans_of_old_sends() -> None:
    connection = op.get_bind()
    message = sa.table(
        "message",
        sa.column("id", sa.Integer),
        sa.column("conversation_id", sa.String),
        sa.column("seq", sa.Integer),
        sa.column("role", sa.String),
        sa.column("prior_turns", sa.Integer),
        sa.column("dropped_turns", sa.Integer),
        sa.column("fit_left_out", JSON_TYPE),
        sa.column("fit_counted_by", sa.String),
    )
    trimmed = connection.execute(
        sa.select(message.c.id, message.c.conversation_id, message.c.seq, message.c.dropped_turns)
        .where(message.c.role == "user", message.c.dropped_turns > 0)
        .order_by(message.c.conversation_id, message.c.seq)
    ).all()
    first_with: dict[str, dict[int, int]] = {}
    for row_id, conversation_id, seq, dropped in trimmed:
        if conversation_id not in first_with:
            first_with[conversation_id] = dict(
                connection.execute(
                    sa.select(message.c.prior_turns, sa.func.min(message.c.seq))
                    .where(
                        message.c.conversation_id == conversation_id,
                        message.c.role == "user",
                        message.c.prior_turns.is_not(None),
                    )
                    .group_by(message.c.prior_turns)
                ).all()
            )
        known = first_with[conversation_id]
        start = known.get(1)
        spans = []
        if start is not None and start < seq:
            spans.append([start, min(known.get(dropped + 1, seq), seq) - 1])
        connection.execute(
            sa.update(message)
            .where(message.c.id == row_id)
            .values(fit_left_out=spans, fit_counted_by="estimate")
        )
    connection.execute(
        sa.update(message)
        .where(message.c.role == "user", message.c.dropped_turns == 0)
        .values(fit_left_out=[], fit_counted_by="estimate")
    )


def downgrade() -> None:
    with op.batch_alter_table("model_calibration", schema=None) as batch_op:
        batch_op.drop_column("message_overhead")
    op.drop_index("ix_message_pinned", table_name="message")
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_column("fit_pins_dropped")
        batch_op.drop_column("fit_left_out")
        batch_op.drop_column("fit_counted_by")
        batch_op.drop_column("pinned")
        batch_op.drop_column("token_counts")
