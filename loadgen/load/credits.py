"""The open-loop in-flight cap (``--max-in-flight``) as credits: one per request in flight.

:class:`LocalCredits` serves one process. :class:`SharedCredits` serves several worker
processes from one system-wide semaphore, so the cap stays global whatever the number
of workers: a pump thread per process takes a credit for the oldest local waiter
(blocking on the semaphore, never on the event loop) and hands it over. A waiter that
is still without a credit at its deadline is dropped. The time a request waited for its
credit is recorded apart from its send lateness (``RequestRecord.credit_ns``).
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any, Protocol

__all__ = ["Credits", "LocalCredits", "SharedCredits"]

_now = time.perf_counter_ns


class Credits(Protocol):
    async def acquire(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a credit; False: none came in time."""
        ...

    def release(self) -> None: ...


class LocalCredits:
    """``n`` credits of one event loop."""

    def __init__(self, n: int) -> None:
        self._sem = asyncio.Semaphore(n)

    async def acquire(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._sem.acquire(), timeout=max(timeout_s, 0.0))
        except asyncio.TimeoutError:
            return False
        return True

    def release(self) -> None:
        self._sem.release()


class SharedCredits:
    """Credits from a ``multiprocessing`` semaphore shared by the worker processes."""

    _POLL_S = 0.05  # the pump re-checks its waiter's deadline this often while blocked

    def __init__(self, semaphore: Any) -> None:
        self._sem = semaphore
        self._waiters: collections.deque[tuple[asyncio.Future[bool], int]] = collections.deque()
        self._cv = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    async def acquire(self, timeout_s: float) -> bool:
        if self._sem.acquire(False):  # a free credit: no hop through the pump
            return True
        deadline_ns = _now() + int(max(timeout_s, 0.0) * 1e9)
        loop = asyncio.get_running_loop()
        if self._thread is None:
            self._loop = loop
            self._thread = threading.Thread(target=self._pump, daemon=True, name="loadgen-credits")
            self._thread.start()
        fut: asyncio.Future[bool] = loop.create_future()
        with self._cv:
            self._waiters.append((fut, deadline_ns))
            self._cv.notify()
        try:  # the deadline holds even while an older waiter holds the pump
            return await asyncio.wait_for(fut, timeout=max(timeout_s, 0.0))
        except asyncio.TimeoutError:
            return False

    def release(self) -> None:
        self._sem.release()

    def _grant(self, fut: asyncio.Future[bool], ok: bool) -> None:
        """On the event loop: hand the result over (a credit nobody waits for any more goes back)."""
        if fut.done():
            if ok:
                self._sem.release()
            return
        fut.set_result(ok)

    def _pump(self) -> None:
        assert self._loop is not None
        while True:
            with self._cv:
                while not self._waiters:
                    self._cv.wait()
                fut, deadline = self._waiters.popleft()
            if fut.done():  # timed out while queued
                continue
            got = False
            while not got:
                left = (deadline - _now()) / 1e9
                if left <= 0 or fut.cancelled():
                    break
                got = bool(self._sem.acquire(True, min(left, self._POLL_S)))
            try:
                self._loop.call_soon_threadsafe(self._grant, fut, got)
            except RuntimeError:  # the loop is closed: give the credit back
                if got:
                    self._sem.release()
                return
