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
    ttft_ms: float,
    gap_ms: float,
    request_side: bool = True,
    prompt: Callable[[int], str] = "hello {}".format,
) -> None:
    """Each record against the request the server served with its prompt (``prompt(index)``).

    Exactly, per request: it was sent before the server's handler began, and each event is
    stamped no earlier than the write that carried it (a stamp taken before its bytes could be
    read fails here). Near, as medians: the client's TTFT exceeds the server's own (its
    handler's start to its first write) by at most ``ttft_ms``, and a client gap differs from
    the server's gap between the same two writes by at most ``gap_ms``. With ``request_side``
    off, the excess counts only the first event's way back: a server in a process of its own,
    reading a burst of requests on a loaded machine, begins the later ones late by itself.
    """
    by_prompt = {s.prompt: s for s in served}
    excess, gap_diff = [], []
    for r in records:
        s = by_prompt[prompt(r.index)]
        stamps = [t for t, _ in r.events]
        assert len(stamps) == len(s.writes), (r.index, len(stamps), len(s.writes))
        assert r.sent_ns <= s.arrival_ns, (r.index, s.arrival_ns - r.sent_ns)
        late = [t - w for t, w in zip(stamps, s.writes, strict=True)]
        assert min(late) >= 0, (r.index, late)  # no event is seen before its bytes were written
        excess.append(late[0] + (s.arrival_ns - r.sent_ns if request_side else 0))
        pairs = zip(itertools.pairwise(stamps), itertools.pairwise(s.writes), strict=True)
        gap_diff += [(c1 - c0) - (w1 - w0) for (c0, c1), (w0, w1) in pairs]
    over = statistics.median(excess) / 1e6
    assert over <= ttft_ms, f"median TTFT {over:.2f} ms over the server's (tolerance {ttft_ms} ms)"
    if gap_diff:
        off = statistics.median(gap_diff) / 1e6
        assert abs(off) <= gap_ms, f"median gap {off:+.2f} ms off the server's (tolerance {gap_ms} ms)"
