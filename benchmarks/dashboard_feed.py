"""How much the live dashboard's Feed costs the run's event loop at a steady 100, 1k and 5k
finished records a second (records of 256 output tokens, one token an event, every 20 ms):
microseconds per ``Feed.add`` and per ``Feed.tick``, and the CPU share of one core.

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
    """A steady rate for 8 virtual seconds (one tick each, a 5 s window): the Feed's CPU
    per second of run, i.e. the share of one core the dashboard takes from the loop."""
    clock_now = [0.0]
    print(f"{'records/s':>10} {'add: us/record':>15} {'tick: us':>10} {'CPU per s of run':>17} {'share of a core':>16}")
    for rate in (100, 1_000, 5_000):
        recs = _records(rate)
        feed = Feed(clock=lambda: clock_now[0], window_s=5.0)
        feed.start_level(index=0, trial=0, heading="level 1", target="x", requests=None, warmup=0, duration_s=None)
        add_s = tick_s = 0.0
        seconds = 8
        for _ in range(seconds):
            t0 = time.process_time()
            for r in recs:
                feed.add(r, TOKENS)  # as the run hands it over: LiveStats has counted the tokens
            t1 = time.process_time()
            clock_now[0] += 1.0
            feed.tick()
            t2 = time.process_time()
            add_s += t1 - t0
            tick_s += t2 - t1
        per_s = (add_s + tick_s) / seconds
        print(
            f"{rate:>10,} {add_s / (rate * seconds) * 1e6:>15.1f} {tick_s / seconds * 1e6:>10,.0f} "
            f"{per_s * 1e3:>14.1f} ms {per_s * 100:>15.1f}%"
        )


if __name__ == "__main__":
    main()
