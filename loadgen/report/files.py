"""The run folder: ``run.json``, ``records.jsonl`` (appended live), ``summary.json``.

``records.jsonl`` is opened once and each finished record is written and flushed at
once, so a crash or Ctrl-C keeps every record that finished. Nothing here computes a
metric; secrets never reach these files (the caller passes a redacted config).

Reading: :func:`read_records` gives whole records; :func:`read_records_columnar` gives
the same records with their events pulled out into one flat int64 array (what the
report's per-request frame is built from), several times faster on large runs: a line
as :func:`~loadgen.records.record_to_json` writes it has its ``"events"`` text cut out
and parsed by numpy in one pass over the whole file, the rest of the line by ``json``.
Any line not in that exact form is parsed whole by ``json`` instead, so both readers
accept and skip the same lines.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np
import numpy.typing as npt

from loadgen import __version__
from loadgen.errors import ConfigError
from loadgen.records import RequestRecord, record_from_json, record_to_json

__all__ = [
    "RUN_FILES",
    "holds_run",
    "RunWriter",
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
    """Records of a run folder; a torn last line (a killed run) or any other line that
    is not a JSON object is skipped."""
    with open(_need(folder, "records.jsonl"), encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            rec = _record(line) if line else None
            if rec is not None:
                yield rec


def _record(text: str | bytes) -> RequestRecord | None:
    """The record of one ``records.jsonl`` line; None when it is not one."""
    try:
        d = json.loads(text)
        return record_from_json(d) if isinstance(d, dict) else None
    except (ValueError, TypeError):
        return None


@dataclass(slots=True)
class RecordColumns:
    """The records of a run folder with their events apart: ``records`` have empty
    ``events``; ``events`` holds every record's ``[t_ns, n_tokens]`` pairs in record
    order (shape ``(N, 2)``), ``n_events[i]`` how many are record ``i``'s."""

    records: list[RequestRecord]
    n_events: npt.NDArray[np.int64]
    events: npt.NDArray[np.int64]


def read_records_columnar(folder: Path) -> RecordColumns:
    """:func:`read_records` with the events pulled out (see the module docstring): the
    same records, in the same order, torn and foreign lines skipped alike. Raises
    :class:`ConfigError` when a record's ``events`` is not a list of integer pairs."""
    path = _need(folder, "records.jsonl")
    cols = _read_columns(path, fast=True)
    if cols is None:  # rare: text that looked like pairs was not; read it all with json
        cols = _read_columns(path, fast=False)
    if cols is None:
        raise _bad_events(str(path))
    return cols


_EVENTS_KEY = b'"events":['
_INT64 = np.iinfo(np.int64)


def _cut_events(line: bytes) -> tuple[bytes, bytes, int] | None:
    """``(line with "events":[], the pairs' text "[t,n],[t,n]", their number)`` for a
    line written like ``record_to_json`` writes one; None for any other form."""
    i = line.find(_EVENTS_KEY)
    # a key at the top level: no object opened before it, its quote not escaped
    if i <= 0 or line.find(b"{", 1, i) >= 0 or line[i - 1] == 0x5C:  # backslash
        return None
    start = i + len(_EVENTS_KEY)
    if line[start : start + 1] == b"]":
        return line, b"", 0
    end = line.find(b"]]", start) + 1
    if end <= 0:
        return None
    part = line[start:end]
    skeleton = part.translate(None, b"0123456789-")  # "[,],[,]" for n pairs, nothing else
    n = (len(skeleton) + 1) // 4
    if skeleton != (b"[,]," * n)[:-1]:
        return None
    return line[:start] + line[end:], part, n


def _json_ints(text: bytes) -> bool:
    """Whether the numbers of ``"t,n,t,n"`` text, which numpy parses, are JSON's too:
    numpy would also read a lone "-" (as 0) and leading zeros; it rejects the rest."""
    if b"-," in text or text.endswith(b"-") or (text[:1] == b"0" and text[1:2].isdigit()):
        return False
    for lead in (b",0", b"-0"):  # few: only the number 0 starts with a zero in JSON
        i = text.find(lead)
        while i >= 0:
            if text[i + 2 : i + 3].isdigit():
                return False
            i = text.find(lead, i + 2)
    return True


def _pairs_text(events: object) -> tuple[bytes, int] | None:
    """A parsed ``events`` list as :func:`_cut_events` gives its text; None unless it
    is a list of ``[t_ns, n_tokens]`` pairs of integers within int64."""
    if not isinstance(events, list):
        return None
    lo, hi = _INT64.min, _INT64.max
    for e in events:
        if not (isinstance(e, list) and len(e) == 2 and all(type(v) is int and lo < v < hi for v in e)):
            return None
    return b",".join(b"[%d,%d]" % (t, n) for t, n in events), len(events)


def _parse_line(line: bytes, fast: bool) -> tuple[RequestRecord, bytes, int] | None:
    """A record (events emptied), its pairs' text and number; None for a line
    :func:`read_records` skips too (torn, not JSON, not a record)."""
    cut = _cut_events(line) if fast else None
    if cut is not None:
        rec = _record(cut[0])
        if rec is not None and rec.events == []:  # else a second "events" key (json keeps it)
            return rec, cut[1], cut[2]  # or no record: the whole-line parse decides
    rec = _record(line)
    if rec is None:
        return None
    pairs = _pairs_text(rec.events)
    if pairs is None:
        return rec, b"", -1
    rec.events = []
    return rec, *pairs


def _read_columns(path: Path, fast: bool) -> RecordColumns | None:
    """One pass over ``records.jsonl``; None when the pairs' text is not all integers
    (only the fast path can let such text through)."""
    records: list[RequestRecord] = []
    counts: list[int] = []
    parts: list[bytes] = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.strip()
            got = _parse_line(line, fast) if line else None
            if got is None:
                continue
            if got[2] < 0:
                raise _bad_events(f"{path} line {lineno}")
            records.append(got[0])
            parts.append(got[1])
            counts.append(got[2])
    n_events = np.array(counts, dtype=np.int64)
    text = b",".join([p for p in parts if p]).translate(None, b"[]")
    del parts
    if not _json_ints(text):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy < 2 only warns on unparsable text
            flat = np.fromstring(text, dtype=np.int64, sep=",")
    except (ValueError, DeprecationWarning):
        return None
    total = int(n_events.sum())
    if flat.size != 2 * total or (total and (flat.max() >= _INT64.max or flat.min() <= _INT64.min)):
        return None  # numbers cut short, or saturated at the int64 limits
    return RecordColumns(records=records, n_events=n_events, events=flat.reshape(-1, 2))


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
