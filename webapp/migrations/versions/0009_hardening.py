"""hardening: conversations owned by foreign keys; embed sends for the quotas

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 09:40:00.000000

Conversations were owned by the text `user:<id>` alone, and SQLite reuses the id of the
newest deleted account: a new account could inherit a deleted one's conversations. Now:

- user_account ids are AUTOINCREMENT on SQLite (never reused; PostgreSQL never did);
- a conversation has `user_id`, a foreign key that deletes it with its user, or
  `embed_name` + `visitor` for an embed visitor, and a CHECK that `owner` agrees;
- existing rows are converted. A `user:<id>` conversation whose user is gone, or whose
  user was made after it (so it belonged to an earlier holder of that id), is kept for
  the record but owned by `former-user:<id>`, which no account can reach.

Every send through an embed is kept, by embed and client address, for the rate limit's
window, so that a visitor's quota does not reset with a new visitor id.

On SQLite, tables are rebuilt (see env.py: foreign keys are off meanwhile, so rebuilding
a table deletes nothing that refers to it).
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


OWNER_KEYS_RULE = (
    "((user_id IS NULL AND owner NOT LIKE 'user:%') OR (user_id IS NOT NULL AND "
    "owner = 'user:' || CAST(user_id AS VARCHAR(20)))) AND "
    "((embed_name IS NULL AND visitor IS NULL AND owner NOT LIKE 'embed:%') OR "
    "(embed_name IS NOT NULL AND visitor IS NOT NULL AND "
    "owner = 'embed:' || embed_name || ':' || visitor))"
)
"""As in webapp.chat.stored.models at this revision (a migration never imports today's code)."""

conversation = sa.table(
    "conversation",
    sa.column("id", sa.String),
    sa.column("owner", sa.String),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("user_id", sa.Integer),
    sa.column("embed_name", sa.String),
    sa.column("visitor", sa.String),
)
user_account = sa.table(
    "user_account", sa.column("id", sa.Integer), sa.column("created_at", sa.DateTime(timezone=True))
)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _keys(owner: str, created_at: datetime, users: dict[int, datetime]) -> dict[str, object]:
    """The new columns for one existing conversation (and its owner, when reassigned)."""
    if owner.startswith("user:"):
        ident = owner[len("user:") :]
        user_id = int(ident) if ident.isdecimal() else None
        made = users.get(user_id) if user_id is not None else None
        if made is not None and _utc(made) <= _utc(created_at):
            return {"user_id": user_id}
        return {"owner": f"former-user:{ident}"}
    if owner.startswith("embed:"):
        name, _, visitor = owner[len("embed:") :].rpartition(":")
        if name and visitor:
            return {"embed_name": name, "visitor": visitor}
        return {"owner": f"former-{owner}"}
    return {}


def convert_owners() -> None:
    bind = op.get_bind()
    users = dict(bind.execute(sa.select(user_account.c.id, user_account.c.created_at)).all())
    rows = bind.execute(
        sa.select(conversation.c.id, conversation.c.owner, conversation.c.created_at)
    ).all()
    for conversation_id, owner, created_at in rows:
        values = _keys(owner, created_at, users)
        if values:
            bind.execute(
                sa.update(conversation).where(conversation.c.id == conversation_id).values(**values)
            )


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        with op.batch_alter_table(
            "user_account", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.add_column(sa.Column("user_id", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("embed_name", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=True)
        )
        batch_op.add_column(
            sa.Column("visitor", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )
    convert_owners()
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.create_foreign_key(
            "fk_conversation_user_id_user_account",
            "user_account",
            ["user_id"],
            ["id"],
            ondelete="CASCADE",
        )
        batch_op.create_index("ix_conversation_user_id", ["user_id"], unique=False)
        batch_op.create_check_constraint("ck_conversation_owner_keys", sa.text(OWNER_KEYS_RULE))

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
    with op.batch_alter_table("conversation", schema=None) as batch_op:
        batch_op.drop_constraint("ck_conversation_owner_keys", type_="check")
        batch_op.drop_index("ix_conversation_user_id")
        batch_op.drop_constraint("fk_conversation_user_id_user_account", type_="foreignkey")
        batch_op.drop_column("visitor")
        batch_op.drop_column("embed_name")
        batch_op.drop_column("user_id")
