"""accounts: users, login sessions and API tokens

Session ids and token hashes are SHA-256 digests of the secrets clients hold;
usernames are unique by their lowercased `username_key`.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 01:02:06.032363
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "user_account",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("username_key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("password_hash", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_login_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("username_key", name="uq_user_account_username_key"),
    )
    op.create_table(
        "api_token",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("token_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("prefix", sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["user_account.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash", name="uq_api_token_token_hash"),
    )
    with op.batch_alter_table("api_token", schema=None) as batch_op:
        batch_op.create_index("ix_api_token_user_id", ["user_id"], unique=False)

    op.create_table(
        "login_session",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["user_account.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("login_session", schema=None) as batch_op:
        batch_op.create_index("ix_login_session_expires_at", ["expires_at"], unique=False)
        batch_op.create_index("ix_login_session_user_id", ["user_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("login_session", schema=None) as batch_op:
        batch_op.drop_index("ix_login_session_user_id")
        batch_op.drop_index("ix_login_session_expires_at")

    op.drop_table("login_session")
    with op.batch_alter_table("api_token", schema=None) as batch_op:
        batch_op.drop_index("ix_api_token_user_id")

    op.drop_table("api_token")
    op.drop_table("user_account")
