"""Bootstrap intervals of a difference between two runs, and the verdict on one.

Three kinds of statistic, each with its own exact, vectorised, seeded bootstrap:
quantiles (:func:`quantile_difference`, drawn by order statistics on ``n_eff`` values per
run, or on ``n`` with ``independent=True``), proportions (:func:`proportion_difference`,
``Binomial(n_eff, p)``) and rates over a window (:func:`rate_difference` over
:func:`block_rates`, a block bootstrap over time). Each :class:`Difference` names its
``method`` (:data:`METHOD_NEFF`, :data:`METHOD_IID`, :data:`METHOD_BLOCKS`, or
:data:`METHOD_WELCH` between repeated trials). The interval is the percentile interval of the
resampled differences; the verdict (:func:`verdict`) follows from that interval alone:
``better``/``worse`` when it excludes zero (unless all of it lies within ``min_effect`` of the
baseline), "no significant change" when it contains zero within :data:`EQUIVALENCE` of the
baseline, else "inconclusive" (with :func:`tail_evidence` for a tail statistic).

The derivations, the references and the measured behaviour: docs/metrics.md, "Comparing
runs". Pure numpy, no I/O; :mod:`loadgen.metrics.compare` applies these to two runs' levels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from loadgen.metrics.level_intervals import MAX_SERIES, time_ordered
from loadgen.metrics.uncertainty import quantile_effective_size

__all__ = [
    "BETTER",
    "DEFAULT_RESAMPLES",
    "EQUIVALENCE",
    "INCONCLUSIVE",
    "METHOD_BLOCKS",
    "METHOD_IID",
    "METHOD_NEFF",
    "METHOD_WELCH",
    "NOT_AVAILABLE",
    "NO_CHANGE",
    "WORSE",
    "Difference",
    "block_rates",
    "bootstrap_quantile",
    "effective_size",
    "proportion_difference",
    "quantile_difference",
    "rate_difference",
    "verdict",
]

BETTER = "better"
WORSE = "worse"
NO_CHANGE = "no significant change"
INCONCLUSIVE = "inconclusive"
NOT_AVAILABLE = "n/a"
# an interval containing 0 says "no significant change" only when it also rules out a
# change larger than this share of the baseline; a wider one is "inconclusive"
EQUIVALENCE = 0.10
METHOD_NEFF = "bootstrap on n_eff (send order)"
METHOD_IID = "i.i.d. bootstrap"
METHOD_BLOCKS = "block bootstrap over time"
METHOD_WELCH = "Welch over trials"

F64 = npt.NDArray[np.float64]
DEFAULT_RESAMPLES = 2000


@dataclass(frozen=True, slots=True)
class Difference:
    """Run ``b`` against run ``a`` for one statistic.

    ``diff = b - a``; ``rel = diff / a`` (None when ``a`` is 0 or missing); ``ci`` the
    confidence interval of ``diff`` at ``confidence``; ``verdict`` one of ``better``,
    ``worse``, ``no significant change``, ``inconclusive`` or ``n/a`` (a side has no
    data); ``note`` says what limits it (e.g. too few samples in a tail); ``method``
    how the interval was made (one of the ``METHOD_*`` names).
    """

    a: float | None
    b: float | None
    diff: float | None
    rel: float | None
    ci: tuple[float, float] | None
    verdict: str
    confidence: float = 0.95
    note: str = ""
    method: str = ""


def verdict(
    ci: tuple[float, float] | None,
    higher_is_better: bool,
    *,
    min_effect: float = 0.0,
    base: float | None = None,
    margin: float = EQUIVALENCE,
) -> str:
    """The category of an interval ``ci`` of ``b - a``, from the interval alone:

    - ``better``/``worse``: the interval excludes 0 (the direction from
      ``higher_is_better``), unless all of it lies within ``min_effect`` of the baseline
      ``base`` either side (a resolved change too small to matter: ``no significant change``);
    - ``no significant change``: the interval contains 0 and stays within ``margin`` of
      ``base`` either side (a larger change is ruled out);
    - ``inconclusive``: the interval contains 0 but reaches beyond ``margin`` of ``base``
      (the data allow a large change either way: not evidence of none);
    - ``n/a`` without an interval.

    Without ``base`` an interval containing 0 is "no significant change" and ``min_effect``
    does not apply. The point estimate never decides a category."""
    if ci is None:
        return NOT_AVAILABLE
    lo, hi = ci
    reach = max(abs(lo), abs(hi))
    scale = abs(base) if base is not None and base != 0 else None
    if lo > 0 or hi < 0:
        if min_effect > 0 and scale is not None and reach < min_effect * scale:
            return NO_CHANGE
        if lo > 0:
            return BETTER if higher_is_better else WORSE
        return WORSE if higher_is_better else BETTER
    if scale is not None and reach > margin * scale:
        return INCONCLUSIVE
    return NO_CHANGE


def _clean(values: npt.ArrayLike) -> F64:
    arr = np.asarray(values, dtype=np.float64).ravel()
    return arr[~np.isnan(arr)]


def bootstrap_quantile(
    sorted_x: F64, q: float, resamples: int, rng: np.random.Generator, size: int | None = None
) -> F64:
    """``resamples`` draws of ``numpy.percentile(resample, 100 * q)`` where each resample
    is ``size`` values (default ``len(sorted_x)``; at least 1) drawn with replacement from
    ``sorted_x`` (sorted, no NaN).

    Exact (see the module docstring), O(``resamples``) whatever the sample size.
    """
    n = sorted_x.size
    if n == 0:
        raise ValueError("bootstrap_quantile needs at least one value")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be within [0, 1], got {q!r}")
    m = n if size is None else max(1, size)
    h = (m - 1) * q
    lo = math.floor(h)
    frac = h - lo
    # the (lo+1)-th smallest of m uniforms, then the next one above it
    u_lo = rng.beta(lo + 1, m - lo, size=resamples)
    idx_lo = np.minimum((u_lo * n).astype(np.int64), n - 1)
    y_lo = sorted_x[idx_lo]
    if frac == 0.0 or lo + 1 >= m:
        return np.asarray(y_lo, dtype=np.float64)
    u_hi = u_lo + (1.0 - u_lo) * rng.beta(1, m - lo - 1, size=resamples)
    idx_hi = np.minimum((u_hi * n).astype(np.int64), n - 1)
    y_hi = sorted_x[idx_hi]
    return np.asarray(y_lo + frac * (y_hi - y_lo), dtype=np.float64)


def _interval(draws: F64, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(draws, [tail, 100.0 - tail])
    return float(lo), float(hi)


def _result(
    a: float | None,
    b: float | None,
    draws: F64 | None,
    higher_is_better: bool,
    confidence: float,
    min_effect: float,
    method: str = "",
) -> Difference:
    if a is None or b is None or draws is None:
        return Difference(a, b, None, None, None, NOT_AVAILABLE, confidence, method=method)
    diff = b - a
    rel = diff / a if a != 0 else None
    ci = _interval(draws, confidence)
    judged = verdict(ci, higher_is_better, min_effect=min_effect, base=a)
    return Difference(a, b, diff, rel, ci, judged, confidence, method=method)


def _check(confidence: float, resamples: int, min_effect: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be within (0, 1), got {confidence!r}")
    if resamples < 10:
        raise ValueError(f"resamples must be >= 10, got {resamples!r}")
    if not min_effect >= 0.0:
        raise ValueError(f"min_effect must be >= 0, got {min_effect!r}")


def effective_size(values_in_time_order: F64, q: float) -> float:
    """``n_eff`` of a run's series (in time order, no NaN) for the ``q``-quantile, at the
    summaries' bounded cost: beyond :data:`~loadgen.metrics.level_intervals.MAX_SERIES`
    values (ITL has one per token) it is that of every ``ceil(n / MAX_SERIES)``-th value
    (:func:`~loadgen.metrics.level_intervals.time_ordered`'s thinning, blind to the values).
    A thinned series carries less information, so that ``n_eff`` is at most the whole
    series' (equal when the correlation spans more than the step): the interval is wider,
    never narrower. The median's cap of the summaries' intervals is left out (a tail's
    difference is judged by the tails' own exceedances: docs/metrics.md, "Comparing runs")."""
    if values_in_time_order.size > MAX_SERIES:  # already in time order: positions are the times
        values_in_time_order, _ = time_ordered(values_in_time_order, np.arange(values_in_time_order.size))
    return quantile_effective_size(values_in_time_order, q, median_cap=False)


def quantile_difference(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    q: float,
    *,
    higher_is_better: bool = False,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    min_effect: float = 0.0,
    min_tail: int = 5,
    independent: bool = False,
    n_eff: tuple[float | None, float | None] = (None, None),
) -> Difference:
    """The ``q``-quantile (0.5: median, 0.99: p99) of samples ``b`` minus that of ``a``,
    each run's samples **in time order** (send order; ITL: arrival order).

    Point values are ``numpy.percentile(x, 100 * q)`` (as the summaries report them);
    NaN samples are dropped; an empty side gives verdict ``n/a``. Latency: lower is
    better (the default). Each run is resampled on its ``n_eff`` for this quantile (see
    the module docstring; :func:`effective_size`); ``independent=True`` resamples all
    ``n`` values as if they were independent (the i.i.d. bootstrap). ``n_eff`` gives a
    side's ``n_eff`` for this quantile where it is known already (a level summary's
    interval carries it), so it is not computed again (then that side's order does not
    matter). When a side has fewer than ``min_tail``
    samples beyond the quantile (``n * min(q, 1 - q)``; p99 of 100 samples has one), the
    bootstrap cannot rule a change out: an interval containing 0 (or a resolved change under
    ``min_effect``) is "inconclusive", never "no significant change"; an interval that
    excludes 0 keeps its verdict. Either way a ``note`` says so.
    """
    _check(confidence, resamples, min_effect)
    ta, tb = _clean(a), _clean(b)
    xa, xb = np.sort(ta), np.sort(tb)
    method = METHOD_IID if independent else METHOD_NEFF
    if xa.size == 0 or xb.size == 0:
        va = float(np.percentile(xa, 100 * q)) if xa.size else None
        vb = float(np.percentile(xb, 100 * q)) if xb.size else None
        return _result(va, vb, None, higher_is_better, confidence, min_effect, method)
    if independent:
        ma, mb = xa.size, xb.size
    else:
        ma, mb = (
            math.floor((effective_size(t, q) if known is None else min(known, t.size)) + 1e-9)
            for t, known in zip((ta, tb), n_eff)
        )
    rng = np.random.default_rng(seed)
    draws = bootstrap_quantile(xb, q, resamples, rng, mb) - bootstrap_quantile(xa, q, resamples, rng, ma)
    va, vb = float(np.percentile(xa, 100 * q)), float(np.percentile(xb, 100 * q))
    result = _result(va, vb, draws, higher_is_better, confidence, min_effect, method)
    tail = min(xa.size, xb.size) * min(q, 1.0 - q)
    if tail < min_tail and result.verdict in (NO_CHANGE, INCONCLUSIVE):
        note = f"too few samples beyond p{100 * q:g} to rule out a change (fewer than {min_tail})"
        return replace(result, verdict=INCONCLUSIVE, note=note)
    if tail < min_tail:  # the interval excludes 0: it decides, but says how thin the tail is
        return replace(result, note=f"fewer than {min_tail} samples beyond p{100 * q:g}")
    return result


def proportion_difference(
    a: tuple[float, float | None],
    b: tuple[float, float | None],
    *,
    scale_a: float = 1.0,
    scale_b: float = 1.0,
    higher_is_better: bool = True,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    min_effect: float = 0.0,
) -> Difference:
    """``(n, p)`` per run: ``n`` requests (or the ``n_eff`` of their success series in send
    order, a float) of which a fraction ``p`` succeeded. The statistic is ``p * scale``
    (``scale = 1``: attainment); resampled as ``Binomial(m, p) / m * scale`` with
    ``m = max(1, floor(n))``."""
    _check(confidence, resamples, min_effect)
    (na, pa), (nb, pb) = a, b
    if not na or not nb or pa is None or pb is None:
        va = None if pa is None or not na else pa * scale_a
        vb = None if pb is None or not nb else pb * scale_b
        return _result(va, vb, None, higher_is_better, confidence, min_effect, METHOD_NEFF)
    ma, mb = max(1, math.floor(na + 1e-9)), max(1, math.floor(nb + 1e-9))
    rng = np.random.default_rng(seed)
    da = rng.binomial(ma, min(max(pa, 0.0), 1.0), size=resamples) / ma * scale_a
    db = rng.binomial(mb, min(max(pb, 0.0), 1.0), size=resamples) / mb * scale_b
    draws = np.asarray(db - da, dtype=np.float64)
    return _result(pa * scale_a, pb * scale_b, draws, higher_is_better, confidence, min_effect, METHOD_NEFF)


def block_rates(
    times_ns: npt.ArrayLike,
    window_ns: tuple[int, int],
    n_blocks: int = 20,
    weights: npt.ArrayLike | None = None,
) -> F64:
    """Rates (per second) in ``n_blocks`` equal time blocks of ``window_ns``: the count
    (or the sum of ``weights``) of the ``times_ns`` falling in each block over its
    length. Times outside the window are clipped into the first or last block, so the
    mean of the rates is the total over the window's length."""
    start, end = window_ns
    if n_blocks < 1:
        raise ValueError(f"n_blocks must be >= 1, got {n_blocks!r}")
    span = end - start
    if span <= 0:
        return np.zeros(0, dtype=np.float64)
    t = np.asarray(times_ns, dtype=np.int64)
    ids = np.clip((t - start) * n_blocks // span, 0, n_blocks - 1)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    sums = np.bincount(ids, weights=w, minlength=n_blocks).astype(np.float64)
    return np.asarray(sums / (span / 1e9 / n_blocks), dtype=np.float64)


def rate_difference(
    a: Sequence[float] | F64,
    b: Sequence[float] | F64,
    *,
    higher_is_better: bool = True,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    min_effect: float = 0.0,
) -> Difference:
    """Mean of the block rates of ``b`` minus that of ``a`` (see :func:`block_rates`),
    the blocks resampled with replacement. Throughput: higher is better (the default)."""
    _check(confidence, resamples, min_effect)
    ra, rb = _clean(a), _clean(b)
    if ra.size == 0 or rb.size == 0:
        va = float(ra.mean()) if ra.size else None
        vb = float(rb.mean()) if rb.size else None
        return _result(va, vb, None, higher_is_better, confidence, min_effect, METHOD_BLOCKS)
    rng = np.random.default_rng(seed)
    ma = ra[rng.integers(0, ra.size, size=(resamples, ra.size))].mean(axis=1)
    mb = rb[rng.integers(0, rb.size, size=(resamples, rb.size))].mean(axis=1)
    return _result(
        float(ra.mean()),
        float(rb.mean()),
        np.asarray(mb - ma, dtype=np.float64),
        higher_is_better,
        confidence,
        min_effect,
        METHOD_BLOCKS,
    )
