"""Follow a run folder being written and feed a :class:`~loadgen.dashboard.feed.Feed`:
:class:`FolderTail` (what ``loadgen watch DIR`` reads).

Each :meth:`FolderTail.poll` reads what is new since the last one, bounded (at most
:data:`MAX_BYTES` of ``records.jsonl``, :data:`MAX_LINES` lines and :data:`MAX_EVENT_BYTES`
of ``events.bin``; ``run.json`` and ``summary.json`` at most :data:`MAX_JSON_BYTES`; the
rest next time), and only regular files. A record's claim on ``events.bin`` is checked
against the file's size before anything is read (:mod:`loadgen.report.recordio` writes a
record's bytes before its line). Damaged lines are counted in :attr:`FolderTail.damaged`;
what cannot be read is said once, as one line, in :attr:`FolderTail.problems`, and the
tail goes on with the rest. What each file gives: docs/dashboard.md, "What the page shows"
(what ``loadgen watch`` reads and how it bounds it).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.dashboard.feed import Feed
from loadgen.inputs import InputError, open_input
from loadgen.numfmt import fmt
from loadgen.records import RequestRecord
from loadgen.report.recordio import EVENTS_FILE, EVENTS_MAGIC, EventsCorrupt, events_ref, fill_events, parse_line

__all__ = ["MAX_BYTES", "MAX_EVENT_BYTES", "MAX_JSON_BYTES", "MAX_LINES", "FolderTail"]

MAX_BYTES = 4 << 20  # of records.jsonl per poll (server_metrics.jsonl: the same), and its longest line
MAX_LINES = 20_000  # records per poll
MAX_EVENT_BYTES = 16 << 20  # of events.bin per poll, and the most one record's events may own
MAX_JSON_BYTES = 32 << 20  # run.json, summary.json


def _cap(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


class _Lines:
    """Complete lines appended to one file, a bounded piece at a time."""

    def __init__(self, path: Path, said: Callable[[str], None]) -> None:
        self.path = path
        self.said = said
        self.offset = 0
        self.ident: tuple[int, int] | None = None  # (device, inode) of the file read
        self.skipping = False  # inside a line longer than MAX_BYTES: dropped to its end

    def replaced(self) -> bool:
        """Whether the file is now another one, or shorter than what was read."""
        try:
            st = self.path.stat()
        except OSError:
            return self.offset > 0
        ident = (st.st_dev, st.st_ino)
        return (self.ident is not None and ident != self.ident) or st.st_size < self.offset

    def read(self, max_lines: int) -> tuple[list[bytes], int]:
        """Up to ``max_lines`` new complete lines and how many overlong ones were dropped."""
        try:
            with open_input(self.path) as f:
                st = os.fstat(f.fileno())
                self.ident = (st.st_dev, st.st_ino)
                f.seek(self.offset)
                data = f.read(MAX_BYTES)
        except InputError as exc:
            self.said(f"{self.path} {exc}: not read")
            return [], 0
        except OSError:
            return [], 0
        dropped = 0
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) == MAX_BYTES:  # no end in sight: drop it as damaged
                self.offset += len(data)
                dropped += 0 if self.skipping else 1
                self.skipping = True
            return [], dropped
        lines = data[: end + 1].split(b"\n")[:-1]
        if self.skipping:  # the tail of an overlong line
            lines = lines[1:]
            self.skipping = False
            self.offset += data.find(b"\n") + 1
        lines = lines[:max_lines]
        self.offset += sum(len(line) + 1 for line in lines)
        return lines, dropped

    def at_end(self) -> bool:
        try:
            return self.path.stat().st_size <= self.offset
        except OSError:
            return True


class _Json:
    """A JSON object file read again when it changes (size or time), at most
    :data:`MAX_JSON_BYTES` of a regular file."""

    def __init__(self, path: Path, said: Callable[[str], None]) -> None:
        self.path = path
        self.said = said
        self.seen: tuple[int, int, int] | None = None

    def changed(self) -> dict[str, Any] | None:
        try:
            with open_input(self.path) as f:
                st = os.fstat(f.fileno())
                key = (st.st_ino, st.st_size, st.st_mtime_ns)
                if key == self.seen:
                    return None
                if st.st_size > MAX_JSON_BYTES:
                    self.seen = key  # said once, until it changes
                    self.said(f"{self.path} is {st.st_size:,} bytes, over {_cap(MAX_JSON_BYTES)}: not read")
                    return None
                data = f.read(MAX_JSON_BYTES + 1)
        except InputError as exc:
            self.said(f"{self.path} {exc}: not read")
            return None
        except OSError:
            return None
        if len(data) > MAX_JSON_BYTES:  # grew since its size was taken: the next change reads it
            return None
        try:
            obj = json.loads(data)
        except ValueError:  # a torn write: read again next time
            return None
        self.seen = key
        return obj if isinstance(obj, dict) else None


def _label(mode: Any, value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "?"
    return f"{fmt(value)} {('user' if value == 1 else 'users') if mode == 'concurrency' else 'req/s'}"


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def _int(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


class FolderTail:
    """Reads a run folder as it is written, into ``feed`` (see the module docstring)."""

    def __init__(self, folder: Path, feed: Feed) -> None:
        self.folder = folder
        self.feed = feed
        self.problems: list[str] = []  # what could not be read, one line each, each said once
        self._said: set[str] = set()
        self._start()
        # the feed's windows and points in the run's own time, not this process's: records
        # arrive in batches (the writer's, a sync's), and their rates are those of the run
        feed.clock = self.clock
        feed.reset()

    def _start(self) -> None:
        self._records = _Lines(self.folder / "records.jsonl", self._say)
        self._server = _Lines(self.folder / "server_metrics.jsonl", self._say)
        self._run = _Json(self.folder / "run.json", self._say)
        self._summary = _Json(self.folder / "summary.json", self._say)
        self._events_at = len(EVENTS_MAGIC)
        self._profile: dict[str, Any] = {}
        self._finished: dict[str, Any] | None = None
        self._levels_seen = 0
        self._level: tuple[int, int] | None = None
        self._ended = False
        self._reported: Path | None = None  # the report the feed was told of
        self._zero_ns: int | None = None  # the run's clock anchor (run.json), else its first send
        self._latest_ns: int | None = None  # the latest time the records read so far show
        self.damaged = 0  # record lines skipped (not a record, or their events did not decode)

    def _say(self, problem: str) -> None:
        if problem not in self._said:
            self._said.add(problem)
            self.problems.append(problem)

    def clock(self) -> float:
        """Seconds on the run's own clock since its start, as far as its records show: it
        moves as records are read (a tick without new ones closes no point)."""
        if self._latest_ns is None or self._zero_ns is None:
            return 0.0
        return (self._latest_ns - self._zero_ns) / 1e9

    def _saw(self, t_ns: int) -> None:
        if t_ns > 0:
            if self._zero_ns is None:
                self._zero_ns = t_ns
            if self._latest_ns is None or t_ns > self._latest_ns:
                self._latest_ns = t_ns

    @property
    def done(self) -> bool:
        """The run is finished and every record of it was read."""
        return self._ended

    @property
    def report(self) -> Path | None:
        """The folder's ``report.html`` once it exists."""
        path = self.folder / "report.html"
        return path if path.is_file() else None

    def poll(self) -> None:
        """Read what is new (bounded; never waits)."""
        if self._records.replaced():
            self._start()
            self.feed.reset()
        run = self._run.changed()
        if run is not None:
            self._plan(run)
        self._read_records()
        lines, _ = self._server.read(MAX_LINES)
        for line in lines:
            with contextlib.suppress(ValueError):
                sample = json.loads(line)
                if isinstance(sample, dict):
                    self.feed.server_sample(sample)
        summary = self._summary.changed()
        if summary is not None and isinstance(summary.get("levels"), list):
            for level in summary["levels"][self._levels_seen :]:
                if isinstance(level, dict):
                    self.feed.level_done(level)
            self._levels_seen = max(self._levels_seen, len(summary["levels"]))
        if self._finished is not None and not self._ended and self._records.at_end():
            self._ended = True
            self._reported = self.report
            self.feed.end(self._end_state, None if self._reported is None else str(self._reported))
        elif self._ended and self._reported is None and self.report is not None:  # written after run.json
            self._reported = self.report
            self.feed.end(self._end_state, str(self._reported))

    @property
    def _end_state(self) -> str:
        return "interrupted" if self._finished and self._finished.get("interrupted") else "finished"

    def _plan(self, run: dict[str, Any]) -> None:
        target, profile, anchor = (_dict(run.get(k)) for k in ("target", "profile", "clock_anchor"))
        self._profile = profile
        levels = profile.get("levels")
        exact = profile.get("kind", "levels") == "levels" and isinstance(levels, list) and bool(levels)
        planned = len(levels) if exact and isinstance(levels, list) else profile.get("max_levels")
        unix = anchor.get("unix_s")
        perf = _int(anchor.get("perf_counter_ns"))
        if perf is not None and self._zero_ns is None:
            self._zero_ns = perf  # the records' clock at the run's start: t counts from there
        self.feed.plan(
            title=str(run.get("label") or self.folder.name),
            api=str(target.get("api") or ""),
            model=target.get("model") if isinstance(target.get("model"), str) else None,
            url=str(target.get("url") or ""),
            out=str(self.folder),
            levels_planned=planned if isinstance(planned, int) else None,
            levels_exact=exact,
            started_unix=float(unix) if isinstance(unix, (int, float)) else None,
        )
        finished = run.get("finished")
        self._finished = finished if isinstance(finished, dict) else None

    def _read_records(self) -> None:
        lines, dropped = self._records.read(MAX_LINES)
        self.damaged += dropped
        if not lines:
            return
        recs: list[RequestRecord] = []
        refs: list[tuple[int, int]] = []
        size = self._events_size()
        at = self._events_at  # where the next record's events start
        start = at  # where this poll's read starts
        taken = 0  # bytes of the lines used (the rest are read again next time)
        for line in lines:
            parsed = parse_line(line)
            if parsed is None:
                self.damaged += 1
                taken += len(line) + 1
                continue
            rec, events = parsed
            ref = events_ref(events)
            n = 0 if ref is None else ref[1]
            if n and at + n > size:  # past the file's end: its bytes are not there yet
                if self._finished is None:
                    break  # (never, with loadgen's writer) this line and the rest again next time
                self.damaged += 1  # the run has ended: they never come
                self._say(f"{self._records.path}: a record claims events past the end of {EVENTS_FILE}")
                taken += len(line) + 1
                continue
            if n > MAX_EVENT_BYTES:  # there, but more than a poll may read: skipped unread
                if at > start:
                    break  # the first of the next poll
                self._say(
                    f"{self._records.path}: a record's events are over {_cap(MAX_EVENT_BYTES)}: shown without them"
                )
                at = start = at + n
                ref = None
            elif at + n - start > MAX_EVENT_BYTES:
                break  # the rest next time
            else:
                at += n
                if ref is None and isinstance(events, list):  # an older folder's line: its events inline
                    rec.events = events
            recs.append(rec)
            refs.append(ref or (0, 0))
            taken += len(line) + 1
        self._records.offset -= sum(len(line) + 1 for line in lines) - taken
        buf = self._read_events(start, at - start)
        if buf.size < at - start:  # the file shrank under us: all of these again next time
            self._records.offset -= taken
            return
        self._events_at = at
        self._fill(recs, refs, buf)
        for rec in recs:
            self._feed(rec)

    def _events_size(self) -> int:
        """The size of ``events.bin`` (0 when it is missing or not a regular file)."""
        try:
            with open_input(self.folder / EVENTS_FILE) as f:
                return os.fstat(f.fileno()).st_size
        except InputError as exc:
            self._say(f"{self.folder / EVENTS_FILE} {exc}: not read")
            return 0
        except OSError:
            return 0

    def _read_events(self, at: int, n: int) -> np.ndarray[Any, Any]:
        if n == 0:
            return np.zeros(0, dtype=np.uint8)
        try:
            with open_input(self.folder / EVENTS_FILE) as f:
                f.seek(at)
                return np.frombuffer(f.read(n), dtype=np.uint8)
        except OSError:
            return np.zeros(0, dtype=np.uint8)

    def _fill(self, recs: list[RequestRecord], refs: list[tuple[int, int]], buf: np.ndarray[Any, Any]) -> None:
        own = [i for i, (_, b) in enumerate(refs) if b]
        if not own:
            return
        try:
            fill_events([recs[i] for i in own], [refs[i] for i in own], buf)
        except EventsCorrupt:  # one record at a time: keep the ones that decode
            at = 0
            bad: list[int] = []
            for i in own:
                n = refs[i][1]
                try:
                    fill_events([recs[i]], [refs[i]], buf[at : at + n])
                except EventsCorrupt:
                    bad.append(i)
                at += n
            for i in reversed(bad):
                del recs[i]
            self.damaged += len(bad)

    def _feed(self, rec: RequestRecord) -> None:
        key = (rec.level, rec.trial)
        if key != self._level:
            self._level = key
            self._saw(rec.sent_ns)  # the level began by its first record's send
            p = self._profile
            levels = _list(p.get("levels"))
            planned = len(levels) if p.get("kind", "levels") == "levels" and levels else None
            value = levels[rec.level] if rec.level < len(levels) else None
            duration = p.get("duration_s")
            self.feed.start_level(
                index=rec.level,
                trial=rec.trial,
                heading=f"level {rec.level + 1} of {planned}" if planned else f"level {rec.level + 1}",
                target=_label(p.get("mode"), value),
                requests=_int(p.get("requests")),
                warmup=_int(p.get("warmup_requests")) or 0,
                duration_s=float(duration) if isinstance(duration, (int, float)) else None,
            )
        self._saw(rec.done_ns or rec.sent_ns)
        self.feed.add(rec)
