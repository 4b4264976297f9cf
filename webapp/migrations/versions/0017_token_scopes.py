"""token scopes

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03 10:00:00

What an API token may do: "chat" (the JSON API and pages), "gateway" (/v1), "admin"
(the admin pages and API, an admin's token only) and "tokens" (create and revoke the
account's tokens), as scope names separated by spaces. Tokens made before this get the
new default, "chat gateway": an admin's old token no longer reaches the admin API.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN with a server default: no table is rebuilt.
    op.add_column(
        "api_token",
        sa.Column("scopes", sa.String(length=100), nullable=False, server_default="chat gateway"),
    )


def downgrade() -> None:
    with op.batch_alter_table("api_token", schema=None) as batch_op:
        batch_op.drop_column("scopes")
