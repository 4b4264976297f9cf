"""Files as the handlers use them: an upload checked and kept, a file read back, one
deleted (the rules of each in `sniff`, `inspect` and `store`)."""

from __future__ import annotations

from collections.abc import Collection

from sqlmodel import Session

from webapp.chat.files.inspect import FileLimits, Inspected, inspect
from webapp.chat.files.isolation import in_child
from webapp.chat.files.models import StoredFile
from webapp.chat.files.sniff import sniff
from webapp.chat.files.store import delete_file, file_bytes, keep_file
from webapp.chat.stored.attachments import clean_name
from webapp.db import Database
from webapp.errors import InvalidInput, TooLarge
from webapp.settings import Settings

MAX_IMAGE_PIXELS = 50_000_000
"""The most pixels a picture may unpack to (a 12-megapixel photo is a quarter of it): a
few kilobytes of PNG can claim billions, a decompression bomb, refused from its header."""
MAX_PDF_PAGES = 2_000
KIND_WORDS = {"text": "a text file", "document": "a PDF", "image": "a picture"}


def _file_bytes(session: Session, owner: str | None, file_id: str) -> tuple[StoredFile, bytes]:
    return file_bytes(session.connection(), owner, file_id)


class FileStore:
    def __init__(self, db: Database, settings: Settings) -> None:
        self._db, self._settings = db, settings
        self.limits = FileLimits(MAX_IMAGE_PIXELS, MAX_PDF_PAGES, settings.max_message_chars)

    def check_size(self, name: str, size: int, most: int | None = None) -> None:
        cap = min(self._settings.max_file_bytes, most or self._settings.max_file_bytes)
        if size > cap:
            raise TooLarge(f"{name} is more than {cap:,} bytes; a file may have {cap:,} at most")

    async def upload(
        self,
        owner: str,
        name: str,
        data: bytes,
        declared: str = "",
        *,
        kinds: Collection[str] | None = None,
        most: int | None = None,
    ) -> StoredFile:
        """The file kept for `owner`, or a 4xx naming it with nothing stored; `kinds` and
        `most`: only those kinds of file, of at most that many bytes (an embed's)."""
        name = clean_name(name)
        self.check_size(name, len(data), most)
        if not data:
            raise InvalidInput(f"{name} is empty")
        sniffed = sniff(name, data, declared)
        if kinds is not None and sniffed.kind not in kinds:
            allowed = ", ".join(KIND_WORDS[k] for k in kinds) or "no files"
            raise InvalidInput(f"{name} is {KIND_WORDS[sniffed.kind]}; this chat takes {allowed}")
        seconds = self._settings.file_read_seconds
        kept: Inspected = await in_child(name, seconds, inspect, name, data, sniffed, self.limits)
        quota = self._settings.user_file_quota_bytes
        return await self._db.write_core(keep_file, owner, name, kept, quota)

    async def read(self, owner: str | None, file_id: str) -> tuple[StoredFile, bytes]:
        """A file and its bytes: the owner's (`owner` None: any, for an admin)."""
        return await self._db.read(_file_bytes, owner, file_id)

    async def delete(self, owner: str, file_id: str) -> None:
        await self._db.write_core(delete_file, owner, file_id)
