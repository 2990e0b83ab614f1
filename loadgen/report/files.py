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

Reading: :func:`read_records` gives whole records; :func:`read_records_columnar` gives
the same records with their events pulled out into flat int64 arrays (what the report's
per-request frame is built from). Both parse each line the same way and skip the same
lines: blank, torn (a killed run), not JSON, or not a record. Folders of older versions
(events as JSON lists inside the lines) read as before, also mixed with newer lines.
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
from loadgen.records import RequestRecord, record_to_json
from loadgen.report.recordio import (
    EVENTS_FILE,
    EVENTS_MAGIC,
    EventsCorrupt,
    decode_events,
    encode_batch,
    events_ref,
    fill_events,
    parse_line,
    split_batch,
)

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


RUN_FILES = ("run.json", "records.jsonl", EVENTS_FILE, "summary.json", "report.html", "server_metrics.jsonl")


def holds_run(folder: Path) -> bool:
    return any((folder / name).exists() for name in RUN_FILES)


class RunWriter:
    """Writes one run folder. Use as a context manager so the records files are closed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._records: IO[bytes] | None = None
        self._events: IO[bytes] | None = None
        self.count = 0

    def __enter__(self) -> "RunWriter":
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
        tmp = self.folder / (name + ".tmp")
        tmp.write_text(json.dumps(obj, indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8")
        tmp.replace(self.folder / name)


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


def _need(folder: Path, name: str) -> Path:
    path = folder / name
    if not path.is_file():
        raise ConfigError(f"{path} not found (is {folder} a loadgen run folder?)")
    return path


class _EventsFile:
    """``events.bin`` read front to back, opened at the first line that refers to it."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / EVENTS_FILE
        self._fh: IO[bytes] | None = None

    def __enter__(self) -> "_EventsFile":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            self._fh.close()

    def read(self, nbytes: int, where: str) -> npt.NDArray[np.uint8]:
        """The next ``nbytes`` bytes, for the lines named by ``where``."""
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")
            except OSError as exc:
                raise ConfigError(f"cannot read {self.path}, which records.jsonl refers to: {exc}") from None
            if self._fh.read(len(EVENTS_MAGIC)) != EVENTS_MAGIC:
                raise ConfigError(f"{self.path} is not a loadgen events file (or of a newer version)")
        data = self._fh.read(nbytes)
        if len(data) != nbytes:
            raise ConfigError(f"{self.path} ends before the events of records.jsonl {where}: the file was cut short")
        return np.frombuffer(data, dtype=np.uint8)


def _parsed(fh: IO[bytes]) -> Iterator[tuple[int, RequestRecord, Any]]:
    """Line number, record and ``events`` value of every line that is a record."""
    for lineno, raw in enumerate(fh, 1):
        line = raw.strip()
        parsed = parse_line(line) if line else None
        if parsed is not None:
            yield lineno, parsed[0], parsed[1]


def _ref(events: Any, path: Path, lineno: int) -> tuple[int, int] | None:
    """The line's reference into ``events.bin``; None for an events list (or any other
    value, which the caller judges); ConfigError for an object that is not a reference."""
    ref = events_ref(events)
    if ref is None and isinstance(events, dict):
        raise ConfigError('must be a list of [t_ns, n_tokens] pairs or {"n": N, "bytes": B}',
                          source=f"{path} line {lineno}", key="events")  # fmt: skip
    return ref


def _decode_error(evf: _EventsFile, lineno: int) -> ConfigError:
    return ConfigError(f"{evf.path}: the events of records.jsonl line {lineno} do not decode (a damaged file)")


_GROUP = 1024  # records decoded together by read_records


def read_records(folder: Path) -> Iterator[RequestRecord]:
    """Records of a run folder, events included (from ``events.bin`` or the line); a
    torn last line (a killed run) or any other line that is not a JSON object of a
    record is skipped. A line whose events cannot be read raises :class:`ConfigError`."""
    path = _need(folder, "records.jsonl")
    with open(path, "rb") as fh, _EventsFile(folder) as evf:
        group: list[RequestRecord] = []
        refs: list[tuple[int, int]] = []
        refd: list[RequestRecord] = []
        lines: list[int] = []
        for lineno, rec, events in _parsed(fh):
            ref = _ref(events, path, lineno)
            if ref is None:
                rec.events = events
            else:
                refs.append(ref)
                refd.append(rec)
                lines.append(lineno)
            group.append(rec)
            if len(group) >= _GROUP:
                _fill(evf, refd, refs, lines)
                yield from group
                group, refs, refd, lines = [], [], [], []
        _fill(evf, refd, refs, lines)
        yield from group


def _fill(evf: _EventsFile, records: list[RequestRecord], refs: list[tuple[int, int]], lines: list[int]) -> None:
    if not records:
        return
    buf = evf.read(sum(b for _, b in refs), f"lines {lines[0]}-{lines[-1]}")
    try:
        fill_events(records, refs, buf)
    except EventsCorrupt as exc:
        raise _decode_error(evf, lines[exc.record]) from None


@dataclass(slots=True)
class RecordColumns:
    """The records of a run folder with their events apart: ``records`` have empty
    ``events``; ``t_ns`` and ``n_tokens`` hold every record's events in record order,
    ``n_events[i]`` how many are record ``i``'s."""

    records: list[RequestRecord]
    n_events: npt.NDArray[np.int64]
    t_ns: npt.NDArray[np.int64]
    n_tokens: npt.NDArray[np.int64]

    @property
    def events(self) -> npt.NDArray[np.int64]:
        """The events as ``[t_ns, n_tokens]`` rows, shape ``(N, 2)`` (a copy)."""
        return np.column_stack((self.t_ns, self.n_tokens))


_CHUNK = 1 << 16  # events of old lines converted to int64 at a time (bounds the Python lists alive)
_CHUNK_BYTES = 1 << 23  # bytes of events.bin decoded at a time (bounds the temporaries)


def read_records_columnar(folder: Path) -> RecordColumns:
    """:func:`read_records` with the events pulled out: the same records, in the same
    order, the same lines skipped. Raises :class:`ConfigError` when a record's
    ``events`` is not a list of integer pairs within int64 (nor a reference into
    ``events.bin`` that decodes)."""
    path = _need(folder, "records.jsonl")
    records: list[RequestRecord] = []
    counts: list[int] = []
    is_ref: list[bool] = []
    refs: list[tuple[int, int]] = []
    ref_lines: list[int] = []
    arrays: list[npt.NDArray[np.int64]] = []  # events of old lines, in chunks
    pending: list[list[Any]] = []  # events lists not yet converted, with their line numbers
    pending_lines: list[int] = []
    n_pending = 0
    # millions of small lists pass through here; none is part of a cycle, and the cyclic
    # collector would walk the ones still alive again and again (several times slower)
    with open(path, "rb") as fh, _collector_paused():
        for lineno, rec, events in _parsed(fh):
            ref = _ref(events, path, lineno)
            if ref is not None:
                records.append(rec)
                counts.append(ref[0])
                is_ref.append(True)
                refs.append(ref)
                ref_lines.append(lineno)
                continue
            if not isinstance(events, list):
                raise _bad_events(f"{path} line {lineno}")
            records.append(rec)
            counts.append(len(events))
            is_ref.append(False)
            pending.append(events)
            pending_lines.append(lineno)
            n_pending += len(events)
            if n_pending >= _CHUNK:
                arrays.append(_int_pairs(pending, pending_lines, path))
                pending, pending_lines, n_pending = [], [], 0
        arrays.append(_int_pairs(pending, pending_lines, path))
    old = np.concatenate(arrays).reshape(-1, 2)
    n_events = np.array(counts, dtype=np.int64)
    if not refs:
        return RecordColumns(records, n_events, np.ascontiguousarray(old[:, 0]), np.ascontiguousarray(old[:, 1]))
    ref_rows = np.array(is_ref, dtype=bool)
    sent = np.fromiter((r.sent_ns for r, k in zip(records, is_ref) if k), dtype=np.int64, count=len(refs))
    t_ns, n_tokens = _decode_file(folder, np.array(refs, dtype=np.int64).reshape(-1, 2), sent, ref_lines)
    if old.size:  # old and new lines mixed: put each event where its record is
        from_ref = np.repeat(ref_rows, n_events)
        t_all = np.empty(from_ref.size, dtype=np.int64)
        n_all = np.empty(from_ref.size, dtype=np.int64)
        t_all[from_ref], n_all[from_ref] = t_ns, n_tokens
        t_all[~from_ref], n_all[~from_ref] = old[:, 0], old[:, 1]
        t_ns, n_tokens = t_all, n_all
    return RecordColumns(records, n_events, t_ns, n_tokens)


def _decode_file(
    folder: Path, refs: npt.NDArray[np.int64], sent: npt.NDArray[np.int64], lines: list[int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Every referenced event of ``events.bin``, decoded a few megabytes at a time."""
    counts, nbytes = refs[:, 0], refs[:, 1]
    t_ns = np.empty(int(counts.sum()), dtype=np.int64)
    n_tokens = np.empty_like(t_ns)
    byte_end = np.cumsum(nbytes)
    ev_end = np.cumsum(counts)
    with _EventsFile(folder) as evf:
        lo = 0
        while lo < counts.size:
            base = int(byte_end[lo - 1]) if lo else 0
            hi = max(int(np.searchsorted(byte_end, base + _CHUNK_BYTES, side="right")), lo + 1)
            buf = evf.read(int(byte_end[hi - 1]) - base, f"lines {lines[lo]}-{lines[hi - 1]}")
            try:
                t, n = decode_events(buf, counts[lo:hi], nbytes[lo:hi], sent[lo:hi])
            except EventsCorrupt as exc:
                raise _decode_error(evf, lines[lo + exc.record]) from None
            at = int(ev_end[lo - 1]) if lo else 0
            t_ns[at : at + t.size] = t
            n_tokens[at : at + n.size] = n
            lo = hi
    return t_ns, n_tokens


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
