"""Coverage of loadgen's 95% intervals on hard processes, against the method before issue 38.

Processes (benchmarks/_processes.py, each with its truth and how it is known): i.i.d.
lognormal and Pareto; an AR(1) on the log scale; M/M/1 sojourn times at ρ = 0.7, 0.9, 0.95
and M/M/4 at 0.9 (Lindley / Kiefer–Wolfowitz recursions, latencies in arrival order);
regime-switching bursts (a Markov chain of normal and ×5 periods) and rare bursts (~1% of
requests); fractional Gaussian noise with H = 0.7 and 0.9 (exact, Davies–Harte); a closed
loop of 10 users near capacity with 1% requests 10× longer. For each, n = 200, 1,000 and
10,000 and ``--reps`` independent levels: p50, p99 and SLO attainment (the SLO at the true
p90, so attainment 0.9; latency/limit as the score). Each cell: coverage of the *printed*
intervals ± binomial s.e., the share printed, the median width / truth, for "new" (loadgen's
functions now) and "today" (Geyer's n_eff, the method before, rebuilt from its parts).

``--candidates`` adds the comparison that chose the method (benchmarks/_candidates.py,
vectorised across levels, ``--cand-reps`` levels a cell): each estimator through the same
order-statistic / Wilson interval, then loadgen's steps one by one (BM10 ∧ Geyer, the
median cap, the correlation check). ``--sim-runs 25`` adds TTFT of the sim engine (the
earlier study's family, slow: ~500 s), ``--seq-reps 100`` the sequential rule's check.

``--trials 3,5,10`` adds the study of intervals between ``--trials``
(:func:`loadgen.metrics.trials.trial_interval`, the function a level's summary calls): each
of ``--trial-reps`` levels runs N independent trials of n; the interval is the pooled value
± t on the trials' spread, widened to the pooled series' own interval (loadgen's
within-level one, the trials concatenated in time order). ``study`` can be skipped with
``--reps 0``.

    python benchmarks/coverage.py [--reps 500] [--only M/M/1,fGn] [--candidates] [--trials 3,5,10]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import _candidates as cand
import _processes as proc

from loadgen.metrics._dist import t_ppf
from loadgen.metrics.rate_windows import StatInterval
from loadgen.metrics.sequential import PrecisionRule, Target
from loadgen.metrics.trials import trial_interval
from loadgen.metrics.uncertainty import (
    REFUSED,
    Interval,
    effective_sample_size,
    percentile_interval,
    proportion_interval,
)

SIZES = (200, 1000, 10000)
STATS = (("p50", 0.5), ("p99", 0.99), ("attain", None))


def cell(lo: np.ndarray, hi: np.ndarray, truth: float, printed: np.ndarray) -> str:
    k = int(printed.sum())
    if k == 0:
        return f"{'—':>10} {'(0%)':>6} {'':>5}"
    hit = float(np.mean((lo[printed] <= truth) & (truth <= hi[printed])))
    se = math.sqrt(max(hit * (1 - hit), 1 / k) / k)  # binomial s.e. (at least that of one level)
    width = float(np.median((hi[printed] - lo[printed]) / truth))
    return f"{100 * hit:5.1f}±{100 * se:<4.1f}{f'({100 * printed.mean():.0f}%)':>6} {width:5.2g}"


def new_intervals(X: np.ndarray, q: float | None, slo: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """loadgen's intervals, level by level: bounds (NaN where not printed), and how many
    were refused for correlation."""
    lo, hi = np.full(len(X), np.nan), np.full(len(X), np.nan)
    refused = 0
    for r, x in enumerate(X):
        iv: Interval = percentile_interval(x, q) if q is not None else proportion_interval(x <= slo, scores=x / slo)
        refused += iv.reason is not None and iv.reason.startswith(REFUSED)
        if iv.bounded:
            lo[r], hi[r] = iv.low, iv.high  # type: ignore[assignment]
    return lo, hi, ~np.isnan(lo), refused


def today_intervals(X: np.ndarray, q: float | None, slo: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The method before issue 38: Geyer's n_eff of the indicator (rare-side cap), order
    statistics or Wilson (t on n_eff − 1 below 200) on it."""
    n = X.shape[1]
    if q is not None:
        ind = np.percentile(X, 100 * q, axis=1)[:, None] >= X
        share = np.full(len(X), q)
    else:
        ind = slo >= X
        share = ind.mean(axis=1)
    near = np.percentile(X, 100 * (1 - 50 / n), axis=1)[:, None] >= X
    neff = np.empty(len(X))
    for r in range(len(X)):
        neff[r] = effective_sample_size(ind[r].astype(float))
        if min(share[r], 1 - share[r]) * n < 50:
            neff[r] = min(neff[r], effective_sample_size(near[r].astype(float)))
    if q is not None:
        lo, hi = cand.quantile_bounds(np.sort(X, axis=1), q, neff)
    else:
        m = neff
        z = np.array([t_ppf(0.975, max(v - 1, 1.0)) if v <= 200 else cand.Z for v in m])
        p = share
        z2m = z * z / m
        centre = (p + z2m / 2) / (1 + z2m)
        half = z / (1 + z2m) * np.sqrt(p * (1 - p) / m + z2m / (4 * m))
        lo = np.where(p == 0, 0.0, np.maximum(0, centre - half))
        hi = np.where(p == 1, 1.0, np.minimum(1, centre + half))
    return lo, hi, ~np.isnan(lo) & ~np.isnan(hi)


def study(fams: list[proc.Family], rng: np.random.Generator, reps: int) -> None:
    head = f"{'cover%±s.e. (printed) width':>29}"
    print(f"{'':<40}{'new':^29}   {'today (Geyer)':^29}")
    print(f"{'process':<26}{'n':>6} {'stat':<7}{head}   {head}   refused")
    for fam in fams:
        for n in SIZES:
            X = fam.gen(rng, reps, n)
            for key, q in STATS:
                truth = 0.9 if q is None else fam.truth[key]
                lo, hi, pr, refused = new_intervals(X, q, fam.truth["p90"])
                tlo, thi, tpr = today_intervals(X, q, fam.truth["p90"])
                print(
                    f"{fam.name:<26}{n:>6} {key:<7}{cell(lo, hi, truth, pr)}   {cell(tlo, thi, truth, tpr)}   {refused:>4}",
                    flush=True,
                )
        print(f"  truth: {fam.how}; p50 {fam.truth['p50']:.4g}, p90 {fam.truth['p90']:.4g}, p99 {fam.truth['p99']:.4g}")


def candidates(fams: list[proc.Family], rng: np.random.Generator, reps: int) -> None:
    """Each candidate as coverage of printed (share printed) per cell."""
    ests = {
        "today": cand.geyer,
        "BM10": cand.bm(10),
        "BM20": cand.bm(20),
        "OBM10": cand.obm(10),
        "SN": cand.sn,
        "CBB-PW": cand.cbb_pw,
    }
    names = [*ests, "sect10", "BM10^Geyer", "+med", "+check"]
    print(f"\ncandidates ({reps} levels a cell): coverage of printed % (share printed %)")
    print(f"{'process':<26}{'n':>6} {'stat':<7}" + "".join(f"{k:>12}" for k in names))
    check = cand.both(cand.neff_check(10, 1.0), cand.r1_check(10, 2.326))
    for fam in fams:
        for n in SIZES:
            X = fam.gen(rng, reps, n)
            srt = np.sort(X, axis=1)
            i50 = (np.median(X, axis=1)[:, None] >= X).astype(float)
            near = (np.percentile(X, 100 * (1 - 50 / n), axis=1)[:, None] >= X).astype(float)
            for key, q in STATS:
                if q is None:
                    ind = (fam.truth["p90"] >= X).astype(float)
                    p = ind.mean(axis=1)
                    rare = np.minimum(p, 1 - p) * n < 50
                    truth = 0.9
                else:
                    ind = (np.percentile(X, 100 * q, axis=1)[:, None] >= X).astype(float)
                    rare = np.full(reps, min(q, 1 - q) * n < 50)
                    truth = fam.truth[key]
                out = []

                def bounds(
                    neff: np.ndarray, q: float | None = q, ind: np.ndarray = ind, srt: np.ndarray = srt
                ) -> tuple[np.ndarray, np.ndarray]:
                    if q is not None:
                        return cand.quantile_bounds(srt, q, neff)
                    return cand.wilson(ind.mean(axis=1), np.maximum(neff, 1.0))

                def show(lo: np.ndarray, hi: np.ndarray, ok: np.ndarray, truth: float = truth) -> str:
                    pr = ok & ~np.isnan(lo) & ~np.isnan(hi)
                    if not pr.any():
                        return f"{'—':>12}"
                    return f"{100 * np.mean((lo[pr] <= truth) & (truth <= hi[pr])):>6.0f} ({100 * pr.mean():>3.0f})"

                for est in ests.values():
                    ne = est(ind)
                    if rare.any():
                        ne = np.where(rare, np.minimum(ne, est(near)), ne)
                    out.append(show(*bounds(ne), np.ones(reps, dtype=bool)))
                if q is None:
                    out.append(f"{'= BM10':>12}")
                else:  # sectioning with batch quantiles (Sequest-like): q̂ ± t9 · sd(batch q̂) / √10
                    bq = np.percentile(X[:, : n // 10 * 10].reshape(reps, 10, -1), 100 * q, axis=2)
                    h = t_ppf(0.975, 9) * bq.std(axis=1, ddof=1) / math.sqrt(10)
                    c = np.percentile(X, 100 * q, axis=1)
                    out.append(show(c - h, c + h, np.ones(reps, dtype=bool)))
                disc = (cand.Z / t_ppf(0.975, 9)) ** 2  # BM's 9 degrees of freedom

                def both(y: np.ndarray, disc: float = disc) -> np.ndarray:  # the smaller of BM's and Geyer's n_eff
                    return np.minimum(cand.bm(10)(y) / disc, cand.geyer(y))

                ne = both(ind)
                if rare.any():
                    ne = np.where(rare, np.minimum(ne, both(near)), ne)
                out.append(show(*bounds(ne * disc), np.ones(reps, dtype=bool)))
                if q != 0.5:  # the median's n_eff caps where it shows correlation (τ >= 2)
                    mid = both(i50)
                    ne = np.where(2 * mid <= n, np.minimum(ne, mid), ne)
                lo, hi = bounds(ne * disc)
                out.append(show(lo, hi, np.ones(reps, dtype=bool)))
                out.append(show(lo, hi, check(i50)))
                print(f"{fam.name:<26}{n:>6} {key:<7}" + "".join(out), flush=True)


def _stat_interval(iv: Interval) -> StatInterval:
    return StatInterval(iv.low, iv.high, iv.n_eff, iv.confidence, iv.reason)


def trials_study(fams: list[proc.Family], rng: np.random.Generator, reps: int, counts: list[int]) -> None:
    """Coverage of the intervals between trials, as a level's summary prints them."""
    most = max(counts)
    print(
        f"\nbetween trials ({reps} levels a cell, each of N independent trials of n): "
        "coverage of printed % ± s.e. (printed %), median width / truth;\n"
        "'within': the pooled series' own interval alone (the trials in time order, no trials model)"
    )
    head = "".join(f"  {f'N={c}':^29}" for c in counts)
    print(f"{'process':<26}{'n':>6} {'stat':<7}{head}  {'within, N=' + str(counts[0]):^29}")
    for fam in fams:
        for n in SIZES:
            X = fam.gen(rng, reps * most, n).reshape(reps, most, n)
            slo = fam.truth["p90"]
            for key, q in STATS:
                truth = 0.9 if q is None else fam.truth[key]
                cells = []
                for c in [*counts, -counts[0]]:
                    k = abs(c)
                    lo, hi = np.full(reps, np.nan), np.full(reps, np.nan)
                    for r in range(reps):
                        trials = X[r, :k]
                        pooled = trials.reshape(-1)
                        if q is None:
                            within = proportion_interval(pooled <= slo, scores=pooled / slo)
                            per: list[float | None] = [float(np.mean(t <= slo)) for t in trials]
                            beyond, own = None, None
                        else:
                            within = percentile_interval(pooled, q)
                            per = [float(np.percentile(t, 100 * q)) for t in trials]
                            beyond = [n * min(q, 1 - q)] * k
                            own = [_stat_interval(percentile_interval(t, q)) for t in trials]
                        w = _stat_interval(within)
                        tails = {"beyond": beyond, "own": own} if q not in (None, 0.5) else {}
                        iv = w if c < 0 else trial_interval(within.point, per, 0.95, w, **tails) or w
                        if iv.low is not None and iv.high is not None:
                            lo[r], hi[r] = iv.low, iv.high
                    cells.append(cell(lo, hi, truth, ~np.isnan(lo)))
                print(f"{fam.name:<26}{n:>6} {key:<7}" + "".join(f"  {x}" for x in cells), flush=True)


def sim_ttft(requests: int, users: int, seed: int, warmup: int = 2000) -> np.ndarray:
    """TTFT in send order from one run of the sim engine core, the first ``warmup`` dropped."""
    import random

    from _virtual import drive

    from loadgen.server.config import SchedulerLimits, ServeConfig, SimOptions
    from loadgen.server.engine import ManualClock
    from loadgen.server.sim import sim_engine

    rng = random.Random(seed)
    work = [(max(16, int(rng.gauss(600, 200))), rng.randint(4, 16)) for _ in range(requests + warmup)]
    clock = ManualClock()
    config = ServeConfig(
        model="llama-3.1-8b",
        scheduler=SchedulerLimits(enable_prefix_caching=False),  # caching is per-token work, not latency here
        sim=SimOptions(gpu="h100", jitter=0.05),  # step-time noise: no ties among the TTFTs
        seed=seed,
    )
    core = sim_engine(config, clock=clock).core
    run = drive(core, clock, work, [(0.0, u) for u in range(users)], closed=True)
    order = sorted(run.times, key=lambda r: run.index[r])
    ttft = np.array([run.times[r][0][0] - run.sent_at[r] for r in order if run.times[r]])
    return ttft[warmup:]


def stretches(runs: list[np.ndarray], n: int, most: int) -> np.ndarray:
    """Non-overlapping stretches of ``n`` requests, run by run, at most ``most``."""
    rows = [x[s : s + n] for x in runs for s in range(0, x.size - n + 1, n)]
    return np.stack(rows[:most])


def sequential(rng: np.random.Generator, reps: int, max_n: int) -> None:
    rule = PrecisionRule((Target("ttft", 0.99, 0.05),))
    print(f"\nsequential: ttft.p99 within 5%, looks at 200·1.5^k, α_k = 0.05/(k(k+1)), {reps} levels each, cap {max_n}")
    for name, gen in (("iid", proc.iid), ("ar1", proc.ar1(0.9))):
        X = gen(rng, reps, max_n)
        truth = proc.lognormal_truth()["p99"]
        stops, hits, capped = [], 0, 0
        for x in X:
            d = rule.run(lambda n, x=x: {"ttft": x[:n]}, max_n)
            iv = d.intervals[rule.targets[0].name]
            stops.append(d.n)
            capped += not d.stop
            hits += iv.bounded and iv.low is not None and iv.high is not None and iv.low <= truth <= iv.high
        q = np.percentile(stops, [10, 50, 90])
        print(
            f"  {name}: requests to stop p10/p50/p90 = {q[0]:.0f} / {q[1]:.0f} / {q[2]:.0f}, "
            f"hit the cap {capped}/{reps}, coverage at stopping {100 * hits / reps:.1f}%"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--candidates", action="store_true")
    ap.add_argument("--cand-reps", type=int, default=200)
    ap.add_argument("--only", default="", help="comma-separated substrings of process names")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sim-runs", type=int, default=0, help="independent sim engine runs for a 'sim' family (slow)")
    ap.add_argument("--sim-requests", type=int, default=40000, help="requests per run, after warm-up")
    ap.add_argument("--truth-runs", type=int, default=8)
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--seq-reps", type=int, default=0, help="levels for the sequential rule's check (0: none)")
    ap.add_argument("--seq-max", type=int, default=60000)
    ap.add_argument("--trials", default="", help="trial counts for the between-trials study (3,5,10); none: skipped")
    ap.add_argument("--trial-reps", type=int, default=300)
    args = ap.parse_args()
    start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    fams = proc.families(rng)
    if args.only:
        fams = [f for f in fams if any(s in f.name for s in args.only.split(","))]
    print(f"seed {args.seed}, {args.reps} levels a cell; 'refused': levels whose interval was refused for correlation")
    if args.sim_runs:
        truth_runs = [
            sim_ttft(args.sim_requests, args.users, 1000 * args.seed + 500 + i) for i in range(args.truth_runs)
        ]
        ref = np.concatenate(truth_runs)
        se = float(np.std([np.percentile(r, 99) for r in truth_runs], ddof=1)) / math.sqrt(args.truth_runs)
        runs = [sim_ttft(args.sim_requests, args.users, 1000 * args.seed + 1 + i) for i in range(args.sim_runs)]
        pooled = {n: stretches(runs, n, args.reps) for n in SIZES if n <= args.sim_requests}

        def sim_gen(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
            return pooled[n][:reps]

        truth = {k: float(np.percentile(ref, 100 * q)) for k, q in proc.QS.items()}
        how = f"{args.truth_runs} runs of {args.sim_requests:,} (p99 s.e. {1e3 * se:.2f} ms); levels: stretches of {args.sim_runs} runs"
        fams.append(proc.Family("sim TTFT", sim_gen, truth, how))
    if args.reps:
        study(fams, rng, args.reps)
    if args.trials:
        trials_study(fams, rng, args.trial_reps, [int(c) for c in args.trials.split(",")])
    if args.seq_reps:
        sequential(rng, args.seq_reps, args.seq_max)
    if args.candidates:
        candidates(fams, rng, args.cand_reps)
    print(f"\nwall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
