"""Reading a run folder's records: ``records.jsonl`` and ``events.bin``.

:func:`read_records` gives whole records; :func:`read_records_columnar` gives the same
records with their events pulled out into flat int64 columns; :func:`read_records_pieces`
gives the records and their events a piece at a time (what the report builds its
per-request data from, so a run of 100M events never sits in memory as raw columns).
All parse each line the same way and skip the same lines: blank, torn (a killed run),
not JSON, or not a record — except a damaged line that lines referring to ``events.bin``
follow, which is an error naming that line (see :func:`_parsed`). Folders of older
versions (events as JSON lists inside the lines) read as before, also mixed with newer
lines. The format: :mod:`loadgen.report.recordio`.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import orjson

from loadgen.errors import ConfigError
from loadgen.records import RequestRecord, record_and_events
from loadgen.report.recordio import (
    EVENTS_FILE,
    EVENTS_MAGIC,
    EventsCorrupt,
    decode_events,
    events_ref,
    fill_events,
    parse_line,
)

__all__ = [
    "RecordColumns",
    "RecordPieces",
    "read_records",
    "read_records_columnar",
    "read_records_pieces",
    "run_file",
]

I64 = npt.NDArray[np.int64]


def run_file(folder: str | os.PathLike[str], name: str) -> Path:
    """``folder / name``; :class:`ConfigError` when it is not a file."""
    path = Path(folder) / name
    if not path.is_file():
        raise ConfigError(f"{path} not found (is {folder} a loadgen run folder?)")
    return path


class _EventsFile:
    """``events.bin`` read front to back, opened at the first line that refers to it."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / EVENTS_FILE
        self._fh: IO[bytes] | None = None

    def __enter__(self) -> _EventsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            self._fh.close()

    def read(self, nbytes: int, where: str, at: int | None = None) -> npt.NDArray[np.uint8]:
        """The next ``nbytes`` bytes (from ``at``, counted after the file's magic, if
        given), for the lines named by ``where``."""
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")  # noqa: SIM115 - kept open across reads, closed by close()
            except OSError as exc:
                raise ConfigError(f"cannot read {self.path}, which records.jsonl refers to: {exc}") from None
            if self._fh.read(len(EVENTS_MAGIC)) != EVENTS_MAGIC:
                raise ConfigError(f"{self.path} is not a loadgen events file (or of a newer version)")
        if at is not None:
            self._fh.seek(len(EVENTS_MAGIC) + at)
        data = self._fh.read(nbytes)
        if len(data) != nbytes:
            raise ConfigError(f"{self.path} ends before the events of records.jsonl {where}: the file was cut short")
        return np.frombuffer(data, dtype=np.uint8)


_SLOW: Any = object()  # _fast_parse's "not JSON to orjson: ask parse_line"


def _fast_parse(raw: bytes) -> tuple[RequestRecord, Any] | None:
    """:func:`parse_line` of a line that orjson reads as it comes (the whitespace around
    a JSON value, its newline included, is JSON's own), without stripping a copy of it
    first; :data:`_SLOW` for any other line, which ``parse_line`` judges."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _SLOW  # type: ignore[no-any-return]
    if type(obj) is not dict:
        return None
    try:
        return record_and_events(obj)
    except (ValueError, TypeError):
        return None


def _parsed(fh: IO[bytes], path: Path) -> Iterator[tuple[int, RequestRecord, Any]]:
    """Line number, record and ``events`` value of every line that is a record.

    A line that is not a record is skipped, but not when a line after it refers to
    ``events.bin``: the skipped line may have held events there too, so the later
    lines' events can no longer be placed, and the error names the damaged line rather
    than ``events.bin`` (a torn last line has no line after it, and stays skipped)."""
    damaged: int | None = None
    for lineno, raw in enumerate(fh, 1):
        parsed = _fast_parse(raw)
        if parsed is _SLOW:
            line = raw.strip()
            parsed = parse_line(line) if line else None
        if parsed is None:
            if line and damaged is None:
                damaged = lineno
            continue
        if damaged is not None and events_ref(parsed[1]) is not None:
            raise ConfigError(
                f"{path} line {damaged} is not a record (a damaged line): the lines after it refer "
                f"to {EVENTS_FILE}, and where their events start there is no longer known"
            )
        yield lineno, parsed[0], parsed[1]


def _ref(events: Any, path: Path, lineno: int) -> tuple[int, int] | None:
    """The line's reference into ``events.bin``; None for an events list (or any other
    value, which the caller judges); ConfigError for an object that is not a reference."""
    ref = events_ref(events)
    if ref is None and isinstance(events, dict):
        raise ConfigError(
            'must be a list of [t_ns, n_tokens] pairs or {"n": N, "bytes": B}',
            source=f"{path} line {lineno}",
            key="events",
        )
    return ref


def _decode_error(evf: _EventsFile, lineno: int) -> ConfigError:
    return ConfigError(f"{evf.path}: the events of records.jsonl line {lineno} do not decode (a damaged file)")


_GROUP = 1024  # records decoded together by read_records


def read_records(folder: str | os.PathLike[str]) -> Iterator[RequestRecord]:
    """Records of a run folder, events included (from ``events.bin`` or the line); a
    torn last line (a killed run) or any other line that is not a JSON object of a
    record is skipped, unless lines referring to ``events.bin`` follow it (then
    :class:`ConfigError` names it). A line whose events cannot be read raises
    :class:`ConfigError`.
    ``folder`` is a path or its text."""
    folder = Path(folder)
    path = run_file(folder, "records.jsonl")
    with open(path, "rb") as fh, _EventsFile(folder) as evf:
        group: list[RequestRecord] = []
        refs: list[tuple[int, int]] = []
        refd: list[RequestRecord] = []
        lines: list[int] = []
        for lineno, rec, events in _parsed(fh, path):
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
# events decoded at a time: temporaries of 256 KB stay in the cache and on the heap (pieces of
# 2M events made each temporary a fresh mmap, and a third of the time went to page faults)
_PIECE = 1 << 15


class RecordPieces:
    """The records of a run folder, their events to be read a piece at a time:
    :meth:`pieces` yields ``(n_events, t_ns, n_tokens)`` of the next few records, in
    order (what :func:`~loadgen.metrics.per_request.frame_and_events_from_pieces`
    takes), decoding about 32k events at a time, so a run's events never have to exist
    as raw columns all at once."""

    def __init__(self, folder: Path, records: list[RequestRecord], n_events: npt.NDArray[np.int64]) -> None:
        self.folder = folder
        self.records = records
        self.n_events = n_events  # per record
        self._ref_of = np.full(len(records), -1, dtype=np.int64)  # per record: its reference, or -1
        self._refs = np.zeros((0, 2), dtype=np.int64)  # every reference to events.bin, kept or not
        self._ref_sent = np.zeros(0, dtype=np.int64)
        self._ref_kept = np.zeros(0, dtype=bool)
        self._ref_lines: list[int] = []
        self._inline = np.zeros((0, 2), dtype=np.int64)  # the kept records' events inside their lines

    def pieces(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[I64, I64, I64]]:
        """``(n_events, t_ns, n_tokens)`` of records ``start`` to ``stop``, a few at a time."""
        counts, ref_of, refs = self.n_events, self._ref_of, self._refs
        stop = counts.size if stop is None else stop
        ends = np.cumsum(counts)
        byte_end = np.cumsum(refs[:, 1])
        inline_end = np.cumsum(np.where(ref_of < 0, counts, 0))
        with _EventsFile(self.folder) as evf:
            r0 = start
            while r0 < stop:
                before = int(ends[r0 - 1]) if r0 else 0
                r1 = min(max(int(np.searchsorted(ends, before + _PIECE, side="right")), r0 + 1), stop)
                n_ev = counts[r0:r1]
                t = np.empty(int(n_ev.sum()), dtype=np.int64)
                k = np.empty_like(t)
                by_ref = np.repeat(ref_of[r0:r1] >= 0, n_ev)
                mine = ref_of[r0:r1][ref_of[r0:r1] >= 0]
                if mine.size:
                    t[by_ref], k[by_ref] = self._decode(evf, int(mine[0]), int(mine[-1]) + 1, byte_end)
                if not by_ref.all():
                    i0 = int(inline_end[r0 - 1]) if r0 else 0
                    inline = self._inline[i0 : int(inline_end[r1 - 1])]
                    t[~by_ref], k[~by_ref] = inline[:, 0], inline[:, 1]
                yield n_ev, t, k
                r0 = r1

    def columns(self, start: int = 0, stop: int | None = None) -> tuple[I64, I64, I64]:
        """``(n_events, t_ns, n_tokens)`` of records ``start`` to ``stop`` in one piece."""
        counts = self.n_events[start:stop]
        t_ns = np.empty(int(counts.sum()), dtype=np.int64)
        n_tokens = np.empty_like(t_ns)
        at = 0
        for _, t, n in self.pieces(start, stop):
            t_ns[at : at + t.size], n_tokens[at : at + n.size] = t, n
            at += t.size
        return counts, t_ns, n_tokens

    def _decode(self, evf: _EventsFile, i0: int, i1: int, byte_end: I64) -> tuple[I64, I64]:
        """The kept events of references ``i0`` to ``i1`` (all of which are decoded, checked)."""
        start = int(byte_end[i0 - 1]) if i0 else 0
        lines = self._ref_lines
        buf = evf.read(int(byte_end[i1 - 1]) - start, f"lines {lines[i0]}-{lines[i1 - 1]}", at=start)
        refs = self._refs[i0:i1]
        try:
            t, n = decode_events(buf, refs[:, 0], refs[:, 1], self._ref_sent[i0:i1])
        except EventsCorrupt as exc:
            raise _decode_error(evf, lines[i0 + exc.record]) from None
        kept = self._ref_kept[i0:i1]
        if not kept.all():
            mine = np.repeat(kept, refs[:, 0])
            t, n = t[mine], n[mine]
        return t, n


def read_records_pieces(
    folder: str | os.PathLike[str], keep: Callable[[RequestRecord], bool] | None = None
) -> RecordPieces:
    """The records of a run folder (only those ``keep`` accepts, with it), their events
    to be read in pieces (:class:`RecordPieces`). Lines are judged as by
    :func:`read_records_columnar`."""
    folder = Path(folder)
    path = run_file(folder, "records.jsonl")
    records: list[RequestRecord] = []
    counts: list[int] = []
    ref_of: list[int] = []
    refs: list[tuple[int, int]] = []
    ref_kept: list[bool] = []
    ref_sent: list[int] = []
    ref_lines: list[int] = []
    arrays: list[npt.NDArray[np.int64]] = []  # events of old lines, in chunks
    pending: list[list[Any]] = []  # events lists not yet converted, with their line numbers
    pending_lines: list[int] = []
    n_pending = 0
    # millions of small lists pass through here; none is part of a cycle, and the cyclic
    # collector would walk the ones still alive again and again (several times slower)
    with open(path, "rb") as fh, _collector_paused():
        for lineno, rec, events in _parsed(fh, path):
            ref = _ref(events, path, lineno)
            kept = keep is None or keep(rec)
            if ref is not None:
                if kept:
                    records.append(rec)
                    counts.append(ref[0])
                    ref_of.append(len(refs))
                refs.append(ref)
                ref_kept.append(kept)
                ref_sent.append(rec.sent_ns)
                ref_lines.append(lineno)
                continue
            if not isinstance(events, list):
                raise _bad_events(f"{path} line {lineno}")
            if not kept:
                continue
            records.append(rec)
            counts.append(len(events))
            ref_of.append(-1)
            pending.append(events)
            pending_lines.append(lineno)
            n_pending += len(events)
            if n_pending >= _CHUNK:
                arrays.append(_int_pairs(pending, pending_lines, path))
                pending, pending_lines, n_pending = [], [], 0
        arrays.append(_int_pairs(pending, pending_lines, path))
    out = RecordPieces(folder, records, np.array(counts, dtype=np.int64))
    out._ref_of = np.array(ref_of, dtype=np.int64)
    out._refs = np.array(refs, dtype=np.int64).reshape(-1, 2)
    out._ref_sent = np.array(ref_sent, dtype=np.int64)
    out._ref_kept = np.array(ref_kept, dtype=bool)
    out._ref_lines = ref_lines
    out._inline = np.concatenate(arrays).reshape(-1, 2)
    return out


def read_records_columnar(
    folder: str | os.PathLike[str], keep: Callable[[RequestRecord], bool] | None = None
) -> RecordColumns:
    """:func:`read_records` with the events pulled out: the same records, in the same
    order, the same lines skipped; with ``keep``, only the records it accepts (and
    their events). Raises :class:`ConfigError` when a record's ``events`` is not a list
    of integer pairs within int64 (nor a reference into ``events.bin`` that decodes)."""
    found = read_records_pieces(folder, keep)
    return RecordColumns(found.records, *found.columns())


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
    return all(type(e) is list and len(e) == 2 and all(type(v) is int and lo <= v <= hi for v in e) for e in events)


_INT64 = np.iinfo(np.int64)


def _bad_events(where: str) -> ConfigError:
    return ConfigError("must be a list of [t_ns, n_tokens] integer pairs", source=where, key="events")
