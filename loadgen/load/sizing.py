"""How many worker processes ``--workers auto`` (the default) starts on this machine.

A worker's cost is per streamed event, not per stream (every event is read, stamped and
parsed on its one event loop), so ``workers = ceil(need / capacity)``: the busiest level's
events per second (:data:`EVENTS_PER_STREAM_S` per closed-loop stream; rate × mean output
tokens open loop) over :data:`EVENTS_PER_WORKER_S`, at least 1 and at most the free cores
(a ``/proc/stat`` sample over :data:`BUSY_SAMPLE_S`). A light load stays in one process.
Ray clusters keep their own rule (:func:`loadgen.load.workers.auto_workers`).

docs/architecture.md, "How a level is sent" → "How many workers ``--workers auto``
starts", has the rule in full and why a sample, not the load average; docs/guide.md, "More
streams than one process can time", has the measurements behind the capacity.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from loadgen.load.profiles import Profile
from loadgen.numfmt import fmt

__all__ = [
    "BUSY_SAMPLE_S",
    "EVENTS_PER_STREAM_S",
    "EVENTS_PER_WORKER_S",
    "Need",
    "busy_cores",
    "free_cores",
    "level_need",
    "max_streams",
    "size_workers",
]

# benchmarks/client_overhead.py: one process keeps the p99 gap error <= 2 ms up to ~3,800
# streamed events per second (~100 streams at 20 ms a token, the aiohttp transport, uvloop)
EVENTS_PER_WORKER_S = 3_800.0
EVENTS_PER_STREAM_S = 50.0  # closed loop: a stream's events per second when the server is fast (20 ms ITL)
BUSY_SAMPLE_S = 0.25  # how long free_cores watches the CPUs


@dataclass(frozen=True, slots=True)
class Need:
    """The events per second a run's busiest level will need, and how that was reckoned."""

    events_per_s: float
    basis: str  # e.g. "256 streams × ~50 events/s"


def max_streams(prof: Profile) -> int:
    """The most requests the profile keeps in flight at once (0: unknown, open loop)."""
    users = [int(v) for v in prof.levels if prof.mode == "concurrency"]
    return max([*users, prof.max_in_flight or 0, prof.max_concurrency if prof.kind == "sweep-rate" else 0])


def level_need(profile: Profile, output_tokens: float) -> Need:
    """What ``profile``'s busiest level needs, its requests streaming ``output_tokens``
    tokens on average (open loop)."""
    cap = profile.max_in_flight
    if profile.kind == "sweep-rate" or profile.mode == "concurrency":  # sweep-rate's first level: closed loop
        return _streams(max(max_streams(profile), 1))
    rates = list(profile.levels)
    if profile.kind == "capacity":  # the search's ceiling: rate_high, or as far as it may double
        rates.append(profile.rate_high or profile.rate_low * 2 ** (profile.max_levels - 1))
    rate = max(rates or [1.0])
    need = Need(rate * output_tokens, f"{fmt(rate)} requests/s × ~{fmt(output_tokens)} output tokens")
    if cap is not None and cap * EVENTS_PER_STREAM_S < need.events_per_s:
        return Need(cap * EVENTS_PER_STREAM_S, f"--max-in-flight {cap} × ~{EVENTS_PER_STREAM_S:g} events/s")
    return need


def _streams(n: int) -> Need:
    n = max(n, 1)
    return Need(n * EVENTS_PER_STREAM_S, f"{n:,} stream{'s' if n > 1 else ''} × ~{EVENTS_PER_STREAM_S:g} events/s")


def free_cores(cpus: int | None = None, busy: float | None = None) -> int:
    """The cores a run may have: ``cpus`` (this process's allowed CPUs unless given) minus
    ``busy`` (the cores busy now, :func:`busy_cores`, unless given), rounded; at least 1."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if busy is None:
        busy = busy_cores()
    return max(1, cpus - round(busy))


def _cpu_times() -> tuple[int, int]:
    """All CPUs' time so far (user to steal) and the idle part of it, in ticks."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return sum(ticks), ticks[3] + ticks[4]  # idle + iowait


def busy_cores(sample_s: float = BUSY_SAMPLE_S) -> float:
    """How many of the machine's cores were busy over the next ``sample_s`` (``/proc/stat``),
    or the one-minute load average where there is no ``/proc/stat``; 0 when neither says."""
    try:
        total0, idle0 = _cpu_times()
        time.sleep(sample_s)
        total1, idle1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0]
        except OSError:
            return 0.0
    total = total1 - total0
    if total <= 0:
        return 0.0
    return (1.0 - (idle1 - idle0) / total) * (os.cpu_count() or 1)


def size_workers(need: Need, free: int | Callable[[], int]) -> tuple[int, str]:
    """How many workers hold ``need`` with at most ``free`` cores, and why (one line).
    ``free`` may be a function (:func:`free_cores`): it is asked only when one worker is
    not enough, so a light run does not wait for the CPU sample."""
    want = max(1, math.ceil(need.events_per_s / EVENTS_PER_WORKER_S))
    if want == 1:
        return 1, f"{need.basis} ≈ {fmt(need.events_per_s)} events/s, within one worker's ~{fmt(EVENTS_PER_WORKER_S)}"
    if callable(free):
        free = free()
    n = min(want, max(free, 1))
    why = (
        f"{need.basis} ≈ {fmt(need.events_per_s)} events/s at ~{fmt(EVENTS_PER_WORKER_S)} per worker; "
        f"{free} free core{'s' if free != 1 else ''}"
    )
    return n, why + (f", so {n} instead of {want}" if want > n else "")
