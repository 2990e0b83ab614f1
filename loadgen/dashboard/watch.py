"""``loadgen watch DIR``: the live dashboard of a run folder another process writes.

A :class:`~loadgen.dashboard.tail.FolderTail` reads what is new in the folder before each
tick (records with their events, server samples, finished levels, run.json) into a
:class:`~loadgen.dashboard.feed.Feed`; the page is the run's own dashboard without Stop
and Skip (this process does not run the load). Once the run has ended the page links its
report (``/report``) when it is there. Ctrl-C (or SIGTERM) stops watching, exit 0;
``until_done`` stops once the run has finished and the page has been told.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from loadgen.aio import new_event_loop
from loadgen.dashboard.feed import Feed
from loadgen.dashboard.server import Controls, Dashboard
from loadgen.dashboard.tail import FolderTail
from loadgen.errors import ConfigError
from loadgen.runconfig import DashboardAt
from loadgen.signals import stop_signals

__all__ = ["watch_folder"]

POLL_S = 0.25  # how often until_done looks at the tail's state


async def _watch(folder: Path, at: DashboardAt, console: Console, until_done: bool) -> None:
    feed = Feed()
    tail = FolderTail(folder, feed)
    tail.poll()
    board = Dashboard(
        feed, host=at.host, port=at.port, controls=Controls(), before_tick=tail.poll, report=lambda: tail.report
    )
    try:
        url = await board.start()
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ConfigError(f"cannot serve the dashboard on {at.host}:{at.port}: {why}", key="--port") from None
    console.print(f"watching {escape(str(folder))}: {escape(url)}", highlight=False, soft_wrap=True)
    stopped = asyncio.Event()
    try:
        with stop_signals(asyncio.get_running_loop(), stopped.set):
            while not stopped.is_set():
                if until_done and tail.done:
                    await asyncio.sleep(board.interval_s * 2)  # the page gets the final point first
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopped.wait(), POLL_S)
    finally:
        await board.aclose()


def watch_folder(folder: Path, at: DashboardAt, console: Console, *, until_done: bool = False) -> None:
    """Serve the page until Ctrl-C (or, with ``until_done``, the run's end)."""
    loop = new_event_loop()
    try:
        loop.run_until_complete(_watch(folder, at, console, until_done))
    finally:
        loop.close()
    console.print("stopped watching", highlight=False)
