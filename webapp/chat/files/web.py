"""The files API (docs/design.md section 12): upload, read back, delete."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from litestar import Controller, Request, Response, Router, delete, get, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.status_codes import HTTP_201_CREATED

from webapp.accounts.models import User
from webapp.chat.files.models import StoredFile
from webapp.chat.files.service import FileStore
from webapp.errors import InvalidInput
from webapp.web.deps import Owner

Files = NamedDependency[FileStore]
"""The app's file store (`files`)."""

MULTIPART_OVERHEAD = 64 * 1024
"""Room in a request for the multipart framing around the file."""


def file_dict(stored: StoredFile) -> dict[str, Any]:
    return {
        "id": stored.id,
        "name": stored.name,
        "media_type": stored.media_type,
        "size": stored.size,
        "sha256": stored.sha256,
        "kind": stored.kind,
    }


def served_type(stored: StoredFile) -> str:
    """Pictures and PDFs as what they are; every text file as plain text, so a browser
    never runs one (an HTML or SVG file is text here)."""
    return "text/plain; charset=utf-8" if stored.kind == "text" else stored.media_type


def disposition(stored: StoredFile) -> str:
    """Pictures open in the page; anything else downloads. The name twice: plain ASCII
    for old clients, and exactly (RFC 6266's `filename*`)."""
    how = "inline" if stored.kind == "image" else "attachment"
    plain = "".join(c if c.isascii() and c not in '"\\' else "_" for c in stored.name)
    return f"{how}; filename=\"{plain}\"; filename*=UTF-8''{quote(stored.name)}"


def file_response(stored: StoredFile, data: bytes) -> Response[bytes]:
    """A file's bytes as served to whoever may read them: never sniffed by the browser,
    a picture inline and anything else as a download."""
    return Response(
        data,
        media_type=served_type(stored),
        headers={
            "Content-Disposition": disposition(stored),
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "private, max-age=3600",
        },
    )


class FileController(Controller):
    path = "/api/files"
    tags = ("files",)

    @post("/", status_code=HTTP_201_CREATED)
    async def upload(
        self, request: Request[Any, Any, Any], files: Files, owner: Owner
    ) -> dict[str, Any]:
        """A file for the caller's messages (multipart, field `file`): a picture (PNG, JPEG,
        WebP, GIF's first frame), a PDF or UTF-8 text, told by its bytes. 413 past the
        size cap or the caller's quota; 400 for a type that is none of those."""
        form = await request.form()
        upload = form.get("file")
        if not isinstance(upload, UploadFile) or not upload.filename:
            raise InvalidInput("send the file as the multipart field 'file'")
        data = await upload.read()
        stored = await files.upload(owner, upload.filename, data, upload.content_type)
        return file_dict(stored)

    @get("/{file_id:str}")
    async def download(
        self, request: Request[Any, Any, Any], files: Files, owner: Owner, file_id: FromPath[str]
    ) -> Response[bytes]:
        """The file's bytes, to its owner, and to an admin signed in (the review's reader:
        an admin's API token reads its owner's files only); 404 for anyone else."""
        user: User = request.user
        reviewing = user.is_admin and request.auth == "session"
        stored, data = await files.read(None if reviewing else owner, file_id)
        return file_response(stored, data)

    @delete("/{file_id:str}", status_code=204)
    async def remove(self, files: Files, owner: Owner, file_id: FromPath[str]) -> None:
        """409 while a message uses the file."""
        await files.delete(owner, file_id)


def files_router(max_file_bytes: int) -> Router:
    """The files API, its requests bounded to one file's size (and its framing): a larger
    body is a 413 as soon as its length says so, before it is read."""
    return Router(
        path="/",
        route_handlers=[FileController],
        request_max_body_size=max_file_bytes + MULTIPART_OVERHEAD,
    )
