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
flight finish). From the third look on (and :data:`PROJECT_MIN` measured requests), each look
also projects the requests every unmet target needs at its measured ``n_eff / n``
(:meth:`~loadgen.metrics.sequential.PrecisionRule.project`); when one needs over
:data:`MARGIN` times what ``--max-duration`` allows at the measured rate (or ``--requests``),
the level ends early, after ``min_duration_s``, as ``precision not reachable: …``.
:meth:`LevelWatch.reason` says why the level stopped, for its summary (docs/metrics.md,
"Uncertainty": Run until precise).

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
from loadgen.metrics.results import LevelSummary
from loadgen.metrics.sequential import Decision, PrecisionRule, Projection, Target
from loadgen.metrics.uncertainty import REFUSED, Interval, needed_n_eff
from loadgen.numfmt import fmt_rel
from loadgen.records import RequestRecord

__all__ = [
    "BLOCK",
    "MARGIN",
    "PROJECT_LOOKS",
    "PROJECT_MIN",
    "LevelWatch",
    "Spec",
    "parse_target",
    "precision_rule",
    "trials_precision",
]

BLOCK = 256  # records framed at a time
PROJECT_LOOKS = 3  # looks before a projection may end a level (n_eff of the first ones is noise)
PROJECT_MIN = 450  # measured requests before a projection may end a level (the third look's)
MARGIN = 2.0  # a level ends early when a target needs more than this many times what its bounds allow
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


def trials_precision(specs: Sequence[Spec], level: LevelSummary) -> str | None:
    """With ``--trials`` (three or more), each target judged on the level's interval between
    trials (:func:`loadgen.metrics.trials.between_trials`), which needs no within-level
    correlation model: ``"between 5 trials: ttft.p99 ±6.2% <= 10% (met)"``; ``None``
    when no target's interval is between trials."""
    parts = []
    n = 0
    for s in specs:
        metric = by_precision(s.target.metric)
        stat = "mean" if s.target.q is None else f"p{100 * s.target.q:.10g}"
        if metric is None:
            continue
        try:
            dist = level.dist(metric.path)
        except KeyError:
            continue
        iv = (dist.intervals or {}).get(stat)
        if iv is None or iv.trials is None:
            parts.append(f"{s.label} not between trials (the pooled level's interval stands)")
            continue
        n = iv.trials
        rel = iv.relative_half_width(dist.stat(stat))
        if rel is None:
            parts.append(f"{s.label} not bounded")
            continue
        met = rel <= s.target.relative
        parts.append(
            f"{s.label} ±{fmt_rel(rel)} {'<=' if met else '>'} {fmt_rel(s.target.relative)} ({'met' if met else 'not met'})"
        )
    return None if n == 0 else f"between {n} trials: " + "; ".join(parts)


class LevelWatch:
    """One level's records against its precision targets (see the module docstring).

    ``clock`` is the monotonic clock the records' times are on (``perf_counter_ns``);
    ``max_duration_s`` and ``max_requests`` (measured) bound the level, None where unbounded:
    what a projection is held against."""

    def __init__(
        self,
        specs: Sequence[Spec],
        confidence: float = 0.95,
        min_duration_s: float = 0.0,
        clock: Callable[[], int] = time.perf_counter_ns,
        *,
        max_duration_s: float | None = None,
        max_requests: int | None = None,
    ) -> None:
        self.specs = list(specs)
        self.rule = precision_rule(self.specs, confidence)
        self.min_ns = int(min_duration_s * 1e9)
        self.max_ns = None if max_duration_s is None else int(max_duration_s * 1e9)
        self.max_requests = max_requests
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
        self._measured_ns = 0  # the earliest measured (not warm-up) send seen
        self.measured = 0  # finished non-warm-up records
        self.looks = 0
        self.decision: Decision | None = None  # the last look's
        self.met = False  # a look found every target met after min_duration_s: the level ends
        self.unreachable: str | None = None  # a look projected a target out of reach: why (the level ends)

    def add(self, records: Iterable[RequestRecord]) -> bool:
        """Take finished records; True once, when the level should end now."""
        for rec in records:
            t = rec.scheduled_ns or rec.sent_ns
            if t and (not self._first_ns or t < self._first_ns):
                self._first_ns = t
            if not rec.warmup:
                if t and (not self._measured_ns or t < self._measured_ns):
                    self._measured_ns = t
                self.measured += 1
                self._pending.append(rec)
        if len(self._pending) >= BLOCK:
            self._frame()
        if self.met or self.unreachable is not None or self.measured < self._next:
            return False
        self.decision = self._look()
        while self._next <= self.measured:
            self._next = next(self._looks)
        lasted = self._clock() - self._first_ns >= self.min_ns
        if self.decision.stop:
            self.met = lasted
            return self.met
        if lasted:
            self.unreachable = self._out_of_reach(self.decision)
        return self.unreachable is not None

    def _out_of_reach(self, d: Decision) -> str | None:
        """``precision not reachable: …`` when an unmet target's projection needs over
        :data:`MARGIN` times the requests the level's bounds allow (None otherwise, and
        before :data:`PROJECT_LOOKS` looks and :data:`PROJECT_MIN` requests)."""
        now = self._clock()
        measuring = now - self._measured_ns
        if self.looks < PROJECT_LOOKS or self.measured < PROJECT_MIN or measuring <= 0:
            return None
        bounds = []
        if self.max_ns is not None:  # those measured, and the measured rate over the time left
            left = max(0, self.max_ns - (now - self._first_ns))
            bounds.append((self.measured * (1 + left / measuring), "max-duration allows at the measured rate"))
        if self.max_requests is not None:
            bounds.append((float(self.max_requests), "--requests allows"))
        if not bounds:
            return None
        cap, allows = min(bounds)
        worst = self._worst(d)
        if worst is None or worst[0] <= MARGIN * cap:
            return None
        return (
            f"precision not reachable: {self._needs(d, *worst)}, more than {allows} (~{cap:,.0f}){self._why(worst[1])}"
        )

    def _worst(self, d: Decision) -> tuple[float, Projection] | None:
        """The unmet target that needs the most requests (those without a value too), and how many."""
        out = [(p.needed_n * self.measured / p.n, p) for p in self.rule.project(d)]
        return max(out, key=lambda t: t[0]) if out else None

    def _needs(self, d: Decision, need: float, p: Projection) -> str:
        spec = next(s for s in self.specs if s.target == p.target)
        at = "at least " if p.floor else ""
        return (
            f"{spec.label} ±{spec.text.partition('=')[2].strip()} needs {at}~{need:,.0f} requests "
            f"(n_eff/n = {p.ratio:.2g} at {d.n:,}, look {d.look})"
        )

    @staticmethod
    def _why(p: Projection) -> str:
        if p.refused:
            return "; correlation spans the level — use --trials"
        if p.ratio < 0.1:
            return f"; correlation too long (τ ≈ {1 / p.ratio:,.0f} requests) — use --trials"
        return ""

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
        """Why the level stopped: ``precision met: …``, ``precision not reachable: …``, or ``END: `` (``max-duration``,
        ``requests``, ``interrupted``…) and each target it missed, by how much, at a last
        look over all its records."""
        if self.met and self.decision is not None:
            return f"precision met: {self._met(self.decision)}"
        if self.unreachable is not None:
            return self.unreachable
        d = self._look()
        misses = [m for s in self.specs if (m := self._miss(s, d.intervals[s.target.name])) is not None]
        if not misses:
            return f"{end}: precision met at the end: {self._met(d)}"
        worst = self._worst(d) if d.n else None
        needs = "" if worst is None else f"; {self._needs(d, *worst)}{self._why(worst[1])}"
        return f"{end}: {'; '.join(misses)}{needs}"
