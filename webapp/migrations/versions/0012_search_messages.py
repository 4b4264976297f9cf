"""search messages: SQLite FTS5 kept current by triggers, a PostgreSQL GIN index

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 10:05:00

Only finished messages are indexed (an answer being written changes with every flush);
an answer is indexed when it stops streaming, whatever it ended as.

Beware on SQLite: a later batch migration that rebuilds `message` drops these triggers with
the old table; such a migration must create them again (SQLITE_UP's trigger statements).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SQLITE_UP = [
    # External content: the text stays in `message`; the index holds only the terms.
    "CREATE VIRTUAL TABLE message_search USING fts5("
    " content, content='message', content_rowid='id',"
    " tokenize='unicode61 remove_diacritics 2')",
    "INSERT INTO message_search(rowid, content)"
    " SELECT id, content FROM message WHERE status != 'streaming'",
    "CREATE TRIGGER message_search_insert AFTER INSERT ON message"
    " WHEN new.status != 'streaming' BEGIN"
    " INSERT INTO message_search(rowid, content) VALUES (new.id, new.content); END",
    "CREATE TRIGGER message_search_unindex AFTER UPDATE OF content, status ON message"
    " WHEN old.status != 'streaming' BEGIN"
    " INSERT INTO message_search(message_search, rowid, content)"
    " VALUES ('delete', old.id, old.content); END",
    "CREATE TRIGGER message_search_reindex AFTER UPDATE OF content, status ON message"
    " WHEN new.status != 'streaming' BEGIN"
    " INSERT INTO message_search(rowid, content) VALUES (new.id, new.content); END",
    "CREATE TRIGGER message_search_delete AFTER DELETE ON message"
    " WHEN old.status != 'streaming' BEGIN"
    " INSERT INTO message_search(message_search, rowid, content)"
    " VALUES ('delete', old.id, old.content); END",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS message_search_insert",
    "DROP TRIGGER IF EXISTS message_search_unindex",
    "DROP TRIGGER IF EXISTS message_search_reindex",
    "DROP TRIGGER IF EXISTS message_search_delete",
    "DROP TABLE IF EXISTS message_search",
]
POSTGRES_UP = [
    # The `simple` configuration: no stemming, so every language is searched alike.
    "CREATE INDEX ix_message_search ON message"
    " USING gin (to_tsvector('simple', content)) WHERE status <> 'streaming'",
]
POSTGRES_DOWN = ["DROP INDEX IF EXISTS ix_message_search"]


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for statement in SQLITE_UP if sqlite else POSTGRES_UP:
        op.execute(statement)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for statement in SQLITE_DOWN if sqlite else POSTGRES_DOWN:
        op.execute(statement)
