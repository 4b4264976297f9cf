"""Full-text search over the caller's own messages: SQLite FTS5 or PostgreSQL `tsvector`.

Both indexes are kept current by the database itself (FTS5 triggers, a GIN expression
index; migration 0011) and hold finished messages only. What a person types is never
passed on as query syntax: it is cut into words, each searched as a prefix, all required.
A snippet is HTML: the message text escaped, the matched words in `<mark>`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from markupsafe import escape
from sqlalchemy import Connection, TextClause, text

from webapp.errors import InvalidInput

MAX_QUERY = 200
"""Characters of a search; longer is refused rather than cut."""
MAX_WORDS = 12
RESULTS = 30

_WORD = re.compile(r"\w+", re.UNICODE)
_START, _STOP = "\x02", "\x03"
"""Around a match in the database's snippet: characters no message text is shown with,
turned into `<mark>` after the text is escaped."""


@dataclass(frozen=True, slots=True)
class Hit:
    conversation_id: str
    message_id: int
    title: str
    snippet: str
    kind: str
    """The conversation's `organising.Kind`: original, fork or import."""
    archived: bool


def search_words(query: object) -> list[str]:
    """The words of a search, or a clear error: nothing to look for, or too much."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("type something to search for (?q=...)")
    if len(query) > MAX_QUERY:
        raise InvalidInput(f"a search is at most {MAX_QUERY} characters")
    words = _WORD.findall(query.lower())
    if not words:
        raise InvalidInput("search for at least one word or number")
    return words[:MAX_WORDS]


def snippet_html(raw: str) -> str:
    """The database's snippet, escaped, with its match markers as `<mark>`."""
    escaped = str(escape(raw.replace("\n", " ")))
    return escaped.replace(_START, "<mark>").replace(_STOP, "</mark>")


_TAGGED = (
    " AND EXISTS (SELECT 1 FROM conversation_tag t WHERE t.conversation_id = c.id AND t.tag = :tag)"
)
"""Narrows a search to conversations carrying `:tag`."""


def _sqlite_statement(tag_filter: str) -> TextClause:
    return text(
        f"""
        SELECT m.conversation_id, m.id, c.title,
               snippet(message_search, 0, '{_START}', '{_STOP}', '…', 16) AS snippet,
               c.kind, c.archived
        FROM message_search
        JOIN message m ON m.id = message_search.rowid
        JOIN conversation c ON c.id = m.conversation_id
        WHERE message_search MATCH :query AND c.owner = :owner{tag_filter}
        ORDER BY bm25(message_search), m.id DESC
        LIMIT :limit
        """
    )


def _postgres_statement(tag_filter: str) -> TextClause:
    return text(
        f"""
        SELECT m.conversation_id, m.id, c.title,
               ts_headline('simple', m.content, to_tsquery('simple', :query),
                           'StartSel={_START}, StopSel={_STOP}, MaxWords=24, MinWords=10')
                 AS snippet,
               c.kind, c.archived
        FROM message m
        JOIN conversation c ON c.id = m.conversation_id
        WHERE c.owner = :owner AND m.status <> 'streaming'
          AND to_tsvector('simple', m.content) @@ to_tsquery('simple', :query){tag_filter}
        ORDER BY ts_rank(to_tsvector('simple', m.content), to_tsquery('simple', :query)) DESC,
                 m.id DESC
        LIMIT :limit
        """
    )


_STATEMENTS = {
    (dialect, narrowed): build(_TAGGED if narrowed else "")
    for dialect, build in (("sqlite", _sqlite_statement), ("postgresql", _postgres_statement))
    for narrowed in (False, True)
}


def _sqlite_query(words: list[str]) -> str:
    return " ".join(f'"{word}"*' for word in words)


def _postgres_query(words: list[str]) -> str:
    return " & ".join(f"{word}:*" for word in words)


def search_messages(
    connection: Connection, owner: str, query: object, tag: str | None = None
) -> list[Hit]:
    """The best matches among `owner`'s finished messages, best first; with `tag`
    (cleaned), only in conversations carrying it."""
    words = search_words(query)
    sqlite = connection.dialect.name == "sqlite"
    statement = _STATEMENTS["sqlite" if sqlite else "postgresql", tag is not None]
    match = _sqlite_query(words) if sqlite else _postgres_query(words)
    parameters = {"query": match, "owner": owner, "limit": RESULTS, "tag": tag}
    rows = connection.execute(statement, parameters)
    return [
        Hit(row[0], row[1], row[2], snippet_html(row[3] or ""), row[4], bool(row[5]))
        for row in rows
    ]
