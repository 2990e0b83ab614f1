"""Standard-normal helpers for truncated sampling (no SciPy): CDF, inverse CDF, tail mass."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["cdf", "mass", "ndtri", "pdf", "truncnorm"]


def cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def pdf(z: float) -> float:
    return 0.0 if math.isinf(z) else math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def mass(a: float, b: float) -> float:
    """P(a < Z < b) for a standard normal Z, accurate in either tail."""
    return cdf(-a) - cdf(-b) if a > 0 else cdf(b) - cdf(a)


# Acklam's rational approximation of the inverse normal CDF (relative error < 1.2e-9).
_A = (
    -39.69683028665376,
    220.9460984245205,
    -275.9285104469687,
    138.3577518672690,
    -30.66479806614716,
    2.506628277459239,
)
_B = (-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572)
_C = (
    -0.007784894002430293,
    -0.3223964580411365,
    -2.400758277161838,
    -2.549732539343734,
    4.374664141464968,
    2.938163982698783,
)
_D = (0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416)
_P_LOW = 0.02425


def poly(coef: tuple[float, ...], x: np.ndarray) -> np.ndarray:
    out = np.full_like(x, coef[0])
    for c in coef[1:]:
        out = out * x + c
    return out


def ndtri(p: np.ndarray) -> np.ndarray:
    """Inverse standard-normal CDF of ``p`` (clamped into the open unit interval)."""
    p = np.clip(p, 1e-300, 1.0 - 1e-16)
    out = np.empty_like(p)
    lo, hi = p < _P_LOW, p > 1.0 - _P_LOW
    mid = ~(lo | hi)
    q = p[mid] - 0.5
    r = q * q
    out[mid] = poly(_A, r) * q / (poly(_B, r) * r + 1.0)
    for mask, sign, tail in ((lo, 1.0, p[lo]), (hi, -1.0, 1.0 - p[hi])):
        t = np.sqrt(-2.0 * np.log(tail))
        out[mask] = sign * poly(_C, t) / (poly(_D, t) * t + 1.0)
    return out


def truncnorm(rng: np.random.Generator, n: int, mu: float, sd: float, lo: float, hi: float) -> np.ndarray:
    """``n`` draws of N(mu, sd) conditioned on [lo, hi] (inverse CDF; one uniform each)."""
    u = rng.random(n)
    if sd == 0.0:
        return np.full(n, min(max(mu, lo), hi))
    a, b = (lo - mu) / sd, (hi - mu) / sd
    if a > 0:  # right tail: sample the mirror image, where the CDF is accurate
        pa, pb = cdf(-b), cdf(-a)
        z = -ndtri(pa + u * (pb - pa))
    else:
        pa, pb = cdf(a), cdf(b)
        z = ndtri(pa + u * (pb - pa))
    return np.clip(mu + sd * z, lo, hi)
