"""A run folder loaded for reporting: summary, run config, per-request frame, server metrics.

The per-request frame and event arrays come from :mod:`loadgen.metrics.per_request`
(warm-up records dropped, as the summaries do), built from the columnar reading of
``records.jsonl`` and ``events.bin`` a piece at a time
(:func:`~loadgen.report.files.read_records_pieces`); this module only reads files.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from loadgen.errors import ConfigError
from loadgen.metrics.compare import LevelSamples
from loadgen.metrics.per_request import EventArrays, frame_and_events_from_pieces
from loadgen.metrics.results import LevelSummary, RunSummary
from loadgen.records import RequestRecord
from loadgen.report.files import read_records_pieces, read_run_info, read_summary
from loadgen.runinfo import RunInfo

__all__ = ["SERVER_METRICS_FILE", "RunData", "load_run", "read_server_metrics"]

SERVER_METRICS_FILE = "server_metrics.jsonl"


@dataclass(slots=True)
class RunData:
    """Everything a report draws from one run folder.

    ``frame``/``ev`` hold the non-warm-up records of every level (``frame["level"]`` is
    the index into ``summary.levels``); ``errors`` counts failure messages per status;
    ``anchor_ns`` is the run's time zero (``run.json`` clock anchor, else the first send);
    ``run`` is the folder's ``run.json``, or None when it has none (or one that cannot be
    read: the report then draws the summary and records alone).
    """

    folder: Path
    run: RunInfo | None
    summary: RunSummary
    frame: pd.DataFrame
    ev: EventArrays
    errors: dict[str, Counter[str]] = field(default_factory=dict)
    server: list[dict[str, Any]] = field(default_factory=list)
    anchor_ns: int = 0

    @property
    def levels(self) -> list[LevelSummary]:
        return self.summary.levels

    def level_rows(self, index: int) -> np.ndarray:
        """Boolean mask over the frame: the rows of level ``index``."""
        return np.asarray(self.frame["level"].to_numpy() == index)

    def level_samples(self, index: int) -> LevelSamples:
        """Level ``index`` as the comparison reads it."""
        return LevelSamples(self.frame, self.ev, self.level_rows(index), self.levels[index])

    def seconds(self, t_ns: np.ndarray) -> np.ndarray:
        """Monotonic ns -> seconds since the run's time zero."""
        return (np.asarray(t_ns, dtype=np.float64) - self.anchor_ns) / 1e9


def read_server_metrics(path: Path) -> list[dict[str, Any]]:
    """The lines of a ``server_metrics.jsonl`` (torn or foreign lines skipped)."""
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("t_ns"), int):
                out.append(obj)
    return out


def _errors(records: list[RequestRecord], ok: np.ndarray) -> dict[str, Counter[str]]:
    """Failure messages per status of ``records`` (``ok``: the frame's column, so only the
    failed ones are visited)."""
    out: dict[str, Counter[str]] = {}
    for i in np.flatnonzero(~ok).tolist():
        r = records[i]
        if r.warmup or r.ok:
            continue
        status = getattr(r.status, "value", str(r.status))
        out.setdefault(status, Counter())[(r.error or "")[:200]] += 1
    return out


def _measured(rec: RequestRecord) -> bool:
    return not rec.warmup


def load_run(folder: Path) -> RunData:
    """Read a run folder (``summary.json`` and ``records.jsonl`` required; ``run.json``
    and ``server_metrics.jsonl`` used when present)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder (expected a loadgen run folder)")
    raw = read_summary(folder)
    if not isinstance(raw, dict) or not isinstance(raw.get("levels"), list):
        raise ConfigError(f"{folder / 'summary.json'}: no 'levels' list (not a loadgen summary)")
    try:
        summary = RunSummary.from_json(raw)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{folder / 'summary.json'}: not a loadgen summary ({exc})") from exc
    run: RunInfo | None
    try:
        run = read_run_info(folder)
    except ConfigError:
        run = None
    found = read_records_pieces(folder, keep=_measured)  # the records hold no events
    frame, ev = frame_and_events_from_pieces(found.records, found.n_events, found.pieces())
    anchor = None if run is None else run.anchor_ns
    if anchor is None:
        sent = frame["sent_ns"].to_numpy()
        anchor = int(sent[sent != 0].min()) if (sent != 0).any() else 0
    return RunData(
        folder=folder,
        run=run,
        summary=summary,
        frame=frame,
        ev=ev,
        errors=_errors(found.records, frame["ok"].to_numpy(dtype=bool)),
        server=read_server_metrics(folder / SERVER_METRICS_FILE),
        anchor_ns=anchor,
    )
