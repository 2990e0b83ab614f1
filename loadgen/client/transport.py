"""Streaming transports: aiohttp (default) and httpx (HTTP/2 capable).

Both implement :class:`loadgen.load.transport.Transport`. Library exceptions are
translated once, here, by one table (:data:`FOREIGN_ERRORS`, after httpx's
``map_httpcore_exceptions``) into :mod:`loadgen.errors`, and those into an ``ErrorKind``
on the record (:data:`ERROR_KINDS`); nothing but ``CancelledError`` leaves :meth:`send`.
"""

from __future__ import annotations

import asyncio
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import aiohttp
import httpx

from loadgen.client.dialects import Dialect, DialectOptions
from loadgen.client.stream import StreamState
from loadgen.errors import (
    ConfigError,
    Disconnected,
    ErrorEvent,
    HTTPStatusError,
    InvalidResponse,
    RequestTimeout,
    TransportError,
)
from loadgen.records import ErrorKind, RequestRecord, RequestSpec

__all__ = [
    "TransportConfig",
    "AiohttpTransport",
    "HttpxTransport",
    "make_transport",
    "TRANSPORTS",
    "FOREIGN_ERRORS",
    "ERROR_KINDS",
]

_now = time.perf_counter_ns

FOREIGN_ERRORS: dict[type[Exception], tuple[type[TransportError], str]] = {
    # aiohttp's and httpx's exceptions -> ours, with the start of the message. The first
    # row the exception is an instance of wins: specific rows before general ones.
    TimeoutError: (RequestTimeout, "timed out"),  # asyncio.timeout(), aiohttp's timeouts
    httpx.TimeoutException: (RequestTimeout, "timed out"),
    aiohttp.ClientConnectorError: (Disconnected, "cannot connect"),
    httpx.ConnectError: (Disconnected, "cannot connect"),
    aiohttp.ServerDisconnectedError: (Disconnected, "connection closed mid-stream"),
    aiohttp.ClientPayloadError: (Disconnected, "connection closed mid-stream"),
    httpx.RemoteProtocolError: (Disconnected, "connection closed mid-stream"),
    httpx.NetworkError: (Disconnected, "connection closed mid-stream"),
    aiohttp.ClientResponseError: (InvalidResponse, "bad HTTP response"),
    httpx.HTTPError: (InvalidResponse, "bad HTTP response"),
    aiohttp.ClientError: (Disconnected, "connection failed"),
    OSError: (Disconnected, "connection failed"),
}

ERROR_KINDS: dict[type[TransportError], ErrorKind] = {
    HTTPStatusError: ErrorKind.HTTP_ERROR,
    RequestTimeout: ErrorKind.TIMEOUT,
    Disconnected: ErrorKind.DISCONNECTED,
    InvalidResponse: ErrorKind.INVALID_RESPONSE,
    ErrorEvent: ErrorKind.ERROR_EVENT,
}


@contextmanager
def _translated() -> Iterator[None]:
    """Re-raise a library exception as its :data:`FOREIGN_ERRORS` row says (``from``
    the original); ours and anything not in the table (a bug) pass unchanged."""
    try:
        yield
    except TransportError:
        raise
    except Exception as exc:
        for foreign, (ours, what) in FOREIGN_ERRORS.items():
            if isinstance(exc, foreign):
                detail = str(exc)
                raise ours(f"{what}: {type(exc).__name__}{': ' + detail if detail else ''}") from exc
        raise


@dataclass(slots=True)
class TransportConfig:
    base_url: str  # e.g. http://127.0.0.1:8000 (no trailing /v1)
    dialect: Dialect
    options: DialectOptions
    headers: dict[str, str] = field(default_factory=dict)  # may hold secrets: never persisted
    max_connections: int = 100
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 120.0  # longest silence between two reads
    request_timeout_s: float = 600.0  # whole request
    http2: bool = False


class _StreamingTransport:
    """The shared request/record logic; subclasses do the HTTP exchange."""

    def __init__(self, config: TransportConfig) -> None:
        self.config = config
        self.url = config.base_url.rstrip("/") + config.dialect.path

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        body = self.config.dialect.build_body(spec, self.config.options)
        state = StreamState(record, self.config.dialect, answer=spec.answer)
        try:
            with _translated():
                await self._exchange(body, state)
        except asyncio.CancelledError:
            state.salvage()
            record.fail(ErrorKind.CANCELLED, "cancelled", _now())
            raise
        except TransportError as exc:
            state.salvage()
            http_status = exc.status if isinstance(exc, HTTPStatusError) else None
            record.fail(ERROR_KINDS[type(exc)], str(exc), _now(), http_status)
        if not record.done_ns:
            record.done_ns = _now()

    async def _exchange(self, body: dict[str, Any], state: StreamState) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


def _nodelay_socket(addr_info: Any) -> socket.socket:
    family, type_, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=type_, proto=proto)
    if family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class AiohttpTransport(_StreamingTransport):
    """aiohttp client; one session per event loop, created lazily inside the loop."""

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            cfg = self.config
            connector = aiohttp.TCPConnector(
                limit=cfg.max_connections, limit_per_host=0, socket_factory=_nodelay_socket, ttl_dns_cache=300
            )
            timeout = aiohttp.ClientTimeout(
                total=cfg.request_timeout_s, sock_connect=cfg.connect_timeout_s, sock_read=cfg.read_timeout_s
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=timeout,
                headers=cfg.headers,
                auto_decompress=True,
                read_bufsize=2**16,
            )
        return self._session

    async def _exchange(self, body: dict[str, Any], state: StreamState) -> None:
        session = self._get_session()
        record = state.record
        record.sent_ns = _now()
        async with session.post(self.url, json=body, allow_redirects=False) as resp:
            if resp.status != 200:
                text = await resp.text(errors="replace")
                raise HTTPStatusError(resp.status, text, resp.headers.get("Location"))
            async for chunk in resp.content.iter_any():
                t = _now()
                state.feed(chunk, t)
            state.close(_now())

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class HttpxTransport(_StreamingTransport):
    """httpx client, HTTP/2 when ``config.http2`` (needs the ``h2`` package)."""

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._client: Any = None

    def _get_client(self) -> Any:
        if self._client is None:
            cfg = self.config
            try:
                self._client = httpx.AsyncClient(
                    http2=cfg.http2,
                    headers=cfg.headers,
                    limits=httpx.Limits(max_connections=cfg.max_connections, max_keepalive_connections=cfg.max_connections),
                    timeout=httpx.Timeout(cfg.read_timeout_s, connect=cfg.connect_timeout_s),
                    follow_redirects=False,
                )
            except ImportError as exc:  # http2=True without h2
                raise ConfigError(f"HTTP/2 needs the h2 package: pip install 'httpx[http2]' ({exc})") from exc
        return self._client

    async def _exchange(self, body: dict[str, Any], state: StreamState) -> None:
        client = self._get_client()
        record = state.record
        record.sent_ns = _now()
        async with asyncio.timeout(self.config.request_timeout_s) if hasattr(asyncio, "timeout") else _NoTimeout():
            async with client.stream("POST", self.url, json=body) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    raise HTTPStatusError(resp.status_code, resp.text, resp.headers.get("Location"))
                async for chunk in resp.aiter_bytes():
                    t = _now()
                    state.feed(chunk, t)
                state.close(_now())

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class _NoTimeout:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


TRANSPORTS: dict[str, type[_StreamingTransport]] = {"aiohttp": AiohttpTransport, "httpx": HttpxTransport}


def make_transport(name: str, config: TransportConfig) -> _StreamingTransport:
    try:
        cls = TRANSPORTS[name]
    except KeyError:
        raise ConfigError(f"unknown transport {name!r}; choose one of: {', '.join(TRANSPORTS)}", key="--transport") from None
    return cls(config)
