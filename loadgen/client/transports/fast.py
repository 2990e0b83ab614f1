"""The ``fast`` transport: HTTP/1.1 on asyncio protocols, parsed by httptools (llhttp).

Built for timing: each read is stamped with ``perf_counter_ns()`` in the protocol's
``data_received`` and its body bytes go straight to the request's
:class:`~loadgen.client.stream.StreamState` (:mod:`.fast_conn`); no
coroutine wakes per read. Requests, records, the end grace, redaction, error kinds and
the stale keep-alive rule are the shared ones of :mod:`.base`.

What it does: keep-alive connections (at most ``max_connections`` per event loop),
``Content-Length``, chunked and connection-delimited bodies, ``gzip``/``deflate``
(``Accept-Encoding`` as :data:`~loadgen.client.bounded.ACCEPT_ENCODING`, inflated in
bounded steps), TLS for ``https`` URLs (the default SSL context), TCP_NODELAY, the
connect / read (longest silence) / whole-request timeouts. Redirects are not followed (a
3xx is an ``HTTPStatusError`` with its ``Location``, secrets masked); an error body is
read to :data:`~loadgen.client.bounded.MAX_ERROR` bytes. A response with
``Connection: close`` (or HTTP/1.0 without keep-alive) leaves its connection closed.
Not supported: proxies and HTTP/2 (the ``aiohttp`` and ``httpx`` transports have them).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

import orjson

from loadgen.client.answer import BodyState
from loadgen.client.bounded import ACCEPT_ENCODING, MAX_ERROR, Inflater
from loadgen.client.keepalive import Attempt
from loadgen.client.transports.base import Stale, StreamingTransport, TransportConfig
from loadgen.client.transports.fast_conn import Conn, Pool
from loadgen.errors import ConfigError, Disconnected, InvalidResponse

__all__ = ["FastTransport"]

_now = time.perf_counter_ns
_DEFAULTS = {"content-type": "application/json", "accept-encoding": ACCEPT_ENCODING, "user-agent": "loadgen"}
_OURS = frozenset({"host", "content-length", "transfer-encoding", "connection"})  # framing: set here only


def _request_head(url: str, headers: dict[str, str]) -> tuple[str, int, bool, bytes]:
    """Host, port, TLS and the request head up to ``Content-Length: `` for ``url``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"the fast transport needs an http:// or https:// URL, not {parts.scheme or url!r}")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    host = parts.hostname
    authority = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        authority += f":{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    given = {k.lower() for k in headers}
    lines = [f"POST {target} HTTP/1.1", f"Host: {authority}"]
    for (
        name,
        value,
    ) in (
        headers.items()
    ):  # the user's first (as aiohttp sends them): a server that echoes the head shows their masks early
        if any(c in name + value for c in "\r\n\0") or not name.strip():
            raise ConfigError(f"header {name[:40]!r} holds a line break or is empty", field="headers")
        if name.lower() not in _OURS:
            lines.append(f"{name}: {value}")
    lines += [f"{k}: {v}" for k, v in _DEFAULTS.items() if k not in given]
    head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1", errors="strict")
    return host, port, tls, head


class FastTransport(StreamingTransport):
    """HTTP/1.1 streaming on an asyncio protocol (see the module); one pool per event loop."""

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        if config.http2:
            raise ConfigError("the fast transport speaks HTTP/1.1 only; --http2 needs --transport httpx")
        try:
            self._host, self._port, tls, self._head = _request_head(self.url, self.config.headers)
        except UnicodeEncodeError:
            raise ConfigError("a header holds characters outside Latin-1", field="headers") from None
        self._tls: ssl.SSLContext | None = ssl.create_default_context() if tls else None
        self._pool: Pool | None = None

    @property
    def pool(self) -> Pool:
        """This event loop's pool (a new loop gets a new one)."""
        pool = self._pool
        loop = asyncio.get_running_loop()
        if pool is None or pool.loop is not loop:
            if pool is not None and not pool.loop.is_closed():
                pool.close()
            cfg = self.config
            pool = self._pool = Pool(
                self._host, self._port, cfg.max_connections, cfg.connect_timeout_s, cfg.read_timeout_s, self._tls
            )
        return pool

    async def warm(self, n: int) -> int:
        """As the other transports' (:meth:`StreamingTransport.warm`), without a request: up
        to ``n`` connections opened and left idle, less those already idle."""
        return await super().warm(n - len(self.pool.idle))

    async def warm_one(self, attempt: Attempt) -> None:
        await self.pool.open_idle(attempt)

    async def exchange(self, body: dict[str, Any], state: BodyState, attempt: Attempt, fresh: bool = False) -> None:
        keepalive = self.keepalive
        single = fresh or keepalive.fresh  # a connection for this request only
        record = state.record
        payload = orjson.dumps(body)
        data = self._head + b"%d\r\n\r\n%s" % (len(payload), payload)
        pool = self.pool
        if not fresh:
            record.sent_ns = _now()
        keep = False
        async with asyncio.timeout(self.config.request_timeout_s):
            conn, attempt.reused = await pool.acquire(single, attempt)
            started = False
            try:
                try:
                    if conn.closed:  # went between the pool and now: as if it closed on our write
                        raise Disconnected("connection closed before a response")
                    conn.start(data, state)
                    started = True
                    await conn.wait(head=True)
                except Disconnected as exc:
                    answered = started and conn.got_bytes  # a byte of this request's response
                    if not fresh and not answered and keepalive.may_resend(attempt, True):
                        raise Stale() from exc
                    raise
                keepalive.answered(attempt)
                if conn.status != 200:
                    text = await _error_body(conn)
                    keep = True
                    raise self.status_error(conn.status, text, conn.location)
                await self.read_to_end(state, lambda: _read(conn, state), lambda: conn.complete)
                keep = not single
            finally:
                pool.release(conn, keep)

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


async def _read(conn: Conn, state: BodyState) -> None:
    """Until the body ended; a close once the answer ended is its end too."""
    try:
        await conn.wait(head=False)
    except (Disconnected, InvalidResponse):  # the connection's failures; a bad event is raised by state.end
        if not state.ended:
            raise


async def _error_body(conn: Conn) -> bytes:
    """At most :data:`MAX_ERROR` bytes of an error body (after decompression); a longer
    one is not read further (its connection is then closed)."""
    inflater = Inflater(conn.encoding)
    parts: list[bytes] = []
    size = 0
    while True:
        pending, conn.body = conn.body, []
        for raw in pending:
            for piece in inflater.feed(raw):
                parts.append(piece)
                size += len(piece)
                if size >= MAX_ERROR:
                    return b"".join(parts)[:MAX_ERROR]
        if conn.complete:
            return b"".join(parts)
        await conn.wait_more()
