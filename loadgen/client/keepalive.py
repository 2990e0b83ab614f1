"""Servers that close kept-alive connections: when a request may be sent again.

A server may close an idle kept-alive connection at any moment; a request written to it
just as the close arrives fails without the server having read it (the *stale keep-alive
race* of RFC 9112 §9.3.1). The rule, the same for every transport, calibration included:
a request is sent again **once**, on a new connection, only when it went out on a
connection reused from the pool and the server closed or reset it before one byte of a
response arrived; nothing else is ever sent twice. The record counts the resend
(``RequestRecord.retries``) and keeps the first attempt's ``sent_ns``; a server that closes
after every stream is noticed, and later requests get new connections.

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
