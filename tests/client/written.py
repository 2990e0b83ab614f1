"""The client's stamps checked against the scripted server's own write times.

Both ends stamp with ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux, one clock for
every process of the machine), so a record is compared with what the server actually did
(tests/scripted_server.py's :class:`Served`), not with its script: a loaded machine stretches
the server's sleeps, and that stretch is the server's, not a fault of the client's stamps.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable

from loadgen.records import RequestRecord
from tests.scripted_server import Served

__all__ = ["assert_timed_as_written"]


def assert_timed_as_written(
    records: list[RequestRecord],
    served: list[Served],
    ttft_over: float,
    gap_off: float,
    prompt: Callable[[int], str] = "hello {}".format,
) -> None:
    """Each record against the request the server served with its prompt (``prompt(index)``).

    Exactly, per request: it was sent before the server's handler began, and each event is
    stamped no earlier than the write that carried it (a stamp taken before its bytes could be
    read fails here). Near, as fractions of what the server did: the median excess of the
    client's TTFT over the server's (its handler's start to its first write) is at most
    ``ttft_over`` of the server's median TTFT, and the median difference between a client gap
    and the server's gap between the same two writes at most ``gap_off`` of the median server gap.
    """
    by_prompt = {s.prompt: s for s in served}
    excess, server_ttft, gap_diff, server_gaps = [], [], [], []
    for r in records:
        s = by_prompt[prompt(r.index)]
        stamps = [t for t, _ in r.events]
        assert len(stamps) == len(s.writes), (r.index, len(stamps), len(s.writes))
        assert r.sent_ns <= s.arrival_ns, (r.index, s.arrival_ns - r.sent_ns)
        late = [t - w for t, w in zip(stamps, s.writes, strict=True)]
        assert min(late) >= 0, (r.index, late)  # no event is seen before its bytes were written
        excess.append((stamps[0] - r.sent_ns) - (s.writes[0] - s.arrival_ns))
        server_ttft.append(s.writes[0] - s.arrival_ns)
        for (c0, c1), (w0, w1) in zip(itertools.pairwise(stamps), itertools.pairwise(s.writes), strict=True):
            gap_diff.append(abs((c1 - c0) - (w1 - w0)))
            server_gaps.append(w1 - w0)
    ttft_ms, excess_ms = statistics.median(server_ttft) / 1e6, statistics.median(excess) / 1e6
    assert excess_ms <= ttft_over * ttft_ms, f"median TTFT {excess_ms:.2f} ms over the server's {ttft_ms:.2f} ms"
    if server_gaps:
        gap_ms, off_ms = statistics.median(server_gaps) / 1e6, statistics.median(gap_diff) / 1e6
        assert off_ms <= gap_off * gap_ms, f"gaps {off_ms:.2f} ms off the server's (median {gap_ms:.2f} ms)"
