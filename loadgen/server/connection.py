"""A header timeout for the reference server's connections (``loadgen serve --header-timeout``).

A connection that has not sent a request's complete headers within ``header_timeout_s``
of opening, or of the first byte of its next request on a kept-alive connection, is closed
(no answer: there is no request to answer). Without it, a client that trickles header
bytes holds a socket for as long as it likes (aiohttp's only bound is its keep-alive
timeout, about an hour, and that only while no bytes arrive).

aiohttp's server has no public header-read timeout, so this relies on private parts
of aiohttp 3.x, each checked by ``tests/server/test_connection.py`` so that a change fails
there first:

- ``web.AppRunner._make_server()`` returns the ``web.Server`` that is the protocol factory;
  :class:`GuardedAppRunner` rebuilds it as a :class:`GuardedServer` from its public
  attributes plus ``Server._loop`` and ``Server._kwargs`` (the handler arguments).
- ``web.Server.__call__()`` makes one ``RequestHandler`` per connection:
  :class:`GuardedServer` makes a :class:`GuardedRequestHandler` instead.
- ``RequestHandler._request_count`` counts the requests whose headers were parsed on the
  connection (it grows in ``data_received``), ``RequestHandler._request_in_progress`` is
  true while a handler runs and ``RequestHandler._messages`` holds parsed requests not yet
  handled: together they tell header bytes from body bytes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

__all__ = ["GuardedAppRunner", "GuardedRequestHandler", "GuardedServer"]


class GuardedRequestHandler(RequestHandler):
    """A ``RequestHandler`` that closes a connection whose headers are late (module doc)."""

    def __init__(self, manager: web.Server, *, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout_s = header_timeout_s
        self._header_timer: asyncio.TimerHandle | None = None
        self.closed_for_headers = False

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self._loop.call_later(self._header_timeout_s, self._late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _late(self) -> None:
        self._header_timer = None
        self.closed_for_headers = True
        self.force_close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()  # a connection that sends nothing at all is closed too

    def data_received(self, data: bytes) -> None:
        parsed = self._request_count
        idle = not self._request_in_progress and not self._messages
        super().data_received(data)
        if self._request_count > parsed:
            self._disarm()
        elif idle and data and not self._force_close:
            self._arm()  # the first bytes of a request whose headers are not complete yet

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
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
