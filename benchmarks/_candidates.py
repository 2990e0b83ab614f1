"""Candidate interval methods for the coverage study, vectorised across levels.

Each estimator maps a ``(reps, n)`` series (an indicator in time order) to the effective
sample size its 95% interval stands on, ``n_eff = s² / Var̂(mean)`` times ``(z / t_ν)²`` for
an estimator with ``ν`` degrees of freedom, so every candidate goes through the same
order-statistic (quantile) and Wilson (attainment) interval as loadgen's. Each check maps
the same series to "resolved" (print) or not (refuse).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from loadgen.metrics._dist import norm_ppf, t_ppf
from loadgen.metrics.uncertainty import effective_sample_size, order_statistic_ranks

Z = norm_ppf(0.975)
Est = Callable[[np.ndarray], np.ndarray]
Check = Callable[[np.ndarray], np.ndarray]


def _var(y: np.ndarray) -> np.ndarray:
    return y.var(axis=1, ddof=1)


def batch_means(y: np.ndarray, b: int) -> np.ndarray:
    n = y.shape[1]
    m = n // b
    return y[:, n - b * m :].reshape(y.shape[0], b, m).mean(axis=2)


def _neff(y: np.ndarray, var_mean: np.ndarray, df: float | None) -> np.ndarray:
    n = y.shape[1]
    s2 = _var(y)
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = np.where(var_mean > 0, s2 / var_mean, n)
    raw = np.minimum(np.nan_to_num(raw, nan=n), n)
    if df is not None:
        raw = raw * (Z / t_ppf(0.975, df)) ** 2
    return raw


def bm(b: int) -> Est:
    """Batch means, ``b`` batches, Student's t on ``b − 1`` (Schmeiser 1982)."""

    def est(y: np.ndarray) -> np.ndarray:
        return _neff(y, _var(batch_means(y, b)) / b, b - 1)

    return est


def obm(b: int) -> Est:
    """Overlapping batch means of size ``n / b``, t on ``1.5 (b − 1)`` (Meketon & Schmeiser 1984)."""

    def est(y: np.ndarray) -> np.ndarray:
        n = y.shape[1]
        m = n // b
        c = np.concatenate([np.zeros((y.shape[0], 1)), np.cumsum(y, axis=1)], axis=1)
        means = (c[:, m:] - c[:, :-m]) / m  # n − m + 1 overlapping batches
        dev = means - y.mean(axis=1, keepdims=True)
        sigma2 = n * m / ((n - m) * (n - m + 1)) * (dev * dev).sum(axis=1)
        return _neff(y, sigma2 / n, 1.5 * (b - 1))

    return est


U95 = 45.4  # 97.5%... the 95% quantile of W(1)² / ∫(W(r) − r W(1))² dr (Lobato 2001; Shao 2010)


def sn(y: np.ndarray) -> np.ndarray:
    """Self-normalisation (Shao 2010): half-width ``√(U·D_n/n)``, ``D_n = n⁻² Σ t² (ȳ_t − ȳ_n)²``."""
    n = y.shape[1]
    t = np.arange(1, n + 1)
    running = np.cumsum(y, axis=1) / t
    d = ((t * (running - running[:, -1:])) ** 2).sum(axis=1) / n**2
    return _neff(y, U95 * d / (n * Z * Z), None)


def _acov(y: np.ndarray) -> np.ndarray:
    n = y.shape[1]
    d = y - y.mean(axis=1, keepdims=True)
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(d, size, axis=1)
    return np.fft.irfft(f * np.conj(f), size, axis=1)[:, :n] / n


def cbb_pw(y: np.ndarray) -> np.ndarray:
    """The circular block bootstrap's variance of the mean (the Bartlett-window sum over the
    block ``ℓ``, exact for the CBB) with ``ℓ`` by Politis & White (2004; Patton, Politis &
    White 2009): flat-top ``M = 2 m̂``, ``ℓ = (2 Ĝ² / D̂)^(1/3) n^(1/3)``, ``D̂ = (4/3) ĝ(0)²``."""
    reps, n = y.shape
    g = _acov(y)
    out = np.empty(reps)
    kn = max(5, int(math.sqrt(math.log10(n))))
    c = 2 * math.sqrt(math.log10(n) / n)
    lmax = max(1, min(int(3 * math.sqrt(n)), n // 3))
    for r in range(reps):
        if g[r, 0] <= 0:
            out[r] = n
            continue
        rho = g[r, : lmax + kn + 1] / g[r, 0]
        small = np.abs(rho[1:]) < c
        mhat = lmax
        for m in range(lmax):
            if small[m : m + kn].all():
                mhat = m
                break
        big_m = min(2 * max(mhat, 1), lmax)
        k = np.arange(-big_m, big_m + 1)
        lam = np.clip(2 - 2 * np.abs(k) / big_m, 0, 1)  # flat-top: 1 to M/2, then down to 0 at M
        gk = g[r, np.abs(k)]
        gg = float((lam * np.abs(k) * gk).sum())
        g0 = float((lam * gk).sum())
        d = 4 / 3 * g0 * g0
        ell = (2 * gg * gg / d) ** (1 / 3) * n ** (1 / 3) if d > 0 and gg > 0 else 1.0
        ell = int(min(max(1, math.ceil(ell)), lmax))
        kk = np.arange(1, ell)
        v = g[r, 0] + 2 * float(((1 - kk / ell) * g[r, kk]).sum())
        out[r] = min(n, n * g[r, 0] / v) if v > 0 else n
    return out


def geyer(y: np.ndarray) -> np.ndarray:
    """Today's: Geyer's initial monotone sequence, τ one s.e. up (loadgen before issue 38)."""
    return np.array([effective_sample_size(row) for row in y])


# --- checks ---------------------------------------------------------------------------
def r1_check(b: int, z: float) -> Check:
    """Resolved when the lag-1 autocorrelation of ``b`` batch means is below ``−1/b + z/√b``."""

    def check(y: np.ndarray) -> np.ndarray:
        means = batch_means(y, b)
        d = means - means.mean(axis=1, keepdims=True)
        den = (d * d).sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            r1 = np.where(den > 0, (d[:, 1:] * d[:, :-1]).sum(axis=1) / den, 0.0)
        return r1 < -1 / b + z / math.sqrt(b)

    return check


def growth_check(b_small: int, b_big: int, limit: float) -> Check:
    """Resolved when the batch-means variance (times batch size) at ``b_small`` batches is at
    most ``limit`` times that at ``b_big`` (Fishman's LBATCH idea: it stops growing)."""

    def check(y: np.ndarray) -> np.ndarray:
        v1 = _var(batch_means(y, b_small)) / b_small
        v2 = _var(batch_means(y, b_big)) / b_big
        return v1 <= limit * v2 + 1e-300

    return check


def no_check(y: np.ndarray) -> np.ndarray:
    return np.ones(y.shape[0], dtype=bool)


def both(a: Check, b: Check) -> Check:
    return lambda y: a(y) & b(y)


# --- the intervals on n_eff ----------------------------------------------------------
@lru_cache(maxsize=100_000)
def ranks(m: int, q: float) -> tuple[int | None, int | None]:
    return order_statistic_ranks(m, q, 0.95)


def quantile_bounds(srt: np.ndarray, q: float, neff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Loadgen's order-statistic interval on ``n_eff`` (NaN where a side cannot be bounded)."""
    reps, n = srt.shape
    low = np.full(reps, np.nan)
    high = np.full(reps, np.nan)
    for r in range(reps):
        m = max(1, min(n, math.floor(neff[r] + 1e-9)))
        lm, um = ranks(m, q)
        if lm is not None:
            low[r] = srt[r, max(1, math.floor(lm * n / m + 1e-9)) - 1]
        if um is not None:
            high[r] = srt[r, min(n, math.ceil((um - 1) * n / m - 1e-9) + 1) - 1]
    return low, high


def wilson(p: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z2m = Z * Z / m
    centre = (p + z2m / 2) / (1 + z2m)
    half = Z / (1 + z2m) * np.sqrt(p * (1 - p) / m + z2m / (4 * m))
    return np.where(p == 0, 0.0, np.maximum(0, centre - half)), np.where(p == 1, 1.0, np.minimum(1, centre + half))


def tau_check(b: int, kappa: float) -> Check:
    """Resolved when Geyer's ``τ̂`` (one s.e. up) is at most ``(n / b) / kappa``: the
    correlation dies out well within one of ``b`` batches."""

    def check(y: np.ndarray) -> np.ndarray:
        n = y.shape[1]
        tau = n / np.maximum(geyer(y), 1e-9)
        return tau <= n / b / kappa

    return check


def neff_check(b: int, least: float) -> Check:
    """Resolved when batch means at ``b`` batches give ``n_eff ≥ least · b`` (``τ̂`` within a batch)."""

    def check(y: np.ndarray) -> np.ndarray:
        v = _var(batch_means(y, b)) / b
        s2 = _var(y)
        return (v <= 0) | (s2 / np.where(v > 0, v, 1) >= least * b)

    return check
