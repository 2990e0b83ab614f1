"""An asyncio event loop on a virtual clock, for tests of timing logic without real sleeps.

The loop's clock stands still while any callback is ready; when every task waits, it
jumps straight to the next timer instead of sleeping. Socket I/O still works (it is
polled without waiting), but a test that waits on the network alone gets nowhere: this
loop is for fakes. ``clock.ns()`` is the same clock in integer nanoseconds, to stand in
for ``time.perf_counter_ns`` in the code under test.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["VirtualClock", "run_virtual"]

T = TypeVar("T")


class VirtualClock:
    def __init__(self, start_ns: int = 10**12) -> None:
        self.now_ns = start_ns

    def ns(self) -> int:
        return self.now_ns

    def seconds(self) -> float:
        return self.now_ns / 1e9


class _Selector(selectors.DefaultSelector):
    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self.clock = clock

    def select(self, timeout: float | None = None) -> list[Any]:
        ready: list[Any] = super().select(0)
        if not ready and timeout is not None and timeout > 0:
            self.clock.now_ns += max(round(timeout * 1e9), 1)
        return ready


class _Loop(asyncio.SelectorEventLoop):
    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(_Selector(clock))
        self._clock = clock

    def time(self) -> float:
        return self._clock.seconds()


def run_virtual(main: Coroutine[Any, Any, T], clock: VirtualClock) -> T:
    """Run ``main`` to completion on a fresh loop driven by ``clock``."""
    loop = _Loop(clock)
    try:
        return loop.run_until_complete(main)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
