"""Is a difference between two runs real or noise? Bootstrap confidence intervals and verdicts.

Three kinds of statistic, each with its own (exact, vectorised, seeded) bootstrap:

- **Quantiles** of per-request or per-token samples (median, p99 of TTFT, ITL, ...):
  :func:`quantile_difference`. Resampling ``n`` values with replacement from sorted data
  ``x`` and taking the ``k``-th smallest gives ``x[floor(n * U)]`` where ``U`` is the
  ``k``-th smallest of ``n`` uniforms, i.e. ``U ~ Beta(k, n - k + 1)``; the next order
  statistic is ``U + (1 - U) * Beta(1, n - k)``. So the bootstrap distribution of
  numpy's (linearly interpolated) percentile is drawn exactly in O(resamples) after one
  sort, whatever the sample size. Per-token samples (ITL) are treated as independent.
- **Proportions** (SLO attainment, and goodput = attained / window): resampling ``n``
  requests of which a fraction ``p`` attained gives ``Binomial(n, p) / n``:
  :func:`proportion_difference`.
- **Rates over a window** (output tokens/s, requests/s): the window is cut into equal
  time blocks; the rate is the mean of the block rates and the blocks are resampled:
  :func:`rate_difference` with :func:`block_rates`.

The interval is the percentile interval of the resampled differences ``b - a`` (each run
resampled independently). The verdict says ``better``/``worse`` only when the interval
excludes zero and the difference is at least ``min_effect`` of the baseline (default 0:
any; the comparison page uses 2%, below the run-to-run noise of a benchmark, which one
run's resampling cannot see); the direction depends on whether higher is better. An
interval that contains zero is "no significant change" only when it also rules out a
change over :data:`EQUIVALENCE` (10%) of the baseline; a wider one is "inconclusive" (the
data allow a large change either way), and for a tail statistic (p99, p99.9) the row's
note adds what the requests themselves show (:func:`tail_evidence`). Pure numpy, no I/O.

:func:`compare_level` applies all three to every metric of two runs' levels (the rows
of the comparison page); :func:`common_levels` pairs the levels two runs share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.errors import ConfigError
from loadgen.metrics.per_request import EventArrays
from loadgen.metrics.results import LevelSummary, RunSummary
from loadgen.metrics.slo import parse_slo, slo_attainment
from loadgen.metrics.summary import level_window_ns
from loadgen.metrics.trials import TRIAL_METRICS, welch_interval

__all__ = [
    "BETTER",
    "EQUIVALENCE",
    "INCONCLUSIVE",
    "METRICS",
    "MIN_EFFECT",
    "NOT_AVAILABLE",
    "NO_CHANGE",
    "WORSE",
    "Difference",
    "LevelSamples",
    "Row",
    "block_rates",
    "bootstrap_quantile",
    "by_verdict",
    "common_levels",
    "compare_level",
    "proportion_difference",
    "quantile_difference",
    "rate_difference",
    "tail_evidence",
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

F64 = npt.NDArray[np.float64]
DEFAULT_RESAMPLES = 2000


@dataclass(frozen=True, slots=True)
class Difference:
    """Run ``b`` against run ``a`` for one statistic.

    ``diff = b - a``; ``rel = diff / a`` (None when ``a`` is 0 or missing); ``ci`` the
    confidence interval of ``diff`` at ``confidence``; ``verdict`` one of ``better``,
    ``worse``, ``no significant change`` or ``n/a`` (a side has no data); ``note``
    says why a difference was not judged (e.g. too few samples in a tail).
    """

    a: float | None
    b: float | None
    diff: float | None
    rel: float | None
    ci: tuple[float, float] | None
    verdict: str
    confidence: float = 0.95
    note: str = ""


def verdict(
    ci: tuple[float, float] | None,
    higher_is_better: bool,
    *,
    rel: float | None = None,
    min_effect: float = 0.0,
    base: float | None = None,
    margin: float = EQUIVALENCE,
) -> str:
    """The verdict on an interval ``ci`` of ``b - a``:

    - ``better``/``worse``: the interval excludes 0 and the relative difference ``rel``
      is at least ``min_effect`` in size (when both are given);
    - ``no significant change``: the interval excludes 0 but the change is under
      ``min_effect``, or it contains 0 and stays within ``margin`` of the baseline
      ``base`` either side (a larger change is ruled out);
    - ``inconclusive``: the interval contains 0 but reaches beyond ``margin`` of
      ``base`` (the data allow a large change either way: not evidence of none);
    - ``n/a`` without an interval.

    Without ``base`` an interval containing 0 is "no significant change"."""
    if ci is None:
        return NOT_AVAILABLE
    lo, hi = ci
    if lo > 0 or hi < 0:
        if min_effect > 0 and rel is not None and abs(rel) < min_effect:
            return NO_CHANGE
        if lo > 0:
            return BETTER if higher_is_better else WORSE
        return WORSE if higher_is_better else BETTER
    if base is not None and base != 0 and max(-lo, hi) > margin * abs(base):
        return INCONCLUSIVE
    return NO_CHANGE


def _clean(values: npt.ArrayLike) -> F64:
    arr = np.asarray(values, dtype=np.float64).ravel()
    return arr[~np.isnan(arr)]


def bootstrap_quantile(sorted_x: F64, q: float, resamples: int, rng: np.random.Generator) -> F64:
    """``resamples`` draws of ``numpy.percentile(resample, 100 * q)`` where each resample
    is ``len(sorted_x)`` values drawn with replacement from ``sorted_x`` (sorted, no NaN).

    Exact (see the module docstring), O(``resamples``) whatever the sample size.
    """
    n = sorted_x.size
    if n == 0:
        raise ValueError("bootstrap_quantile needs at least one value")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be within [0, 1], got {q!r}")
    h = (n - 1) * q
    lo = math.floor(h)
    frac = h - lo
    # the (lo+1)-th smallest of n uniforms, then the next one above it
    u_lo = rng.beta(lo + 1, n - lo, size=resamples)
    idx_lo = np.minimum((u_lo * n).astype(np.int64), n - 1)
    y_lo = sorted_x[idx_lo]
    if frac == 0.0 or lo + 1 >= n:
        return np.asarray(y_lo, dtype=np.float64)
    u_hi = u_lo + (1.0 - u_lo) * rng.beta(1, n - lo - 1, size=resamples)
    idx_hi = np.minimum((u_hi * n).astype(np.int64), n - 1)
    y_hi = sorted_x[idx_hi]
    return np.asarray(y_lo + frac * (y_hi - y_lo), dtype=np.float64)


def _interval(draws: F64, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(draws, [tail, 100.0 - tail])
    return float(lo), float(hi)


def _result(
    a: float | None, b: float | None, draws: F64 | None, higher_is_better: bool, confidence: float, min_effect: float
) -> Difference:
    if a is None or b is None or draws is None:
        return Difference(a, b, None, None, None, NOT_AVAILABLE, confidence)
    diff = b - a
    rel = diff / a if a != 0 else None
    ci = _interval(draws, confidence)
    return Difference(
        a, b, diff, rel, ci, verdict(ci, higher_is_better, rel=rel, min_effect=min_effect, base=a), confidence
    )


def _check(confidence: float, resamples: int, min_effect: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be within (0, 1), got {confidence!r}")
    if resamples < 10:
        raise ValueError(f"resamples must be >= 10, got {resamples!r}")
    if not min_effect >= 0.0:
        raise ValueError(f"min_effect must be >= 0, got {min_effect!r}")


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
) -> Difference:
    """The ``q``-quantile (0.5: median, 0.99: p99) of samples ``b`` minus that of ``a``.

    Point values are ``numpy.percentile(x, 100 * q)`` (as the summaries report them);
    NaN samples are dropped; an empty side gives verdict ``n/a``. Latency: lower is
    better (the default). When a side has fewer than ``min_tail`` samples beyond the
    quantile (``n * min(q, 1 - q)``; p99 of 100 samples has one), the bootstrap cannot
    be trusted: the interval is still given but the verdict is "inconclusive" with a
    ``note``.
    """
    _check(confidence, resamples, min_effect)
    xa, xb = np.sort(_clean(a)), np.sort(_clean(b))
    if xa.size == 0 or xb.size == 0:
        va = float(np.percentile(xa, 100 * q)) if xa.size else None
        vb = float(np.percentile(xb, 100 * q)) if xb.size else None
        return _result(va, vb, None, higher_is_better, confidence, min_effect)
    rng = np.random.default_rng(seed)
    draws = bootstrap_quantile(xb, q, resamples, rng) - bootstrap_quantile(xa, q, resamples, rng)
    va, vb = float(np.percentile(xa, 100 * q)), float(np.percentile(xb, 100 * q))
    result = _result(va, vb, draws, higher_is_better, confidence, min_effect)
    tail = min(xa.size, xb.size) * min(q, 1.0 - q)
    if tail < min_tail:
        note = f"too few samples to judge p{100 * q:g} (fewer than {min_tail} beyond it)"
        return Difference(result.a, result.b, result.diff, result.rel, result.ci, INCONCLUSIVE, confidence, note)
    return result


def proportion_difference(
    a: tuple[int, float | None],
    b: tuple[int, float | None],
    *,
    scale_a: float = 1.0,
    scale_b: float = 1.0,
    higher_is_better: bool = True,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    min_effect: float = 0.0,
) -> Difference:
    """``(n, p)`` per run: ``n`` requests of which a fraction ``p`` succeeded. The
    statistic is ``p * scale`` (``scale = 1``: attainment; ``n / window_s``: goodput in
    requests/s); resampled as ``Binomial(n, p) / n * scale``."""
    _check(confidence, resamples, min_effect)
    (na, pa), (nb, pb) = a, b
    if not na or not nb or pa is None or pb is None:
        va = None if pa is None or not na else pa * scale_a
        vb = None if pb is None or not nb else pb * scale_b
        return _result(va, vb, None, higher_is_better, confidence, min_effect)
    rng = np.random.default_rng(seed)
    da = rng.binomial(na, min(max(pa, 0.0), 1.0), size=resamples) / na * scale_a
    db = rng.binomial(nb, min(max(pb, 0.0), 1.0), size=resamples) / nb * scale_b
    return _result(
        pa * scale_a, pb * scale_b, np.asarray(db - da, dtype=np.float64), higher_is_better, confidence, min_effect
    )


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
        return _result(va, vb, None, higher_is_better, confidence, min_effect)
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
    )


# ---- two runs' levels, metric by metric -------------------------------------------

# (key, label, unit, higher is better, kind)
METRICS: tuple[tuple[str, str, str, bool, str], ...] = (
    ("ttft_ms", "TTFT", "ms", False, "quantile"),
    ("ttft_queued_ms", "TTFT from scheduled", "ms", False, "quantile"),
    ("itl_ms", "ITL", "ms", False, "quantile"),
    ("tpot_ms", "TPOT", "ms", False, "quantile"),
    ("e2e_ms", "E2E latency", "ms", False, "quantile"),
    ("output_tokens_per_s", "output tokens/s", "tok/s", True, "rate"),
    ("requests_per_s", "requests/s", "req/s", True, "rate"),
    ("goodput", "goodput", "req/s", True, "rate"),
    ("slo_attainment", "SLO attainment", "%", True, "proportion"),
)
_QUANTILES = ((0.5, "p50"), (0.99, "p99"), (0.999, "p99.9"))
N_BLOCKS = 20
MIN_EFFECT = 0.02


@dataclass(frozen=True, slots=True)
class LevelSamples:
    """One level of a run as the comparison needs it: the run's per-request ``frame``
    and event arrays ``ev``, the level's ``rows`` (a mask over the frame) and summary."""

    frame: pd.DataFrame
    ev: EventArrays
    rows: npt.NDArray[np.bool_]
    summary: LevelSummary

    @property
    def ok_rows(self) -> npt.NDArray[np.bool_]:
        return np.asarray(self.rows & self.frame["ok"].to_numpy(dtype=bool))


@dataclass(frozen=True, slots=True)
class Row:
    """One cell group of the table: a metric's statistic at one level, run vs baseline."""

    level: int  # position in the common levels
    metric: str
    label: str
    stat: str
    unit: str
    diff: Difference


# what a serving engineer reads first, in this order when changes are equally large
HEADLINE: tuple[str, ...] = (
    "itl_ms",
    "ttft_ms",
    "output_tokens_per_s",
    "goodput",
    "slo_attainment",
    "tpot_ms",
    "e2e_ms",
)


def tail_evidence(a: npt.ArrayLike, b: npt.ArrayLike, what: str) -> str:
    """Per-request evidence on the tail, for a tail statistic the bootstrap cannot settle:
    how many of one run's requests have a larger ``what`` than every request of the other
    (the side with more), and the chance of that many if both runs' requests came from one
    distribution (the top ``k`` of the pooled requests all from that side:
    ``C(n, k) / C(n + m, k)``). Empty when that chance is 5% or more (no evidence)."""
    xa, xb = _clean(a), _clean(b)
    if xa.size == 0 or xb.size == 0:
        return ""
    over_b = int((xb > xa.max()).sum())  # this run's requests above every baseline request
    over_a = int((xa > xb.max()).sum())
    if over_b == over_a == 0:
        return ""
    k, n, m, who, whom = (
        (over_b, xb.size, xa.size, "this run's", "the baseline's")
        if over_b >= over_a
        else (over_a, xa.size, xb.size, "the baseline's", "this run's")
    )
    chance = math.exp(sum(math.log((n - j) / (n + m - j)) for j in range(k)))
    if chance >= 0.05:
        return ""
    return (
        f"per request: {k} of {who} {n} had a higher {what} than every one of {whom} {m} "
        f"(chance if the runs were alike: {chance:.2g})"
    )


def by_verdict(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """The rows grouped by verdict (better, worse, inconclusive, no significant change,
    n/a), each group the largest relative changes first, headline metrics first on a tie."""
    order = {key: i for i, key in enumerate(HEADLINE)}
    out: dict[str, list[Row]] = {v: [] for v in (WORSE, BETTER, INCONCLUSIVE, NO_CHANGE, NOT_AVAILABLE)}
    for r in rows:
        out.setdefault(r.diff.verdict, []).append(r)
    for group in out.values():
        group.sort(key=lambda r: (-abs(r.diff.rel or 0.0), order.get(r.metric, len(order))))
    return out


def common_levels(summaries: Sequence[RunSummary]) -> list[tuple[str, float, list[int]]]:
    """Load levels present in every run: ``(mode, value, [level index in each run])``,
    sorted by mode then value (the first level of a run wins when one repeats)."""
    maps = []
    for s in summaries:
        m: dict[tuple[str, float], int] = {}
        for i, lv in enumerate(s.levels):
            m.setdefault((lv.load.mode, round(float(lv.load.value), 6)), i)
        maps.append(m)
    keys = set(maps[0]).intersection(*maps[1:]) if maps else set()
    return [(mode, value, [m[(mode, value)] for m in maps]) for mode, value in sorted(keys)]


def _samples(lv: LevelSamples, key: str) -> F64:
    if key == "itl_ms":
        return lv.ev.itl_ms(lv.ok_rows)
    return np.asarray(lv.frame[key].to_numpy(dtype=np.float64)[lv.ok_rows], dtype=np.float64)


def _per_request(lv: LevelSamples, key: str) -> F64:
    """One value per ok request: its largest ITL for ``itl_ms``, else the metric itself."""
    if key == "itl_ms":
        return np.asarray(lv.ev.itl_max_ms()[lv.ok_rows], dtype=np.float64)
    return _samples(lv, key)


def _attained(lv: LevelSamples) -> npt.NDArray[np.bool_] | None:
    """Mask over the frame: the level's requests meeting its SLOs (as its summary
    names them), None when an SLO cannot be read back."""
    slos = []
    for text in lv.summary.goodput.slos:
        try:
            slos.append(parse_slo(text))
        except ConfigError:
            return None
    mask = np.zeros(lv.rows.size, dtype=bool)
    mask[lv.rows] = slo_attainment(lv.frame[lv.rows], slos)[0]
    return mask


def _blocks(lv: LevelSamples, key: str) -> F64:
    """Block rates over the level's window: output tokens, ok requests or requests
    meeting the SLOs (goodput) per second; their mean is the summary's number."""
    window = level_window_ns(lv.frame[lv.rows])
    if window is None:
        return np.zeros(0)
    ok = lv.ok_rows
    if key == "output_tokens_per_s":
        mask = lv.ev.chunk_mask(ok)  # a chunk's events share its time: its tokens count at once
        return block_rates(lv.ev.ch_t[mask], window, N_BLOCKS, weights=lv.ev.ch_n[mask])
    if key == "goodput":
        attained = _attained(lv)
        if attained is None:
            return np.zeros(0)
        ok = attained
    return block_rates(lv.frame["done_ns"].to_numpy()[ok], window, N_BLOCKS)


def _proportion(level: LevelSummary) -> tuple[int, float | None]:
    return level.requests.total, level.goodput.slo_attainment


_TRIAL_KEYS = {
    "throughput.output_tokens_per_s": "output_tokens_per_s",
    "goodput.requests_per_s": "goodput",
    "goodput.slo_attainment": "slo_attainment",
}


def trial_rows(
    a: LevelSummary, b: LevelSummary, position: int = 0, *, min_effect: float = MIN_EFFECT, confidence: float = 0.95
) -> list[Row]:
    """The rows of two levels that both ran repeated trials: each headline metric's
    mean over trials, the difference of the means and its Welch interval (the note
    says so and how many trials each side had)."""
    assert a.trials is not None and b.trials is not None
    rows = []
    for path, (label, stat, unit, higher) in TRIAL_METRICS.items():
        sa, sb = a.trials.metrics.get(path), b.trials.metrics.get(path)
        if sa is None or sb is None:
            continue
        note = f"between trials: {a.trials.n} vs {b.trials.n}"
        ci = welch_interval(sa.values, sb.values)
        if sa.mean is None or sb.mean is None or ci is None:
            d = Difference(sa.mean, sb.mean, None, None, None, NOT_AVAILABLE, confidence, note)
        else:
            diff = sb.mean - sa.mean
            rel = diff / sa.mean if sa.mean != 0 else None
            d = Difference(
                sa.mean,
                sb.mean,
                diff,
                rel,
                ci,
                verdict(ci, higher, rel=rel, min_effect=min_effect, base=sa.mean),
                confidence,
                note,
            )
        metric = _TRIAL_KEYS.get(path, path.split(".")[0])
        rows.append(Row(position, metric, label, stat, unit, d))
    return rows


def compare_level(
    a: LevelSamples,
    b: LevelSamples,
    position: int = 0,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    min_effect: float = MIN_EFFECT,
) -> list[Row]:
    """Every metric of level ``a`` (the baseline) against level ``b`` (seeded by
    ``position``, so the same runs always give the same intervals)."""
    if a.summary.trials is not None and b.summary.trials is not None:
        return trial_rows(a.summary, b.summary, position, min_effect=min_effect)
    rows: list[Row] = []
    rate_mode = a.summary.load.mode == "rate"
    for m, (key, label, unit, higher, kind) in enumerate(METRICS):
        seed = 7919 * position + 101 * m
        if key == "ttft_queued_ms" and not rate_mode:
            continue
        if kind == "quantile":
            xa, xb = _samples(a, key), _samples(b, key)
            for j, (q, stat) in enumerate(_QUANTILES):
                d = quantile_difference(
                    xa, xb, q, higher_is_better=higher, seed=seed + j, resamples=resamples, min_effect=min_effect
                )
                if d.verdict == INCONCLUSIVE and q >= 0.99:  # the tail: what the requests themselves say
                    what = "largest ITL" if key == "itl_ms" else label
                    evidence = tail_evidence(_per_request(a, key), _per_request(b, key), what)
                    if evidence:
                        d = replace(d, note="; ".join(x for x in (d.note, evidence) if x))
                rows.append(Row(position, key, label, stat, unit, d))
        elif kind == "rate":
            d = rate_difference(
                _blocks(a, key),
                _blocks(b, key),
                higher_is_better=higher,
                seed=seed,
                resamples=resamples,
                min_effect=min_effect,
            )
            rows.append(Row(position, key, label, "rate", unit, d))
        else:
            d = proportion_difference(
                _proportion(a.summary),
                _proportion(b.summary),
                scale_a=100.0,
                scale_b=100.0,
                higher_is_better=higher,
                seed=seed,
                resamples=resamples,
                min_effect=min_effect,
            )
            rows.append(Row(position, key, label, "value", unit, d))
    return rows
