"""loadgen as a library: run a configured sweep, read a run folder back (docs/api.md).

``loadgen run`` is a thin layer over these: it builds a :class:`~loadgen.orchestrate.RunConfig`
from its flags and calls the same :func:`~loadgen.orchestrate.execute`. Everything here
writes and reads the same run folder the CLI does, so a run started from Python has the
same report, the same ``loadgen report`` and ``loadgen compare``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from loadgen.errors import ConfigError, LoadgenError
from loadgen.metrics.results import RunSummary
from loadgen.orchestrate import RunConfig

if TYPE_CHECKING:
    import pandas as pd

    from loadgen.load.profiles import Profile
    from loadgen.workload.spec import Workload

__all__ = ["load_profile", "load_workload", "read_summary", "records_frame", "run"]


def run(config: RunConfig, *, console: Console | None = None, report: bool = True) -> RunSummary:
    """Run ``config`` into its folder (``config.out``) and return the run's summary.

    Without a ``console`` nothing is printed (and there is no live display); with one, the
    run prints what ``loadgen run`` prints. ``report`` also writes ``report.html``. Ctrl-C
    stops the run as it stops the CLI: the records so far are kept and the summary says
    ``interrupted``. A folder that cannot be written raises :class:`LoadgenError`."""
    from loadgen.orchestrate import execute, finish_unwritable

    if console is None:
        console = Console(quiet=True)
        config = dataclasses.replace(config, live=False)
    outcome = execute(config, console)
    if outcome.write_error is not None:
        raise LoadgenError(finish_unwritable(outcome))
    if report and outcome.records:
        from loadgen.report.html import render_run_report

        render_run_report(outcome.folder)
    return outcome.summary


def read_summary(folder: str | os.PathLike[str]) -> RunSummary:
    """A run folder's ``summary.json``, typed (a killed run's: rebuild it first with
    ``loadgen report FOLDER``)."""
    from loadgen.report.files import read_summary as read_raw

    raw = read_raw(folder)
    try:
        return RunSummary.from_json(raw)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{Path(folder) / 'summary.json'}: not a loadgen summary ({exc})") from None


def records_frame(folder: str | os.PathLike[str]) -> pd.DataFrame:
    """The run's measured requests (warm-up excluded), one row each, as ``loadgen export``
    writes ``requests.csv``: ``level`` indexes the summary's levels; times in ns of the
    run's monotonic clock, latencies in ms (docs/files.md)."""
    from loadgen.report.rundata import load_run

    return load_run(Path(folder)).frame.reset_index(drop=True)


def load_workload(name_or_path: str, search_dirs: Sequence[Path] | None = None) -> Workload:
    """A named workload (``chat``: ``workloads/chat.toml`` here or the one shipped) or a
    ``.toml`` path, as ``--workload`` reads it."""
    from loadgen.paths import search_dirs as default_dirs
    from loadgen.workload.spec import load_workload as load

    return load(name_or_path, default_dirs("workloads") if search_dirs is None else search_dirs)


def load_profile(name_or_path: str, search_dirs: Sequence[Path] | None = None) -> Profile:
    """A named load profile (``profiles/NAME.toml``) or a ``.toml`` path, as ``--profile`` reads it."""
    from loadgen.load.profiles import load_profile as load
    from loadgen.paths import search_dirs as default_dirs

    return load(name_or_path, default_dirs("profiles") if search_dirs is None else search_dirs)
