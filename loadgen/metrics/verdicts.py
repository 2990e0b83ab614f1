"""Per-level verdicts on the time-ordered requests: steady state and MLPerf early stopping.

- :func:`steady_state_of`: the MSER-5 warm-up cut (:mod:`loadgen.metrics.steady`) on the
  ok requests' TTFT and E2E in send order, then the trend tests after it, or on the whole
  level where MSER-5 found no steady state (a queue that keeps filling is no warm-up); a
  significant *rise* (of at least :data:`MIN_RISE`) in either makes the level non-stationary.
- :func:`auto_cut`: the same cut applied as warm-up (only with ``auto_warmup = true``).
- :func:`mlperf_of`: per per-request latency SLO, MLPerf LoadGen's early-stopping verdict
  (:func:`~loadgen.metrics.mlperf.early_stopping_verdict`) at the profile's percentile
  and confidence.

The results are plain frozen dataclasses that :class:`~loadgen.metrics.results.LevelSummary`
carries as ``steady_state`` and ``mlperf``. The rules (which cut, which queries count):
docs/metrics.md, "Steady state and MLPerf verdicts (per level)".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.metrics.catalog import Metric, per_request
from loadgen.metrics.mlperf import early_stopping_failed, early_stopping_verdict
from loadgen.metrics.steady import mser5_truncation, stationarity
from loadgen.records import RequestRecord

__all__ = [
    "MIN_RISE",
    "MlperfCheck",
    "SteadyState",
    "Trend",
    "auto_cut",
    "level_verdicts",
    "mlperf_of",
    "steady_state_of",
]

MIN_RISE = 0.2
"""The fitted rise across a level (over its mean) that, significant, makes it non-stationary;
the knee's latency growth between levels defaults to the same 20%."""


@dataclass(frozen=True, slots=True)
class Trend:
    """One series' trend test: ``metric`` (a per-request column, e.g. ``"ttft_queued_ms"``),
    ``drift`` (fitted change across the level over its mean; 0.2 = rose 20%), the slope's
    ``t`` against ``critical`` (``None`` for an infinite value: a perfectly straight line, or a
    zero mean), the ``batches`` used (0: too short to test) and ``reason``; ``low_drift`` and
    ``low_t`` the same for the batches' 10th percentiles, ``spread_drift``, ``spread_t`` and
    ``spread_critical`` for the spread between consecutive requests
    (:func:`~loadgen.metrics.steady.stationarity`)."""

    metric: str
    stationary: bool
    drift: float | None
    t: float | None
    critical: float
    batches: int
    reason: str | None = None
    spread_drift: float | None = None
    spread_t: float | None = None
    spread_critical: float | None = None
    low_drift: float | None = None
    low_t: float | None = None


@dataclass(frozen=True, slots=True)
class SteadyState:
    """A level's steady state: MSER-5's warm-up cut (``warmup_cut`` requests of the level,
    in send order; ``warmup_applied`` when the statistics exclude them), whether MSER-5 found
    a steady state at all (``warmup_found``), the trend tests of TTFT and E2E after the cut,
    and the overall ``stationary`` verdict with its ``reasons``."""

    warmup_cut: int
    warmup_applied: bool
    warmup_found: bool
    stationary: bool
    ttft: Trend
    e2e: Trend
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class MlperfCheck:
    """MLPerf LoadGen's early-stopping verdict for one per-request SLO: ``passed`` when the
    level's ``n`` queries reach ``min_queries`` (those needed at ``percentile`` and
    ``confidence`` with ``overlatency`` queries over ``bound_ms``); ``estimate_ms`` is the
    early-stopping estimate of the percentile (``None`` when too few queries)."""

    @property
    def outcome(self) -> str:
        """``"met"`` (``passed``), ``"failed"`` (the overlatency queries show the percentile
        above the bound: :func:`~loadgen.metrics.mlperf.early_stopping_failed`) or
        ``"undecided"`` (too few queries to say either)."""
        if self.passed:
            return "met"
        failed = early_stopping_failed(self.n, self.overlatency, self.percentile, self.confidence)
        return "failed" if failed else "undecided"

    slo: str
    metric: str
    bound_ms: float
    percentile: float
    confidence: float
    passed: bool
    n: int
    overlatency: int
    min_queries: int
    more_needed: int
    estimate_ms: float | None


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _series(frame: pd.DataFrame, ok: npt.NDArray[np.bool_], open_loop: bool) -> dict[str, npt.NDArray[np.float64]]:
    """The ok requests' TTFT and E2E in send order (NaN TTFTs left out)."""
    okf = frame[ok]
    order = np.argsort(okf["sent_ns"].to_numpy(), kind="stable")
    out = {}
    for name in ("ttft", "e2e"):
        col = f"{name}_queued_ms" if open_loop else f"{name}_ms"
        x = okf[col].to_numpy(dtype=np.float64)[order]
        out[col] = x[~np.isnan(x)]
    return out


def _cut_time(frame: pd.DataFrame, ok: npt.NDArray[np.bool_], open_loop: bool) -> tuple[int | None, bool]:
    """The send time before which MSER-5 cuts (``None``: no cut) and whether it found a steady state."""
    okf = frame[ok]
    sent = np.sort(okf["sent_ns"].to_numpy())
    cut, found = 0, True
    for x in _series(frame, ok, open_loop).values():
        tr = mser5_truncation(x)
        found &= tr.steady
        cut = max(cut, tr.half_cut)  # a best cut in the second half is MSER's end effect as often as not
    if cut == 0 or cut >= sent.size:
        return None, found
    return int(sent[cut]), found


def steady_state_of(
    frame: pd.DataFrame,
    ok: npt.NDArray[np.bool_],
    *,
    open_loop: bool,
    applied: int | None = None,
    whole: pd.DataFrame | None = None,
) -> SteadyState:
    """The level's :class:`SteadyState`. ``applied`` is the number of requests
    :func:`auto_cut` already removed from ``frame`` (``None``: no cut applied; the cut is
    found and recorded here), and ``whole`` the level's frame before that cut (``None``:
    ``frame``). Where MSER-5 found a steady state the trend tests run after its cut (a
    closed loop's first requests meet an empty server); where it found none, on the whole
    level: a queue that keeps filling is no warm-up, and cutting up to half of it would
    remove half the evidence."""
    base = frame if whole is None else whole
    base_ok = ok if whole is None else whole["ok"].to_numpy(dtype=bool)
    t_cut, found = _cut_time(base, base_ok, open_loop)
    n_cut = applied or 0
    if applied is None and t_cut is not None:
        sent = frame["sent_ns"].to_numpy()
        n_cut = int(((sent < t_cut) & (sent != 0)).sum())  # never sent: not before the cut
    tested = np.ones(len(base), dtype=bool)
    if found and t_cut is not None and not (applied is not None and whole is None):  # not cut twice
        sent = base["sent_ns"].to_numpy()
        tested = (sent >= t_cut) | (sent == 0)
    series = _series(base[tested], base_ok[tested], open_loop)
    trends, reasons = [], []
    for col, x in series.items():
        st = stationarity(x, min_drift=MIN_RISE)
        trends.append(
            Trend(
                col,
                st.stationary,
                _finite(st.drift),
                _finite(st.t),
                st.critical,
                st.batches,
                st.reason,
                _finite(st.spread_drift),
                _finite(st.spread_t),
                st.spread_critical,
                _finite(st.low_drift),
                _finite(st.low_t),
            )
        )
        rises = (
            (st.t > st.critical and st.drift > MIN_RISE)
            or (st.low_t > st.critical and st.low_drift > MIN_RISE)
            or (st.spread_t > st.spread_critical and st.spread_drift > MIN_RISE)
        )
        if rises and st.reason:
            reasons.append(f"{col}: {st.reason}")
    return SteadyState(
        warmup_cut=n_cut,
        warmup_applied=applied is not None,
        warmup_found=found,
        stationary=not reasons,
        ttft=trends[0],
        e2e=trends[1],
        reasons=reasons,
    )


def auto_cut(
    records: Sequence[RequestRecord], frame: pd.DataFrame, *, open_loop: bool
) -> tuple[list[RequestRecord], int]:
    """``records`` with the measured ones sent before MSER-5's cut marked warm-up (copies;
    the caller's records are untouched), and how many were marked; nothing is cut when
    MSER-5 found no steady state. ``frame`` is the per-request frame of the measured records."""
    t_cut, _ = _cut_time(frame, frame["ok"].to_numpy(dtype=bool), open_loop)
    if t_cut is None:
        return list(records), 0
    out, n = [], 0
    for r in records:
        if not r.warmup and 0 < r.sent_ns < t_cut:
            out.append(dataclasses.replace(r, warmup=True))
            n += 1
        else:
            out.append(r)
    return out, n


def mlperf_of(
    frame: pd.DataFrame, slos: Sequence[tuple[str, Metric, float]], percentile: float, confidence: float
) -> list[MlperfCheck]:
    """One :class:`MlperfCheck` per ``(slo text, metric, bound in ms)``
    (:func:`~loadgen.metrics.slo.mlperf_bounds`)."""
    ok = frame["ok"].to_numpy(dtype=bool)
    out = []
    for text, metric, bound in slos:
        x = per_request(metric, frame).copy()
        missing = np.isnan(x) & ok
        x[~ok] = np.inf
        if metric.vacuous:  # too few tokens: nothing to measure
            x = x[~missing]
        else:
            x[missing] = np.inf
        es = early_stopping_verdict(x, bound, percentile, confidence)
        out.append(
            MlperfCheck(
                slo=text,
                metric=metric.column or metric.name,
                bound_ms=bound,
                percentile=percentile,
                confidence=confidence,
                passed=es.passed,
                n=es.n,
                overlatency=es.overlatency,
                min_queries=es.min_queries,
                more_needed=es.more_needed,
                estimate_ms=es.estimate,
            )
        )
    return out


def level_verdicts(
    frame: pd.DataFrame,
    ok: npt.NDArray[np.bool_],
    bounds: Sequence[tuple[str, Metric, float]],
    open_loop: bool,
    cut: int | None,
    mlperf: tuple[float, float],
    attained: npt.NDArray[np.bool_],
    whole: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """The ``steady_state`` and ``mlperf`` fields of a level summary (``mlperf`` ``None``
    without a per-request SLO, ``bounds`` as :func:`mlperf_of` takes them); ``cut`` is what
    :func:`auto_cut` removed (0 or ``None``: nothing), ``whole`` the frame before it (the trend
    tests' series where MSER-5 found no steady state) and ``attained`` which requests met every SLO."""
    return {
        "steady_state": steady_state_of(frame, ok, open_loop=open_loop, applied=cut or None, whole=whole),
        "mlperf": mlperf_of(frame, bounds, *mlperf) if bounds else None,
    }
