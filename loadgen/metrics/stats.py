"""Descriptive statistics with the percentiles loadgen reports everywhere.

Percentiles use numpy's default linear interpolation, so ``describe(x)["p99"]`` equals
``numpy.percentile(x, 99)``. NaN values are dropped first (a missing value is not a
sample). Results are plain Python floats, ready for ``json.dumps``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.metrics.results import Distribution

__all__ = [
    "PERCENTILES",
    "STAT_KEYS",
    "describe",
    "describe_counts",
    "distribution",
    "distribution_of_counts",
    "stat_value",
]

PERCENTILES: tuple[float, ...] = (50, 90, 95, 99, 99.9)


def _pkey(p: float) -> str:
    return f"p{p:g}"


STAT_KEYS: tuple[str, ...] = ("count", "mean", "std", "min", *(_pkey(p) for p in PERCENTILES), "max")


def _clean(values: Iterable[float] | npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The non-NaN values as a new float64 array (never a view of the input)."""
    seq = values if hasattr(values, "__len__") else list(values)  # type: ignore[arg-type]
    arr = np.asarray(seq, dtype=np.float64).ravel()
    nan = np.isnan(arr)
    return arr[~nan] if nan.any() else arr.copy()  # boolean indexing always copies; a copy is faster


def describe(values: Iterable[float] | npt.ArrayLike) -> dict[str, Any]:
    """``{"count", "mean", "std", "min", "p50", "p90", "p95", "p99", "p99.9", "max"}``.

    ``count`` is an int, the rest floats; ``std`` is the population standard deviation
    (numpy's default). With no values: count 0 and ``None`` for every other key. The
    input is never modified (the percentiles partition a private copy).
    """
    arr = _clean(values)
    if arr.size == 0:
        return {k: (0 if k == "count" else None) for k in STAT_KEYS}
    n = arr.size
    # numpy's mean and std in numpy's order of operations (the same floats), one sum shared
    mean = arr.sum() / n
    dev = arr - mean
    np.multiply(dev, dev, out=dev)
    std = np.sqrt(dev.sum() / n)
    del dev
    out: dict[str, Any] = {"count": int(n), "mean": float(mean), "std": float(std), "min": float(arr.min())}
    top = float(arr.max())
    # arr is _clean's own copy: sorting it (after the sums above) is cheaper than the
    # partition numpy.percentile makes for five percentiles, and gives the same values
    arr.sort()
    for p, v in zip(PERCENTILES, _sorted_percentiles(arr)):
        out[_pkey(p)] = v
    out["max"] = top
    return out


_Q = np.asarray(PERCENTILES, dtype=np.float64) / 100.0


def _sorted_percentiles(s: npt.NDArray[np.float64]) -> list[float]:
    """``numpy.percentile(s, PERCENTILES)`` of a sorted, NaN-free, non-empty array, by
    numpy's own steps ("linear": virtual index ``(n - 1) q``, its floor and the next
    value, and numpy's two-sided lerp), so the floats are the same."""
    n = s.size
    out = []
    for h in ((n - 1) * _Q).tolist():
        if h >= n - 1:
            out.append(float(s[-1]))
            continue
        lo = math.floor(h)
        a, b, t = float(s[lo]), float(s[lo + 1]), h - lo
        d = b - a
        out.append(b - d * (1 - t) if t >= 0.5 else a + d * t)
    return out


def describe_counts(values: npt.ArrayLike, counts: npt.ArrayLike) -> dict[str, Any]:
    """:func:`describe` of the samples in which ``values[i]`` occurs ``counts[i]`` times,
    without building them (e.g. tokens per event from a ``bincount``). Percentiles use
    the same linear interpolation; mean and std agree with :func:`describe` up to
    floating-point rounding."""
    v = np.asarray(values, dtype=np.float64).ravel()
    c = np.asarray(counts, dtype=np.int64).ravel()
    keep = (c > 0) & ~np.isnan(v)
    v, c = v[keep], c[keep]
    n = int(c.sum())
    if n == 0:
        return describe([])
    order = np.argsort(v, kind="stable")
    v, c = v[order], c[order]
    ends = np.cumsum(c)  # sample i (sorted) is v[searchsorted(ends, i, "right")]
    q = np.asarray(PERCENTILES, dtype=np.float64) / 100.0
    h = (n - 1) * q  # numpy's "linear" virtual index, in numpy's order of operations
    lo = np.floor(h)
    t = h - lo
    a = v[np.searchsorted(ends, lo, side="right")]
    b = v[np.searchsorted(ends, np.minimum(lo + 1, n - 1), side="right")]
    pct = np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)  # numpy's lerp
    mean = float(np.dot(v, c) / n)
    out: dict[str, Any] = {
        "count": n,
        "mean": mean,
        "std": float(np.sqrt(np.dot((v - mean) ** 2, c) / n)),
        "min": float(v[0]),
    }
    for p, x in zip(PERCENTILES, pct):
        out[_pkey(p)] = float(x)
    out["max"] = float(v[-1])
    return out


def _typed(d: dict[str, Any]) -> Distribution:
    return Distribution(
        count=d["count"],
        mean=d["mean"],
        std=d["std"],
        min=d["min"],
        p50=d["p50"],
        p90=d["p90"],
        p95=d["p95"],
        p99=d["p99"],
        p99_9=d["p99.9"],
        max=d["max"],
    )


def distribution(values: Iterable[float] | npt.ArrayLike) -> Distribution:
    """:func:`describe` as a typed :class:`~loadgen.metrics.results.Distribution`."""
    return _typed(describe(values))


def distribution_of_counts(values: npt.ArrayLike, counts: npt.ArrayLike) -> Distribution:
    """:func:`describe_counts` as a typed :class:`~loadgen.metrics.results.Distribution`."""
    return _typed(describe_counts(values, counts))


def stat_value(values: Iterable[float] | npt.ArrayLike, stat: str) -> float | None:
    """One statistic by name: ``pXX`` (any percentile, e.g. ``p99.9``), ``mean``,
    ``min`` or ``max``. ``None`` when there are no values."""
    arr = _clean(values)
    if arr.size == 0:
        return None
    if stat == "mean":
        return float(arr.mean())
    if stat == "max":
        return float(arr.max())
    if stat == "min":
        return float(arr.min())
    if stat.startswith("p"):
        return float(np.percentile(arr, float(stat[1:])))
    raise ValueError(f"unknown statistic {stat!r} (allowed: pXX, mean, min, max)")
