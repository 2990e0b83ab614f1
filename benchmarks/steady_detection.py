"""How often the steady-state verdict flags a level: false flags and detection (a study, not a test).

Families of stationary latency noise (positive, in request order): ``iid`` lognormal (σ 0.5);
``ar1`` (φ = 0.9 on the log scale); ``mm1-0.7`` / ``mm1-0.9``: M/M/1 sojourn times in arrival
order by the Lindley recursion, started in the stationary law; ``mg1-0.9``: M/G/1 with
lognormal service (cv 1.3), 5,000 arrivals discarded; ``regime``: a Markov chain of normal
and ×5 periods (~17% of requests, periods of ~20); ``rare``: ×10 bursts of ~10 requests
(~1%); ``fgn-0.7`` / ``fgn-0.9``: exp(0.5 · fractional Gaussian noise) with Hurst 0.7 / 0.9
(Davies–Harte); ``pareto``: i.i.d. Pareto α 2.5; ``mm1-0.7-cold``: M/M/1 at 0.7 started
empty (a warm-up, then steady). Columns: ``none`` the share flagged without drift (false
flags), ``×drift`` with the latencies scaled by 1 → 1.5 linearly across the level, ``+drift``
with 0.5 × the family's mean added linearly (the level rises, its spread does not),
``step`` ×1.5 from the middle on. Last, ``filling``: a queue at utilisation 1.05 started
empty (non-stationary throughout). Each cell: percent flagged ± binomial s.e., for the rule
before issue 38 ("before": MSER-5 cut, 10 batch means, 1%) and today's
:func:`~loadgen.metrics.verdicts.steady_state_of` on the same levels ("now").
``--candidates``: the rules it was chosen among, on whole levels, vectorised (see ``RULES``):
batch means (the rule before), the batch medians, 10th percentiles, the spread as the median
``|x[i+1] − x[i]|`` of 10 batches and as today's, medians or spread, today's three, and a
self-normalised CUSUM (Shao & Zhang 2010).

``--oracle``: the most any rule could detect with at most 5% false flags, by an oracle
that knows the family's noise: each statistic's 95th percentile over ``--null-reps`` levels
of that very family without drift is its critical value (one-sided, upward, as the drifts
are), so its power on the drifted levels is what the statistic can reach at all. Statistics:
the least-squares slope of the values, of their logs, of 10 batch means, of 10 batch
medians (and its t), of 10 batches' 10th percentiles and of their spread (the verdict's three,
and the spread's t), the second half's mean over the first's, and for ``ar1`` the slope of the
prewhitened logs with the true φ (generalised least squares, the optimal test there). A cell
under 90% means no rule built on those statistics can meet a 90% detection target at 5%
false flags on that family at that size.

    python benchmarks/steady_detection.py [--reps 500] [--sizes 200,1000,10000] [--seed 38] [--candidates] [--oracle]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

import _processes as proc

from loadgen.metrics._dist import t_ppf
from loadgen.metrics.steady import mser5_truncation
from loadgen.metrics.verdicts import MIN_RISE, steady_state_of

Gen = Callable[[np.random.Generator, int, int], np.ndarray]
iid = proc.iid  # lognormal, σ = 0.5 on the log scale: the coverage study's generators


def ar1(rng: np.random.Generator, reps: int, n: int, phi: float = 0.9) -> np.ndarray:
    return proc.ar1(phi)(rng, reps, n)


def lindley(
    rng: np.random.Generator, reps: int, n: int, rho: float, *, empty: bool = False, lognormal: bool = False
) -> np.ndarray:
    """Sojourn times (wait + service, mean service 1) of a single-server FIFO queue."""
    a = rng.exponential(1.0 / rho, (reps, n))
    s = np.exp(rng.standard_normal((reps, n)) - 0.5) if lognormal else rng.exponential(1.0, (reps, n))
    w = np.empty((reps, n))
    if empty or lognormal:
        w[:, 0] = 0.0
    else:  # the M/M/1 stationary wait: 0 with probability 1 − ρ, else exponential with rate 1 − ρ
        w[:, 0] = np.where(rng.random(reps) < rho, rng.exponential(1.0 / (1.0 - rho), reps), 0.0)
    d = s[:, :-1] - a[:, 1:]
    for t in range(1, n):
        w[:, t] = np.maximum(w[:, t - 1] + d[:, t - 1], 0.0)
    return w + s


def bursts(rng: np.random.Generator, reps: int, n: int, p_in: float, p_out: float, factor: float) -> np.ndarray:
    """Lognormal latencies times ``factor`` while a two-state Markov chain is in its burst state."""
    u = rng.random((reps, n))
    on = rng.random(reps) < p_in / (p_in + p_out)
    state = np.empty((reps, n), dtype=bool)
    for t in range(n):
        on = np.where(on, u[:, t] >= p_out, u[:, t] < p_in)
        state[:, t] = on
    return iid(rng, reps, n) * np.where(state, factor, 1.0)


def fgn(rng: np.random.Generator, reps: int, n: int, hurst: float) -> np.ndarray:
    """exp(σ · fractional Gaussian noise) by circulant embedding (Davies & Harte 1987)."""
    return proc.fgn(hurst)(rng, reps, n)


FAMILIES: dict[str, Gen] = {
    "iid": iid,
    "ar1": ar1,
    "mm1-0.7": lambda r, k, n: lindley(r, k, n, 0.7),
    "mm1-0.9": lambda r, k, n: lindley(r, k, n, 0.9),
    "mg1-0.9": lambda r, k, n: lindley(r, k, n + 5000, 0.9, lognormal=True)[:, 5000:],
    "regime": lambda r, k, n: bursts(r, k, n, 0.01, 0.05, 5.0),
    "rare": lambda r, k, n: bursts(r, k, n, 0.001, 0.1, 10.0),
    "fgn-0.7": lambda r, k, n: fgn(r, k, n, 0.7),
    "fgn-0.9": lambda r, k, n: fgn(r, k, n, 0.9),
    "pareto": lambda r, k, n: (1.0 - r.random((k, n))) ** (-1.0 / 2.5),
    "mm1-0.7-cold": lambda r, k, n: lindley(r, k, n, 0.7, empty=True),
}
MEANS = {"mm1-0.7": 1 / 0.3, "mm1-0.9": 10.0, "mg1-0.9": 1 + 0.9 * (1 + math.e - 1) / (2 * 0.1)}


def conditions(x: np.ndarray, mean: float) -> dict[str, np.ndarray]:
    ramp = np.arange(x.shape[1]) / (x.shape[1] - 1)
    return {
        "none": x,
        "×drift": x * (1 + 0.5 * ramp),
        "+drift": x + 0.5 * mean * ramp,
        "step": x * np.where(ramp >= 0.5, 1.5, 1.0),
    }


def before(x: np.ndarray) -> bool:
    """The rule before issue 38: MSER-5's first-half cut, then 10 batch means' slope, 1% two-sided."""
    x = x[mser5_truncation(x).half_cut :]
    b = 10
    if x.size < 2 * b:
        return False
    z = x[: b * (x.size // b)].reshape(b, -1).mean(axis=1)
    i = np.arange(b) - (b - 1) / 2
    slope = float((i * (z - z.mean())).sum() / (i * i).sum())
    resid = z - z.mean() - slope * i
    se = math.sqrt(float((resid * resid).sum()) / (b - 2) / float((i * i).sum()))
    t = slope / se if se > 0 else math.inf
    return t > t_ppf(0.995, b - 2) and slope * (b - 1) / z.mean() > MIN_RISE


def now(x: np.ndarray) -> bool:
    """Today's level verdict on a one-series level (TTFT = E2E = ``x``), closed loop."""
    n = x.size
    frame = pd.DataFrame({"sent_ns": np.arange(1, n + 1) * 1_000_000, "ttft_ms": x, "e2e_ms": x})
    return not steady_state_of(frame, np.ones(n, dtype=bool), open_loop=False).stationary


def _slope_t(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the least-squares slope of ``z`` against its index, and its t."""
    b = z.shape[1]
    i = np.arange(b) - (b - 1) / 2
    zc = z - z.mean(axis=1, keepdims=True)
    slope = (zc * i).sum(axis=1) / (i * i).sum()
    resid = zc - slope[:, None] * i
    se = np.sqrt((resid * resid).sum(axis=1) / (b - 2) / (i * i).sum())
    return slope, slope / se


def _medians(x: np.ndarray, b: int) -> np.ndarray:
    s = x.shape[1] // b
    return np.log(np.median(x[:, : b * s].reshape(x.shape[0], b, s), axis=2))


CRIT = t_ppf(0.995, 8)


def means(x: np.ndarray) -> np.ndarray:
    s = x.shape[1] // 10
    z = x[:, : 10 * s].reshape(x.shape[0], 10, s).mean(axis=2)
    slope, t = _slope_t(z)
    return (t > CRIT) & (slope * 9 / z.mean(axis=1) > MIN_RISE)


def medians(x: np.ndarray) -> np.ndarray:
    slope, t = _slope_t(_medians(x, 10))
    return (t > CRIT) & (np.expm1(slope * 9) > MIN_RISE)


def tenth(x: np.ndarray) -> np.ndarray:
    """The batches' 10th percentiles (10 batches, log)."""
    s = x.shape[1] // 10
    slope, t = _slope_t(np.log(np.quantile(x[:, : 10 * s].reshape(x.shape[0], 10, s), 0.1, axis=2)))
    return (t > CRIT) & (np.expm1(slope * 9) > MIN_RISE)


def spread_medians(x: np.ndarray) -> np.ndarray:
    """The spread as the median |x[i+1] − x[i]| of 10 batches."""
    slope, t = _slope_t(_medians(np.abs(np.diff(x, axis=1)), 10))
    return (t > CRIT) & (np.expm1(slope * 9) > MIN_RISE)


def spread(x: np.ndarray) -> np.ndarray:
    """The spread as (mean √|x[i+1] − x[i]|)² of 10 to 20 batches of at least 50 (as today's)."""
    d = np.sqrt(np.abs(np.diff(x, axis=1)))
    b = min(20, max(10, d.shape[1] // 50))
    s = d.shape[1] // b
    slope, t = _slope_t(2 * np.log(d[:, : b * s].reshape(d.shape[0], b, s).mean(axis=2)))
    return (t > t_ppf(0.995, b - 2)) & (np.expm1(slope * (b - 1)) > MIN_RISE)


def self_normalised(x: np.ndarray, critical: float = 68.6) -> np.ndarray:
    """Shao & Zhang (2010, *JASA* 105(491)) self-normalised CUSUM for a change in the mean, on 100
    batch medians (log), a rise only; 68.6 is their 1% critical value (two-sided)."""
    z = _medians(x, 100)
    m = z.shape[1]
    s = np.cumsum(z, axis=1)
    tot = s[:, -1:]
    t = np.arange(1, m + 1)
    best = np.full(z.shape[0], -np.inf)
    for k in range(2, m - 1):
        sk, sk1 = s[:, k - 1 : k], tot - s[:, k - 1 : k]
        a = s[:, :k] - (t[:k] / k) * sk
        b = (tot - s[:, k - 1 : m - 1]) - ((m - t[k:] + 1) / (m - k)) * sk1
        v = ((a * a).sum(axis=1) + (b * b).sum(axis=1)) / m**2
        d = (k * (m - k) / m**1.5) * (sk1[:, 0] / (m - k) - sk[:, 0] / k)
        best = np.maximum(best, np.sign(d) * d * d / v)
    return best > critical


RULES = {
    "means": means,  # the test before issue 38 on the whole level
    "medians": medians,
    "p10": tenth,
    "spr-med": spread_medians,
    "spread": spread,
    "med|spr": lambda x: medians(x) | spread(x),
    "now": lambda x: medians(x) | tenth(x) | spread(x),  # today's rule, on whole levels
    "SN-CUSUM": self_normalised,
}


def candidates(rng: np.random.Generator, reps: int, sizes: list[int]) -> None:
    print(f"\ncandidate rules on whole levels: % flagged, {reps} levels a cell (s.e. <= {50 / math.sqrt(reps):.1f})")
    print(f"{'family':<13}{'n':>6} {'condition':<8}" + "".join(f"{r:>9}" for r in RULES))
    for fam, gen in [*FAMILIES.items(), ("filling", lambda r, k, n: lindley(r, k, n, 1.05, empty=True))]:
        for n in sizes:
            x = gen(rng, reps, n)
            conds = {"none": x} if fam in ("filling", "mm1-0.7-cold") else conditions(x, MEANS.get(fam, x.mean()))
            for c, xs in conds.items():
                rates = "".join(f"{100 * rule(xs).mean():>9.1f}" for rule in RULES.values())
                print(f"{fam:<13}{n:>6} {c:<8}{rates}", flush=True)


def cell(flags: list[bool]) -> str:
    p = float(np.mean(flags))
    return f"{100 * p:5.1f}±{100 * math.sqrt(p * (1 - p) / len(flags)):3.1f}"


def _slope(z: np.ndarray) -> np.ndarray:
    i = np.arange(z.shape[1]) - (z.shape[1] - 1) / 2
    return ((z - z.mean(axis=1, keepdims=True)) * i).sum(axis=1) / (i * i).sum()


def _prewhitened_slope(x: np.ndarray, phi: float = 0.9) -> np.ndarray:
    y = np.log(x)
    t = np.arange(x.shape[1], dtype=np.float64)
    yw, tw = y[:, 1:] - phi * y[:, :-1], t[1:] - phi * t[:-1]
    tc = tw - tw.mean()
    return ((yw - yw.mean(axis=1, keepdims=True)) * tc).sum(axis=1) / (tc * tc).sum()


ORACLE_STATS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "slope": _slope,
    "log slope": lambda x: _slope(np.log(x)),
    "means10": lambda x: _slope(x[:, : x.shape[1] // 10 * 10].reshape(x.shape[0], 10, -1).mean(axis=2)),
    "medians10": lambda x: _slope(np.median(x[:, : x.shape[1] // 10 * 10].reshape(x.shape[0], 10, -1), axis=2)),
    "halves": lambda x: x[:, x.shape[1] // 2 :].mean(axis=1) / x[:, : x.shape[1] // 2].mean(axis=1),
    "medians t": lambda x: _slope_t(_medians(x, 10))[1],
    "p10": lambda x: _slope(
        np.log(np.quantile(x[:, : x.shape[1] // 10 * 10].reshape(x.shape[0], 10, -1), 0.1, axis=2))
    ),
    "spread": lambda x: _slope(_spread_batches(x)),
    "spread t": lambda x: _slope_t(_spread_batches(x))[1],
}


def _spread_batches(x: np.ndarray) -> np.ndarray:
    """2 log (mean √|x[i+1] − x[i]|) of 10 batches: the verdict's spread."""
    d = np.sqrt(np.abs(np.diff(x, axis=1)))
    s = d.shape[1] // 10
    return 2 * np.log(d[:, : 10 * s].reshape(d.shape[0], 10, s).mean(axis=2))


def oracle(rng: np.random.Generator, reps: int, null_reps: int, sizes: list[int]) -> None:
    names = ("×drift", "+drift", "step")
    print(
        f"oracle power at 5% false flags (critical values from {null_reps} drift-free levels of the family itself), "
        f"{reps} levels a cell: best statistic % (which)"
    )
    print(f"{'family':<13}{'n':>6}" + "".join(f"{c:>24}" for c in names))
    for fam, gen in FAMILIES.items():
        if fam in ("iid", "pareto", "mm1-0.7-cold"):
            continue
        stats = dict(ORACLE_STATS)
        if fam == "ar1":
            stats["GLS, true φ"] = _prewhitened_slope
        for n in sizes:
            null = gen(rng, null_reps, n)
            crit = {k: float(np.quantile(f(null), 0.95)) for k, f in stats.items()}
            x = gen(rng, reps, n)
            mean = MEANS.get(fam, float(null.mean()))
            cells = []
            for c, xs in conditions(x, mean).items():
                if c == "none":
                    continue
                power = {k: float(np.mean(f(xs) > crit[k])) for k, f in stats.items()}
                best = max(power, key=lambda k: power[k])
                cells.append(f"{100 * power[best]:>7.1f} ({best})".rjust(24))
            print(f"{fam:<13}{n:>6}" + "".join(cells), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--sizes", default="200,1000,10000")
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--candidates", action="store_true", help="the candidate rules' table instead")
    ap.add_argument("--oracle", action="store_true", help="the oracle's power table instead")
    ap.add_argument("--null-reps", type=int, default=2000)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    if args.oracle:
        oracle(rng, args.reps, args.null_reps, sizes)
        print(f"\nwall {time.perf_counter() - start:.0f} s")
        return
    if args.candidates:
        candidates(rng, args.reps, sizes)
        print(f"\nwall {time.perf_counter() - start:.0f} s")
        return
    names = ("none", "×drift", "+drift", "step")
    print(f"% of levels flagged non-stationary (± binomial s.e.), {args.reps} levels a cell; before → now")
    print(f"{'family':<13}{'n':>6}" + "".join(f"{c:>26}" for c in names))
    for fam, gen in FAMILIES.items():
        for n in sizes:
            x = gen(rng, args.reps, n)
            mean = MEANS.get(fam, float(x.mean()))
            cells = []
            for c, xs in conditions(x, mean).items():
                if fam == "mm1-0.7-cold" and c != "none":
                    cells.append(f"{'':>26}")
                    continue
                cells.append(f"{cell([before(r) for r in xs]):>12} → {cell([now(r) for r in xs]):>11}")
            print(f"{fam:<13}{n:>6}" + "".join(cells), flush=True)
    print("\nfilling queue (utilisation 1.05, started empty): % flagged, before → now")
    for n in sizes:
        x = lindley(rng, args.reps, n, 1.05, empty=True)
        print(f"{'filling':<13}{n:>6}{cell([before(r) for r in x]):>12} → {cell([now(r) for r in x]):>11}", flush=True)
    print(f"\nwall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
