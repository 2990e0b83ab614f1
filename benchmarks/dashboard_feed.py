"""How much the live dashboard's Feed costs the run's event loop: records absorbed per
second by ``Feed.add`` and microseconds per ``Feed.tick`` with 100, 1k and 10k records in
the window (records of 256 output tokens, one token an event, every 20 ms).

    python benchmarks/dashboard_feed.py
"""

from __future__ import annotations

import time

from loadgen.dashboard.feed import Feed
from loadgen.records import RequestRecord

MS = 1_000_000
TOKENS = 256


def _records(n: int) -> list[RequestRecord]:
    out = []
    for i in range(n):
        sent = i * 10 * MS
        events = [[sent + 50 * MS + k * 20 * MS + (i % 7) * 1000, 1] for k in range(TOKENS)]
        out.append(RequestRecord(index=i, sent_ns=sent, done_ns=events[-1][0], events=events))
    return out


def main() -> None:
    clock_now = [0.0]
    print(f"{'records/window':>15} {'add: records/s':>15} {'add: us/record':>15} {'tick: us':>10}")
    for n in (100, 1_000, 10_000):
        recs = _records(n)
        feed = Feed(clock=lambda: clock_now[0], window_s=5.0)
        feed.start_level(index=0, trial=0, heading="level 1", target="x", requests=None, warmup=0, duration_s=None)
        t0 = time.perf_counter()
        for r in recs:
            feed.add(r)
        add_s = time.perf_counter() - t0
        ticks = 20
        t0 = time.perf_counter()
        for _ in range(ticks):
            clock_now[0] += 0.001  # the records stay in the window
            feed.tick()
        tick_us = (time.perf_counter() - t0) / ticks * 1e6
        print(f"{n:>15,} {n / add_s:>15,.0f} {add_s / n * 1e6:>15.1f} {tick_us:>10,.0f}")


if __name__ == "__main__":
    main()
