"""A header timeout for the reference server's connections (``loadgen serve --header-timeout``).

It times a request's *head* (request line and headers) and nothing else: the clock starts
when the connection opens, or at the first byte after the previous request's end, and stops
when the head is complete; a late head closes the connection without an answer. Each
connection feeds a copy of its bytes to its own ``httptools`` request parser, which frames
bodies as aiohttp's does, so body bytes never look like a new head (docs/server.md,
"Hostile clients and shutdown").

aiohttp has no public header timeout nor a public way to choose the protocol class, so two
private parts of aiohttp 3.x remain, both checked by ``tests/server/test_connection.py``:
``web.AppRunner._make_server()`` (:class:`GuardedAppRunner` rebuilds its ``web.Server`` as a
:class:`GuardedServer` from public attributes plus ``Server._loop`` and ``Server._kwargs``)
and ``web.Server.__call__()`` (which makes a :class:`GuardedRequestHandler`: it overrides
only the ``Protocol`` callbacks, closes with ``force_close()`` and reads no private state).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httptools
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

__all__ = ["GuardedAppRunner", "GuardedRequestHandler", "GuardedServer", "HeadClock"]


class HeadClock:
    """Times each request head on one connection from the bytes it receives (module doc).

    ``on_late`` is called once, when a head has taken longer than ``timeout_s``.
    """

    def __init__(self, timeout_s: float, on_late: Callable[[], object]) -> None:
        self._timeout_s = timeout_s
        self._on_late = on_late
        self._timer: asyncio.TimerHandle | None = None
        self._parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        self._between = True  # no request begun since the last one ended (or the connection opened)
        self.late = False

    @property
    def running(self) -> bool:
        """Whether a head is being timed now."""
        return self._timer is not None

    def start(self) -> None:
        """Start the clock (a new connection, or a new request's first byte); no-op if running."""
        if self._timer is None and not self.late:
            self._timer = asyncio.get_running_loop().call_later(self._timeout_s, self._fire)

    def stop(self) -> None:
        """Stop the clock: the head is complete."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        """The connection is gone: stop the clock and the watching."""
        self.stop()
        self._parser = None

    def feed(self, data: bytes) -> None:
        """Account for bytes the connection received."""
        if self._parser is None or not data:
            return
        if self._between:
            self.start()  # any byte between requests (even the empty lines llhttp skips) starts it
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._parser = None  # a switched protocol: no more heads (the clock stopped at its head)
        except httptools.HttpParserError:
            self._parser = None  # aiohttp answers 400 and closes; a begun head keeps its clock

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._between = False
        self.start()

    def on_headers_complete(self) -> None:
        self.stop()

    def on_message_complete(self) -> None:
        self._between = True

    def _fire(self) -> None:
        self._timer = None
        self.late = True
        self._on_late()


class GuardedRequestHandler(RequestHandler):
    """A ``RequestHandler`` that closes a connection whose request head is late (module doc)."""

    def __init__(self, manager: web.Server, *, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.head_clock = HeadClock(header_timeout_s, self.force_close)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.head_clock.start()  # a connection that sends nothing at all is closed too

    def data_received(self, data: bytes) -> None:
        self.head_clock.feed(data)
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.head_clock.close()
        super().connection_lost(exc)


class GuardedServer(web.Server):
    """A ``web.Server`` whose connections get a header timeout."""

    def __init__(self, *args: Any, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s = header_timeout_s

    def __call__(self) -> RequestHandler:
        return GuardedRequestHandler(self, loop=self._loop, header_timeout_s=self.header_timeout_s, **self._kwargs)


class GuardedAppRunner(web.AppRunner):
    """A ``web.AppRunner`` serving through a :class:`GuardedServer`."""

    def __init__(self, app: web.Application, *, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.header_timeout_s = header_timeout_s

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()
        return GuardedServer(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            header_timeout_s=self.header_timeout_s,
            **plain._kwargs,
        )
