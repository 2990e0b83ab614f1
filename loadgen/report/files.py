"""The run folder: ``run.json``, ``records.jsonl`` and ``events.bin`` (appended live),
``summary.json``.

:class:`RunWriter` writes records in batches (:func:`~loadgen.report.recordio.encode_batch`:
events to ``events.bin``, then lines to ``records.jsonl``), holding single records at most
:data:`FLUSH_RECORDS` of them for at most :data:`FLUSH_S`, and always flushing before a
summary or ``run.json`` and on close, so Ctrl-C keeps every finished record. A failed write
never raises out of it: the files are cut back to the last whole record, the error is kept
in ``RunWriter.error`` and ``on_error`` is called once. :func:`lock_run_folder` makes a run
own its folder. Nothing here computes a metric; secrets never reach these files (the
caller passes a redacted config). Reading (:mod:`loadgen.report.readers`, its names also
here): :func:`read_records`, :func:`read_records_columnar`, :func:`read_records_pieces`.

Why batches, orjson, the lock and older folders: docs/architecture.md, "Writing the run
folder".
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
from loadgen.runinfo import Machine, RunInfo

__all__ = [
    "LOCK_FILE",
    "RUN_FILES",
    "RecordColumns",
    "RecordPieces",
    "RunWriter",
    "check_out_folder",
    "default_run_dir",
    "holds_run",
    "is_run_folder",
    "lock_run_folder",
    "machine_info",
    "read_records",
    "read_records_columnar",
    "read_records_pieces",
    "read_run",
    "read_run_info",
    "read_summary",
    "record_line",
    "records_before_level",
    "safe_label",
    "write_json",
]


_UNSAFE = re.compile(r"[^\w.+-]+")
_LABEL_CHARS = 80


def safe_label(label: str) -> str:
    """``label`` as one harmless path component: every run of characters other than
    letters, digits (of any script), ``.``, ``_``, ``+`` and ``-`` (``/``, spaces, newlines,
    escape and other control characters) becomes ``_``; leading dots go (no ``..``, no hidden folder); at most 80
    characters; ``run`` when nothing is left."""
    text = _UNSAFE.sub("_", label)[: _LABEL_CHARS * 2].strip("._-")[:_LABEL_CHARS].rstrip("._-")
    return text or "run"


def default_run_dir(root: Path, label: str) -> Path:
    """``root/<time>-<label>``, the label made one path component (:func:`safe_label`)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return root / f"{stamp}-{safe_label(label)}"


def machine_info() -> Machine:
    """This machine and the versions of loadgen and its main libraries (``run.json``'s ``machine``)."""
    import aiohttp
    import httptools
    import numpy
    import pandas

    return Machine(
        hostname=platform.node(),
        platform=platform.platform(),
        python=sys.version.split()[0],
        cpus=os.cpu_count(),
        versions={
            "loadgen": __version__,
            "aiohttp": aiohttp.__version__,
            "httptools": httptools.__version__,
            "numpy": numpy.__version__,
            "pandas": pandas.__version__,
        },
    )


RUN_FILES = ("run.json", "records.jsonl", EVENTS_FILE, "summary.json", "report.html", "server_metrics.jsonl")
LOCK_FILE = ".loadgen.lock"  # held (flock) by the run writing the folder
RESERVE_FILE = ".loadgen.reserve"  # space set aside while a run writes, given back when the disk is full
RESERVE_BYTES = 1 << 20  # room for the records in flight, summary.json and run.json after a full disk
FLUSH_RECORDS = 256  # single records held before they are written as one batch (a few ms of encoding)
FLUSH_S = 0.5  # ... and the longest the first of them is held (the caller's timer covers an idle run)
_now = time.monotonic  # the clock of FLUSH_S (a test's virtual clock replaces it)
_OURS = (LOCK_FILE, RESERVE_FILE)


def _holder(path: Path) -> str:
    with contextlib.suppress(OSError, ValueError):
        pid = int(path.read_text(encoding="ascii").strip() or "x")
        return f" (pid {pid})"
    return ""


@contextlib.contextmanager
def lock_run_folder(folder: Path, field: str = "out") -> Iterator[None]:
    """Hold ``folder`` for one run: an exclusive, non-blocking ``flock`` on its
    ``.loadgen.lock`` (the folder is made when missing). Another holder means another run
    is writing there: :class:`ConfigError` on ``field``. The kernel drops the lock when
    the process ends however it ends; on a clean exit the lock file is removed, and so is
    the folder when this call made it and nothing else was written in it."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is a file, not a folder", field=field)
    made = not folder.exists()
    path = folder / LOCK_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for _ in range(10):  # the file may be removed between open and flock by a run that ends
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise ConfigError(
                    f"another loadgen run is writing {folder}{_holder(path)}; wait for it or give another folder",
                    field=field,
                ) from None
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        else:  # pragma: no cover - ten races in a row
            raise ConfigError(f"cannot lock {path}: it keeps being replaced", field=field)
    except OSError as exc:
        raise ConfigError(f"cannot write the run folder: {exc.strerror or exc}", field=field) from None
    with contextlib.suppress(OSError):  # who holds it, for the refusal's message (a full disk may refuse)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)  # before the lock goes: a run that opens it now sees another inode
        os.close(fd)
        if made:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty: a run that failed before writing anything


def holds_run(folder: Path) -> bool:
    """Whether ``folder`` holds any file of a run."""
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


def is_run_folder(folder: Path) -> bool:
    """Whether ``folder`` is a loadgen run's: a run holds its lock there, or loadgen wrote
    its run.json or events.bin (what :func:`check_out_folder` takes for ours)."""
    return (folder / LOCK_FILE).exists() or _is_loadgen_run(folder)


def check_out_folder(folder: Path) -> None:
    """Refuse (ConfigError on ``--out``) a folder a run would overwrite that is not ours:
    it must be absent, empty, or a loadgen run folder (whose run is then replaced)."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ConfigError(f"{folder} is a file, not a folder", field="out")
    try:
        empty = next((p for p in folder.iterdir() if p.name not in _OURS), None) is None
    except OSError as exc:
        raise ConfigError(f"cannot read {folder}: {exc.strerror or exc}", field="out") from exc
    if not empty and not _is_loadgen_run(folder):
        raise ConfigError(
            f"{folder} is neither empty nor a loadgen run folder; give a new or empty folder", field="out"
        )


def records_before_level(folder: Path, level: int) -> tuple[int, int, int]:
    """Where the records of levels ``< level`` end: ``(records.jsonl bytes, events.bin
    bytes, records)``. Levels run one after another, so their records follow one another
    in the file; the cut is at the first line of a later level, or at the lines that are
    not records there or at the end (the torn last line of a killed run). A line that is
    not a record with records of levels ``< level`` after it is a damaged file:
    :class:`ConfigError` names the line."""
    line_end = n_events = count = 0
    damaged: int | None = None
    path = folder / "records.jsonl"
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if raw.endswith(b"\n") and not raw.strip():  # a blank line, as the readers skip it
                line_end += len(raw) if damaged is None else 0
                continue
            parsed = parse_line(raw.strip()) if raw.endswith(b"\n") else None
            if parsed is None:
                damaged = lineno if damaged is None else damaged
                continue
            if parsed[0].level >= level:
                break  # a damaged line just before is cut with the rest
            if damaged is not None:
                raise ConfigError(
                    f"{path} line {damaged} is not a record (a damaged line), and records of the levels "
                    "to keep follow it",
                    field="resume",
                )
            ref = events_ref(parsed[1])
            n_events += ref[1] if ref is not None else 0
            line_end += len(raw)
            count += 1
    return line_end, len(EVENTS_MAGIC) + n_events, count


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class RunWriter:
    """Writes one run folder. Use as a context manager so the records files are closed.

    ``keep_levels_below``: continue the run already in the folder (``--resume``): the
    records of levels below it are kept byte for byte, the rest of the records files
    (a partly-run level, a torn line) is cut off, and new records are appended.

    While it writes, ``.loadgen.reserve`` holds :data:`RESERVE_BYTES` of the disk. A write
    that fails (any ``OSError``: ENOSPC, EDQUOT, EIO, EROFS, EFBIG...) does not raise: the
    batch is cut off again (both files end after the last whole record), ``error`` keeps
    the first failure and ``on_error`` is called with it once; the reserve is then given
    back and the batch tried again, so the records still in flight and the summary find
    room on a full disk. Later batches are still tried; ``lost`` counts the records not
    written.

    :meth:`append` holds records and writes them as one batch (see the module): when
    :data:`FLUSH_RECORDS` are held, when the first was held :data:`FLUSH_S` ago, on
    :meth:`flush` (a caller's timer, for a run gone quiet), before any batch, summary or
    ``run.json``, and on close. ``count`` and ``lost`` count written records only."""

    def __init__(
        self, folder: Path, keep_levels_below: int | None = None, on_error: Callable[[OSError], None] | None = None
    ) -> None:
        self.folder = folder
        self.keep_levels_below = keep_levels_below
        self.on_error = on_error
        self._records: int | None = None  # descriptors, unbuffered: a failed write leaves nothing pending
        self._events: int | None = None
        self._sizes = (0, 0)  # (records.jsonl, events.bin) bytes after the last whole batch
        self.count = 0
        self.lost = 0
        self.error: OSError | None = None
        self._held: list[RequestRecord] = []
        self._held_since = 0.0  # _now() when the first held record came

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

    def _open(self, name: str, truncate: bool) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0)
        return os.open(self.folder / name, flags, 0o644)

    def __enter__(self) -> RunWriter:
        if self.keep_levels_below is not None:
            try:
                self._cut(self.keep_levels_below)
                self._events = self._open(EVENTS_FILE, False)
                self._records = self._open("records.jsonl", False)
            except OSError as exc:
                raise ConfigError(f"cannot continue the run folder: {exc}", field="resume") from exc
        else:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                for name in RUN_FILES:  # a folder holds one run: an older one's files would mix in
                    (self.folder / name).unlink(missing_ok=True)
                self._events = self._open(EVENTS_FILE, True)
                _write_all(self._events, EVENTS_MAGIC)
                self._records = self._open("records.jsonl", True)
            except OSError as exc:
                self.close()
                raise ConfigError(f"cannot write the run folder: {exc.strerror or exc}", field="out") from None
        self._sizes = (os.fstat(self._records).st_size, os.fstat(self._events).st_size)
        self._reserve()
        return self

    def _reserve(self) -> None:
        path = self.folder / RESERVE_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return  # no reserve: a full disk then loses what does not fit
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        except OSError:
            with contextlib.suppress(OSError):
                path.unlink()
        finally:
            os.close(fd)

    def _release_reserve(self) -> bool:
        """Give the reserve back to the disk; whether there was one."""
        try:
            (self.folder / RESERVE_FILE).unlink()
        except OSError:
            return False
        return True

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self._records is not None:
                self.flush()
        finally:
            self._close_files()

    def _close_files(self) -> None:
        for fd in (self._records, self._events):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if self._records is not None:
            self._release_reserve()
        self._records = self._events = None

    def _failed(self, exc: OSError) -> None:
        first = self.error is None
        if first:
            self.error = exc
        if first and self.on_error is not None:
            self.on_error(exc)

    def write_run(self, run: RunInfo | dict[str, Any]) -> None:
        """Write ``run.json`` (a :class:`~loadgen.runinfo.RunInfo` is written as its ``to_json()``)."""
        self.flush()
        self._write_json("run.json", run.to_json() if isinstance(run, RunInfo) else run)

    @property
    def held(self) -> int:
        """Records appended but not written yet."""
        return len(self._held)

    def append(self, rec: RequestRecord) -> None:
        """Write one finished record: held, then written with the next ones (see the
        class). Raises ValueError, when the batch is written, if an event of a held
        record is not a pair of int64 integers (nothing of that batch is written)."""
        held = self._held
        if not held:
            self._held_since = _now()
        held.append(rec)
        if len(held) >= FLUSH_RECORDS or _now() - self._held_since >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        """Write the held records now. Raises ValueError, after writing the others, when
        a held record's events are not pairs of int64 integers."""
        if not self._held:
            return
        held, self._held = self._held, []
        try:
            self._write_batch(encode_batch(held), len(held))
        except ValueError:  # a bad record: the others are written, one at a time
            bad: ValueError | None = None
            for rec in held:
                try:
                    blob = encode_batch([rec])
                except ValueError as exc:
                    bad = bad or exc
                else:
                    self._write_batch(blob, 1)
            if bad is not None:
                raise bad from None

    def append_batch(self, blob: bytes | memoryview) -> None:
        """Write an :func:`~loadgen.report.recordio.encode_batch` blob as it is: its
        events bytes to ``events.bin``, then its lines to ``records.jsonl`` (a line never
        refers to bytes that are not on disk), after the records held before it. A
        failed write cuts both files back to the last whole batch (see the class).
        Raises ValueError when ``blob`` is not a batch."""
        self.flush()
        self._write_batch(blob)

    def _write_batch(self, blob: bytes | memoryview, n: int | None = None) -> None:
        """Write a batch of ``n`` records (None: count its lines)."""
        lines, events = split_batch(blob)
        if n is None:
            n = bytes(lines).count(b"\n")
        exc = self._try_batch(lines, events)
        if exc is not None:
            self._failed(exc)
            if self._release_reserve():
                exc = self._try_batch(lines, events)
        if exc is None:
            self.count += n
        else:
            self.lost += n

    def _try_batch(self, lines: bytes | memoryview, events: bytes | memoryview) -> OSError | None:
        """Write one batch whole, or cut both files back to where they were."""
        assert self._records is not None and self._events is not None, "RunWriter used outside its context"
        records_size, events_size = self._sizes
        try:
            if events:
                _write_all(self._events, events)
            _write_all(self._records, lines)
        except OSError as exc:
            for fd, size in ((self._records, records_size), (self._events, events_size)):
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)  # frees what the torn batch took
            return exc
        self._sizes = (records_size + len(lines), events_size + len(events))
        return None

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write ``summary.json`` (after the held records)."""
        self.flush()
        self._write_json("summary.json", summary)

    def _write_json(self, name: str, obj: Any) -> None:
        try:
            write_json(self.folder, name, obj)
        except OSError as exc:
            self._failed(exc)
            if self._release_reserve():
                with contextlib.suppress(OSError):
                    write_json(self.folder, name, obj)


def write_json(folder: Path, name: str, obj: Any) -> None:
    """``folder/name`` as indented JSON, replaced at once (written beside it, then renamed;
    when that fails the temporary file is removed and the error raised)."""
    tmp = folder / (name + ".tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8")
        tmp.replace(folder / name)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


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


def _read_object(folder: str | os.PathLike[str], name: str) -> dict[str, Any]:
    path = run_file(folder, name)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return obj


def read_summary(folder: str | os.PathLike[str]) -> dict[str, Any]:
    return _read_object(folder, "summary.json")


def read_run(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """``run.json`` as JSON (:func:`read_run_info` reads it typed)."""
    return _read_object(folder, "run.json")


def read_run_info(folder: str | os.PathLike[str]) -> RunInfo:
    """``run.json`` as a :class:`~loadgen.runinfo.RunInfo`; a :class:`ConfigError` that names
    the file (and the bad key) when it is unreadable or not a loadgen run record."""
    return RunInfo.from_json(read_run(folder), source=str(run_file(folder, "run.json")))
