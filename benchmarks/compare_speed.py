"""How long ``compare_level`` takes on large levels (a benchmark, not a test).

Builds two runs' levels of N synthetic requests with E output events each (a few
coalesced reads, a few failures), summarised by the real ``summarize_level`` and read
back as the comparison reads them (``frame_and_events`` → ``LevelSamples``), then times
``compare_level`` (every metric: TTFT, ITL, TPOT, E2E quantiles, rates, attainment) and
prints a table: best and median of ``--repeat`` runs, CPU time (``time.process_time``).
The ITL series has one value per token (N x E), the longest series the comparison sees.

``--false-alarms`` also reruns the calibration of the n_eff bootstrap: pairs of runs of
one AR(1) process (φ = 0.9, 2,000 requests each), how often the medians are called
different (n_eff and i.i.d. bootstraps), and how often a real 10% shift is found.

Run from the repository root (``pip install -e .`` or ``PYTHONPATH=.``):

    python benchmarks/compare_speed.py                       # 5,000 and 20,000 requests x 64
    python benchmarks/compare_speed.py --records 5000 --events 64 --repeat 5 --false-alarms 200
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
from _records import synthetic_records

from loadgen.metrics import parse_slo, summarize_level
from loadgen.metrics.compare import BETTER, WORSE, LevelSamples, compare_level, quantile_difference
from loadgen.metrics.per_request import frame_and_events


def level(n: int, e: int, seed: int) -> LevelSamples:
    recs = synthetic_records(n, e, seed, gap_ns=5e6, correlated=True, classes=("chat",))
    slos = [parse_slo("ttft=100ms"), parse_slo("itl=30ms")]
    summary = summarize_level(recs, load={"mode": "rate", "value": 200.0}, slos=slos, trim=(0.1, 0.1))
    frame, ev = frame_and_events(recs)
    return LevelSamples(frame, ev, np.ones(len(frame), dtype=bool), summary)


def time_compare(n: int, e: int, repeat: int) -> tuple[float, float, int]:
    a, b = level(n, e, 1), level(n, e, 2)
    cpu = []
    for _ in range(max(1, repeat)):
        c = time.process_time()
        rows = compare_level(a, b, 0)
        cpu.append(time.process_time() - c)
    return min(cpu), statistics.median(cpu), len(rows)


def _ar1(rng: np.random.Generator, n: int, phi: float = 0.9) -> np.ndarray:
    e = rng.normal(0.0, 1.0, n)
    x = np.empty(n)
    x[0] = e[0] / math.sqrt(1 - phi**2)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return np.asarray(50.0 * np.exp(0.1 * math.sqrt(1 - phi**2) * x))


def false_alarms(pairs: int, n: int = 2000) -> tuple[int, int, int]:
    """(n_eff alarms, i.i.d. alarms, 10% shifts found) over ``pairs`` pairs of AR(1) runs."""
    rng = np.random.default_rng(2024)
    neff = iid = found = 0
    for k in range(pairs):
        a, b = _ar1(rng, n), _ar1(rng, n)
        neff += quantile_difference(a, b, 0.5, seed=k).verdict in (BETTER, WORSE)
        iid += quantile_difference(a, b, 0.5, seed=k, independent=True).verdict in (BETTER, WORSE)
        found += quantile_difference(a, b * 1.10, 0.5, seed=k).verdict == WORSE
    return neff, iid, found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, nargs="+", default=[5000, 20000], help="requests per level")
    ap.add_argument("--events", type=int, default=64, help="output events (tokens) per request")
    ap.add_argument("--repeat", type=int, default=5, help="runs per size; the table shows best and median")
    ap.add_argument("--false-alarms", type=int, default=0, metavar="PAIRS", help="also run the AR(1) calibration")
    args = ap.parse_args()
    print(f"{'requests':>9} {'ITL samples':>12} {'rows':>5} {'best ms':>9} {'median ms':>10}")
    for n in args.records:
        best, med, rows = time_compare(n, args.events, args.repeat)
        print(f"{n:>9,} {n * (args.events - 1):>12,} {rows:>5} {1e3 * best:>9.1f} {1e3 * med:>10.1f}")
    if args.false_alarms:
        p = args.false_alarms
        neff, iid, found = false_alarms(p)
        print(f"AR(1) phi=0.9, 2,000 requests, {p} pairs of one process:")
        print(f"  n_eff bootstrap calls medians different: {neff} ({100 * neff / p:.1f}%)")
        print(f"  i.i.d. bootstrap calls medians different: {iid} ({100 * iid / p:.1f}%)")
        print(f"  a 10% shift found: {found}/{p}")


if __name__ == "__main__":
    main()
