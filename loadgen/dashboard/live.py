"""``loadgen run --dashboard``: the live page of the run in progress.

The run's :class:`~loadgen.report.live.LiveStats` hands every level start, finished record
and level summary to a :class:`~loadgen.dashboard.feed.Feed` too (the scraper its server
samples); a :class:`~loadgen.dashboard.server.Dashboard` serves the page and pushes one
point a second. Stop ends the run as Ctrl-C does (records kept, summary and report
written, exit 130); Skip level ends the level in progress as its duration would, and the
sweep goes on (the level's summary says ``stopped: skipped from the dashboard``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from loadgen.client.discovery import ServerInfo, redact_url
from loadgen.dashboard.feed import Feed
from loadgen.dashboard.server import Controls, Dashboard
from loadgen.errors import ConfigError
from loadgen.load.executor import LevelExecutor
from loadgen.load.sweeps import planned_levels
from loadgen.report.live import LiveStats

if TYPE_CHECKING:
    from loadgen.runconfig import RunConfig

__all__ = ["run_dashboard"]


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
    """The dashboard for the run's levels (None without ``--dashboard``); the feed it yields
    takes the scraper's samples. On leaving, the page is told how the run ended."""
    if cfg.dashboard is None:
        yield None
        return
    feed = Feed()
    n, exact = planned_levels(cfg.profile)
    feed.plan(
        title=cfg.label or cfg.workload.name,
        api=cfg.api,
        model=info.model,
        url=redact_url(cfg.url),
        out=str(cfg.out),
        levels_planned=n,
        levels_exact=exact,
    )
    feed.set_in_flight(lambda: levels.in_flight)
    stats.taps.append(feed)
    board = Dashboard(feed, host=cfg.dashboard.host, port=cfg.dashboard.port, controls=_controls(levels, stats))
    try:
        url = await board.start()
    except OSError as exc:
        where = f"{cfg.dashboard.host}:{cfg.dashboard.port}"
        why = exc.strerror or str(exc)
        raise ConfigError(f"cannot serve the dashboard on {where}: {why}", key="--dashboard-port") from None
    console.print(f"dashboard: {escape(url)}", highlight=False, soft_wrap=True)
    state = "failed"
    try:
        yield feed
        state = "interrupted" if levels.interrupted else "finished"
    finally:
        stats.taps.remove(feed)
        feed.end(state, report=str(cfg.out / "report.html"))
        await board.aclose()
