"""What SIGINT, SIGTERM and SIGHUP do to a loadgen process.

During a run all three stop the level the same way (in-flight requests recorded as
cancelled, the summary and the report written); the process exits with 128 + the signal:
130 for Ctrl-C, 143 for SIGTERM (``timeout``, ``docker stop``, Kubernetes, CI
cancellation), 129 for SIGHUP (the terminal or the SSH session running loadgen closed).
Outside a run's own handler, :func:`raise_on_sigterm` turns SIGTERM and SIGHUP into
:class:`~loadgen.errors.Terminated`, which unwinds like Ctrl-C's ``KeyboardInterrupt``.
Worker processes ignore all three and stop when their coordinator says so; one that has
not answered within :data:`loadgen.load.workers.STOP_WAIT_S` (5 s) is killed, its requests
in flight recorded as ``worker_lost``.

A process started with SIGHUP ignored (``nohup``) keeps ignoring it: loadgen then stops on
SIGINT and SIGTERM only, and a closed terminal does not end the run.

A closed terminal fails every later write to it (EIO; a pipe whose reader went with it:
EPIPE). On SIGHUP, :func:`release_lost_console` points standard output and standard error
that can no longer be written at ``/dev/null``, so the summary, the report and the exit code
do not depend on printing them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from loadgen.errors import Terminated

__all__ = [
    "HUP",
    "STOP_SIGNALS",
    "TERMINATING",
    "Stop",
    "cancel_on_stop",
    "exit_code",
    "ignore_stop_signals",
    "raise_on_sigterm",
    "release_lost_console",
    "stop_signals",
]

# started under nohup (SIGHUP ignored): a hang-up is to be survived, as the user asked
HUP = () if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else (signal.SIGHUP,)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, *HUP)
TERMINATING = (signal.SIGTERM, *HUP)  # the stop signals that unwind as Terminated
_GONE = select.POLLERR | select.POLLHUP | select.POLLNVAL


def _unwritable(fd: int) -> bool:
    """Whether writes to ``fd`` can only fail: a hung-up terminal, a pipe without reader."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & _GONE for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def release_lost_console() -> None:
    """Standard output and standard error, where writing them can only fail now (the
    terminal closed, the pipe's reader is gone), write to ``/dev/null`` from here on: what
    is still to be printed (the summary, the report's path) is dropped instead of raising
    ``OSError`` in the middle of writing the run's files."""
    for fd in (1, 2):
        if _unwritable(fd):
            with contextlib.suppress(OSError):
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, fd)
                os.close(null)


def _raise_terminated(signum: int, frame: object) -> None:
    if signum == signal.SIGHUP:
        release_lost_console()
    raise Terminated(signum)


def raise_on_sigterm() -> None:
    """SIGTERM and SIGHUP raise :class:`~loadgen.errors.Terminated` in the main thread
    instead of ending the process where it stands. Elsewhere than the main thread this does
    nothing."""
    with contextlib.suppress(ValueError):
        for sig in TERMINATING:
            signal.signal(sig, _raise_terminated)


def ignore_stop_signals() -> None:
    """For worker processes: a signal sent to the whole process group (Ctrl-C, ``timeout``,
    a closing terminal) reaches them too, and their coordinator tells them when to stop."""
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
    """``handler(signum)`` runs from ``loop`` for the stop signals while the block runs;
    afterwards they do again what they did before (Ctrl-C raises, SIGTERM and SIGHUP as
    set). On SIGHUP the lost console is released first (:func:`release_lost_console`)."""
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    installed = []

    def on_signal(signum: int) -> None:
        if signum == signal.SIGHUP:
            release_lost_console()
        handler(signum)

    for sig in STOP_SIGNALS:
        try:
            loop.add_signal_handler(sig, on_signal, sig)
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
    """SIGINT, SIGTERM or SIGHUP on ``loop`` calls ``interrupt`` (a run: stop the level,
    keep every record, write the summary); ``Stop.signum`` is the first signal received.

    A second Ctrl-C is not caught (it interrupts at once). SIGTERM and SIGHUP stay handled:
    ``timeout`` sends SIGTERM twice (to the process, then to its group), a closing terminal
    sends SIGHUP to its whole group, and a later one adds nothing; SIGKILL is what ends a
    run that will not stop.
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
    """The start of a run (discovery, calibration), before it has levels to stop: a stop
    signal cancels the task that entered the block, and the block then raises
    ``KeyboardInterrupt`` (SIGINT) or :class:`~loadgen.errors.Terminated` (SIGTERM, SIGHUP).

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
