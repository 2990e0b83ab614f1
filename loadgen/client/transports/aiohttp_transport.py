"""The ``aiohttp`` transport: aiohttp's client session, with its connection pool.

aiohttp inflates a compressed body in bounded steps itself. A connection that holds bytes
beyond its last answer is closed before it is reused (:class:`_Connector`); aiohttp's
connection events tell the request whether its connection was new or reused.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import aiohttp

from loadgen.client.answer import BodyState
from loadgen.client.bounded import MAX_ERROR
from loadgen.client.keepalive import Attempt
from loadgen.client.stream import MAX_BACKLOG
from loadgen.client.transports.base import Stale, StreamingTransport, TransportConfig, oserror_is_stale

__all__ = ["AiohttpTransport"]

_now = time.perf_counter_ns


def _aiohttp_stale(exc: BaseException) -> bool:
    """aiohttp: closed with no byte of a response (``ServerDisconnectedError`` carries the
    partial message when there was one), or a reset / broken pipe."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return exc.message == "Server disconnected"
    return (
        isinstance(exc, aiohttp.ClientOSError)
        and not isinstance(exc, aiohttp.ClientConnectorError)
        and oserror_is_stale(exc)
    )


async def _on_reuse(session: Any, ctx: Any, params: Any) -> None:
    if isinstance(ctx.trace_request_ctx, Attempt):
        ctx.trace_request_ctx.reused = True
        ctx.trace_request_ctx.connected = True


async def _on_create_start(session: Any, ctx: Any, params: Any) -> None:
    if isinstance(ctx.trace_request_ctx, Attempt):
        ctx.trace_request_ctx.connecting()


async def _on_create_end(session: Any, ctx: Any, params: Any) -> None:
    if isinstance(ctx.trace_request_ctx, Attempt):
        ctx.trace_request_ctx.opened()


_TRACE = aiohttp.TraceConfig()
_TRACE.on_connection_reuseconn.append(_on_reuse)
_TRACE.on_connection_create_start.append(_on_create_start)
_TRACE.on_connection_create_end.append(_on_create_end)


def _nodelay_socket(addr_info: Any) -> socket.socket:
    family, type_, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=type_, proto=proto)
    if family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, but an idle connection holding bytes beyond its last answer is
    closed before it can be reused.

    aiohttp returns a connection to the pool the moment a response's body ends, while the
    rest of that read (a second, unasked-for response; garbage) is still being parsed; the
    next request on it would read the queued message as its own answer. The check is here,
    when a connection is taken, because by then every read has been parsed: the protocol's
    ``should_close`` (public) says it holds a queued message, unparsed bytes or a parse
    error. ``_get`` and ``_conns`` are aiohttp 3.x's own; tests/fuzz/test_integrity_fuzz.py
    fails first if they change."""

    async def _get(self, key: Any, traces: list[Any]) -> Any:
        for proto, _ in getattr(self, "_conns", {}).get(key, ()):
            if proto.should_close:
                proto.close()  # not connected any more: aiohttp's _get drops it
        return await super()._get(key, traces)


class AiohttpTransport(StreamingTransport):
    """aiohttp client; one session per event loop, created lazily inside the loop, and a
    second one without keep-alive for resends and servers that close every connection."""

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._session: aiohttp.ClientSession | None = None
        self._fresh_session: aiohttp.ClientSession | None = None

    def _get_session(self, fresh: bool = False) -> aiohttp.ClientSession:
        session = self._fresh_session if fresh else self._session
        if session is None:
            cfg = self.config
            connector = _Connector(
                limit=cfg.max_connections,
                limit_per_host=0,
                socket_factory=_nodelay_socket,
                ttl_dns_cache=300,
                force_close=fresh,
            )
            timeout = aiohttp.ClientTimeout(
                total=cfg.request_timeout_s, sock_connect=cfg.connect_timeout_s, sock_read=cfg.read_timeout_s
            )
            session = aiohttp.ClientSession(
                connector=connector,
                timeout=timeout,
                headers=cfg.headers,
                auto_decompress=True,
                read_bufsize=2**16,
                trace_configs=[_TRACE],
            )
            if fresh:
                self._fresh_session = session
            else:
                self._session = session
        return session

    async def warm_one(self, attempt: Attempt) -> None:
        session = self._get_session(self.keepalive.fresh)
        async with session.get(self.warm_url, allow_redirects=False, trace_request_ctx=attempt) as resp:
            await _aiohttp_error_body(resp)  # read to its end (bounded), so the connection goes back to the pool

    async def exchange(self, body: dict[str, Any], state: BodyState, attempt: Attempt, fresh: bool = False) -> None:
        keepalive = self.keepalive
        session = self._get_session(fresh or keepalive.fresh)
        record = state.record
        if not fresh:
            record.sent_ns = _now()
        try:
            async with session.post(self.url, json=body, allow_redirects=False, trace_request_ctx=attempt) as resp:
                keepalive.answered(attempt)
                if resp.status != 200:
                    raise self.status_error(resp.status, await _aiohttp_error_body(resp), resp.headers.get("Location"))

                async def read() -> None:
                    async for chunk in resp.content.iter_any():
                        t = _now()
                        state.feed(chunk, t)
                        if state.backlog > MAX_BACKLOG:
                            await state.drain()

                await self.read_to_end(state, read)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            if not fresh and not attempt.answered and keepalive.may_resend(attempt, _aiohttp_stale(exc)):
                raise Stale() from exc
            raise

    async def aclose(self) -> None:
        for session in (self._session, self._fresh_session):
            if session is not None:
                await session.close()
        self._session = self._fresh_session = None


async def _aiohttp_error_body(resp: aiohttp.ClientResponse) -> bytes:
    """At most :data:`MAX_ERROR` bytes of an error body (after decompression); the rest is
    not read (the connection is then closed, not reused)."""
    parts: list[bytes] = []
    size = 0
    while size < MAX_ERROR:
        chunk = await resp.content.read(MAX_ERROR - size)
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)
