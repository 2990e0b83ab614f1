"""The live dashboard wired to a run (``loadgen run --dashboard``) and to a run folder
(``loadgen watch DIR``); the parts are in :mod:`loadgen.dashboard` (docs/dashboard.md).

A run: its :class:`~loadgen.report.live.LiveStats` hands every level start, finished record
and level summary to a :class:`~loadgen.dashboard.feed.Feed` too (the metrics scraper its
samples); a :class:`~loadgen.dashboard.server.Dashboard` serves the page and pushes one
point a second. Stop ends the run as Ctrl-C does (records kept, summary and report
written, exit 130); Skip level ends the level in progress as its duration would, and the
sweep goes on (the level's summary says ``stopped: skipped from the dashboard``).

A folder: a :class:`~loadgen.dashboard.tail.FolderTail` reads what is new before each tick
(records with their events, server samples, finished levels, run.json); the page has no
Stop or Skip (this process does not run the load) and links the report (``/report``) once
it is written. What the tail cannot read (a file that is not a regular one, or too large)
is one ``warning:`` line on the console, once, and watching goes on. Ctrl-C, SIGTERM or SIGHUP
stops watching (exit 0); ``until_done`` stops once the run has finished and the page has
been told.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from loadgen.aio import new_event_loop
from loadgen.client.discovery import ServerInfo
from loadgen.client.redact import redact_url
from loadgen.dashboard.feed import Feed
from loadgen.dashboard.server import Controls, Dashboard
from loadgen.dashboard.tail import FolderTail
from loadgen.errors import ConfigError
from loadgen.load.executor import LevelExecutor
from loadgen.load.sweeps import planned_levels
from loadgen.orchestrate.config import DashboardAt
from loadgen.report.live import LiveStats
from loadgen.signals import stop_signals

if TYPE_CHECKING:
    from loadgen.orchestrate.config import RunConfig

__all__ = ["check_port", "run_dashboard", "watch_folder"]

POLL_S = 0.25  # how often ``until_done`` looks at the tail's state
REPORT_WAIT_S = 15.0  # ``until_done``: how long the report may take after run.json says finished


async def _start(board: Dashboard, at: DashboardAt, field: str) -> str:
    """The page's URL; a port in use (or a host that is not this machine's) is one line."""
    try:
        return await board.start()
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ConfigError(f"cannot serve the dashboard on {at.host}:{at.port}: {why}", field=field) from None


def check_port(at: DashboardAt, field: str = "dashboard_port") -> None:
    """Before anything is sent: the dashboard's address can be bound (a port in use is one
    line now, not after discovery and calibration). Port 0 always can."""
    if at.port == 0:
        return
    try:
        infos = socket.getaddrinfo(at.host, at.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, addr = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp's site binds
            probe.bind(addr)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ConfigError(f"cannot serve the dashboard on {at.host}:{at.port}: {why}", field=field) from None


def _where(board: Dashboard) -> str:
    if not board.everywhere:
        return ""
    return " (listening on every interface: from another machine, use this machine's address in this URL)"


def _refused(board: Dashboard, console: Console) -> None:
    """One line for the requests the dashboard refused (each one counted, never logged)."""
    if board.refused:
        n = board.refused
        console.print(
            f"dashboard: refused {n} request{'s' if n != 1 else ''} (malformed, or failing its Host, Origin or token checks)",
            highlight=False,
            soft_wrap=True,
        )


def _controls(levels: LevelExecutor, stats: LiveStats) -> Controls:
    def stop() -> None:
        levels.interrupt()

    def skip() -> bool:
        if stats.level is None or levels.interrupted or not levels.end_level():
            return False
        stats.skipped = True
        return True

    return Controls(stop=stop, skip=skip)


@contextlib.asynccontextmanager
async def run_dashboard(
    cfg: RunConfig, info: ServerInfo, levels: LevelExecutor, stats: LiveStats, console: Console
) -> AsyncIterator[Feed | None]:
    """The dashboard for the run's levels (None without ``cfg.dashboard``); the feed it
    yields takes the scraper's samples. On leaving, the page is told how the run ended."""
    if cfg.dashboard is None:
        yield None
        return
    feed = Feed()
    n, exact = planned_levels(cfg.profile)
    title = cfg.label or cfg.workload.name
    feed.plan(
        title=title,
        api=cfg.api,
        model=info.model,
        url=redact_url(cfg.url),
        out=str(cfg.out),
        levels_planned=n,
        levels_exact=exact,
    )
    feed.set_in_flight(lambda: levels.in_flight)
    at = cfg.dashboard
    board = Dashboard(feed, host=at.host, port=at.port, controls=_controls(levels, stats), title=f"loadgen: {title}")
    url = await _start(board, at, "dashboard_port")
    stats.taps.append(feed)
    stats.causes.append(board.level_cost)
    console.print(f"dashboard: {escape(url)}{_where(board)}", highlight=False, soft_wrap=True)
    state = "failed"
    try:
        yield feed
        state = "interrupted" if levels.interrupted else "finished"
    finally:
        stats.taps.remove(feed)
        stats.causes.remove(board.level_cost)
        feed.end(state, report=str(cfg.out / "report.html"))
        await board.aclose()
        _refused(board, console)


async def _watch(folder: Path, at: DashboardAt, console: Console, until_done: bool) -> None:
    feed = Feed()
    tail = FolderTail(folder, feed)
    tail.poll()
    board = Dashboard(
        feed,
        host=at.host,
        port=at.port,
        controls=Controls(),
        before_tick=tail.poll,
        report=lambda: tail.report,
        title=f"loadgen watch: {folder.name or folder}",
    )
    check_port(at, "port")
    url = await _start(board, at, "port")
    console.print(f"watching {escape(str(folder))}: {escape(url)}{_where(board)}", highlight=False, soft_wrap=True)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    ended_at: float | None = None  # when the run ended without a report yet (it follows run.json)
    said = 0
    try:
        with stop_signals(loop, stopped.set):
            while not stopped.is_set():
                for problem in tail.problems[said:]:
                    console.print(f"[yellow]warning: {escape(problem)}[/yellow]", highlight=False, soft_wrap=True)
                said = len(tail.problems)
                if until_done and tail.done:
                    if tail.report is None and ended_at is None:
                        ended_at = loop.time()
                    if tail.report is not None or loop.time() - (ended_at or 0.0) > REPORT_WAIT_S:
                        await asyncio.sleep(board.interval_s * 2)  # the page gets the final point first
                        break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopped.wait(), POLL_S)
    finally:
        await board.aclose()
        _refused(board, console)


def watch_folder(folder: Path, at: DashboardAt, console: Console, *, until_done: bool = False) -> None:
    """Serve the page of ``folder`` until Ctrl-C (or, with ``until_done``, the run's end)."""
    loop = new_event_loop()
    try:
        loop.run_until_complete(_watch(folder, at, console, until_done))
    finally:
        loop.close()
    console.print("stopped watching", highlight=False)
