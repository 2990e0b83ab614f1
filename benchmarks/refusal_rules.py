"""Stricter refusal rules for within-level intervals, judged on the coverage study's processes
(issue 38; a study, not a test).

Each level's interval is loadgen's (the smaller of 10-batch-means' and Geyer's n_eff on the
indicator, the median cap, t on 9 df); each column prints it only where a rule says the
correlation was resolved, and shows coverage of the printed % (share printed %). "now" is
loadgen's correlation check; "tau<=m/K": also the median indicator's batch-means tau under a
K-th of a batch (n_eff >= 10 K); "g5/20<=L", "gL<=L": the batch-means variance at 5 batches at
most L times that at 20 (Fishman's LBATCH idea) on the indicator / on log values; "logcheck":
the correlation check on log values too; then combinations. The finding: every stricter rule
refuses more levels and, in the queues near saturation, *lowers* the coverage of those it
prints (M/M/1 rho=0.9, p50 at 200: 47% -> 9% as tau must fit a third of a batch): a calm
stretch of a queue looks uncorrelated, and it is exactly the level whose median is too low.
No rule on the level's own values can tell it from a lightly loaded server.

    python benchmarks/refusal_rules.py [REPS] [FAMILY,FAMILY]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import _candidates as cand
import _processes as proc

from loadgen.metrics._dist import t_ppf

DISC = (cand.Z / t_ppf(0.975, 9)) ** 2  # batch means' 9 degrees of freedom as fewer values
Rule = Callable[[dict[str, np.ndarray]], np.ndarray]


def both(y: np.ndarray) -> np.ndarray:
    """The smaller of 10-batch-means' and Geyer's n_eff (loadgen's)."""
    return np.minimum(cand.bm(10)(y) / DISC, cand.geyer(y))


def vb(y: np.ndarray, b: int) -> np.ndarray:
    return cand._var(cand.batch_means(y, b)) / b


def neffb(y: np.ndarray, b: int) -> np.ndarray:
    v = vb(y, b)
    return np.where(v > 0, cand._var(y) / np.where(v > 0, v, 1), y.shape[1])


BASE = cand.both(cand.neff_check(10, 1.0), cand.r1_check(10, 2.326))
RULES: dict[str, Rule] = {"now": lambda d: d["base"]}
for _k in (2, 3, 4, 6):
    RULES[f"tau<=m/{_k}"] = lambda d, k=_k: d["base"] & (d["n10"] >= 10 * k)
for _lim in (2.0, 3.0):
    RULES[f"g5/20<={_lim:g}"] = lambda d, lim=_lim: d["base"] & (d["g"] <= lim)
    RULES[f"gL<={_lim:g}"] = lambda d, lim=_lim: d["base"] & (d["gL"] <= lim)
RULES["logcheck"] = lambda d: d["base"] & d["baseL"]
RULES["t/3+g3"] = lambda d: d["base"] & (d["n10"] >= 30) & (d["g"] <= 3)
RULES["t/3+gL3"] = lambda d: d["base"] & (d["n10"] >= 30) & (d["gL"] <= 3)
RULES["t/3+L/3"] = lambda d: d["base"] & (d["n10"] >= 30) & (d["n10L"] >= 30)
RULES["t/4+L/4+gL3"] = lambda d: d["base"] & (d["n10"] >= 40) & (d["n10L"] >= 40) & (d["gL"] <= 3)


def bounds(
    x: np.ndarray, srt: np.ndarray, q: float | None, slo: float, mid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """loadgen's interval per level (vectorised as benchmarks/_candidates.py does)."""
    reps, n = x.shape
    if q is None:
        ind = (slo >= x).astype(float)
        p = ind.mean(axis=1)
        rare = np.minimum(p, 1 - p) * n < 50
    else:
        ind = (np.percentile(x, 100 * q, axis=1)[:, None] >= x).astype(float)
        rare = np.full(reps, min(q, 1 - q) * n < 50)
    near = (np.percentile(x, 100 * (1 - 50 / n), axis=1)[:, None] >= x).astype(float)
    ne = both(ind)
    if rare.any():
        ne = np.where(rare, np.minimum(ne, both(near)), ne)
    if q != 0.5:
        ne = np.where(2 * mid <= n, np.minimum(ne, mid), ne)
    if q is not None:
        return cand.quantile_bounds(srt, q, ne * DISC)
    z = t_ppf(0.975, 9)
    m = np.maximum(ne, 1.0)
    z2m = z * z / m
    c = (p + z2m / 2) / (1 + z2m)
    h = z / (1 + z2m) * np.sqrt(p * (1 - p) / m + z2m / (4 * m))
    return np.where(p == 0, 0, np.maximum(0, c - h)), np.where(p == 1, 1, np.minimum(1, c + h))


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    rng = np.random.default_rng(7)
    fams = [f for f in proc.families(rng, quick=True) if only is None or any(o in f.name for o in only)]
    print(f"{reps} levels a cell; coverage of printed % (share printed %)")
    print(f"{'process':<24}{'n':>6} {'stat':<7}" + "".join(f"{k:>12}" for k in RULES))
    start = time.perf_counter()
    for fam in fams:
        for n in (200, 1000, 10000):
            x = fam.gen(rng, reps, n)
            srt = np.sort(x, axis=1)
            i50 = (np.median(x, axis=1)[:, None] >= x).astype(float)
            logs = np.log(x)
            d = {
                "base": BASE(i50),
                "baseL": BASE(logs),
                "n10": neffb(i50, 10),
                "n10L": neffb(logs, 10),
                "g": vb(i50, 5) / np.maximum(vb(i50, 20), 1e-300),
                "gL": vb(logs, 5) / np.maximum(vb(logs, 20), 1e-300),
            }
            mid = both(i50)
            for key, q in (("p50", 0.5), ("p99", 0.99), ("attain", None)):
                truth = 0.9 if q is None else fam.truth[key]
                lo, hi = bounds(x, srt, q, fam.truth["p90"], mid)
                hit = (lo <= truth) & (truth <= hi)
                ok = ~np.isnan(lo) & ~np.isnan(hi)
                cells = []
                for rule in RULES.values():
                    pr = ok & rule(d)
                    cells.append(
                        f"{'—':>12}" if not pr.any() else f"{100 * hit[pr].mean():>6.0f} ({100 * pr.mean():>3.0f})"
                    )
                print(f"{fam.name:<24}{n:>6} {key:<7}" + "".join(cells), flush=True)
    print(f"wall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
