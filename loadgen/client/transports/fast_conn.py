"""One HTTP/1.1 connection of the ``fast`` transport, and its pool.

:class:`Conn` is an asyncio :class:`~asyncio.Protocol`: ``data_received`` stamps the read
and feeds an ``httptools`` (llhttp) response parser, whose ``on_body`` hands each piece to
the request's :class:`~loadgen.client.stream.StreamState` with that stamp; the sending
coroutine wakes only for the head, the end, a failure or backpressure, never per read. A
response belongs to the request written on its connection and nothing else (1xx skipped,
``101`` invalid, bytes beyond the answer close the connection); the head is bounded by
:data:`MAX_LINE`, :data:`MAX_HEADERS`, :data:`MAX_HEAD` and :data:`MAX_INTERIM`. One timer
checks the read timeout. :class:`Pool` keeps at most ``max_connections`` per event loop.

Docs: docs/client.md ("The ``fast`` transport's connections", "One answer, one request",
"Every read is bounded").
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections import deque
from typing import Any, cast

import httptools

from loadgen.client.answer import BodyState
from loadgen.client.bounded import Inflater
from loadgen.client.keepalive import Attempt
from loadgen.client.stream import MAX_BACKLOG
from loadgen.errors import Disconnected, InvalidResponse, TransportError

__all__ = ["MAX_HEAD", "MAX_HEADERS", "MAX_INTERIM", "MAX_LINE", "Conn", "Pool"]

MAX_LINE = 8190  # bytes of the status line or of one header line (aiohttp's client limit)
MAX_HEADERS = 128  # header fields in one response head (aiohttp's client limit)
MAX_HEAD = MAX_HEADERS * (MAX_LINE + 2)  # bytes of the heads before the final one ends, interim heads included
MAX_INTERIM = 16  # 1xx interim responses before the final one

_now = time.perf_counter_ns


class Conn(asyncio.Protocol):
    """One connection; one request at a time (:meth:`start`, then the waits)."""

    __slots__ = (
        "_framed",
        "_head_bytes",
        "_interim",
        "_last",
        "_line",
        "_loop",
        "_n_headers",
        "_timer",
        "_waiter",
        "body",
        "closed",
        "complete",
        "encoding",
        "error",
        "got_bytes",
        "head_done",
        "inflater",
        "keep_alive",
        "location",
        "lost",
        "parser",
        "paused",
        "read_timeout_ns",
        "sink",
        "state",
        "status",
        "stray",
        "transport",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout_s: float) -> None:
        self._loop = loop
        self.read_timeout_ns = int(read_timeout_s * 1e9)
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.stray = False  # bytes came that no request asked for: the connection is not used again
        self.lost: BaseException | None = None  # why the connection went (None: a clean EOF)
        self._timer: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._reset(None)

    def _reset(self, state: BodyState | None) -> None:
        self.state = state
        self.sink: BodyState | None = None  # where 200 body pieces go (None: the error buffer)
        self.inflater: Inflater | None = None
        self.body: list[bytes] = []
        self.status = 0
        self.location: str | None = None
        self.encoding: str | None = None
        self._framed = False  # Content-Length or chunked: the body does not end at EOF
        self.got_bytes = False
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.paused = False
        self.error: BaseException | None = None
        self._interim = 0  # 1xx responses skipped
        self._n_headers = 0  # header fields of the head being read
        self._head_bytes = 0  # bytes read while no final head had ended
        self._line = 0  # bytes of the head's unfinished line
        self._last = _now()

    # -- the request side -------------------------------------------------------------

    def start(self, data: bytes, state: BodyState) -> None:
        """Send one request whose 200 body goes to ``state``."""
        self._reset(state)
        assert self.transport is not None
        self.transport.write(data)
        if self.read_timeout_ns > 0 and self._timer is None:
            # an armed timer is due at most read_timeout after an older stamp: it fires no
            # later than this request needs, and re-arms from the newest stamp
            self._timer = self._loop.call_later(self.read_timeout_ns / 1e9, self._check_silence)

    async def wait(self, head: bool) -> None:
        """Until the head (``head``) or the whole message came; raises the failure if one
        came first. Paused reading is resumed once the stream's backlog drained."""
        while True:
            if self.error is not None:
                raise self.error
            if self.paused:
                if self.state is not None:
                    await self.state.drain()
                self.paused = False
                if self.transport is not None and not self.closed:
                    self.transport.resume_reading()
                continue
            if self.complete or (head and self.head_done):
                return
            if self.closed:
                self._on_eof()
                continue
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def wait_more(self) -> None:
        """Until anything happens on the connection (an error body's next piece); raises
        the failure if one came."""
        if self.error is None and not self.complete:
            if self.closed:
                self._on_eof()
            else:
                self._waiter = self._loop.create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
        if self.error is not None:
            raise self.error

    def done(self) -> None:
        """The request is over (whatever its end): the silence timer watches nothing now
        (it lapses when it next fires, unless a new request started meanwhile)."""
        self.state = self.sink = None

    @property
    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed and self.error is None and not self.stray

    def close(self) -> None:
        self.done()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # -- the protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self._last = _now()
        if self.state is None or self.stray:
            self._unasked()  # no request is waiting on this connection: nothing here is an answer
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.complete:  # garbage after the answer: the answer stands, the connection goes
                self._unasked()
            else:
                self._fail(InvalidResponse(f"bad HTTP response: {type(exc).__name__}: {exc}"))
            return
        if not self.head_done and self.error is None:
            self._bound_head(data)
        state = self.sink
        if state is not None and state.backlog > MAX_BACKLOG and not self.paused:
            self.paused = True
            if self.transport is not None:
                self.transport.pause_reading()
            self._wake()

    def _bound_head(self, data: bytes) -> None:
        """The final head has not ended after ``data``: fail past the head's bounds (the
        parser buffers an unfinished line, so an endless one must be cut here)."""
        self._head_bytes += len(data)
        nl = data.rfind(b"\n")
        self._line = self._line + len(data) if nl < 0 else len(data) - nl - 1
        if self._line > MAX_LINE:
            self._fail(InvalidResponse(f"response head line over {MAX_LINE} bytes"))
        elif self._head_bytes > MAX_HEAD:
            self._fail(InvalidResponse(f"response head over {MAX_HEAD} bytes"))

    def _unasked(self) -> None:
        """Bytes that belong to no request (a second response, garbage after the answer,
        anything on an idle connection): the connection is closed, never used again."""
        self.stray = self.closed = True
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        return False  # close the transport (connection_lost follows)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.lost = exc
        self._wake()

    def _check_silence(self) -> None:
        self._timer = None
        if self.state is None or self.complete:
            return  # no request in flight: the next start arms a new timer
        left = self.read_timeout_ns - (_now() - self._last)
        if self.paused:  # our own backlog, not the server's silence
            left = self.read_timeout_ns
        if left > 0:
            self._timer = self._loop.call_later(left / 1e9, self._check_silence)
        elif not self.complete:
            self._fail(TimeoutError(f"no byte for {self.read_timeout_ns / 1e9:g} s (read timeout)"))

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _on_eof(self) -> None:
        """The connection went while a request waited on it."""
        if self.head_done and not self._framed and self.lost is None:
            self.complete = True  # a body that ends at the connection's end
            return
        lost = self.lost
        detail = f": {type(lost).__name__}: {lost}" if lost is not None else ""
        what = "connection closed mid-stream" if self.got_bytes else "connection closed before a response"
        self.error = Disconnected(what + detail)

    # -- parser callbacks (httptools) -------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # a second response to one request
            self._unasked()
        self.got_bytes = True

    def on_status(self, status: bytes) -> None:
        self.got_bytes = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.stray:
            return
        self._n_headers += 1
        if self._n_headers > MAX_HEADERS:
            self._fail(InvalidResponse(f"response head with over {MAX_HEADERS} header fields"))
        elif len(name) + len(value) > MAX_LINE:
            self._fail(InvalidResponse(f"response header line over {MAX_LINE} bytes"))
        key = name.lower()
        if key == b"content-encoding":
            self.encoding = value.decode("latin-1")
        elif key == b"location":
            self.location = value.decode("latin-1")
        elif key in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        if self.stray or self.error is not None:
            return
        status = self.parser.get_status_code()
        if status < 200:
            self._skip_interim(status)
            return
        self.status = status
        self.head_done = True
        if self.status == 200 and self.state is not None:
            enc = (self.encoding or "").strip().lower()
            try:
                self.inflater = None if enc in ("", "identity") else Inflater(enc, max_ratio=None)
            except TransportError as exc:
                self._fail(exc)
                return
            self.sink = self.state
        self._wake()

    def _skip_interim(self, status: int) -> None:
        """A 1xx head: the final response follows on the same connection (RFC 9110 §15.2)."""
        if status == 101:
            self._fail(InvalidResponse("HTTP 101 Switching Protocols: the server switched protocols unasked"))
            return
        self._interim += 1
        if self._interim > MAX_INTERIM:
            self._fail(InvalidResponse(f"over {MAX_INTERIM} interim (1xx) responses"))
        self.encoding = self.location = None
        self._framed = False
        self._n_headers = 0

    def on_body(self, body: bytes) -> None:
        if self.error is not None or self.stray:
            return
        sink = self.sink
        if sink is None:
            self.body.append(body)  # an error body: the waiting side reads it in bounded steps
            self._wake()
            return
        try:
            if self.inflater is None:
                sink.feed(body, self._last)
            else:
                for piece in self.inflater.feed(body):
                    sink.feed(piece, self._last)
        except TransportError as exc:  # a bad event, an over-long line, a corrupt body
            self._fail(exc)

    def on_message_complete(self) -> None:
        if not self.head_done or self.stray:
            return  # an interim response's end, or a response no request asked for
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # llhttp forgets it once the message is over
        self._wake()


class Pool:
    """At most ``limit`` connections to one origin, for one event loop."""

    def __init__(
        self,
        host: str,
        port: int,
        limit: int,
        connect_timeout_s: float,
        read_timeout_s: float,
        tls: ssl.SSLContext | None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.host, self.port, self.limit = host, port, max(1, limit)
        self.connect_timeout_s, self.read_timeout_s, self.tls = connect_timeout_s, read_timeout_s, tls
        self.idle: deque[Conn] = deque()
        self.open = 0
        self.connects = 0  # connections opened, over the pool's life
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self, fresh: bool, attempt: Attempt) -> tuple[Conn, bool]:
        """A connection and whether it came from the pool (``fresh``: a new one); ``attempt``
        learns which, and how long a new one took to open."""
        while True:
            idle = self.idle
            while idle and not fresh:
                conn = idle.pop()
                if not conn.closed:
                    attempt.connected = True
                    return conn, True
                self.open -= 1
            if self.open >= self.limit and idle:  # room for a new one: the oldest idle goes
                self._drop(idle.popleft())
            if self.open < self.limit:
                return await self._open(attempt), False
            waiter = self.loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():  # woken, then cancelled: pass the turn on
                    self._wake_one()
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def open_idle(self, attempt: Attempt) -> None:
        """Open one connection and leave it idle in the pool (a level's warm-up), if there is room."""
        if self.open < self.limit:
            self.idle.append(await self._open(attempt))
            self._wake_one()

    async def _open(self, attempt: Attempt) -> Conn:
        """A new connection, counted in :attr:`open` (uncounted again if it fails)."""
        self.open += 1
        attempt.connecting()
        try:
            conn = await self._connect()
        except BaseException:
            self._gone()
            raise
        attempt.opened()
        return conn

    async def _connect(self) -> Conn:
        tls = self.tls
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await self.loop.create_connection(
                    lambda: Conn(self.loop, self.read_timeout_s),
                    self.host,
                    self.port,
                    ssl=tls,
                    server_hostname=self.host if tls is not None else None,
                )
        except OSError as exc:
            raise Disconnected(f"cannot connect: {type(exc).__name__}: {exc}") from exc
        self.connects += 1
        return conn

    def release(self, conn: Conn, keep: bool) -> None:
        """A request is over on ``conn``: back to the pool (``keep`` and reusable) or closed."""
        conn.done()
        if keep and conn.reusable:
            self.idle.append(conn)
            self._wake_one()
        else:
            self._drop(conn)

    def _drop(self, conn: Conn) -> None:
        conn.close()
        self._gone()

    def _gone(self) -> None:
        self.open -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        while self.idle:
            self._drop(self.idle.pop())

    def __repr__(self) -> str:
        return f"Pool({self.host}:{self.port}, open={self.open}, idle={len(self.idle)})"

    def stats(self) -> dict[str, Any]:
        return {"open": self.open, "idle": len(self.idle), "connects": self.connects}
