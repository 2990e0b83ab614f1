"""What SIGINT and SIGTERM do to a loadgen process.

During a run both stop the level the same way (in-flight requests recorded as cancelled,
the summary and the report written); the process exits with 128 + the signal: 130 for
Ctrl-C, 143 for SIGTERM (``timeout``, ``docker stop``, Kubernetes, CI cancellation).
Outside a run's own handler, :func:`raise_on_sigterm` turns SIGTERM into
:class:`~loadgen.errors.Terminated`, which unwinds like Ctrl-C's ``KeyboardInterrupt``.
Worker processes ignore both and stop when their coordinator says so; one that has not
answered within :data:`loadgen.load.workers.STOP_WAIT_S` (5 s) is killed, its requests in
flight recorded as ``worker_lost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from loadgen.errors import Terminated

__all__ = [
    "STOP_SIGNALS",
    "Stop",
    "cancel_on_stop",
    "exit_code",
    "ignore_stop_signals",
    "raise_on_sigterm",
    "stop_signals",
]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


def raise_on_sigterm() -> None:
    """SIGTERM raises :class:`~loadgen.errors.Terminated` in the main thread instead of
    ending the process where it stands. Elsewhere than the main thread this does nothing."""
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, _raise_terminated)


def ignore_stop_signals() -> None:
    """For worker processes: a signal sent to the whole process group (Ctrl-C, ``timeout``)
    reaches them too, and their coordinator tells them when to stop."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def exit_code(signum: int | None) -> int:
    """The exit code of a run stopped by ``signum`` (None: Ctrl-C's)."""
    return 128 + int(signum or signal.SIGINT)


@dataclass
class Stop:
    signum: int | None = None  # the first stop signal received


@contextlib.contextmanager
def _on_loop(loop: asyncio.AbstractEventLoop, handler: Callable[[int], None]) -> Iterator[None]:
    """``handler(signum)`` runs from ``loop`` for SIGINT and SIGTERM while the block runs;
    afterwards both signals do again what they did before (Ctrl-C raises, SIGTERM as set)."""
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    installed = []
    for sig in STOP_SIGNALS:
        try:
            loop.add_signal_handler(sig, handler, sig)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / Windows
            pass
    try:
        yield
    finally:
        for sig in installed:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
            if before[sig] is not None:
                with contextlib.suppress(ValueError, TypeError):
                    signal.signal(sig, before[sig])  # the loop's removal left its own default


@contextlib.contextmanager
def stop_signals(loop: asyncio.AbstractEventLoop, interrupt: Callable[[], None]) -> Iterator[Stop]:
    """SIGINT or SIGTERM on ``loop`` calls ``interrupt`` (a run: stop the level, keep every
    record, write the summary); ``Stop.signum`` is the first signal received.

    A second Ctrl-C is not caught (it interrupts at once). SIGTERM stays handled: ``timeout``
    sends it twice (to the process, then to its group), and a later one from the same
    supervisor adds nothing; SIGKILL is what ends a run that will not stop.
    """
    stop = Stop()

    def handler(signum: int) -> None:
        if stop.signum is None:
            stop.signum = signum
        interrupt()
        if signum == signal.SIGINT:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGINT)
                signal.signal(signal.SIGINT, signal.default_int_handler)

    with _on_loop(loop, handler):
        yield stop


@contextlib.contextmanager
def cancel_on_stop(loop: asyncio.AbstractEventLoop) -> Iterator[Stop]:
    """The start of a run (discovery, calibration), before it has levels to stop: SIGINT or
    SIGTERM cancels the task that entered the block, and the block then raises
    ``KeyboardInterrupt`` (SIGINT) or :class:`~loadgen.errors.Terminated` (SIGTERM).

    The signal is taken by the loop, between callbacks. Python's own handler raises wherever
    the main thread stands, and that can be inside a transport's ``data_received``: the
    interrupt then came out as that connection's read error ("cannot reach …: ReadError",
    exit 2) instead of "interrupted" and 130.
    """
    task = asyncio.current_task(loop)
    stop = Stop()

    def handler(signum: int) -> None:
        if stop.signum is None:
            stop.signum = signum
            if task is not None:
                task.cancel()

    try:
        with _on_loop(loop, handler):
            yield stop
    except asyncio.CancelledError:
        if stop.signum is None:
            raise
    if stop.signum is not None:  # cancelled by the signal, or the block ended all the same
        if task is not None:
            task.uncancel()
        raise KeyboardInterrupt() if stop.signum == signal.SIGINT else Terminated(stop.signum)
