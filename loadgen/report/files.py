"""The run folder: ``run.json``, ``records.jsonl`` (appended live), ``summary.json``.

``records.jsonl`` is opened once and each finished record is written and flushed at
once, so a crash or Ctrl-C keeps every record that finished. Nothing here computes a
metric; secrets never reach these files (the caller passes a redacted config).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import IO, Any, Iterator

from loadgen import __version__
from loadgen.errors import ConfigError
from loadgen.records import RequestRecord, record_from_json, record_to_json

__all__ = ["RUN_FILES", "holds_run", "RunWriter", "read_records", "read_summary", "read_run", "machine_info", "default_run_dir"]


def default_run_dir(root: Path, label: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return root / f"{stamp}-{label}"


def machine_info() -> dict[str, Any]:
    import aiohttp
    import numpy
    import pandas

    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "versions": {
            "loadgen": __version__,
            "aiohttp": aiohttp.__version__,
            "numpy": numpy.__version__,
            "pandas": pandas.__version__,
        },
    }


RUN_FILES = ("run.json", "records.jsonl", "summary.json", "report.html", "server_metrics.jsonl")


def holds_run(folder: Path) -> bool:
    return any((folder / name).exists() for name in RUN_FILES)


class RunWriter:
    """Writes one run folder. Use as a context manager so the records file is closed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._records: IO[str] | None = None
        self.count = 0

    def __enter__(self) -> "RunWriter":
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            for name in RUN_FILES:  # a folder holds one run: an older one's files would mix in
                (self.folder / name).unlink(missing_ok=True)
            self._records = open(self.folder / "records.jsonl", "w", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write the run folder: {exc}", key="--out") from exc
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._records is not None:
            self._records.close()
            self._records = None

    def write_run(self, run: dict[str, Any]) -> None:
        self._write_json("run.json", run)

    def append(self, rec: RequestRecord) -> None:
        assert self._records is not None, "RunWriter used outside its context"
        self._records.write(record_to_json(rec) + "\n")
        self._records.flush()
        self.count += 1

    def write_summary(self, summary: dict[str, Any]) -> None:
        self._write_json("summary.json", summary)

    def _write_json(self, name: str, obj: Any) -> None:
        tmp = self.folder / (name + ".tmp")
        tmp.write_text(json.dumps(obj, indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8")
        tmp.replace(self.folder / name)


def _need(folder: Path, name: str) -> Path:
    path = folder / name
    if not path.is_file():
        raise ConfigError(f"{path} not found (is {folder} a loadgen run folder?)")
    return path


def read_records(folder: Path) -> Iterator[RequestRecord]:
    """Records of a run folder; a torn last line (a killed run) is skipped."""
    with open(_need(folder, "records.jsonl"), encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield record_from_json(line)
            except (ValueError, TypeError):
                continue


def read_summary(folder: Path) -> dict[str, Any]:
    return json.loads(_need(folder, "summary.json").read_text(encoding="utf-8"))


def read_run(folder: Path) -> dict[str, Any]:
    return json.loads(_need(folder, "run.json").read_text(encoding="utf-8"))
