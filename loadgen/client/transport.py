"""Streaming transports: aiohttp (default) and httpx (HTTP/2 capable).

Both implement :class:`loadgen.load.transport.Transport`. A request that meets a
connection the server closed while it sat in the pool is sent again once, on a new
connection, by the rule of :mod:`loadgen.client.keepalive`. Library exceptions are
translated once, here, by one table (:data:`FOREIGN_ERRORS`, after httpx's
``map_httpcore_exceptions``) into :mod:`loadgen.errors`, and those into an ``ErrorKind``
on the record (:data:`ERROR_KINDS`); nothing but ``CancelledError`` leaves :meth:`send`.

A stream ends at ``[DONE]`` or when the server closes it; a server may instead hold the
connection open after its last event. Once the answer has ended (its ``finish_reason``, or
``[DONE]``, see :mod:`loadgen.client.stream`) the server has :attr:`TransportConfig.end_grace_s`
(:data:`END_GRACE_S`) to end the stream: what comes meanwhile (the usage event asked for by
``stream_options.include_usage``, ``[DONE]``, the body's end, which lets the connection be
reused) is read; then the client stops reading and closes that connection, and the record
is ``ok``, ended at its last event. A connection that fails or times out after the answer
ended does not fail the record either.

Every read is bounded (:mod:`loadgen.client.bounded`): an SSE line by the decoder's cap,
an error body by :data:`~loadgen.client.bounded.MAX_ERROR` bytes after decompression
(httpx's raw bytes are inflated in bounded steps by our own decoder; aiohttp inflates in
bounded steps itself), and unparsed bytes by the parser's backlog. Server text kept on a
record has the request's secrets masked (:mod:`loadgen.client.redact`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx

from loadgen.client.answer import AnswerState, BodyState
from loadgen.client.bounded import ACCEPT_ENCODING, MAX_ERROR, Inflater, read_capped
from loadgen.client.dialects import Dialect, DialectOptions
from loadgen.client.keepalive import STALE_ERRNOS, Attempt, KeepAlive
from loadgen.client.redact import Redactor
from loadgen.client.stream import MAX_BACKLOG, StreamState, output_cap
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
    "END_GRACE_S",
    "ERROR_KINDS",
    "FOREIGN_ERRORS",
    "TRANSPORTS",
    "AiohttpTransport",
    "HttpxTransport",
    "TransportConfig",
    "make_transport",
]

_now = time.perf_counter_ns
_log = logging.getLogger(__name__)
END_GRACE_S = 0.5  # after the answer ended: the longest wait for the stream to end
_AFTER_END = (TimeoutError, aiohttp.ClientError, httpx.HTTPError, OSError)  # failures that no longer matter

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


class _Stale(Exception):
    """A first try lost to the stale keep-alive race; :meth:`_StreamingTransport.send`
    sends the request again on a new connection."""


def _oserror_is_stale(exc: BaseException) -> bool:
    """A reset, broken pipe or abort (the peer had closed), anywhere in the cause chain."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 8:
        if isinstance(cur, ConnectionResetError) or (isinstance(cur, OSError) and cur.errno in STALE_ERRNOS):
            return True
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return False


def _aiohttp_stale(exc: BaseException) -> bool:
    """aiohttp: closed with no byte of a response (``ServerDisconnectedError`` carries the
    partial message when there was one), or a reset / broken pipe."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return exc.message == "Server disconnected"
    return (
        isinstance(exc, aiohttp.ClientOSError)
        and not isinstance(exc, aiohttp.ClientConnectorError)
        and _oserror_is_stale(exc)
    )


def _httpx_stale(exc: BaseException) -> bool:
    """httpx: "Server disconnected without sending a response", a failed write, or a reset."""
    if isinstance(exc, httpx.RemoteProtocolError):
        return "without sending a response" in str(exc)
    if isinstance(exc, httpx.WriteError):
        return True
    return isinstance(exc, httpx.ReadError) and _oserror_is_stale(exc)


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


def _httpx_trace(attempt: Attempt) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
    """httpcore's trace hook for one try: the connect's start and end (TCP, then TLS),
    and the request's headers going out (it had a connection)."""

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.started":
            attempt.connecting()
        elif event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            attempt.opened()
        elif event.endswith("send_request_headers.started"):
            attempt.connected = True

    return trace


def _note_connection(record: RequestRecord, attempt: Attempt) -> None:
    """Put ``attempt``'s connection on the record: new (and its connect time) or reused;
    nothing when the try never got as far as a connection."""
    if attempt.connecting_ns:
        record.new_connection = True
        record.connect_ms = None if attempt.connect_ns is None else attempt.connect_ns / 1e6
    elif attempt.connected:
        record.new_connection = False
        record.connect_ms = None


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
    end_grace_s: float = END_GRACE_S  # after the finish_reason / [DONE]: the wait for the stream's end


class _StreamingTransport:
    """The shared request/record logic; subclasses do the HTTP exchange."""

    def __init__(self, config: TransportConfig) -> None:
        self.redact = Redactor(config.headers)  # the run's headers, which may hold secrets
        if config.dialect.headers:  # the API's own constant headers (not secrets); the run's --header wins
            config = dataclasses.replace(config, headers=config.dialect.request_headers(config.headers))
        self.config = config
        self.url = config.base_url.rstrip("/") + config.dialect.path
        self.keepalive = KeepAlive()
        self._warm_failed = False  # a failure to warm is logged once per transport

    def _state(self, record: RequestRecord, spec: RequestSpec, body: dict[str, Any]) -> BodyState:
        dialect = self.config.dialect
        if not dialect.streams:
            record.inputs = dialect.inputs_sent(body)
            return AnswerState(record, dialect, redact=self.redact)
        return StreamState(
            record,
            dialect,
            answer=spec.answer,
            redact=self.redact,
            finish_ends=dialect.finish_ends(body),
            calls=spec.calls,
            max_events=output_cap(body),
        )

    async def _read_to_end(
        self, state: BodyState, read: Callable[[], Awaitable[None]], over: Callable[[], bool] | None = None
    ) -> None:
        """Run ``read`` (the body's reads, fed to ``state``) until the body ends, until
        :attr:`TransportConfig.end_grace_s` after the answer ended, or until a bad event was
        found; then end ``state`` (which raises that bad event). ``over``: whether the body
        has already ended (``read`` then returns without waiting), so the answer's end
        needs no grace timer."""
        loop = asyncio.get_running_loop()
        grace = self.config.end_grace_s
        try:
            async with asyncio.timeout(None) as deadline:

                def stop() -> None:  # the answer ended: a grace; a bad event: at once
                    failed = state.failed
                    if not failed and over is not None and over():
                        return  # the body's end came with the answer's: nothing to wait for
                    deadline.reschedule(loop.time() + (0.0 if failed else grace))

                state.on_end = stop
                if state.ended or state.failed:
                    stop()
                try:
                    await read()
                finally:
                    state.on_end = None
        except _AFTER_END:
            if not (deadline.expired() or state.ended):
                raise
        await state.end(_now())

    def _status_error(self, status: int, body: bytes, location: str | None) -> HTTPStatusError:
        """A non-200 answer, its (bounded) body and ``Location`` with the secrets masked."""
        text = self.redact(body.decode("utf-8", errors="replace"))
        return HTTPStatusError(status, text, None if location is None else self.redact(location))

    async def warm(self, n: int) -> int:
        """Open up to ``n`` keep-alive connections at once and leave them in the pool, so
        that the level's first requests do not wait for a connect; the number opened (0:
        none needed, or it failed). Bounded by the connect timeout; a failure is logged
        once and is not fatal. Nothing it sends is a request of the level."""
        n = min(max(n, 0), self.config.max_connections)
        if n == 0 or self.keepalive.fresh:  # a server that closes every connection keeps none open
            return 0
        attempts = [Attempt() for _ in range(n)]
        try:
            async with asyncio.timeout(self.config.connect_timeout_s):
                await asyncio.gather(*(self._warm_one(a) for a in attempts))
        except (TimeoutError, aiohttp.ClientError, httpx.HTTPError, OSError, TransportError) as exc:
            if not self._warm_failed:
                self._warm_failed = True
                _log.warning("could not open %d connection(s) ahead of the level: %s", n, type(exc).__name__)
        return sum(1 for a in attempts if a.connect_ns is not None)

    async def _warm_one(self, attempt: Attempt) -> None:
        """One cheap request that opens a connection (when none is idle) and returns it to the pool."""
        return None

    @property
    def _warm_url(self) -> str:
        return self.config.base_url.rstrip("/") + "/v1/models"

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        body = self.config.dialect.build_body(spec, self.config.options)
        state = self._state(record, spec, body)
        attempt = Attempt()
        try:
            with _translated():
                try:
                    await self._exchange(body, state, attempt)
                except _Stale:
                    # the stale keep-alive race: the server never read it (keepalive's rule)
                    record.retries += 1
                    state = self._state(record, spec, body)
                    attempt = Attempt()
                    await self._exchange(body, state, attempt, fresh=True)
        except asyncio.CancelledError:
            _note_connection(record, attempt)
            state.salvage()
            record.fail(ErrorKind.CANCELLED, "cancelled", _now())
            raise
        except TransportError as exc:
            state.salvage()
            http_status = exc.status if isinstance(exc, HTTPStatusError) else None
            record.fail(ERROR_KINDS[type(exc)], self.redact(str(exc)), _now(), http_status)
        _note_connection(record, attempt)
        if record.server is not None and self.redact:  # the server's vendor object, kept on the record
            record.server = self.redact.value(record.server)
        if not record.done_ns:
            record.done_ns = _now()

    async def _exchange(self, body: dict[str, Any], state: BodyState, attempt: Attempt, fresh: bool = False) -> None:
        """One try. ``fresh``: on a new connection. A first try that fails as the stale
        race raises :class:`_Stale` (with the library's exception as its cause)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


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


class AiohttpTransport(_StreamingTransport):
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

    async def _warm_one(self, attempt: Attempt) -> None:
        session = self._get_session(self.keepalive.fresh)
        async with session.get(self._warm_url, allow_redirects=False, trace_request_ctx=attempt) as resp:
            await _aiohttp_error_body(resp)  # read to its end (bounded), so the connection goes back to the pool

    async def _exchange(self, body: dict[str, Any], state: BodyState, attempt: Attempt, fresh: bool = False) -> None:
        keepalive = self.keepalive
        session = self._get_session(fresh or keepalive.fresh)
        record = state.record
        if not fresh:
            record.sent_ns = _now()
        try:
            async with session.post(self.url, json=body, allow_redirects=False, trace_request_ctx=attempt) as resp:
                keepalive.answered(attempt)
                if resp.status != 200:
                    raise self._status_error(resp.status, await _aiohttp_error_body(resp), resp.headers.get("Location"))

                async def read() -> None:
                    async for chunk in resp.content.iter_any():
                        t = _now()
                        state.feed(chunk, t)
                        if state.backlog > MAX_BACKLOG:
                            await state.drain()

                await self._read_to_end(state, read)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            if not fresh and not attempt.answered and keepalive.may_resend(attempt, _aiohttp_stale(exc)):
                raise _Stale() from exc
            raise

    async def aclose(self) -> None:
        for session in (self._session, self._fresh_session):
            if session is not None:
                await session.close()
        self._session = self._fresh_session = None


class HttpxTransport(_StreamingTransport):
    """httpx client, HTTP/2 when ``config.http2`` (needs the ``h2`` package); a second
    client without keep-alive for resends and servers that close every connection."""

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._client: Any = None
        self._fresh_client: Any = None

    def _get_client(self, fresh: bool = False) -> Any:
        client = self._fresh_client if fresh else self._client
        if client is None:
            cfg = self.config
            try:
                client = httpx.AsyncClient(
                    http2=cfg.http2,
                    headers={"Accept-Encoding": ACCEPT_ENCODING, **cfg.headers},  # what Inflater decodes
                    limits=httpx.Limits(
                        max_connections=cfg.max_connections,
                        max_keepalive_connections=0 if fresh else cfg.max_connections,
                    ),
                    timeout=httpx.Timeout(cfg.read_timeout_s, connect=cfg.connect_timeout_s),
                    follow_redirects=False,
                )
            except ImportError as exc:  # http2=True without h2
                raise ConfigError(f"HTTP/2 needs the h2 package: pip install 'httpx[http2]' ({exc})") from exc
            if fresh:
                self._fresh_client = client
            else:
                self._client = client
        return client

    async def _exchange(self, body: dict[str, Any], state: BodyState, attempt: Attempt, fresh: bool = False) -> None:
        keepalive = self.keepalive
        client = self._get_client(fresh or keepalive.fresh)
        record = state.record
        if not fresh:
            record.sent_ns = _now()
        attempt.reused = True  # until the pool says it connected
        trace = _httpx_trace(attempt)

        served: Any = None  # the HTTP/1.1 connection that answered (see _h11_connection)
        async with asyncio.timeout(self.config.request_timeout_s) if hasattr(asyncio, "timeout") else _NoTimeout():
            try:
                async with client.stream("POST", self.url, json=body, extensions={"trace": trace}) as resp:
                    served = _h11_connection(client, resp)
                    keepalive.answered(attempt)
                    encoding = resp.headers.get("Content-Encoding")
                    if resp.status_code != 200:
                        text = await read_capped(resp.aiter_raw(), encoding, MAX_ERROR, truncate=True)
                        raise self._status_error(resp.status_code, text, resp.headers.get("Location"))
                    inflater = Inflater(
                        encoding, max_ratio=None
                    )  # bounded steps: httpx would inflate a whole read at once

                    async def read() -> None:
                        async for raw in resp.aiter_raw():
                            t = _now()
                            for chunk in inflater.feed(raw):
                                state.feed(chunk, t)
                                if state.backlog > MAX_BACKLOG:
                                    await state.drain()

                    await self._read_to_end(state, read)
            except (httpx.RemoteProtocolError, httpx.WriteError, httpx.ReadError) as exc:
                if not fresh and not attempt.answered and keepalive.may_resend(attempt, _httpx_stale(exc)):
                    raise _Stale() from exc
                raise
            finally:
                if served is not None and served._h11_state.trailing_data[0]:
                    await served.aclose()  # bytes beyond the answer: never read as the next request's

    async def _warm_one(self, attempt: Attempt) -> None:
        client = self._get_client(self.keepalive.fresh)
        async with client.stream("GET", self._warm_url, extensions={"trace": _httpx_trace(attempt)}) as resp:
            await read_capped(resp.aiter_raw(), resp.headers.get("Content-Encoding"), MAX_ERROR, truncate=True)

    async def aclose(self) -> None:
        for client in (self._client, self._fresh_client):
            if client is not None:
                await client.aclose()
        self._client = self._fresh_client = None


def _h11_connection(client: httpx.AsyncClient, resp: httpx.Response) -> Any:
    """The httpcore HTTP/1.1 connection that carries ``resp``, or None (HTTP/2, or an
    httpcore whose private parts moved: tests/fuzz/test_integrity_fuzz.py then fails).

    h11 keeps the bytes read beyond a response's end and parses them as the next
    response on the connection: a second response, or garbage, pipelined after an
    answer would be taken as the next request's. httpcore has no public way to see them,
    so the caller looks at ``_h11_state.trailing_data`` once the response is over and
    closes the connection if any came (httpcore gives a request assigned to a closed
    connection another one)."""
    stream = resp.extensions.get("network_stream")
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    for conn in getattr(pool, "connections", ()):
        inner = getattr(conn, "_connection", None)
        if getattr(inner, "_network_stream", None) is stream and hasattr(inner, "_h11_state"):
            return inner
    return None


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


class _NoTimeout:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def _fast(config: TransportConfig) -> _StreamingTransport:
    from loadgen.client.fast import FastTransport  # here: fast.py subclasses _StreamingTransport

    return FastTransport(config)


TRANSPORTS: dict[str, Callable[[TransportConfig], _StreamingTransport]] = {
    "aiohttp": AiohttpTransport,
    "httpx": HttpxTransport,
    "fast": _fast,
}


def make_transport(name: str, config: TransportConfig) -> _StreamingTransport:
    try:
        cls = TRANSPORTS[name]
    except KeyError:
        raise ConfigError(
            f"unknown transport {name!r}; choose one of: {', '.join(TRANSPORTS)}", key="--transport"
        ) from None
    return cls(config)
