"""Run until precise: a level ends when every named statistic is known well enough.

``--precision ttft.p99=5%`` (repeatable) names a per-request metric, a statistic and a
relative half-width. :func:`parse_target` turns the text into a :class:`Spec` (a
:class:`~loadgen.metrics.sequential.Target` and the text it was read from), once, where the
profile is read; :class:`LevelWatch` takes one level's
finished records as they come (from the runner in this process, or from the worker
processes' batches on the coordinator) and looks at them along
:class:`~loadgen.metrics.sequential.PrecisionRule`'s schedule (200, 300, 450, … measured
requests), each look at its own spent confidence, so that the interval where the level
stops is valid although the level was looked at many times. When a look finds every
target met and the level has lasted ``min_duration_s``, :meth:`LevelWatch.add` says so
once, and the executor ends the level as its duration would (no new request; those in
flight finish). :meth:`LevelWatch.reason` says why the level stopped, for its summary.

Values are the level summary's own (:func:`~loadgen.metrics.per_request.per_request_frame`
of the successful, non-warm-up records, in send order); records are framed in blocks of
:data:`BLOCK` as they arrive, so a look costs a sort and an FFT, not a frame of the level.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.metrics.catalog import Metric, by_precision, metrics, per_request
from loadgen.metrics.per_request import per_request_frame
from loadgen.metrics.sequential import Decision, PrecisionRule, Target
from loadgen.metrics.uncertainty import REFUSED, Interval, needed_n_eff
from loadgen.records import RequestRecord

__all__ = ["BLOCK", "LevelWatch", "Spec", "parse_target", "precision_rule"]

BLOCK = 256  # records framed at a time
_STAT = re.compile(r"p(\d+(?:\.\d+)?)")


@dataclass(frozen=True, slots=True)
class Spec:
    """One parsed ``--precision`` value: its label (``ttft.p99``), its target and the text
    it was read from, which is how run.json writes it (``json_text``)."""

    label: str
    target: Target
    text: str

    def __str__(self) -> str:
        return self.text

    def json_text(self) -> str:
        return self.text


def parse_target(text: str) -> Spec:
    """``METRIC.STAT=N%`` (``ttft.p99=5%``, ``e2e.mean=2.5%``) as a :class:`Spec`;
    ValueError with a one-line reason otherwise."""
    name, sep, value = text.partition("=")
    metric, dot, stat = name.strip().partition(".")
    if not sep or not dot:
        raise ValueError(f"expected METRIC.STAT=N% such as ttft.p99=5%, got {text!r}")
    if by_precision(metric) is None:
        names = ", ".join(m.precision for m in metrics() if m.precision)
        raise ValueError(f"unknown metric {metric!r} in {text!r}; choose one of: {names}")
    q: float | None = None
    if stat != "mean":
        m = _STAT.fullmatch(stat)
        q = float(m.group(1)) / 100 if m else math.nan
        if not 0 < q < 1:
            raise ValueError(f"unknown statistic {stat!r} in {text!r}; give mean or a percentile such as p50, p99.9")
    value = value.strip()
    try:
        relative = float(value.removesuffix("%")) / 100
    except ValueError:
        relative = math.nan
    if not value.endswith("%") or not 0 < relative < 1:
        raise ValueError(f"expected a half-width between 0% and 100% such as 5%, got {value!r} in {text!r}")
    return Spec(f"{metric}.{stat}", Target(metric, q, relative), text)


def precision_rule(specs: Sequence[Spec], confidence: float) -> PrecisionRule:
    """The rule of a profile's ``precision`` targets at ``confidence``."""
    return PrecisionRule(tuple(s.target for s in specs), confidence)


def _pct(x: float) -> str:
    return f"{100 * x:.2g}%" if x < 0.1 else f"{100 * x:.1f}%"


class LevelWatch:
    """One level's records against its precision targets (see the module docstring).

    ``clock`` is the monotonic clock the records' times are on (``perf_counter_ns``)."""

    def __init__(
        self,
        specs: Sequence[Spec],
        confidence: float = 0.95,
        min_duration_s: float = 0.0,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.specs = list(specs)
        self.rule = precision_rule(self.specs, confidence)
        self.min_ns = int(min_duration_s * 1e9)
        self._clock = clock
        # the targets' metrics by --precision spelling (parse_target found each)
        self._metrics: dict[str, Metric] = {
            s.target.metric: m for s in self.specs if (m := by_precision(s.target.metric)) is not None
        }
        self._pending: list[RequestRecord] = []
        self._sent: list[npt.NDArray[np.int64]] = []
        self._values: dict[str, list[npt.NDArray[np.float64]]] = {name: [] for name in self._metrics}
        self._looks = self.rule.looks(1 << 62)
        self._next = next(self._looks)
        self._first_ns = 0  # the earliest send seen: the level's start, near enough
        self.measured = 0  # finished non-warm-up records
        self.looks = 0
        self.decision: Decision | None = None  # the last look's
        self.met = False  # a look found every target met after min_duration_s: the level ends

    def add(self, records: Iterable[RequestRecord]) -> bool:
        """Take finished records; True once, when the level should end now."""
        for rec in records:
            t = rec.scheduled_ns or rec.sent_ns
            if t and (not self._first_ns or t < self._first_ns):
                self._first_ns = t
            if not rec.warmup:
                self.measured += 1
                self._pending.append(rec)
        if len(self._pending) >= BLOCK:
            self._frame()
        if self.met or self.measured < self._next:
            return False
        self.decision = self._look()
        while self._next <= self.measured:
            self._next = next(self._looks)
        self.met = self.decision.stop and self._clock() - self._first_ns >= self.min_ns
        return self.met

    def _frame(self) -> None:
        if not self._pending:
            return
        frame = per_request_frame(self._pending)
        self._pending.clear()
        ok = frame["ok"].to_numpy(dtype=bool)
        self._sent.append(frame["sent_ns"].to_numpy(dtype=np.int64)[ok])
        for name, m in self._metrics.items():
            self._values[name].append(per_request(m, frame)[ok])

    def _look(self) -> Decision:
        self._frame()
        self.looks += 1
        order = np.argsort(np.concatenate(self._sent), kind="stable") if self._sent else np.zeros(0, np.int64)
        series = {}
        for s in self.specs:
            x = np.concatenate(self._values[s.target.metric])[order] if self._sent else np.zeros(0)
            series[s.target.metric] = x[~np.isnan(x)]
        return self.rule.check(self.looks, series)

    def _miss(self, spec: Spec, iv: Interval) -> str | None:
        """How ``spec`` missed its target at the interval ``iv`` (None: it met it)."""
        want = _pct(spec.target.relative)
        hw = iv.half_width
        if iv.n == 0:
            return f"{spec.label}: no values"
        if hw is None or not iv.point > 0:
            q = spec.target.q
            if iv.reason is not None and iv.reason.startswith(REFUSED):
                return f"{spec.label} not bounded ({iv.reason})"
            need = f" (needs n_eff >= {needed_n_eff(q, iv.confidence)}, has {iv.n_eff:.0f})" if q is not None else ""
            return f"{spec.label} not bounded{need}"
        rel = hw / iv.point
        return None if rel <= spec.target.relative else f"{spec.label} ±{_pct(rel)} > {want}"

    def _met(self, d: Decision) -> str:
        parts = []
        for s in self.specs:
            iv = d.intervals[s.target.name]
            hw = iv.half_width or 0.0
            parts.append(f"{s.label} ±{_pct(hw / iv.point)} <= {_pct(s.target.relative)}")
        return f"{', '.join(parts)} at {d.n:,} requests (look {d.look})"

    def reason(self, end: str) -> str:
        """Why the level stopped: ``precision met: …``, or ``END: `` (``max-duration``,
        ``requests``, ``interrupted``…) and each target it missed, by how much, at a last
        look over all its records."""
        if self.met and self.decision is not None:
            return f"precision met: {self._met(self.decision)}"
        d = self._look()
        misses = [m for s in self.specs if (m := self._miss(s, d.intervals[s.target.name])) is not None]
        if not misses:
            return f"{end}: precision met at the end: {self._met(d)}"
        return f"{end}: {'; '.join(misses)}"
