"""The run folder: ``run.json``, ``records.jsonl`` (appended live), ``summary.json``.

``records.jsonl`` is opened once and each finished record is written and flushed at
once, so a crash or Ctrl-C keeps every record that finished. Nothing here computes a
metric; secrets never reach these files (the caller passes a redacted config).

``records.jsonl`` is written and read with orjson: a record serialises in a few
microseconds instead of ``dataclasses.asdict`` + ``json``'s hundreds, and the report
reads 100,000 records in seconds. What orjson refuses is left to ``json``: it writes
integers over 64 bits and lone surrogates (escaped), and reads ``NaN``, ``Infinity``
and lone-surrogate escapes, so a line either library wrote reads back.

Reading: :func:`read_records` gives whole records; :func:`read_records_columnar` gives
the same records with their events pulled out into one flat int64 array (what the
report's per-request frame is built from). Both parse each line the same way and skip
the same lines: blank, torn (a killed run), not JSON, or not a record.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

import numpy as np
import numpy.typing as npt
import orjson

from loadgen import __version__
from loadgen.errors import ConfigError
from loadgen.records import RequestRecord, record_from_json, record_to_json

__all__ = [
    "RUN_FILES",
    "holds_run",
    "RunWriter",
    "record_line",
    "RecordColumns",
    "read_records",
    "read_records_columnar",
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


RUN_FILES = ("run.json", "records.jsonl", "summary.json", "report.html", "server_metrics.jsonl")


def holds_run(folder: Path) -> bool:
    return any((folder / name).exists() for name in RUN_FILES)


class RunWriter:
    """Writes one run folder. Use as a context manager so the records file is closed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._records: IO[bytes] | None = None
        self.count = 0

    def __enter__(self) -> "RunWriter":
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            for name in RUN_FILES:  # a folder holds one run: an older one's files would mix in
                (self.folder / name).unlink(missing_ok=True)
            self._records = open(self.folder / "records.jsonl", "wb")
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
        self._records.write(record_line(rec))
        self._records.flush()
        self.count += 1

    def write_summary(self, summary: dict[str, Any]) -> None:
        self._write_json("summary.json", summary)

    def _write_json(self, name: str, obj: Any) -> None:
        tmp = self.folder / (name + ".tmp")
        tmp.write_text(json.dumps(obj, indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8")
        tmp.replace(self.folder / name)


def record_line(rec: RequestRecord) -> bytes:
    """One ``records.jsonl`` line: the fields of :func:`~loadgen.records.record_to_json`
    in its order, compact, UTF-8, ending in a newline (orjson writes ``NaN`` as ``null``)."""
    try:
        return orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # an integer over 64 bits or a lone surrogate (a server's odd text)
        # json writes both; a lone surrogate can only sit inside a JSON string, where
        # backslashreplace turns it into its JSON escape (\udXXX)
        return (record_to_json(rec) + "\n").encode("utf-8", "backslashreplace")


def _need(folder: Path, name: str) -> Path:
    path = folder / name
    if not path.is_file():
        raise ConfigError(f"{path} not found (is {folder} a loadgen run folder?)")
    return path


def _load(line: bytes) -> Any:
    """The JSON value of one line; None when it is none. orjson first; ``json`` reads
    what orjson refuses but ``json`` writes (``NaN``, ``Infinity``, lone surrogates)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(line.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError included
        return None


def _record(obj: Any) -> RequestRecord | None:
    """The record of one parsed line; None when it is not one."""
    if not isinstance(obj, dict):
        return None
    try:
        return record_from_json(obj)
    except (ValueError, TypeError):
        return None


def read_records(folder: Path) -> Iterator[RequestRecord]:
    """Records of a run folder; a torn last line (a killed run) or any other line that
    is not a JSON object of a record is skipped."""
    with open(_need(folder, "records.jsonl"), "rb") as fh:
        for raw in fh:
            line = raw.strip()
            rec = _record(_load(line)) if line else None
            if rec is not None:
                yield rec


@dataclass(slots=True)
class RecordColumns:
    """The records of a run folder with their events apart: ``records`` have empty
    ``events``; ``events`` holds every record's ``[t_ns, n_tokens]`` pairs in record
    order (shape ``(N, 2)``), ``n_events[i]`` how many are record ``i``'s."""

    records: list[RequestRecord]
    n_events: npt.NDArray[np.int64]
    events: npt.NDArray[np.int64]


_CHUNK = 1 << 16  # events converted to int64 at a time (bounds the Python lists alive)


def read_records_columnar(folder: Path) -> RecordColumns:
    """:func:`read_records` with the events pulled out: the same records, in the same
    order, the same lines skipped. Raises :class:`ConfigError` when a record's
    ``events`` is not a list of integer pairs within int64."""
    path = _need(folder, "records.jsonl")
    records: list[RequestRecord] = []
    counts: list[int] = []
    arrays: list[npt.NDArray[np.int64]] = []
    pending: list[list[Any]] = []  # events lists not yet converted, with their line numbers
    pending_lines: list[int] = []
    n_pending = 0
    # millions of small lists pass through here; none is part of a cycle, and the cyclic
    # collector would walk the ones still alive again and again (several times slower)
    with open(path, "rb") as fh, _collector_paused():
        for lineno, raw in enumerate(fh, 1):
            line = raw.strip()
            obj = _load(line) if line else None
            if not isinstance(obj, dict):
                continue
            events = obj.pop("events", [])
            rec = _record(obj)
            if rec is None:
                continue
            if not isinstance(events, list):
                raise _bad_events(f"{path} line {lineno}")
            records.append(rec)
            counts.append(len(events))
            pending.append(events)
            pending_lines.append(lineno)
            n_pending += len(events)
            if n_pending >= _CHUNK:
                arrays.append(_int_pairs(pending, pending_lines, path))
                pending, pending_lines, n_pending = [], [], 0
        arrays.append(_int_pairs(pending, pending_lines, path))
    return RecordColumns(
        records=records,
        n_events=np.array(counts, dtype=np.int64),
        events=np.concatenate(arrays).reshape(-1, 2),
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _int_pairs(groups: list[list[Any]], lines: list[int], path: Path) -> npt.NDArray[np.int64]:
    """The pairs of several records' ``events`` lists as one flat int64 array; the
    first record whose list is not all ``[int, int]`` pairs raises, naming its line."""
    pairs = list(chain.from_iterable(groups))
    try:
        # a JSON value of length 2 is a list, a string or an object; only lists give
        # their values: the other two give strings, which the type check refuses
        if _only(map(len, pairs), 2):
            flat = list(chain.from_iterable(pairs))
            if _only(map(type, flat), int):  # not bool, float or str, which numpy would cast
                return np.array(flat, dtype=np.int64)
    except (TypeError, OverflowError):  # a number or null for a pair; a value over int64
        pass
    for events, lineno in zip(groups, lines):
        if not _are_pairs(events):
            raise _bad_events(f"{path} line {lineno}")
    raise AssertionError("unreachable: a list of pairs failed as a group but not alone")


def _only(values: Iterable[Any], allowed: Any) -> bool:
    """Whether every value (a type, a length) is ``allowed``; C speed, no Python loop."""
    return {allowed}.issuperset(values)


def _are_pairs(events: list[Any]) -> bool:
    lo, hi = _INT64.min, _INT64.max
    return all(
        type(e) is list and len(e) == 2 and all(type(v) is int and lo <= v <= hi for v in e) for e in events
    )


_INT64 = np.iinfo(np.int64)


def _bad_events(where: str) -> ConfigError:
    return ConfigError("must be a list of [t_ns, n_tokens] integer pairs", source=where, key="events")


def _read_object(folder: Path, name: str) -> dict[str, Any]:
    path = _need(folder, name)
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
