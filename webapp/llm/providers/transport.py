"""The httpx transport over `network.AsyncioBackend`, and which providers get it.

httpx's own transport builds its httpcore pool on the default (anyio) backend and offers
no way to name another, so this one is written against the two libraries' public APIs:
an httpx request becomes an httpcore request (the body streamed, the extensions passed
as they are, so the `trace` hook the providers time requests with still fires), the
httpcore response an httpx response whose body streams, and httpcore's exceptions the
httpx exceptions of the same names, which httpx's own transport raises for them too.

`transport_for` gives it only to plain-HTTP providers the environment sends no proxy:
anything else (https, a proxy, the "httpx" `TransportKind`) keeps httpx's own.
"""

from __future__ import annotations

import ipaddress
import ssl
import urllib.request
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Literal

import httpcore
import httpx

from webapp.llm.providers.network import AsyncioBackend

TransportKind = Literal["asyncio", "httpx"]
"""How plain-HTTP providers are read: "asyncio", this module's transport; "httpx",
httpx's own, the way back should this one misbehave with some server. The deployment
chooses (`WEBAPP_PROVIDER_TRANSPORT`), and whoever builds the providers passes it down."""

_ERRORS: dict[type[Exception], type[httpx.TransportError]] = {
    httpcore.TimeoutException: httpx.TimeoutException,
    httpcore.PoolTimeout: httpx.PoolTimeout,
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.NetworkError: httpx.NetworkError,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.ProtocolError: httpx.ProtocolError,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
    httpcore.ProxyError: httpx.ProxyError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
}
"""httpcore's exceptions and the httpx ones callers catch; a subclass httpcore may add
later is mapped as its nearest listed base."""

_CAUGHT = tuple(_ERRORS)


def _as_httpx(exc: Exception, request: httpx.Request) -> httpx.TransportError:
    for kind in type(exc).__mro__:
        mapped = _ERRORS.get(kind)
        if mapped is not None:
            return mapped(str(exc), request=request)
    raise AssertionError(f"not an httpcore error: {exc!r}")  # only _CAUGHT come here


class _Body(httpx.AsyncByteStream):
    """A response's body as httpcore streams it, with its errors as httpx's; closing it
    hands the connection back to the pool (or drops it, if the body was not all read)."""

    def __init__(self, response: httpcore.Response, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        stream = self._response.stream
        assert isinstance(stream, AsyncIterable), "an async pool streams asynchronously"
        try:
            async for chunk in stream:
                yield chunk
        except _CAUGHT as exc:
            raise _as_httpx(exc, self._request) from exc

    async def aclose(self) -> None:
        try:
            await self._response.aclose()
        except _CAUGHT as exc:
            raise _as_httpx(exc, self._request) from exc


class AsyncioTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 through an httpcore pool on `AsyncioBackend`, with the pool settings
    httpx's own transport would use for the same `verify` and `limits`."""

    def __init__(self, *, verify: ssl.SSLContext, limits: httpx.Limits) -> None:
        self._connections = httpcore.AsyncConnectionPool(
            ssl_context=verify,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=AsyncioBackend(),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = request.stream
        assert isinstance(body, httpx.AsyncByteStream), "an async client sends async bodies"
        url = request.url
        outgoing = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=body,
            extensions=request.extensions,  # timeout, trace
        )
        try:
            response = await self._connections.handle_async_request(outgoing)
        except _CAUGHT as exc:
            raise _as_httpx(exc, request) from exc
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response, request),
            extensions=response.extensions,  # http_version, reason_phrase, network_stream
        )

    async def aclose(self) -> None:
        await self._connections.aclose()


# --------------------------------------------------------------------------------------
# The proxy rule.
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Rule:
    """One proxy setting of the environment: the URLs it covers, and whether they go
    through a proxy (HTTP_PROXY and the like) or not (a NO_PROXY entry)."""

    scheme: str
    """"" for any scheme."""
    host: str
    """"" for any host; "*.example.com" its subdomains; "*example.com" it and them."""
    port: int | None
    proxied: bool

    @classmethod
    def parse(cls, key: str, proxied: bool) -> _Rule:
        url = httpx.URL(key)
        return cls(
            scheme="" if url.scheme == "all" else url.scheme,
            host="" if url.host == "*" else url.host,
            port=url.port,
            proxied=proxied,
        )

    def matches(self, url: httpx.URL) -> bool:
        if self.scheme and self.scheme != url.scheme:
            return False
        if self.port is not None and self.port != url.port:
            return False
        host = url.host
        if not self.host:
            return True
        if self.host.startswith("*."):
            suffix = self.host[1:]
            return host.endswith(suffix) and len(host) > len(suffix)
        if self.host.startswith("*"):
            domain = self.host[1:]
            return host == domain or (host.endswith("." + domain) and len(host) > len(domain) + 1)
        return host == self.host

    @property
    def specificity(self) -> tuple[bool, int, int]:
        """Sorts the most specific first: a port named, then the longer host, then the
        longer scheme."""
        return (self.port is None, -len(self.host), -len(self.scheme))


def _bypass_key(entry: str) -> str:
    """A NO_PROXY entry as the URL pattern it stands for, read as curl reads them (and
    httpx): an address or "localhost" is that host only, a name is it and its
    subdomains, ".name" its subdomains only."""
    if "://" in entry:
        return entry
    address = entry.split("/")[0]
    for version in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        try:
            version(address)
        except ValueError:
            continue
        return f"all://{entry}" if version is ipaddress.IPv4Address else f"all://[{entry}]"
    if entry.lower() == "localhost":
        return f"all://{entry}"
    return f"all://*{entry}"


def _environment_rules() -> list[_Rule]:
    """The environment's proxies (urllib's reading: lower case before upper, HTTP_PROXY
    ignored under CGI), most specific first. NO_PROXY=* anywhere in the list turns every
    proxy off; an entry that is no URL at all is left out, which errs towards a proxy
    (and so towards httpx's transport, which then reports it)."""
    found = urllib.request.getproxies()
    keys: dict[str, bool] = {}
    for scheme in ("http", "https", "all"):
        if found.get(scheme):
            keys[f"{scheme}://"] = True
    for entry in (part.strip() for part in found.get("no", "").split(",")):
        if entry == "*":
            return []
        if entry:
            keys[_bypass_key(entry)] = False
    rules = []
    for key, proxied in keys.items():
        try:
            rules.append(_Rule.parse(key, proxied))
        except httpx.InvalidURL:
            continue
    return sorted(rules, key=lambda rule: rule.specificity)


def proxied_by_environment(url: httpx.URL) -> bool:
    """Whether httpx would send `url` through a proxy the environment names
    (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, less NO_PROXY): the most specific setting that
    covers it decides, as in httpx, so the answer is the one its transport acts on."""
    for rule in _environment_rules():
        if rule.matches(url):
            return rule.proxied
    return False


def transport_for(
    url: httpx.URL, *, verify: ssl.SSLContext, limits: httpx.Limits
) -> AsyncioTransport | None:
    """The transport a provider's client at `url` should get: this module's for plain
    HTTP, None (httpx's own) for https or where the environment names a proxy."""
    if url.scheme != "http" or proxied_by_environment(url):
        return None
    return AsyncioTransport(verify=verify, limits=limits)
