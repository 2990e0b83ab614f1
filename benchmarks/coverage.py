"""Coverage of loadgen's 95% intervals against the naive i.i.d. ones (a study, not a test).

Processes whose true values are known:
- ``iid``: independent lognormal latencies (σ = 0.5 on the log scale);
- ``ar1``: an AR(1) on the log scale with φ = 0.9 (stationary N(0, 0.5²), started in it), so
  the true quantiles are ``exp(0.5 · z_q)``;
- ``sim``: TTFT of the sim engine core in virtual time (H100, Llama-3.1-8B, prefix caching
  off, a closed loop of ``--users`` chat users with prompts of ~600 tokens and 4–16 output
  tokens: prefill fills the 8,192-token step budget, so requests queue and neighbours share
  batches), in send order. Each level is a non-overlapping stretch of one of ``--sim-runs``
  independent runs (own seeds, warm-up dropped); the truth pools ``--truth-runs`` further
  independent runs (several times all the requests of a 10,000-request cell's level), and
  its standard error at p99 is printed from the spread of those runs.

For each process and n in 200, 1,000, 10,000: the share of levels whose interval covers
the true p50, p99 and SLO attainment (the SLO at the true p90, so attainment is 0.9), for
``percentile_interval`` / ``proportion_interval`` ("new"; for attainment with each request's
latency-to-limit ratio as its score, as a level's summary passes it) and the i.i.d. interval
("iid"; Wilson on n for attainment). "—" where the method could not bound (count given).
Then the sequential rule: requests until ``ttft.p99 within 5%`` and its coverage there.

    python benchmarks/coverage.py [--reps 500] [--seq-reps 100] [--sim-runs 25] [--sim-requests 40000]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from loadgen.metrics._dist import norm_ppf
from loadgen.metrics.sequential import PrecisionRule, Target
from loadgen.metrics.uncertainty import Interval, iid_percentile_interval, percentile_interval, proportion_interval

SIGMA, PHI = 0.5, 0.9
SIZES = (200, 1000, 10000)


def iid(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
    return np.exp(SIGMA * rng.standard_normal((reps, n)))


def ar1(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
    e = rng.standard_normal((reps, n)) * SIGMA * math.sqrt(1 - PHI * PHI)
    y = np.empty((reps, n))
    y[:, 0] = SIGMA * rng.standard_normal(reps)
    for t in range(1, n):
        y[:, t] = PHI * y[:, t - 1] + e[:, t]
    return np.exp(y)


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


def covered(ivs: list[Interval], truth: float) -> str:
    ok = [iv for iv in ivs if iv.bounded]
    if not ok:
        return f"{'— (' + str(len(ivs)) + ')':>14}"
    hit = np.mean([iv.low is not None and iv.high is not None and iv.low <= truth <= iv.high for iv in ok])
    note = "" if len(ok) == len(ivs) else f" {len(ok)}/{len(ivs)}"
    return f"{100 * hit:>6.1f}%{note:>8}"


def wilson_iid(s: np.ndarray) -> Interval:
    n = s.size
    p = float(s.mean())
    z = norm_ppf(0.975)
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return Interval(p, c - h, c + h, n, float(n), 0.95, True)


def table(name: str, levels: dict[int, np.ndarray], truth: dict[str, float]) -> None:
    for n, X in levels.items():
        cells = []
        neff = []
        for q, key in ((0.5, "p50"), (0.99, "p99")):
            new = [percentile_interval(x, q) for x in X]
            old = [iid_percentile_interval(x, q) for x in X]
            neff.append(np.median([iv.n_eff for iv in new]))
            cells += [covered(new, truth[key]), covered(old, truth[key])]
        s = truth["p90"] >= X
        new = [proportion_interval(row, scores=x / truth["p90"]) for row, x in zip(s, X, strict=True)]
        neff.append(np.median([iv.n_eff for iv in new]))
        cells += [covered(new, 0.9), covered([wilson_iid(row) for row in s], 0.9)]
        print(f"{name:<5}{n:>7}{len(X):>6}" + "".join(cells) + "   " + " / ".join(f"{v:.0f}" for v in neff))


def sequential(rng: np.random.Generator, reps: int, max_n: int) -> None:
    rule = PrecisionRule((Target("ttft", 0.99, 0.05),))
    print(f"\nsequential: ttft.p99 within 5%, looks at 200·1.5^k, α_k = 0.05/(k(k+1)), {reps} levels each, cap {max_n}")
    for name, gen in (("iid", iid), ("ar1", ar1)):
        X = gen(rng, reps, max_n)
        truth = math.exp(SIGMA * norm_ppf(0.99))
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
    ap.add_argument("--seq-reps", type=int, default=100)
    ap.add_argument("--seq-max", type=int, default=60000)
    ap.add_argument("--sim-runs", type=int, default=25, help="independent runs for the levels (0: no sim)")
    ap.add_argument("--sim-requests", type=int, default=40000, help="requests per run, after warm-up")
    ap.add_argument("--truth-runs", type=int, default=8)
    ap.add_argument("--truth-requests", type=int, default=40000)
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    print(
        f"{'':<5}{'n':>7}{'levels':>6}{'p50 new':>14}{'p50 iid':>14}{'p99 new':>14}{'p99 iid':>14}"
        f"{'attain new':>14}{'attain iid':>14}   median n_eff p50 / p99 / attain"
    )
    z = {k: norm_ppf(q) for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
    truth = {k: math.exp(SIGMA * v) for k, v in z.items()}
    for name, gen in (("iid", iid), ("ar1", ar1)):
        table(name, {n: gen(rng, args.reps, n) for n in SIZES}, truth)
    if args.sim_runs:
        t0 = time.perf_counter()
        truth_runs = [
            sim_ttft(args.truth_requests, args.users, 1000 * args.seed + 500 + i) for i in range(args.truth_runs)
        ]
        ref = np.concatenate(truth_runs)
        strue = {k: float(np.percentile(ref, q)) for k, q in (("p50", 50), ("p90", 90), ("p99", 99))}
        se99 = float(np.std([np.percentile(r, 99) for r in truth_runs], ddof=1)) / math.sqrt(args.truth_runs)
        runs = [sim_ttft(args.sim_requests, args.users, 1000 * args.seed + 1 + i) for i in range(args.sim_runs)]
        sim_s = time.perf_counter() - t0
        table("sim", {n: stretches(runs, n, args.reps) for n in SIZES if n <= args.sim_requests}, strue)
        print(
            f"sim: {args.sim_runs} runs of {args.sim_requests} requests for the levels, {args.truth_runs} of "
            f"{args.truth_requests} ({ref.size} in all) for the truth ({sim_s:.0f} s simulated); true TTFT "
            f"p50 {1e3 * strue['p50']:.1f} ms, p99 {1e3 * strue['p99']:.2f} ms ± {1e3 * se99:.2f} ms (s.e. over the truth runs)"
        )
    sequential(rng, args.seq_reps, args.seq_max)
    print(f"\nwall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
