"""What writing one finished record costs in a single-process run (a benchmark, not a test).

Builds N finished records with E streamed events each (a token every ~20 ms, a few
coalesced reads carrying several tokens, a few failures), then times the writer's path
per record, as the single-process run drives it: ``RunWriter.append`` for each record,
then ``flush`` (the level's end). Also times its parts (the JSON line, the events as
arrays, their bytes) and, for comparison, what it costs without batches (one record's
events encoded alone, two writes per record) and the line of older versions (events
inline as JSON, the cost to match). Best of R repeats, CPU time (``process_time``) and wall
time (``perf_counter``), in µs per record. Target: ≤ 10 µs per record.

Run from the repository root (``pip install -e .`` or ``PYTHONPATH=.``):

    python benchmarks/record_write.py                  # 20,000 x 64, best of 5
    python benchmarks/record_write.py --records 50000 --events 128 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _records import synthetic_records

from loadgen.report import files
from loadgen.report.files import RunWriter, record_line
from loadgen.report.recordio import _event_columns, _line, encode_events

FLUSH_RECORDS = getattr(files, "FLUSH_RECORDS", 256)  # (a version before held records: batches of 256 here)


def best(fn: Callable[[], None], repeat: int, n: int) -> tuple[float, float]:
    """Best CPU and wall µs per record of ``fn`` (which handles ``n`` records)."""
    cpu, wall = [], []
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return min(cpu) / n * 1e6, min(wall) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--events", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.records
    recs = synthetic_records(n, args.events, two_tokens=0.05, as_run=True)
    rows: list[tuple[str, float, float]] = []

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "run"

        def whole() -> None:
            with RunWriter(folder) as writer:
                for rec in recs:
                    writer.append(rec)
                if hasattr(writer, "flush"):  # (a version before held records wrote each at once)
                    writer.flush()
            assert writer.count == n, writer.count

        rows.append(("whole path (RunWriter.append per record)", *best(whole, args.repeat, n)))
        lines_size = (folder / "records.jsonl").stat().st_size
        events_size = (folder / "events.bin").stat().st_size

        def lines() -> None:
            for rec in recs:
                _line(rec, 64, 256)

        rows.append(("  JSON line (_line)", *best(lines, args.repeat, n)))
        batches = [recs[at : at + FLUSH_RECORDS] for at in range(0, n, FLUSH_RECORDS)]

        def columns() -> None:
            for b in batches:
                _event_columns(b)

        rows.append((f"  events to arrays, {FLUSH_RECORDS} records at once", *best(columns, args.repeat, n)))
        cols = [(np.array([r.sent_ns for r in b], dtype=np.int64), *_event_columns(b)) for b in batches]

        def events_batch() -> None:
            for c in cols:
                encode_events(*c)

        rows.append((f"  events' bytes, {FLUSH_RECORDS} records at once", *best(events_batch, args.repeat, n)))
        sent = [np.array([r.sent_ns], dtype=np.int64) for r in recs]
        one = [np.array(r.events, dtype=np.int64) for r in recs]
        size = np.array([args.events], dtype=np.int64)

        def events_one() -> None:
            for s, c in zip(sent, one):
                encode_events(s, size, c[:, 0].copy(), c[:, 1].copy())

        rows.append(("  (events' bytes, one record at a time)", *best(events_one, args.repeat, n)))

        def inline() -> None:
            for rec in recs:
                record_line(rec)

        rows.append(("  (older versions' line, events inline)", *best(inline, args.repeat, n)))

        line = (folder / "records.jsonl").read_bytes()[: lines_size // n]
        ev = b"\x01" * (events_size // n)
        path = Path(tmp) / "w"

        def writes() -> None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC
            a, b = os.open(path, flags), os.open(str(path) + "2", flags)
            for _ in range(n):
                os.write(b, ev)
                os.write(a, line)
            os.close(a)
            os.close(b)

        rows.append(("  (two os.write calls per record)", *best(writes, args.repeat, n)))

    print(f"{n:,} records x {args.events} events, best of {args.repeat}: µs per record")
    print(f"{'':48s} {'CPU':>8s} {'wall':>8s}")
    for name, c, w in rows:
        print(f"{name:48s} {c:8.2f} {w:8.2f}")
    print(f"records.jsonl {lines_size / n:.0f} B/record, events.bin {events_size / n:.0f} B/record")


if __name__ == "__main__":
    main()
