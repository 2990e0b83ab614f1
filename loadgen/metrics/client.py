"""Client health: the event-loop lag probe binned for plotting, late open-loop sends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from loadgen.metrics.results import LagSeries
from loadgen.records import RequestRecord

__all__ = ["LATE_NS", "WorkerStats", "lag_over_time", "late_sends"]

LATE_NS = 2_000_000  # an open-loop send more than 2 ms after its scheduled time is "late"


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """What one worker process measured of itself during a level: its event-loop lag
    samples (and when), the CPU and wall seconds it used, and how long its main thread
    waited for a CPU while runnable (``/proc/self/schedstat``; None elsewhere)."""

    worker: int
    share: int = 0  # its share of the level: records whose ``worker`` (user) % n_shares == share
    n_shares: int = 1
    loop_lag_ms: list[float] = field(default_factory=list)
    loop_lag_t_ns: list[int] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    runqueue_s: float | None = None


def lag_over_time(t_ns: Sequence[int], lag_ms: Sequence[float], anchor_ns: int, bin_s: float = 1.0) -> LagSeries:
    """The worst loop lag in each ``bin_s`` bin (``t_s``, ``max_ms``).

    ``t_s`` is the bin start in seconds from ``anchor_ns`` (the run's clock anchor); empty
    bins are left out.
    """
    if not len(t_ns):
        return LagSeries()
    t = (np.asarray(t_ns, dtype=np.int64) - anchor_ns) / 1e9
    lag = np.asarray(lag_ms, dtype=np.float64)
    bins = np.floor(t / bin_s).astype(np.int64)
    uniq, inv = np.unique(bins, return_inverse=True)
    worst = np.full(uniq.size, -np.inf)
    np.maximum.at(worst, inv, lag)
    return LagSeries(t_s=[round(float(b * bin_s), 3) for b in uniq], max_ms=[round(float(x), 3) for x in worst])


def late_sends(records: Sequence[RequestRecord], threshold_ns: int = LATE_NS) -> int:
    """How many requests went out more than ``threshold_ns`` after their scheduled time
    (or after the in-flight credit they waited for, which is the cap's delay)."""
    return sum(1 for r in records if r.sent_ns - max(r.scheduled_ns, r.credit_ns) > threshold_ns)
