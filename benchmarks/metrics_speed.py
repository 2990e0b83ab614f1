"""How long the metrics take on a large level (a benchmark, not a test).

Builds N synthetic records with E output events each (some coalesced, a few failed,
a few warm-up), then times ``per_request_frame``, ``itl_samples`` and
``summarize_level`` and prints a table. Target: 100k records x 256 events in a few
seconds per call.

Run from the repository root (``pip install -e .`` or ``PYTHONPATH=.``):

    python benchmarks/metrics_speed.py                 # 100k x 256 (needs ~8 GB RAM)
    python benchmarks/metrics_speed.py --records 20000 --events 64 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from _records import synthetic_records

from loadgen.metrics import itl_samples, parse_slo, per_request_frame, summarize_level, windows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3, help="runs per step; the table shows best and median")
    args = ap.parse_args()
    t = time.perf_counter()
    recs = synthetic_records(args.records, args.events)
    build = time.perf_counter() - t
    slos = [parse_slo("ttft=100ms"), parse_slo("itl=60ms"), parse_slo("ttft:p99=200ms")]
    rows = [("build records", build, build, build)]
    for name, fn in [
        ("per_request_frame", lambda: per_request_frame(recs)),
        ("itl_samples", lambda: itl_samples(recs)),
        (
            "summarize_level",
            lambda: summarize_level(recs, load={"mode": "rate", "value": 1000}, slos=slos, trim=(0.1, 0.1)),
        ),
        ("windows(10 s)", lambda: windows(recs, 10.0)),
    ]:
        times, cpu = [], []
        for _ in range(max(1, args.repeat)):
            t, c = time.perf_counter(), time.process_time()
            fn()
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        rows.append((name, min(times), statistics.median(times), min(cpu)))
    n_ev = args.records * args.events
    print(f"{args.records} records x {args.events} events = {n_ev / 1e6:.1f} M events")
    print(f"{'step':<20} {'best s':>8} {'median s':>9} {'best CPU s':>11} {'M events/s':>11}")
    for name, best, med, cpu_s in rows:
        print(f"{name:<20} {best:>8.2f} {med:>9.2f} {cpu_s:>11.2f} {n_ev / best / 1e6:>11.1f}")


if __name__ == "__main__":
    main()
