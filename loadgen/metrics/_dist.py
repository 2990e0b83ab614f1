"""The few distribution functions the uncertainty modules need, in numpy and ``math`` only.

- ``norm_ppf``: Acklam's rational approximation of the standard normal quantile (relative
  error below 1.2e-9), refined by one Halley step on ``math.erfc``.
- ``t_ppf``: Student's t quantile by the Cornish–Fisher expansion of Abramowitz & Stegun
  26.7.5 (error under 1e-3 for 5 or more degrees of freedom), falling back to the closed
  forms for 1 and 2 degrees of freedom.
- ``binom_cdf``: the binomial CDF for every k at once, summed from the log pmf
  (recurrence ``pmf(k+1)/pmf(k) = (n-k)/(k+1) · p/(1-p)``, anchored at the mode with
  ``math.lgamma``, so no term underflows before it matters).

scipy would give the same numbers; these three are all loadgen needs, and keeping them
here keeps ``metrics/`` on numpy alone.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["binom_cdf", "norm_ppf", "t_ppf"]

_A = (
    -3.969683028665376e01,
    2.209460984245205e02,
    -2.759285104469687e02,
    1.383577518672690e02,
    -3.066479806614716e01,
    2.506628277459239e00,
)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01, -1.328068155288572e01)
_C = (
    -7.784894002430293e-03,
    -3.223964580411365e-01,
    -2.400758277161838e00,
    -2.549732539343734e00,
    4.374664141464968e00,
    2.938163982698783e00,
)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)


def norm_ppf(p: float) -> float:
    """The standard normal quantile at ``p`` (0 < p < 1)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"norm_ppf needs 0 < p < 1, got {p}")
    lo = 0.02425
    if p < lo or p > 1 - lo:
        q = math.sqrt(-2 * math.log(p if p < lo else 1 - p))
        x = (((((_C[0] * q + _C[1]) * q + _C[2]) * q + _C[3]) * q + _C[4]) * q + _C[5]) / (
            (((_D[0] * q + _D[1]) * q + _D[2]) * q + _D[3]) * q + 1
        )
        x = x if p < lo else -x
    else:
        q = p - 0.5
        r = q * q
        x = (
            (((((_A[0] * r + _A[1]) * r + _A[2]) * r + _A[3]) * r + _A[4]) * r + _A[5])
            * q
            / (((((_B[0] * r + _B[1]) * r + _B[2]) * r + _B[3]) * r + _B[4]) * r + 1)
        )
    e = 0.5 * math.erfc(-x / math.sqrt(2)) - p  # one Halley step
    u = e * math.sqrt(2 * math.pi) * math.exp(x * x / 2)
    return x - u / (1 + x * u / 2)


def t_ppf(p: float, df: float) -> float:
    """Student's t quantile at ``p`` with ``df`` (> 0, may be fractional) degrees of freedom."""
    if df <= 0:
        raise ValueError(f"t_ppf needs df > 0, got {df}")
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = norm_ppf(p)
    z2 = z * z
    g1 = (z2 + 1) * z / 4
    g2 = ((5 * z2 + 16) * z2 + 3) * z / 96
    g3 = (((3 * z2 + 19) * z2 + 17) * z2 - 15) * z / 384
    g4 = ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) * z / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def binom_cdf(n: int, p: float) -> npt.NDArray[np.float64]:
    """``P(Bin(n, p) <= k)`` for k = 0..n, as an array of n + 1 floats."""
    if n < 0 or not 0.0 <= p <= 1.0:
        raise ValueError(f"binom_cdf needs n >= 0 and 0 <= p <= 1, got n={n}, p={p}")
    if p == 0.0:
        return np.ones(n + 1)
    if p == 1.0:
        out = np.zeros(n + 1)
        out[n] = 1.0
        return out
    k = np.arange(n + 1, dtype=np.float64)
    mode = min(n, int((n + 1) * p))
    log_mode = (
        math.lgamma(n + 1)
        - math.lgamma(mode + 1)
        - math.lgamma(n - mode + 1)
        + mode * math.log(p)
        + (n - mode) * math.log1p(-p)
    )
    step = np.log((n - k[:-1]) / (k[:-1] + 1)) + math.log(p) - math.log1p(-p)  # log pmf(k+1) - log pmf(k)
    logpmf = np.empty(n + 1)
    logpmf[mode] = log_mode
    logpmf[mode + 1 :] = log_mode + np.cumsum(step[mode:])
    logpmf[:mode] = log_mode - np.cumsum(step[:mode][::-1])[::-1]
    cdf = np.cumsum(np.exp(logpmf))
    return np.asarray(np.minimum(cdf, 1.0), dtype=np.float64)
