"""files attached to messages

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07 05:00:00

A file's bytes are kept once per owner and content hash (`file_blob`); each upload is a
`stored_file` naming its blob, with its sniffed type, its kind (text, document, image),
its size and, for text and documents, the text the model reads; `message_file` lists a
message's files in order. A user row keeps its files as sent (`attachments`) and which
of the send's files went and which were left out with their turns (`fit_attachments`).
A file a message uses is not deleted (the app refuses, 409); deleting a user deletes
their messages and files at once (every key cascades).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _user_key() -> sa.Column[int]:
    return sa.Column(
        "user_id", sa.Integer(), sa.ForeignKey("user_account.id", ondelete="CASCADE"), nullable=True
    )


def upgrade() -> None:
    op.create_table(
        "file_blob",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("owner", sa.String(length=100), nullable=False),
        _user_key(),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.UniqueConstraint("owner", "sha256", name="uq_file_blob_owner_sha256"),
    )
    op.create_table(
        "stored_file",
        sa.Column("id", sa.String(length=32), primary_key=True),
        sa.Column("owner", sa.String(length=100), nullable=False),
        _user_key(),
        sa.Column(
            "blob_id",
            sa.Integer(),
            sa.ForeignKey("file_blob.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("media_type", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("width", sa.Integer(), nullable=True),
        sa.Column("height", sa.Integer(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("token_counts", JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_stored_file_owner", "stored_file", ["owner"])
    op.create_index("ix_stored_file_blob_id", "stored_file", ["blob_id"])
    op.create_table(
        "message_file",
        sa.Column(
            "message_id",
            sa.Integer(),
            sa.ForeignKey("message.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("position", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column(
            "file_id",
            sa.String(length=32),
            sa.ForeignKey("stored_file.id", ondelete="CASCADE"),
            nullable=False,
        ),
    )
    op.create_index("ix_message_file_file_id", "message_file", ["file_id"])
    op.add_column("message", sa.Column("attachments", JSON, nullable=True))
    op.add_column("message", sa.Column("fit_attachments", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_column("fit_attachments")
        batch_op.drop_column("attachments")
    op.drop_table("message_file")
    op.drop_table("stored_file")
    op.drop_table("file_blob")
