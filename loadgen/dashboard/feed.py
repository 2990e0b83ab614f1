"""What the live dashboard shows, kept as the run goes: :class:`Feed`.

The caller (the run's event loop, or :class:`~loadgen.dashboard.tail.FolderTail`) hands it
each finished record, each level's summary and each server sample; :meth:`Feed.tick`, about
once a second, closes one point of the time series and :meth:`Feed.snapshot` gives the whole
state to a page that connects now. No I/O, no asyncio, a clock injected.

A point's percentiles are over the records that finished within the last ``window_s``
seconds, with loadgen's definitions (:mod:`loadgen.metrics.per_request`). Memory is fixed:
at most :data:`ITL_CAP` ITL samples per window (then one in ``stride``, weighted) and
``max_points`` points per series (the older half thinned when full). The definitions and
bounds in full: docs/dashboard.md, "How the page's numbers are computed".
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from itertools import chain
from typing import Any

import numpy as np

from loadgen.numfmt import fmt
from loadgen.records import ErrorKind, RequestRecord

__all__ = ["ITL_CAP", "SERIES", "SERVER_KEYS", "Feed", "level_point"]

ITL_CAP = 50_000  # ITL samples held for one window
ITL_RECORDS_PER_TICK = 200  # records whose gaps a tick's ITL takes (beyond: one in k, weighted k)
SERVER_KEYS = ("running", "waiting", "kv_usage", "prefix_hit_rate", "gpu_util")
_LATENCY = ("ttft_p50", "ttft_p90", "ttft_p99", "itl_p50", "itl_p99")
SERIES = ("t", "level", *_LATENCY, "out_tok_s", "req_s", "in_flight", "loop_lag_ms", "errors", *SERVER_KEYS)


def _num(x: Any, digits: int = 3) -> float | None:
    """A finite number rounded, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return round(float(x), digits)


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def level_point(level: dict[str, Any], index: int) -> dict[str, Any]:
    """One finished level for the sweep curves, from its ``LevelSummary.to_json()`` dict
    (missing keys: None)."""
    mode, value = _get(level, "load", "mode"), _get(level, "load", "value")
    x = _num(value, 6)
    if x is None:
        label = str(value)
    elif mode == "concurrency":
        label = f"{fmt(x)} {'user' if x == 1 else 'users'}"
    else:
        label = f"{fmt(x)} req/s"
    p99 = ("ttft_ms", "intervals", "p99")
    tput = ("throughput", "intervals", "output_tokens_per_s")
    return {
        "index": index,
        "label": label,
        "mode": mode if isinstance(mode, str) else None,
        "x": x,
        "ok": int(_get(level, "requests", "ok") or 0),
        "failed": int(_get(level, "requests", "failed") or 0),
        "ttft_p50_ms": _num(_get(level, "ttft_ms", "p50")),
        "ttft_p99_ms": _num(_get(level, "ttft_ms", "p99")),
        "ttft_p99_lo": _num(_get(level, *p99, "low")),
        "ttft_p99_hi": _num(_get(level, *p99, "high")),
        "itl_p50_ms": _num(_get(level, "itl_ms", "p50")),
        "itl_p99_ms": _num(_get(level, "itl_ms", "p99")),
        "out_tok_s": _num(_get(level, "throughput", "output_tokens_per_s"), 2),
        "out_tok_s_lo": _num(_get(level, *tput, "low"), 2),
        "out_tok_s_hi": _num(_get(level, *tput, "high"), 2),
        "req_s": _num(_get(level, "throughput", "requests_per_s"), 3),
        "stopped": level.get("stopped") if isinstance(level.get("stopped"), str) else None,
        "client_verdict": verdict if isinstance(verdict := _get(level, "client", "verdict"), str) else None,
        "client_reasons": [str(r)[:200] for r in _get(level, "client", "reasons") or [] if isinstance(r, str)][:3],
    }


def _chunks(events: list[list[int]]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The record's chunks (times, tokens): token-less events dropped, events in time
    order (stable), equal times merged."""
    flat = np.fromiter(chain.from_iterable(events), dtype=np.int64, count=2 * len(events))
    t, k = flat[0::2], flat[1::2]
    if not (k > 0).all():
        keep = k > 0
        t, k = t[keep], k[keep]
    if t.size > 1:
        step = np.diff(t)
        if (step < 0).any():
            order = np.argsort(t, kind="stable")
            t, k = t[order], k[order]
            step = np.diff(t)
        if not step.all():  # coalesced events: one chunk each time
            start = np.flatnonzero(np.concatenate(([True], step != 0)))
            t, k = t[start], np.add.reduceat(k, start)
    return t, k


class _Window:
    """The records finished in the last ``window_s``: per record (time, ok, out tokens,
    TTFT ms or NaN, its kept ITL samples, their weight)."""

    def __init__(self, window_s: float, cap: int) -> None:
        self.window_s = window_s
        self.cap = cap
        self.items: deque[tuple[float, bool, int, float, np.ndarray[Any, Any], int]] = deque()
        self.held = 0  # ITL samples held
        self.stride = 1
        self._phase = 0
        self.record_stride = 1  # one record in this many gives its ITL gaps (set per tick)
        self._record_phase = 0
        self.ok_added = 0  # successful records added since the last tick

    def add(self, now: float, rec: RequestRecord, output_tokens: int | None = None) -> None:
        ok = rec.status is ErrorKind.OK
        ttft = math.nan
        itl = _EMPTY
        weight = self.stride
        if ok:
            self.ok_added += 1
            self._record_phase = (self._record_phase + 1) % self.record_stride
        if ok and self._record_phase:  # not this one's gaps: its TTFT only (the first chunk)
            ev = rec.events
            first: int | None
            if ev and ev[0][1] > 0 and (len(ev) == 1 or ev[0][0] <= ev[1][0]):
                first = ev[0][0]  # the usual case, without a pass over every event
            else:
                first = min((t for t, n in ev if n > 0), default=None)
            if first is not None and rec.sent_ns:
                ttft = (first - rec.sent_ns) / 1e6
        elif ok:
            weight = self.stride * self.record_stride
            times, tokens = _chunks(rec.events)
            if times.size and rec.sent_ns:
                ttft = (int(times[0]) - rec.sent_ns) / 1e6
            if times.size > 1:
                k = tokens[1:]
                samples = np.diff(times) / 1e6 / k
                if (k != 1).any():
                    samples = np.repeat(samples, k)
                if self.stride > 1:  # one in stride, the phase carried over records: even
                    first = (-self._phase) % self.stride
                    self._phase = (self._phase + samples.size) % self.stride
                    samples = samples[first :: self.stride]
                itl = samples
        out = rec.output_tokens if output_tokens is None else output_tokens
        self.items.append((now, ok, out, ttft, itl, weight))
        self.held += itl.size
        while self.held > self.cap:
            self._thin()

    def _thin(self) -> None:
        held = 0
        for i, (t, ok, out, ttft, itl, w) in enumerate(self.items):
            if itl.size:
                itl = itl[1::2].copy()
                self.items[i] = (t, ok, out, ttft, itl, w * 2)
                held += itl.size
        self.held = held
        self.stride *= 2

    def expire(self, now: float) -> None:
        """Drop what finished before the window; set the next tick's record stride from
        this tick's successful records (a tick's ITL costs at most ITL_RECORDS_PER_TICK
        records' gaps, however high the rate)."""
        self.record_stride = max(1, -(-self.ok_added // ITL_RECORDS_PER_TICK))
        self.ok_added = 0
        cut = now - self.window_s
        items = self.items
        while items and items[0][0] <= cut:
            self.held -= items.popleft()[4].size
        if self.stride > 1 and self.held * 4 < self.cap:
            self.stride //= 2

    def stats(self) -> dict[str, float | None]:
        ok = [it for it in self.items if it[1]]
        ttft = np.array([it[3] for it in ok], dtype=np.float64)
        ttft = ttft[~np.isnan(ttft)]
        out: dict[str, float | None] = dict.fromkeys(_LATENCY)
        if ttft.size:
            out["ttft_p50"], out["ttft_p90"], out["ttft_p99"] = (_num(v) for v in np.percentile(ttft, [50, 90, 99]))
        parts = [it[4] for it in ok if it[4].size]
        if parts:
            samples = np.concatenate(parts)
            weights = [it[5] for it in ok if it[4].size]
            if min(weights) == max(weights):  # one weight: loadgen's own (linear) percentiles
                p50, p99 = np.percentile(samples, [50, 99])
            else:
                w = np.repeat(np.asarray(weights, dtype=np.float64), [p.size for p in parts])
                p50, p99 = np.percentile(samples, [50, 99], weights=w, method="inverted_cdf")
            out["itl_p50"], out["itl_p99"] = _num(p50), _num(p99)
        return out

    def rates(self, span: float) -> tuple[float | None, float | None]:
        if span <= 0:
            return None, None
        ok = [it for it in self.items if it[1]]
        return _num(sum(it[2] for it in ok) / span, 2), _num(len(ok) / span, 3)


_EMPTY: np.ndarray[Any, Any] = np.zeros(0, dtype=np.float64)


class Feed:
    """The dashboard's state (see the module docstring). Cheap per :meth:`add`; call
    :meth:`tick` about once a second. ``loop_lag_ms``: set by the caller before each tick
    (the coordinator loop's own lag), it goes into the point."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, window_s: float = 5.0, max_points: int = 3600
    ) -> None:
        if window_s <= 0 or max_points < 4:
            raise ValueError("window_s must be > 0 and max_points >= 4")
        self.clock = clock
        self.window_s = window_s
        self.max_points = max_points
        self.loop_lag_ms: float | None = None
        self._in_flight: Callable[[], int] | None = None
        self.reset()

    def reset(self, started_unix: float | None = None) -> None:
        """Forget everything (a new run in the same place)."""
        self._t0 = self.clock()
        self._run: dict[str, Any] = {
            "title": "",
            "api": "",
            "model": None,
            "url": "",
            "out": "",
            "state": "starting",
            "levels_planned": None,
            "levels_exact": False,
            "report": None,
            "started_unix": _num(time.time() if started_unix is None else started_unix),
        }
        self._level: dict[str, Any] | None = None
        self._level_t0 = self._t0
        self._level_finished = False
        self._window = _Window(self.window_s, ITL_CAP)
        self._series: dict[str, list[Any]] = {k: [] for k in SERIES}
        self._levels: list[dict[str, Any]] = []
        self._new_levels: list[dict[str, Any]] = []
        self._tick_errors: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        self._done = self._failed = 0
        self._server: dict[str, Any] | None = None

    def plan(
        self,
        *,
        title: str,
        api: str,
        model: str | None,
        url: str,
        out: str,
        levels_planned: int | None,
        levels_exact: bool,
        started_unix: float | None = None,
    ) -> None:
        """What the run is (``url`` already redacted by the caller); ``started_unix`` when
        known (a folder's ``run.json``), else when the feed was made."""
        self._run.update(
            title=title,
            api=api,
            model=model,
            url=url,
            out=out,
            levels_planned=levels_planned,
            levels_exact=levels_exact,
        )
        if started_unix is not None:
            self._run["started_unix"] = _num(started_unix)

    def start_level(
        self,
        *,
        index: int,
        trial: int,
        heading: str,
        target: str,
        requests: int | None,
        warmup: int,
        duration_s: float | None,
    ) -> None:
        """A level (or a trial of it) begins now."""
        if self._run["state"] == "starting":
            self._run["state"] = "running"
        self._level_t0 = self.clock()
        self._level_finished = False
        self._level = {
            "index": index,
            "trial": trial,
            "heading": heading,
            "target": target,
            "duration_s": duration_s,
            "requests": requests,
            "warmup": warmup,
            "done": 0,
            "failed": 0,
            "warm": 0,
        }

    def add(self, rec: RequestRecord, output_tokens: int | None = None) -> None:
        """One finished record (warm-up: counted apart, nothing else); ``output_tokens``:
        its ``rec.output_tokens`` when the caller has it already (a sum over the events)."""
        level = self._level
        if rec.warmup:
            if level is not None:
                level["warm"] += 1
            return
        ok = rec.status is ErrorKind.OK
        self._done += 1
        if level is not None:
            level["done"] += 1
        if not ok:
            kind = ErrorKind(rec.status).value
            self._failed += 1
            self._errors[kind] = self._errors.get(kind, 0) + 1
            self._tick_errors[kind] = self._tick_errors.get(kind, 0) + 1
            if level is not None:
                level["failed"] += 1
        self._window.add(self.clock(), rec, output_tokens)

    def level_done(self, level: dict[str, Any]) -> None:
        """One finished level: a ``LevelSummary.to_json()`` dict."""
        point = level_point(level, len(self._levels))
        self._levels.append(point)
        self._new_levels.append(point)
        self._level_finished = True

    def server_sample(self, sample: dict[str, Any]) -> None:
        """One ``server_metrics.jsonl`` line; the latest before a tick goes into its point."""
        self._server = sample

    def set_in_flight(self, fn: Callable[[], int]) -> None:
        """How to read the requests in flight (at each tick)."""
        self._in_flight = fn

    def end(self, state: str, report: str | None = None) -> None:
        """The run ended: ``"finished"``, ``"interrupted"`` or ``"failed"``."""
        if state not in ("finished", "interrupted", "failed"):
            raise ValueError(f"unknown end state {state!r}")
        self._run["state"] = state
        self._run["report"] = report

    # -- reading ---------------------------------------------------------------------

    def _level_view(self, now: float) -> dict[str, Any] | None:
        if self._level is None:
            return None
        lv = dict(self._level)
        elapsed = max(0.0, now - self._level_t0)
        fractions = []
        if lv["requests"]:
            fractions.append(lv["done"] / lv["requests"])
        if lv["duration_s"]:
            fractions.append(elapsed / lv["duration_s"])
        progress = 1.0 if self._level_finished else (min(1.0, max(fractions)) if fractions else None)
        left: float | None = None
        if self._level_finished:
            left = 0.0
        elif lv["duration_s"]:
            left = max(0.0, lv["duration_s"] - elapsed)
        elif lv["requests"] and lv["done"]:
            left = max(0, lv["requests"] - lv["done"]) * elapsed / lv["done"]
        lv.update(
            elapsed_s=_num(elapsed, 1),
            in_flight=self._read_in_flight() or 0,
            left_s=_num(left, 1),
            progress=_num(progress, 4),
        )
        return lv

    def _read_in_flight(self) -> int | None:
        return None if self._in_flight is None else int(self._in_flight())

    def _progress(self, level: dict[str, Any] | None) -> float | None:
        planned = self._run["levels_planned"]
        if not planned:
            return None
        part = 0.0 if level is None or self._level_finished else float(level["progress"] or 0.0)
        return _num(min(1.0, (len(self._levels) + part) / planned), 4)

    def _totals(self) -> dict[str, Any]:
        return {"done": self._done, "failed": self._failed, "errors": dict(self._errors)}

    def tick(self) -> dict[str, Any]:
        """Close one point (about once a second): the POINT message. A clock that has not
        moved since the last point (a folder's clock, which moves with its records) closes
        none: ``"point"`` is None and the rest of the message is current."""
        now = self.clock()
        if self._series["t"] and now - self._t0 <= (self._series["t"][-1] or 0.0):
            return self._message(None, now)
        win = self._window
        win.expire(now)
        point: dict[str, Any] = {
            "t": _num(now - self._t0, 3),
            "level": None if self._level is None else self._level["index"],
        }
        point.update(win.stats())
        span = min(self.window_s, now - self._level_t0)
        point["out_tok_s"], point["req_s"] = win.rates(span)
        point["in_flight"] = self._read_in_flight()
        point["loop_lag_ms"] = _num(self.loop_lag_ms)
        point["errors"], self._tick_errors = self._tick_errors, {}
        server, self._server = self._server or {}, None
        for key in SERVER_KEYS:
            point[key] = _num(server.get(key), 4)
        self._append(point)
        return self._message(point, now)

    def _message(self, point: dict[str, Any] | None, now: float) -> dict[str, Any]:
        level = self._level_view(now)
        new, self._new_levels = self._new_levels, []
        return {
            "v": 1,
            "point": point,
            "run": dict(self._run),
            "level": level,
            "progress": self._progress(level),
            "levels": new,
            "totals": self._totals(),
        }

    def _append(self, point: dict[str, Any]) -> None:
        series = self._series
        if len(series["t"]) >= self.max_points:
            half = len(series["t"]) // 2 // 2 * 2  # an even count: whole pairs
            for key, values in series.items():
                old = values[:half]
                kept = old[0::2]
                if key == "errors":  # a dropped point's counts go to the one kept before it
                    kept = [_merged(a, b) for a, b in zip(old[0::2], old[1::2])]
                values[:half] = kept
        for key in SERIES:
            series[key].append(point[key])

    def snapshot(self) -> dict[str, Any]:
        """The whole state, for a page that connects now: the SNAPSHOT message."""
        level = self._level_view(self.clock())
        return {
            "v": 1,
            "run": dict(self._run),
            "level": level,
            "progress": self._progress(level),
            "series": {k: [dict(e) for e in v] if k == "errors" else list(v) for k, v in self._series.items()},
            "levels": [dict(lv) for lv in self._levels],
            "totals": self._totals(),
        }


def _merged(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(b)
    for k, n in a.items():
        out[k] = out.get(k, 0) + n
    return out
