"""The run folder: ``run.json``, ``records.jsonl`` and ``events.bin`` (appended live),
``summary.json``.

Each finished record (or batch of records, :func:`~loadgen.report.recordio.encode_batch`)
is written and flushed at once: its events to ``events.bin``, then its line to
``records.jsonl`` (the format and why: :mod:`loadgen.report.recordio`), so a crash or
Ctrl-C keeps every record that finished. Nothing here computes a metric; secrets never
reach these files (the caller passes a redacted config).

Lines are written and read with orjson: a record serialises in a few microseconds
instead of ``dataclasses.asdict`` + ``json``'s hundreds. What orjson refuses is left to
``json``: it writes integers over 64 bits and lone surrogates (escaped), and reads
``NaN``, ``Infinity`` and lone-surrogate escapes, so a line either library wrote reads
back.

Reading (:mod:`loadgen.report.readers`, its names also here): :func:`read_records`
gives whole records, :func:`read_records_columnar` the same with their events in flat
columns, :func:`read_records_pieces` with their events a piece at a time. Folders of
older versions (events as JSON lists inside the lines) read as before.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import IO, Any

import orjson

from loadgen import __version__
from loadgen.errors import ConfigError
from loadgen.records import RequestRecord, record_to_json
from loadgen.report.readers import (
    RecordColumns,
    RecordPieces,
    read_records,
    read_records_columnar,
    read_records_pieces,
    run_file,
)
from loadgen.report.recordio import (
    EVENTS_FILE,
    EVENTS_MAGIC,
    encode_batch,
    events_ref,
    parse_line,
    split_batch,
)

__all__ = [
    "RUN_FILES",
    "holds_run",
    "check_out_folder",
    "RunWriter",
    "records_before_level",
    "write_json",
    "record_line",
    "RecordColumns",
    "read_records",
    "read_records_columnar",
    "RecordPieces",
    "read_records_pieces",
    "read_summary",
    "read_run",
    "machine_info",
    "default_run_dir",
]


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


RUN_FILES = ("run.json", "records.jsonl", EVENTS_FILE, "summary.json", "report.html", "server_metrics.jsonl")


def holds_run(folder: Path) -> bool:
    return any((folder / name).exists() for name in RUN_FILES)


def _is_loadgen_run(folder: Path) -> bool:
    """Whether loadgen wrote this folder: its run.json says so, or events.bin starts with our magic."""
    try:
        with open(folder / EVENTS_FILE, "rb") as fh:
            if fh.read(len(EVENTS_MAGIC)) == EVENTS_MAGIC:
                return True
    except OSError:
        pass
    try:
        meta = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("tool") == "loadgen"


def check_out_folder(folder: Path) -> None:
    """Refuse (ConfigError on ``--out``) a folder a run would overwrite that is not ours:
    it must be absent, empty, or a loadgen run folder (whose run is then replaced)."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ConfigError(f"{folder} is a file, not a folder", key="--out")
    try:
        empty = next(folder.iterdir(), None) is None
    except OSError as exc:
        raise ConfigError(f"cannot read {folder}: {exc.strerror or exc}", key="--out") from exc
    if not empty and not _is_loadgen_run(folder):
        raise ConfigError(f"{folder} is neither empty nor a loadgen run folder; give a new or empty folder", key="--out")


def records_before_level(folder: Path, level: int) -> tuple[int, int, int]:
    """Where the records of levels ``< level`` end: ``(records.jsonl bytes, events.bin
    bytes, records)``. Levels run one after another, so their records follow one another
    in the file; the cut is at the first line of a later level, or at the first line
    that is not a record (the torn last line of a killed run)."""
    line_end = n_events = count = 0
    with open(folder / "records.jsonl", "rb") as fh:
        for raw in fh:
            if raw.endswith(b"\n") and not raw.strip():  # a blank line, as the readers skip it
                line_end += len(raw)
                continue
            parsed = parse_line(raw.strip()) if raw.endswith(b"\n") else None
            if parsed is None or parsed[0].level >= level:
                break
            ref = events_ref(parsed[1])
            n_events += ref[1] if ref is not None else 0
            line_end += len(raw)
            count += 1
    return line_end, len(EVENTS_MAGIC) + n_events, count


class RunWriter:
    """Writes one run folder. Use as a context manager so the records files are closed.

    ``keep_levels_below``: continue the run already in the folder (``--resume``): the
    records of levels below it are kept byte for byte, the rest of the records files
    (a partly-run level, a torn line) is cut off, and new records are appended."""

    def __init__(self, folder: Path, keep_levels_below: int | None = None) -> None:
        self.folder = folder
        self.keep_levels_below = keep_levels_below
        self._records: IO[bytes] | None = None
        self._events: IO[bytes] | None = None
        self.count = 0

    def _cut(self, level: int) -> None:
        """Cut the records files after the records of levels below ``level``."""
        records, events = self.folder / "records.jsonl", self.folder / EVENTS_FILE
        if not records.is_file():
            records.write_bytes(b"")
        if not events.is_file():  # a folder of an older version: events inline in the lines
            events.write_bytes(EVENTS_MAGIC)
        line_end, events_end, self.count = records_before_level(self.folder, level)
        if events.stat().st_size < events_end:
            raise ConfigError(f"{events} is shorter than records.jsonl says (a damaged run folder)")
        os.truncate(records, line_end)
        os.truncate(events, events_end)

    def __enter__(self) -> "RunWriter":
        if self.keep_levels_below is not None:
            try:
                self._cut(self.keep_levels_below)
                self._events = open(self.folder / EVENTS_FILE, "ab")
                self._records = open(self.folder / "records.jsonl", "ab")
            except OSError as exc:
                raise ConfigError(f"cannot continue the run folder: {exc}", key="--resume") from exc
            return self
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            for name in RUN_FILES:  # a folder holds one run: an older one's files would mix in
                (self.folder / name).unlink(missing_ok=True)
            self._events = open(self.folder / EVENTS_FILE, "wb")
            self._events.write(EVENTS_MAGIC)
            self._events.flush()
            self._records = open(self.folder / "records.jsonl", "wb")
        except OSError as exc:
            raise ConfigError(f"cannot write the run folder: {exc}", key="--out") from exc
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fh in (self._records, self._events):
            if fh is not None:
                fh.close()
        self._records = self._events = None

    def write_run(self, run: dict[str, Any]) -> None:
        self._write_json("run.json", run)

    def append(self, rec: RequestRecord) -> None:
        """Write one finished record (a batch of one)."""
        self.append_batch(encode_batch([rec]))

    def append_batch(self, blob: bytes | memoryview) -> None:
        """Write an :func:`~loadgen.report.recordio.encode_batch` blob as it is: its
        events bytes to ``events.bin``, flushed, then its lines to ``records.jsonl``,
        flushed (a line never refers to bytes that are not on disk). Raises ValueError
        when ``blob`` is not a batch."""
        assert self._records is not None and self._events is not None, "RunWriter used outside its context"
        lines, events = split_batch(blob)
        if events:
            self._events.write(events)
            self._events.flush()
        self._records.write(lines)
        self._records.flush()
        self.count += bytes(lines).count(b"\n")

    def write_summary(self, summary: dict[str, Any]) -> None:
        self._write_json("summary.json", summary)

    def _write_json(self, name: str, obj: Any) -> None:
        write_json(self.folder, name, obj)


def write_json(folder: Path, name: str, obj: Any) -> None:
    """``folder/name`` as indented JSON, replaced at once (written beside it, then renamed)."""
    tmp = folder / (name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8")
    tmp.replace(folder / name)


def record_line(rec: RequestRecord) -> bytes:
    """One self-contained ``records.jsonl`` line, events inline (the format of older
    versions, which the readers still read): the fields of
    :func:`~loadgen.records.record_to_json` in its order, compact, UTF-8, ending in a
    newline (orjson writes ``NaN`` as ``null``)."""
    try:
        return orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # an integer over 64 bits or a lone surrogate (a server's odd text)
        # json writes both; a lone surrogate can only sit inside a JSON string, where
        # backslashreplace turns it into its JSON escape (\udXXX)
        return (record_to_json(rec) + "\n").encode("utf-8", "backslashreplace")


def _read_object(folder: Path, name: str) -> dict[str, Any]:
    path = run_file(folder, name)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return obj


def read_summary(folder: Path) -> dict[str, Any]:
    return _read_object(folder, "summary.json")


def read_run(folder: Path) -> dict[str, Any]:
    return _read_object(folder, "run.json")
