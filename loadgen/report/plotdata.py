"""Shaping arrays for plots: downsampling, ECDF points, time bins, rounding, colours.

Display-side reductions only (what to draw, not what to report): the numbers a report
states come from ``summary.json``; these pick which points of the per-request data a
figure carries so the page stays small. Pure numpy, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "F64",
    "NO_BIN",
    "bin_edges",
    "bin_ids",
    "binned_quantiles",
    "ecdf_points",
    "keep_peaks",
    "log_ticks",
    "palette",
    "quantiles_by_bin",
    "rounded",
    "spread",
]

F64 = npt.NDArray[np.float64]

# colour-blind-friendly qualitative palette (Okabe-Ito, then Tableau)
_COLOURS = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
    "#F0E442",
    "#4E79A7",
    "#F28E2B",
    "#59A14F",
    "#B07AA1",
    "#9C755F",
    "#BAB0AC",
)


def palette(n: int) -> list[str]:
    """``n`` distinct colours (qualitative; cycles beyond 14)."""
    return [_COLOURS[i % len(_COLOURS)] for i in range(n)]


def rounded(values: npt.ArrayLike, decimals: int = 3) -> list[float | None]:
    """A JSON-ready list: values rounded to ``decimals``, NaN/inf as None."""
    arr = np.asarray(values, dtype=np.float64)
    out = np.round(arr, decimals).tolist()
    if np.isfinite(arr).all():
        return out  # type: ignore[no-any-return]
    return [v if math.isfinite(v) else None for v in out]


def spread(n: int, k: int) -> npt.NDArray[np.int64]:
    """Indices of ``k`` evenly spaced items of ``n`` (all when ``n <= k``), first and
    last included, ascending."""
    if n <= k:
        return np.arange(n, dtype=np.int64)
    if k <= 1:
        return np.zeros(min(k, n), dtype=np.int64)
    return np.unique(np.round(np.linspace(0, n - 1, k)).astype(np.int64))


def ecdf_points(values: npt.ArrayLike, max_points: int = 400) -> tuple[F64, F64]:
    """Points ``(x, F(x))`` of the empirical CDF of ``values`` (NaN dropped), at most
    about ``max_points``: even in probability up to 0.9, then denser toward the tail
    (1 - p log-spaced down to 1/n), always including the minimum and the maximum. Each
    point is an exact ECDF point (a sorted value and its rank / n)."""
    arr = np.asarray(values, dtype=np.float64)
    arr = np.sort(arr[~np.isnan(arr)])
    n = arr.size
    if n == 0:
        return np.zeros(0), np.zeros(0)
    if n <= max_points:
        idx = np.arange(n)
    else:
        body = np.linspace(0.0, 0.9, max_points // 2)
        tail = 1.0 - np.logspace(-1, math.log10(1.0 / n), max_points - max_points // 2)
        p = np.concatenate([body, tail, [1.0]])
        idx = np.unique(np.clip(np.ceil(p * n).astype(np.int64) - 1, 0, n - 1))
    return arr[idx], (idx + 1) / n


def bin_edges(t_min: float, t_max: float, max_bins: int = 300, min_width: float = 0.1) -> F64:
    """Edges of at most ``max_bins`` equal bins covering ``[t_min, t_max]``, each at least
    ``min_width`` wide (a "nice" width: 1, 2 or 5 times a power of ten)."""
    span = max(t_max - t_min, 0.0)
    raw = max(span / max_bins, min_width)
    mag = 10.0 ** math.floor(math.log10(raw))
    width = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw - 1e-12)
    lo = math.floor(t_min / width) * width
    n = max(1, math.ceil((t_max - lo) / width + 1e-9))
    return np.asarray(lo + width * np.arange(n + 1), dtype=np.float64)


def binned_quantiles(
    t: F64, values: F64, edges: F64, quantiles: Sequence[float] = (50, 99)
) -> tuple[F64, dict[float, F64], F64]:
    """Per bin of ``edges``: bin centres, the given percentiles of ``values`` whose ``t``
    falls in the bin (NaN for an empty bin), and the maximum."""
    n_bins = edges.size - 1
    centres = (edges[:-1] + edges[1:]) / 2
    if t.size == 0 or n_bins <= 0:
        return centres, {q: np.full(max(n_bins, 0), np.nan) for q in quantiles}, np.full(max(n_bins, 0), np.nan)
    qs, top = quantiles_by_bin(bin_ids(t, edges), n_bins, lambda at: values[at], quantiles)
    return centres, qs, top


def bin_ids(t: F64, edges: F64) -> npt.NDArray[np.uint16]:
    """The bin of ``edges`` each ``t`` falls in (clipped to the first and last bins)."""
    n_bins = edges.size - 1
    if not 0 < n_bins < NO_BIN:
        raise ValueError(f"{n_bins} bins: between 1 and {NO_BIN - 1} are supported")
    return np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n_bins - 1).astype(np.uint16)


NO_BIN = (1 << 16) - 1  # an id no bin has
_GROUP = 1 << 21  # samples sorted at a time by quantiles_by_bin


def quantiles_by_bin(
    ids: npt.NDArray[np.uint16],
    n_bins: int,
    values_of: Callable[[npt.NDArray[np.int64]], F64],
    quantiles: Sequence[float],
    counts: npt.NDArray[np.integer[Any]] | None = None,
) -> tuple[dict[float, F64], F64]:
    """Per bin: the given percentiles and the maximum (NaN when empty) of the values of
    the items whose ``ids`` is that bin (items with ids >= ``n_bins`` belong to none),
    each item counted ``counts[i]`` times (once without). ``values_of(items)`` gives the
    values of the given items, so they need not exist all at once: a few bins are done
    at a time, with about :data:`_GROUP` samples."""
    out = {q: np.full(n_bins, np.nan) for q in quantiles}
    top = np.full(n_bins, np.nan)
    per_bin = np.zeros(n_bins)
    for b in range(0, ids.size, _GROUP):  # a block at a time: no temporaries the size of ids
        block = slice(b, b + _GROUP)
        weights = None if counts is None else counts[block]
        per_bin += np.bincount(ids[block], weights=weights, minlength=NO_BIN + 1)[:n_bins]
    # where a bin's items can be: not before the running maximum of ids reaches it, not
    # after the running minimum from the end passes it (items roughly in time order
    # make these spans short, so each group of bins scans a slice, not every item)
    rising = np.where(ids < n_bins, ids, np.uint16(0))
    np.maximum.accumulate(rising, out=rising)
    falling = np.empty_like(ids)
    np.minimum.accumulate(ids[::-1], out=falling[::-1])
    b0 = 0
    while b0 < n_bins:
        b1 = max(int(np.searchsorted(np.cumsum(per_bin[b0:]), _GROUP, side="right")) + b0, b0 + 1)
        lo = int(np.searchsorted(rising, np.uint16(b0)))  # a uint16 key: no copy of rising as int64
        hi = int(np.searchsorted(falling, np.uint16(b1)))
        span = ids[lo:hi]
        at = np.flatnonzero((span >= b0) & (span < b1)) + lo
        b0, lo_bin = b1, b0
        if at.size == 0:
            continue
        vals = values_of(at)
        bins = ids[at]
        if counts is not None:  # each item as often as it counts: the extra copies appended (sorted below)
            k = counts[at]
            more = np.flatnonzero(k != 1)
            if more.size:
                extra = k[more] - 1
                vals = np.concatenate([vals, np.repeat(vals[more], extra)])
                bins = np.concatenate([bins, np.repeat(bins[more], extra)])
        if b1 - lo_bin == 1:  # one bin: no sorting by bin
            sorted_vals = np.sort(vals)
            first = np.array([0, vals.size])
        else:
            order = np.argsort(bins, kind="stable")  # a uint16 key: a cheap radix sort
            sorted_vals = vals[order]
            first = np.searchsorted(bins[order], np.arange(lo_bin, b1 + 1, dtype=np.uint16))
            for lo, hi in zip(first[:-1].tolist(), first[1:].tolist()):
                sorted_vals[lo:hi].sort()  # each bin's values in order, in place
        _fill_bins(out, top, lo_bin, sorted_vals, first, quantiles)
    return out, top


def _fill_bins(
    out: dict[float, F64],
    top: F64,
    lo_bin: int,
    sorted_vals: F64,
    first: npt.NDArray[np.int64],
    quantiles: Sequence[float],
) -> None:
    """Percentiles and maxima of bins ``lo_bin...`` from their samples sorted by (bin,
    value), ``first`` where each bin's samples start (and where the last ends): the
    numbers ``np.percentile`` (its linear method, step by step) and ``max`` give, without
    selecting in each bin again."""
    b = np.flatnonzero(first[1:] > first[:-1])
    if b.size == 0:
        return
    lo, hi = first[:-1][b], first[1:][b]
    n = hi - lo
    last = sorted_vals[hi - 1]
    nan = np.isnan(last)  # NaN sorts last: np.percentile and max give NaN
    top[lo_bin + b] = last
    for q in quantiles:
        virtual = (n - 1) * (q / 100)
        above = virtual >= n - 1
        prev = np.where(above, n - 1, np.floor(virtual).astype(np.int64))
        a = sorted_vals[lo + prev]
        c = sorted_vals[lo + np.minimum(prev + 1, n - 1)]
        gamma = virtual - prev
        diff = c - a
        value = np.where(gamma >= 0.5, c - diff * (1 - gamma), a + diff * gamma)
        value[above] = a[above]
        value[nan] = np.nan
        out[q][lo_bin + b] = value


def keep_peaks(t: F64, values: F64, k: int, n_bins: int = 500) -> npt.NDArray[np.int64]:
    """Indices of at most about ``k`` points to draw of a scatter over time: the largest
    value in each of ``n_bins`` time bins (so spikes survive) plus evenly spaced others."""
    n = t.size
    if n <= k:
        return np.arange(n, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    ts = t[order]
    ids = np.minimum(((ts - ts[0]) / max(ts[-1] - ts[0], 1e-12) * n_bins).astype(np.int64), n_bins - 1)
    vals = np.nan_to_num(values[order], nan=-np.inf)
    # per bin, the position of its maximum: sort by (bin, value) and take each bin's last
    by = np.lexsort((vals, ids))
    last = np.r_[ids[by][1:] != ids[by][:-1], True]
    peaks = order[by[last]]
    rest = order[spread(n, max(k - peaks.size, 0))]
    return np.unique(np.concatenate([peaks, rest]))


def log_ticks(values: npt.ArrayLike, max_ticks: int = 12) -> dict[str, Any]:
    """Tick settings for a log axis over ``values`` (NaN and values <= 0 ignored): ticks at
    1, 2 and 5 times powers of ten (only the powers when that makes too many; evenly
    spaced round numbers when the values span less than 4x), labelled as plain numbers
    (``0.5``, ``20``, ``1,000``), never plotly's bare minor digits. Empty when no value is
    positive."""
    arr = np.asarray(values, dtype=np.float64).ravel()
    arr = arr[np.isfinite(arr) & (arr > 0)]
    if arr.size == 0:
        return {}
    v_lo, v_hi = float(arr.min()), float(arr.max())
    if v_hi < 4 * v_lo:  # a narrow range shows one or no 1-2-5 tick: evenly spaced round numbers
        raw = max(v_hi - v_lo, v_hi * 1e-3) / 4
        mag = 10.0 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw - 1e-12)
        first = math.floor(v_lo / step) * step
        ticks = [first + k * step for k in range(int((v_hi - first) / step) + 2) if first + k * step > 0]
        return {"tickmode": "array", "tickvals": ticks, "ticktext": [f"{t:,.6g}" for t in ticks]}
    lo, hi = math.floor(math.log10(v_lo)), math.ceil(math.log10(v_hi))
    hi = max(hi, lo + 1)
    for mantissas in ((1, 2, 5), (1,)):
        ticks = [m * 10.0**e for e in range(lo, hi + 1) for m in mantissas]
        if len(ticks) <= max_ticks or mantissas == (1,):
            break
    if len(ticks) > max_ticks:  # many decades: every few powers of ten
        step = math.ceil(len(ticks) / max_ticks)
        ticks = ticks[::step]
    return {"tickmode": "array", "tickvals": ticks, "ticktext": [f"{t:,.10g}" for t in ticks]}
