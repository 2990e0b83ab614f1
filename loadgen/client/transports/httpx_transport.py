"""The ``httpx`` transport: httpx's async client, HTTP/2 when asked (the ``h2`` package).

httpx hands over the raw bytes, which our own :class:`~loadgen.client.bounded.Inflater`
inflates in bounded steps (httpx would inflate a whole read at once). httpcore's trace
hook tells the request whether its connection was new or reused; an HTTP/1.1 connection
that read bytes beyond its answer is closed (:func:`_h11_connection`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from loadgen.client.answer import BodyState
from loadgen.client.bounded import ACCEPT_ENCODING, MAX_ERROR, Inflater, read_capped
from loadgen.client.keepalive import Attempt
from loadgen.client.stream import MAX_BACKLOG
from loadgen.client.transports.base import Stale, StreamingTransport, TransportConfig, oserror_is_stale
from loadgen.errors import ConfigError

__all__ = ["HttpxTransport"]

_now = time.perf_counter_ns


def _httpx_stale(exc: BaseException) -> bool:
    """httpx: "Server disconnected without sending a response", a failed write, or a reset."""
    if isinstance(exc, httpx.RemoteProtocolError):
        return "without sending a response" in str(exc)
    if isinstance(exc, httpx.WriteError):
        return True
    return isinstance(exc, httpx.ReadError) and oserror_is_stale(exc)


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


class HttpxTransport(StreamingTransport):
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

    async def exchange(self, body: dict[str, Any], state: BodyState, attempt: Attempt, fresh: bool = False) -> None:
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
                    served = _h11_connection(resp)
                    keepalive.answered(attempt)
                    encoding = resp.headers.get("Content-Encoding")
                    if resp.status_code != 200:
                        text = await read_capped(resp.aiter_raw(), encoding, MAX_ERROR, truncate=True)
                        raise self.status_error(resp.status_code, text, resp.headers.get("Location"))
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

                    await self.read_to_end(state, read)
            except (httpx.RemoteProtocolError, httpx.WriteError, httpx.ReadError) as exc:
                if not fresh and not attempt.answered and keepalive.may_resend(attempt, _httpx_stale(exc)):
                    raise Stale() from exc
                raise
            finally:
                if served is not None and served._h11_state.trailing_data[0]:
                    await served.aclose()  # bytes beyond the answer: never read as the next request's

    async def warm_one(self, attempt: Attempt) -> None:
        client = self._get_client(self.keepalive.fresh)
        async with client.stream("GET", self.warm_url, extensions={"trace": _httpx_trace(attempt)}) as resp:
            await read_capped(resp.aiter_raw(), resp.headers.get("Content-Encoding"), MAX_ERROR, truncate=True)

    async def aclose(self) -> None:
        for client in (self._client, self._fresh_client):
            if client is not None:
                await client.aclose()
        self._client = self._fresh_client = None


def _h11_connection(resp: httpx.Response) -> Any:
    """The httpcore HTTP/1.1 connection that carries ``resp``, or None (HTTP/2, or an
    httpcore whose private parts moved: tests/fuzz/test_integrity_fuzz.py then fails).

    h11 keeps the bytes read beyond a response's end and parses them as the next
    response on the connection: a second response, or garbage, pipelined after an
    answer would be taken as the next request's. httpcore has no public way to see them,
    so the caller looks at ``_h11_state.trailing_data`` once the response is over and
    closes the connection if any came (httpcore gives a request assigned to a closed
    connection another one). The connection is reached through the response's own stream
    (httpx's bound stream, its httpcore stream, the pool's, the connection's), one step
    each: no walk over the pool's connections for every request."""
    stream: Any = resp.stream
    for name in ("_stream", "_httpcore_stream", "_stream", "_connection"):
        stream = getattr(stream, name, None)
    return stream if hasattr(stream, "_h11_state") else None


class _NoTimeout:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None
