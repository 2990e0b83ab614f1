"""Servers that close kept-alive connections: when a request may be sent again.

A client keeps a connection open after a response so the next request skips the TCP
handshake. A server may close such an idle connection at any moment (its keep-alive
timeout, or after every streamed answer, as llama.cpp's ``llama-server`` does while it
advertises ``Keep-Alive: timeout=5, max=100``). A request written to the connection
just as the close arrives fails without the server having read it: the *stale
keep-alive race* of RFC 9112 §9.3.1.

The rule (the same for every transport, calibration included):

- A request is sent again **once**, on a new connection, when it went out on a
  connection **reused from the pool** and the server closed or reset that connection
  **before one byte of a response** arrived. The server closed the connection without
  answering on a connection it had left idle: it did not take the request.
- Anything else is never sent twice: a request on a new connection, one that received
  any byte of a response (a status line, a header), a timeout, a second failure. A
  failure there is recorded as it is (``disconnected``, ``timeout``…).
- The record counts the resend (``RequestRecord.retries``), its ``sent_ns`` stays the
  first attempt's (the failed attempt's time is inside the measured latency, not
  hidden), and the level's ``requests.retried`` counts such records.
- A server that closes after every stream is noticed: once two stale closes have
  happened and they are at least as many as the successful reuses, every later request
  gets its own new connection (the TCP connect is then inside TTFT, as it is for any
  client of that server).

Docs: ``docs/client.md`` ("Connections the server closes").
"""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass

__all__ = ["FRESH_AFTER", "STALE_ERRNOS", "Attempt", "KeepAlive"]

STALE_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED, errno.ESHUTDOWN})
FRESH_AFTER = 2  # stale closes before a server is given a new connection for every request


@dataclass(slots=True)
class Attempt:
    """One try of a request: whether its connection came from the pool, and whether
    any byte of a response came back on it; ``connected`` once it had a connection (new
    or pooled), ``connecting_ns`` when it began opening one of its own (0: it did not) and
    ``connect_ns`` how long that took, once open."""

    reused: bool = False
    answered: bool = False
    connected: bool = False
    connecting_ns: int = 0
    connect_ns: int | None = None

    def connecting(self) -> None:
        """It begins to open a connection of its own."""
        self.reused = False
        self.connecting_ns = time.perf_counter_ns()

    def opened(self) -> None:
        """Its connection is open (after :meth:`connecting`: the connect's duration)."""
        self.connected = True
        if self.connecting_ns:
            self.connect_ns = time.perf_counter_ns() - self.connecting_ns


class KeepAlive:
    """Per transport: the stale closes and successful reuses seen, and whether the
    server has earned a new connection per request (:attr:`fresh`)."""

    __slots__ = ("fresh", "reuses", "stale")

    def __init__(self) -> None:
        self.stale = 0
        self.reuses = 0
        self.fresh = False

    def answered(self, attempt: Attempt) -> None:
        """A response began on ``attempt``'s connection."""
        attempt.answered = True
        if attempt.reused:
            self.reuses += 1

    def may_resend(self, attempt: Attempt, stale_error: bool) -> bool:
        """Whether a failed first ``attempt`` is the stale race (see the module's rule);
        counts it, and turns :attr:`fresh` on when the server closes after every stream."""
        if not (attempt.reused and not attempt.answered and stale_error):
            return False
        self.stale += 1
        if self.stale >= FRESH_AFTER and self.stale >= self.reuses:
            self.fresh = True
        return True
