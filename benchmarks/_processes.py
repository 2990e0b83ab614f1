"""Latency processes for the coverage study (benchmarks/coverage.py), each with a known truth.

Every generator takes ``(rng, reps, n)`` and returns a ``(reps, n)`` array of independent
levels, values in arrival order, started in (or run into) the stationary regime. Each
:class:`Family` carries its true p50, p90 and p99: a closed form where there is one, else
pooled long runs with the standard error of p99 over those runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from loadgen.metrics._dist import norm_ppf

Gen = Callable[[np.random.Generator, int, int], np.ndarray]
QS = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


@dataclass
class Family:
    name: str
    gen: Gen
    truth: dict[str, float] = field(default_factory=dict)
    how: str = "closed form"


def _invert(cdf: Callable[[float], float], q: float, hi: float) -> float:
    """The ``q``-quantile of a continuous ``cdf`` by bisection (to 1e-12 relative)."""
    lo = 0.0
    while cdf(hi) < q:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2


# --- i.i.d. and AR(1) -----------------------------------------------------------------
SIGMA = 0.5


def lognormal_truth() -> dict[str, float]:
    return {k: math.exp(SIGMA * norm_ppf(q)) for k, q in QS.items()}


def iid(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
    return np.exp(SIGMA * rng.standard_normal((reps, n)))


def ar1(phi: float) -> Gen:
    def gen(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
        e = rng.standard_normal((reps, n)) * SIGMA * math.sqrt(1 - phi * phi)
        y = np.empty((reps, n))
        y[:, 0] = SIGMA * rng.standard_normal(reps)
        for t in range(1, n):
            y[:, t] = phi * y[:, t - 1] + e[:, t]
        return np.exp(y)

    return gen


def pareto(alpha: float) -> tuple[Gen, dict[str, float]]:
    """Pareto (x_m = 1): ``x = U^(-1/α)``, quantile ``(1 − q)^(−1/α)``."""

    def gen(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
        return rng.random((reps, n)) ** (-1.0 / alpha)

    return gen, {k: (1 - q) ** (-1.0 / alpha) for k, q in QS.items()}


# --- queues -------------------------------------------------------------------------
def mm1(rho: float) -> tuple[Gen, dict[str, float]]:
    """Sojourn times of an M/M/1 FIFO queue (μ = 1) in arrival order, by Lindley's recursion
    ``W_{k+1} = max(0, W_k + S_k − A_{k+1})``, started in the stationary law of ``W``; the
    sojourn ``W + S`` is exponential with rate ``1 − ρ`` (closed form)."""

    def gen(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
        s = rng.exponential(1.0, (reps, n))
        a = rng.exponential(1.0 / rho, (reps, n))
        w = np.where(rng.random(reps) < rho, rng.exponential(1.0 / (1 - rho), reps), 0.0)
        out = np.empty((reps, n))
        for k in range(n):
            out[:, k] = w + s[:, k]
            w = np.maximum(0.0, out[:, k] - a[:, k])
        return out

    return gen, {k: -math.log(1 - q) / (1 - rho) for k, q in QS.items()}


def mmc(c: int, rho: float, burn: int = 20_000) -> tuple[Gen, dict[str, float]]:
    """Sojourn times of an M/M/c FIFO queue (μ = 1, λ = cρ) in arrival order, by the
    Kiefer–Wolfowitz workload vector, after ``burn`` arrivals from empty. Truth: the sojourn
    is ``S + W`` with ``W = 0`` w.p. ``1 − C`` (Erlang C) and ``Exp(c − λ)`` otherwise."""
    lam = c * rho

    def gen(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
        w = np.zeros((reps, c))
        out = np.empty((reps, n))
        for k in range(-burn, n):
            s = rng.exponential(1.0, reps)
            wait = w[:, 0]
            if k >= 0:
                out[:, k] = wait + s
            w[:, 0] = wait + s
            w = np.sort(np.maximum(w - rng.exponential(1.0 / lam, reps)[:, None], 0.0), axis=1)
        return out

    a = lam
    term = sum(a**k / math.factorial(k) for k in range(c))
    top = a**c / math.factorial(c) / (1 - rho)
    erlang_c = top / (term + top)
    d = c - lam  # rate of the wait given it is positive

    def cdf(t: float) -> float:
        hypo = 1 - math.exp(-t) if abs(d - 1) < 1e-12 else 1 - (d * math.exp(-t) - math.exp(-d * t)) / (d - 1)
        return (1 - erlang_c) * (1 - math.exp(-t)) + erlang_c * hypo

    return gen, {k: _invert(cdf, q, 10.0) for k, q in QS.items()}


def closed_loop(users: int, think: float, long_share: float, long_x: float, burn: int = 5000) -> Gen:
    """Response times of a closed loop: ``users`` users each think ``Exp(think)`` then send a
    request to one FIFO server; service ``Exp(1)``, ``long_x`` times longer for a share
    ``long_share`` of requests. In arrival order, after ``burn`` requests."""

    def gen(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
        nxt = rng.exponential(think, (reps, users))
        free = np.zeros(reps)  # when the server frees up
        rows = np.arange(reps)
        out = np.empty((reps, n))
        for k in range(-burn, n):
            u = nxt.argmin(axis=1)
            t = nxt[rows, u]
            s = rng.exponential(1.0, reps) * np.where(rng.random(reps) < long_share, long_x, 1.0)
            done = np.maximum(t, free) + s
            free = done
            if k >= 0:
                out[:, k] = done - t
            nxt[rows, u] = done + rng.exponential(think, reps)
        return out

    return gen


# --- bursts -------------------------------------------------------------------------
def bursts(normal_len: float, burst_len: float, factor: float) -> tuple[Gen, dict[str, float]]:
    """Lognormal latencies (σ = 0.5) multiplied by ``factor`` during bursts: a two-state
    Markov chain over requests with mean stays ``normal_len`` and ``burst_len`` requests,
    started in its stationary law. Truth: the two-component mixture (closed form)."""
    p_end_normal, p_end_burst = 1 / normal_len, 1 / burst_len
    share = burst_len / (normal_len + burst_len)

    def gen(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
        u = rng.random((reps, n))
        state = np.empty((reps, n), dtype=bool)
        cur = rng.random(reps) < share
        for k in range(n):
            state[:, k] = cur
            cur = np.where(cur, u[:, k] >= p_end_burst, u[:, k] < p_end_normal)
        return np.exp(SIGMA * rng.standard_normal((reps, n))) * np.where(state, factor, 1.0)

    def cdf(t: float) -> float:
        def phi(x: float) -> float:
            return 0.5 * math.erfc(-x / math.sqrt(2))

        return (1 - share) * phi(math.log(t) / SIGMA) + share * phi(math.log(t / factor) / SIGMA)

    return gen, {k: _invert(cdf, q, 10.0) for k, q in QS.items()}


# --- long memory ----------------------------------------------------------------------
def fgn(hurst: float) -> Gen:
    """``exp(0.5 · Z)`` with ``Z`` unit-variance fractional Gaussian noise of Hurst ``hurst``,
    exact by circulant embedding (Davies & Harte 1987, *Biometrika* 74(1)); true quantiles
    ``exp(0.5 z_q)`` as for the lognormal."""

    def gen(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
        k = np.arange(n + 1, dtype=np.float64)
        h2 = 2 * hurst
        gamma = 0.5 * ((k + 1) ** h2 - 2 * k**h2 + np.abs(k - 1) ** h2)
        row = np.concatenate([gamma, gamma[-2:0:-1]])  # length 2n
        lam = np.fft.fft(row).real
        if lam.min() < -1e-9:
            raise RuntimeError("circulant embedding not non-negative")
        lam = np.maximum(lam, 0.0)
        m = row.size
        w = (rng.standard_normal((reps, m)) + 1j * rng.standard_normal((reps, m))) * np.sqrt(lam / m)
        z = np.fft.fft(w, axis=1)[:, :n].real
        return np.exp(SIGMA * z)

    return gen


# --- diurnal drift -------------------------------------------------------------------
def diurnal(period: float, amplitude: float) -> tuple[Gen, dict[str, float]]:
    """Lognormal latencies (σ = 0.5) times ``1 + amplitude · sin(2π k / period + φ)``, ``k`` the
    request's index and ``φ`` uniform per level: a daily swing much slower than a level, met
    at a random time of day. Truth: the mixture over the phase (the marginal law), by a
    4,096-point average over φ of the lognormal CDF."""
    phases = np.linspace(0.0, 2 * math.pi, 4096, endpoint=False)
    scale = 1.0 + amplitude * np.sin(phases)

    def gen(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
        phi = rng.uniform(0.0, 2 * math.pi, (reps, 1))
        k = np.arange(n, dtype=np.float64)[None, :]
        return np.exp(SIGMA * rng.standard_normal((reps, n))) * (
            1.0 + amplitude * np.sin(2 * math.pi * k / period + phi)
        )

    def cdf(t: float) -> float:
        z = np.log(t / scale) / (SIGMA * math.sqrt(2))
        return float(np.mean(0.5 * (1.0 + np.vectorize(math.erf)(z))))

    return gen, {k: _invert(cdf, q, 10.0) for k, q in QS.items()}


def long_run_truth(gen: Gen, rng: np.random.Generator, runs: int, n: int) -> tuple[dict[str, float], float]:
    """Quantiles of ``runs`` pooled independent runs of ``n``; and the s.e. of p99 over the runs."""
    x = gen(rng, runs, n)
    truth = {k: float(np.percentile(x, 100 * q)) for k, q in QS.items()}
    se = float(np.std(np.percentile(x, 99, axis=1), ddof=1) / math.sqrt(runs))
    return truth, se


def families(rng: np.random.Generator, quick: bool = False) -> list[Family]:
    out = [Family("iid lognormal", iid, lognormal_truth()), Family("AR(1) phi=0.9", ar1(0.9), lognormal_truth())]
    g, t = pareto(2.5)
    out.append(Family("iid Pareto a=2.5", g, t))
    for rho in (0.7, 0.9, 0.95):
        g, t = mm1(rho)
        out.append(Family(f"M/M/1 rho={rho}", g, t))
    g, t = mmc(4, 0.9)
    out.append(Family("M/M/4 rho=0.9", g, t, "closed form (Erlang C)"))
    for nl, bl, f in ((200, 50, 5.0), (1000, 100, 5.0)):
        g, t = bursts(nl, bl, f)
        out.append(Family(f"bursts {nl}/{bl} x{f:g}", g, t))
    for nl, bl, f in ((2000, 20, 5.0), (990, 10, 10.0)):
        g, t = bursts(nl, bl, f)
        out.append(Family(f"rare bursts {100 * bl / (nl + bl):.0f}% {bl} x{f:g}", g, t))
    for h in (0.7, 0.9):
        out.append(Family(f"fGn H={h}", fgn(h), lognormal_truth()))
    g, t = diurnal(20_000, 0.3)
    out.append(Family("diurnal 20k ±30%", g, t, "closed form (the mixture over the phase)"))
    g = closed_loop(10, 10.0, 0.01, 10.0)
    runs, n = (20, 50_000) if quick else (64, 200_000)
    t, se = long_run_truth(g, rng, runs, n)
    out.append(Family("closed loop 10u, 1% x10", g, t, f"{runs} runs of {n:,}, p99 s.e. {se:.3g}"))
    return out
