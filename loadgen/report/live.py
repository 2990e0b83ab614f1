"""The live progress line of a run: which level of how many, its target, its own counters
and the time it has left.

It reads finished records only and keeps running counters for the display; the reported
numbers come from :mod:`loadgen.metrics`. Every counter starts again with each level (and
each trial), so nothing of the previous level shows; warm-up requests are counted apart and
stay out of ``done`` and of the medians.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from rich.text import Text

from loadgen.metrics.client import late_sends
from loadgen.numfmt import fmt, fmt_latency, fmt_ms
from loadgen.records import RequestRecord

__all__ = ["LevelTap", "LiveStats", "fmt_duration", "fmt_latency", "fmt_ms", "level_heading"]

_TOK_WINDOW_S = 5.0  # the display's tokens/s is over this many seconds


def fmt_duration(s: float) -> str:
    """``"42s"``, ``"3m05s"``, ``"1h02m"``."""
    s = max(0, round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def level_heading(index: int, planned: tuple[int, bool], trial: int = 0, trials: int = 1) -> str:
    """``"level 2 of 4"``, ``"level 3 of at most 10"`` (a capacity search), ``", trial 1/3"``."""
    n, exact = planned
    of = f" of {n}" if exact else f" of at most {n}"
    return f"level {index + 1}{of if index < n else ''}" + (f", trial {trial + 1}/{trials}" if trials > 1 else "")


class LevelTap(Protocol):
    """What else follows the run as the display does (the live dashboard's feed)."""

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
    ) -> None: ...

    def add(self, rec: RequestRecord, output_tokens: int | None = None) -> None: ...

    def level_done(self, level: dict[str, Any]) -> None: ...


class LiveStats:
    """Running counters of the level in progress, fed one finished record at a time.

    :meth:`start_level` names the level (``heading``: "level 2 of 4", the ``target``
    load) and what ends it (``requests`` after ``warmup`` warm-up requests, ``duration_s``,
    ``sends_s``: when the last request of an open loop is due, whose late sends are then
    counted); records of another level or trial (a worker's late batch) are not counted.
    """

    def __init__(
        self, in_flight: Callable[[], int], label: str = "", clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._in_flight = in_flight
        self._clock = clock
        self.taps: list[LevelTap] = []  # told of each level, record and finished level too
        # asked once per finished level what else in this process may have held the loop (the
        # dashboard): a reason a client-bound level names (None: nothing worth naming)
        self.causes: list[Callable[[], str | None]] = []
        self.skipped = False  # the level in progress was ended from the dashboard (Skip level)
        self.start_level(label)

    def start_level(
        self,
        heading: str,
        target: str = "",
        *,
        level: int | None = None,
        trial: int = 0,
        requests: int | None = None,
        warmup: int = 0,
        duration_s: float | None = None,
        sends_s: float | None = None,
    ) -> None:
        """Reset every counter for a new level (or trial)."""
        self.label, self.target = heading, target
        self.level, self.trial = level, trial
        self.requests, self.warmup, self.duration_s, self.sends_s = requests, warmup, duration_s, sends_s
        self.done = self.failed = self.warm = self.tokens = self.late = 0
        self._tok_window: deque[tuple[float, int]] = deque()
        self._ttft: deque[float] = deque(maxlen=2000)
        self._tpot: deque[float] = deque(maxlen=2000)
        self.started = self._clock()
        self.skipped = False
        if level is not None:
            for tap in self.taps:
                tap.start_level(
                    index=level,
                    trial=trial,
                    heading=heading,
                    target=target,
                    requests=requests,
                    warmup=warmup,
                    duration_s=duration_s,
                )

    def level_done(self, level: dict[str, Any]) -> None:
        """A level's summary (``LevelSummary.to_json()``), for the taps."""
        for tap in self.taps:
            tap.level_done(level)

    def add(self, rec: RequestRecord) -> None:
        n = rec.output_tokens  # a sum over the events: once, for the taps too
        for tap in self.taps:
            tap.add(rec, n)
        if self.level is not None and (rec.level != self.level or rec.trial != self.trial):
            return
        now = self._clock()
        self.tokens += n
        w = self._tok_window
        w.append((now, n))
        while now - w[0][0] > _TOK_WINDOW_S:  # bounded without a display to prune it (--quiet)
            w.popleft()
        if rec.warmup:
            self.warm += 1
            return
        if self.sends_s is not None:  # an open loop: sends later than their schedule, as the summary counts them
            self.late += late_sends([rec])
        if rec.ok:
            self.done += 1
        else:
            self.failed += 1
        ev = rec.events
        if ev and rec.sent_ns:
            self._ttft.append((ev[0][0] - rec.sent_ns) / 1e6)
            if len(ev) > 1 and rec.output_tokens > 1:
                self._tpot.append((ev[-1][0] - ev[0][0]) / 1e6 / max(rec.output_tokens - 1, 1))

    def _tokens_per_s(self, now: float) -> float:
        w = self._tok_window
        while w and now - w[0][0] > _TOK_WINDOW_S:
            w.popleft()
        span = min(_TOK_WINDOW_S, now - self.started) or 1e-9
        return sum(n for _, n in w) / span

    @staticmethod
    def _median(xs: deque[float]) -> float | None:
        if not xs:
            return None
        s = sorted(xs)
        return s[len(s) // 2]

    def time_left(self) -> float | None:
        """Seconds the level has left, best guess (None: no guess yet): the duration's rest,
        the open loop's schedule, or the requests left at the closed loop's pace so far."""
        now = self._clock()
        elapsed = now - self.started
        guesses = []
        if self.duration_s is not None:
            guesses.append(self.duration_s - elapsed)
        if self.requests is not None:
            left = self.requests - self.done - self.failed
            if self.sends_s is not None:
                guesses.append(self.sends_s - elapsed)
            elif self.done + self.failed and elapsed > 0:  # the level's pace so far, warm-up included
                guesses.append(left * elapsed / (self.done + self.failed + self.warm))
        return max(0.0, min(guesses)) if guesses else None

    def __rich__(self) -> Text:
        now = self._clock()
        t = Text()
        t.append(self.label, style="bold cyan")
        if self.target:
            t.append(f" · target {self.target}", style="cyan")
        t.append("  ")
        if self.warmup:
            t.append(f"warm-up {self.warm}/{self.warmup}  ", style="dim" if self.warm >= self.warmup else "yellow")
        t.append(f"done {self.done}" + (f"/{self.requests}" if self.requests is not None else ""), style="green")
        t.append("  failed ")
        t.append(str(self.failed), style="red" if self.failed else "")
        if self.sends_s is not None:
            t.append(f"  late sends {self.late}", style="yellow" if self.late else "")
        t.append(f"  in flight {self._in_flight()}  {fmt(self._tokens_per_s(now))} tok/s")
        ttft, tpot = fmt_latency(self._median(self._ttft)), fmt_latency(self._median(self._tpot))
        t.append(f"  TTFT p50 {ttft}  TPOT p50 {tpot}")
        left = self.time_left()
        t.append(
            f"  {fmt_duration(now - self.started)}" + ("" if left is None else f", ~{fmt_duration(left)} left"),
            style="dim",
        )
        return t
