"""What every transport shares: :class:`StreamingTransport`, its :class:`TransportConfig`
and the mapping of failures to error kinds.

:class:`StreamingTransport` implements :class:`loadgen.load.transport.Transport`: it builds
the body, keeps the record, gives the answer its end grace (:data:`END_GRACE_S`), masks
secrets (:mod:`loadgen.client.redact`), turns failures into error kinds and resends a
request lost to the stale keep-alive race once (:mod:`loadgen.client.keepalive`). A
subclass does the HTTP exchange (:meth:`StreamingTransport.exchange`) and nothing else.
Library exceptions are translated once, here, by :data:`FOREIGN_ERRORS` into
:mod:`loadgen.errors`, and those by :data:`ERROR_KINDS` into the record's ``ErrorKind``;
nothing but ``CancelledError`` leaves :meth:`send`. Every read is bounded
(:mod:`loadgen.client.bounded`).

Docs: docs/client.md ("How a response becomes a record", "End of a stream").
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx

from loadgen.client.answer import AnswerState, BodyState
from loadgen.client.dialects import Dialect, DialectOptions
from loadgen.client.keepalive import STALE_ERRNOS, Attempt, KeepAlive
from loadgen.client.redact import Redactor
from loadgen.client.stream import StreamState, output_cap
from loadgen.errors import (
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
    "Stale",
    "StreamingTransport",
    "TransportConfig",
    "oserror_is_stale",
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


class Stale(Exception):
    """Raised by :meth:`StreamingTransport.exchange` for a first try lost to the stale
    keep-alive race (the library's exception as its cause); :meth:`StreamingTransport.send`
    then sends the request again on a new connection."""


def oserror_is_stale(exc: BaseException) -> bool:
    """A reset, broken pipe or abort (the peer had closed), anywhere in the cause chain."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 8:
        if isinstance(cur, ConnectionResetError) or (isinstance(cur, OSError) and cur.errno in STALE_ERRNOS):
            return True
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return False


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
    """What a transport is built from: where to send, in which API, with which limits."""

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


class StreamingTransport:
    """The shared request/record logic; a subclass does the HTTP exchange.

    A subclass implements :meth:`exchange` (one try of one request) and, to open
    connections ahead of a level, :meth:`warm_one`; it closes what it holds in
    :meth:`aclose`. :meth:`read_to_end` and :meth:`status_error` are its helpers.
    """

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

    async def read_to_end(
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

    def status_error(self, status: int, body: bytes, location: str | None) -> HTTPStatusError:
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
                await asyncio.gather(*(self.warm_one(a) for a in attempts))
        except (TimeoutError, aiohttp.ClientError, httpx.HTTPError, OSError, TransportError) as exc:
            if not self._warm_failed:
                self._warm_failed = True
                _log.warning("could not open %d connection(s) ahead of the level: %s", n, type(exc).__name__)
        return sum(1 for a in attempts if a.connect_ns is not None)

    async def warm_one(self, attempt: Attempt) -> None:
        """Open one connection (when none is idle) and leave it in the pool, telling ``attempt``
        (``connecting()``, ``opened()``); the base opens none."""
        return None

    @property
    def warm_url(self) -> str:
        """A cheap URL to GET for :meth:`warm_one` (the models list)."""
        return self.config.base_url.rstrip("/") + "/v1/models"

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        """Send one request and fill in ``record`` (see :class:`~loadgen.load.transport.Transport`)."""
        body = self.config.dialect.build_body(spec, self.config.options)
        state = self._state(record, spec, body)
        attempt = Attempt()
        try:
            with _translated():
                try:
                    await self.exchange(body, state, attempt)
                except Stale:
                    # the stale keep-alive race: the server never read it (keepalive's rule)
                    record.retries += 1
                    state = self._state(record, spec, body)
                    attempt = Attempt()
                    await self.exchange(body, state, attempt, fresh=True)
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

    async def exchange(self, body: dict[str, Any], state: BodyState, attempt: Attempt, fresh: bool = False) -> None:
        """One try: POST ``body`` to :attr:`url` with :attr:`config`'s headers, set
        ``state.record.sent_ns`` right before it leaves (unless ``fresh``, a resend), stamp
        each read before feeding its bytes to ``state`` (:meth:`read_to_end`), raise
        :meth:`status_error` for a non-200 answer. ``fresh``: on a new connection. Tell
        ``attempt`` about the connection and ``self.keepalive`` when an answer began; a first
        try that fails as the stale race raises :class:`Stale` (with the library's exception
        as its cause)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close every connection the transport holds."""
        return None
