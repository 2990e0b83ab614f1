"""``loadgen export DIR``: a run's per-request and per-level tables as CSV or Parquet.

- ``requests.csv`` / ``.parquet``: one row per measured request (warm-up dropped), the
  columns of :data:`~loadgen.metrics.per_request.FRAME_COLUMNS` (times in ns since the
  monotonic clock's origin, latencies in ms, NaN where a value does not apply).
- ``levels.csv`` / ``.parquet``: one row per level, ``summary.json``'s level entries
  flattened with dotted names (``ttft_ms.p99``, ``throughput.output_tokens_per_s``);
  lists (windows, per-worker health, lag series) are left out — they are in
  ``summary.json``.

Parquet needs pyarrow (``pip install pyarrow``); without it the export says so in one line.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pandas as pd

from loadgen.errors import ConfigError
from loadgen.report.rundata import load_run

__all__ = ["FORMATS", "export_run", "level_table"]

FORMATS = ("csv", "parquet")


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif not isinstance(value, list):
        out[prefix] = value


def level_table(levels: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per level entry of ``summary.json``, nested keys joined with dots."""
    rows = []
    for i, level in enumerate(levels):
        row: dict[str, Any] = {"level": i}
        _flatten("", level, row)
        rows.append(row)
    return pd.DataFrame(rows)


def export_run(folder: Path, fmt: str = "csv", out: Path | None = None) -> list[Path]:
    """Write the two tables of ``folder`` into ``out`` (default: the run folder)."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}", field="format")
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ConfigError("Parquet needs pyarrow: pip install pyarrow (or export --format csv)", field="format")
    data = load_run(Path(folder))
    dest = Path(out) if out is not None else Path(folder)
    dest.mkdir(parents=True, exist_ok=True)
    tables = {
        "requests": data.frame.reset_index(drop=True),
        "levels": level_table([lv.to_json() for lv in data.summary.levels]),
    }
    written = []
    for name, table in tables.items():
        path = dest / f"{name}.{fmt}"
        if fmt == "csv":
            table.to_csv(path, index=False)
        else:
            table.to_parquet(path, index=False)
        written.append(path)
    return written
