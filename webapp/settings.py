"""Settings from `WEBAPP_*` environment variables; the model catalog lives in a TOML file.

Environment for what differs per deployment (database, secret, where the TOML is);
TOML for what is shared configuration (providers, models, configurations, embeds).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from webapp.llm.catalog import Catalog, load_catalog
from webapp.llm.providers.transport import TransportKind

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///var/webapp.db"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WEBAPP_", extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL
    secret_key: str = Field(default="dev-only-insecure-secret-change-me", min_length=16)
    config: Path | None = None
    """Path of the TOML catalog; unset means the built-in offline demo model."""

    max_message_chars: int = Field(default=100_000, gt=0)
    """The largest message a user may send, in characters."""

    max_file_bytes: int = Field(default=20 * 2**20, gt=0)
    """The largest file a user may upload (`POST /api/files`), in bytes; a larger one is
    refused with a 413 and nothing is stored."""

    max_files_per_message: int = Field(default=10, gt=0)
    """The most files one message may carry."""

    user_file_quota_bytes: int = Field(default=500 * 2**20, ge=0)
    """What one user's files may take in all, in bytes (each distinct content counted
    once); an upload past it is refused with a 413. 0: no quota."""

    file_read_seconds: float = Field(default=30.0, gt=0)
    """How long reading one upload may take (decoding an image, extracting a PDF's text,
    in a child process); a file that takes longer is refused with a 422."""

    summary_wait_seconds: float = Field(default=10.0, ge=0)
    """How long a send that moved the cut waits for the new summary of what it left out;
    past it the send goes with the summary before, and the new one is carried from the
    next move on (`webapp.chat.answering.summarizing`)."""

    model_titles: bool = True
    """After a conversation's first answer, ask its model for a short title (one call of
    a few tokens, which the model's provider may bill); off, the first message's clean cut
    stays the title."""

    gateway_max_body_bytes: int = Field(default=4 * 2**20, gt=0)
    """The largest request body the OpenAI-compatible gateway (/v1) reads, in bytes; a
    larger one is refused with a 413 before it is read (or as soon as it passes this)."""

    gateway_max_messages: int = Field(default=2048, gt=0)
    """The most messages one /v1/chat/completions call may hold (and the most content
    parts and tool calls in all, and the most inputs of one /v1/embeddings call); more
    are refused with a 400 before they are parsed."""

    stream_flush_interval: float = Field(default=0.25, gt=0)
    """How often a streaming answer's text so far is written to the database, in seconds."""

    tool_approval_seconds: float = Field(default=300.0, gt=0)
    """How long a tool call whose server wants approval waits for the owner's Allow or
    Deny; past it the call counts as denied and the model is told so."""

    stale_stream_after: float = Field(default=30.0, gt=0)
    """A streaming answer not written for this long is taken to be orphaned by a dead worker."""

    rate_limit_messages: int = Field(default=30, ge=0)
    """Messages a signed-in user may send per rate_limit_window; 0 turns the limit off."""

    embed_rate_limit_messages: int = Field(default=10, ge=0)
    """Messages one anonymous embed visitor, and one client address through an embed, may
    send per rate_limit_window; 0 turns it off."""

    embed_rate_limit_total: int = Field(default=200, ge=0)
    """Messages all visitors of one embed together may send per rate_limit_window: what an
    embed may cost at most, however many addresses its visitors come from; 0: no ceiling."""

    rate_limit_window: float = Field(default=60.0, gt=0)
    """The rate limits' window, in seconds."""

    import_limit: int = Field(default=20, ge=0)
    """Conversations a user may import per import_window; 0 turns the count off."""

    import_limit_bytes: int = Field(default=50_000_000, ge=0)
    """Bytes of imports a user may send per import_window (and the most one import may
    be); 0 turns it off."""

    import_window: float = Field(default=3600.0, gt=0)
    """The import quota's window, in seconds."""

    preview_rate: float = Field(default=2.0, ge=0)
    """Previews of a send (the context meter while typing) a user may ask for per second,
    in each worker, after a burst of preview_burst; 0 turns the throttle off."""

    preview_burst: int = Field(default=20, ge=1)
    """Previews a user may ask for at once before preview_rate applies."""

    watchers_per_answer: int = Field(default=10, ge=0)
    """Pages one worker lets follow one answer as it is written; 0: no cap."""

    watchers_per_user: int = Field(default=30, ge=0)
    """Answers' followers one worker lets one user (or embed visitor) have at once; 0: no
    cap."""

    exports_per_user: int = Field(default=3, ge=0)
    """Exports one worker lets one user (or token) have on their way at once: each holds a
    connection and a batch of messages until its client has read it; past this, 429. 0:
    no cap."""

    title_waits_per_user: int = Field(default=10, ge=0)
    """Requests for a new conversation's title (`GET /c/{id}/title`, held until the model
    has named it) one worker lets one user hold at once; past this, 429. 0: no cap."""

    sign_in_failures_allowed: int = Field(default=5, ge=0)
    """Failed sign-ins one username may have within sign_in_failure_window before further
    attempts are refused until the oldest leaves it; 0 turns the throttle off."""

    sign_in_failure_window: float = Field(default=900.0, gt=0)
    """The sign-in throttle's window, in seconds."""

    trusted_proxies: str = ""
    """Comma-separated addresses (or networks) of the reverse proxies in front of the app.
    Only a connection from one of them may say, in X-Forwarded-For and X-Forwarded-Proto,
    who the client is and whether it came over https; empty: nobody may."""

    request_timeout: float = Field(default=15.0, gt=0)
    """A request's headers and body must arrive within this many seconds (from when the
    connection opens or the previous response ends), or the connection is closed."""

    keep_alive_timeout: float = Field(default=5.0, gt=0)
    """An idle keep-alive connection is closed after this many seconds."""

    write_timeout: float = Field(default=15.0, gt=0)
    """A client that takes none of a response's bytes for this many seconds, while the
    server has more to send, is dropped (and what was waiting for it freed)."""

    password_hashing: Literal["standard", "cheapest"] = "standard"
    """The cost of new password hashes. `standard`: Argon2id with argon2-cffi's defaults
    (RFC 9106's low-memory profile, 64 MiB and some 0.2 s of CPU a hash). `cheapest`:
    argon2-cffi's profile of that name, for test runs, which make hundreds of accounts;
    its hashes protect nothing."""

    provider_transport: TransportKind = "asyncio"
    """How plain-HTTP providers (a local llama.cpp, vLLM, Ollama) are read. "asyncio":
    httpcore's HTTP on the app's own asyncio sockets, which cost a fifth less CPU per
    streamed answer than anyio's; "httpx": httpx's own transport for every provider, the
    way back should the fast one misbehave with some server. https providers, and those
    the environment sends through a proxy, use httpx's own transport either way."""

    @property
    def trusted_proxy_list(self) -> list[str]:
        return [item.strip() for item in self.trusted_proxies.split(",") if item.strip()]

    @field_validator("config", mode="before")
    @classmethod
    def _empty_means_unset(cls, value: object) -> object:
        return None if value == "" else value

    @cached_property
    def catalog(self) -> Catalog:
        return load_catalog(self.config)
