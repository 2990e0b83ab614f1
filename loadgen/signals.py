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

import contextlib
import signal

from loadgen.errors import Terminated

__all__ = ["STOP_SIGNALS", "exit_code", "ignore_stop_signals", "raise_on_sigterm"]

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
