"""A load level as data: its plan (:class:`LevelPlan`), its outcome (:class:`LevelResult`)
and its open-loop schedule (:func:`level_schedule`).

Everything that runs levels — the runner, the session driver, the worker pools — shares
these; they import nothing else of :mod:`loadgen.load` but the arrival processes.
"""

from __future__ import annotations

import dataclasses
from array import array
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from loadgen.load.arrivals import schedule
from loadgen.load.store import RecordStore
from loadgen.metrics.client import WorkerStats
from loadgen.metrics.results import Load, LoadMode
from loadgen.records import RequestRecord

__all__ = ["TRIAL_LEVELS", "Keep", "LevelPlan", "LevelResult", "level_schedule"]

I64 = npt.NDArray[np.int64]

TRIAL_LEVELS = 4096  # levels a run can have before trials' request indices would overlap


@dataclass(slots=True)
class LevelPlan:
    """One load level. ``requests`` excludes the ``warmup_requests`` sent first."""

    index: int
    mode: LoadMode
    value: float
    requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_in_flight: int | None = None  # open loop only
    max_lateness_s: float = 10.0  # open loop: later than this (waiting for the cap) -> dropped
    seed: int = 0
    ramp_s: float = 0.0  # closed loop: users join one by one, evenly over this many seconds
    worker: int = 0  # this process's share of the level: users and sends w, w + n, w + 2n, ...
    n_workers: int = 1
    start_ns: int = 0  # the level's start on the shared monotonic clock (0: a few ms from now)
    offsets: np.ndarray | None = None  # trace replay: the send offsets (s, ascending) instead of arrival/value
    trial: int = 0  # --trials: which repetition of the level this is (its own requests)
    ramp_up_s: float = 0.0  # closed loop (--ramp-up): users join evenly over this many seconds, sent then: warm-up
    warm_connections: bool = False  # open the level's connections before its clock starts

    def user_start_ns(self, start_ns: int, user: int, users: int) -> int:
        """Closed loop: when user ``user`` of ``users`` sends its first request (a ramp
        spreads the users evenly over its seconds; without one, all at ``start_ns``)."""
        ramp = self.ramp_s or self.ramp_up_s
        return start_ns + int(ramp * 1e9 * user / users) if ramp > 0 else start_ns

    def warm_until_ns(self, start_ns: int) -> int:
        """Closed loop: requests sent before this are warm-up (``--ramp-up``'s seconds; 0
        without a ramp-up: a share's first request may leave a hair before ``start_ns``, as
        the event loop runs a timer up to its clock resolution early, and is measured)."""
        return start_ns + int(self.ramp_up_s * 1e9) if self.ramp_up_s > 0 else 0

    def deadline_ns(self, start_ns: int) -> int | None:
        """Closed-loop sessions and tasks: when no new request goes out (``duration_s``
        after the ramp-up; None: the level is bound by requests only)."""
        if self.duration_s is None:
            return None
        return start_ns + int((self.ramp_up_s + self.duration_s) * 1e9)

    def measured_deadline_ns(self, first_measured_ns: int) -> int | None:
        """Closed loop: when no new request goes out, ``duration_s`` after the level's first
        measured request was sent (warm-up and ramp-up never use up the duration; None: the
        level is bound by requests only)."""
        return None if self.duration_s is None else first_measured_ns + int(self.duration_s * 1e9)

    @property
    def spec_level(self) -> int:
        """Where the level's requests come from in the workload's index space: trial ``t``
        of level ``i`` draws those of ``i + t * TRIAL_LEVELS`` (new requests, same law)."""
        return self.index + self.trial * TRIAL_LEVELS

    def share(self, worker: int, n_workers: int, start_ns: int) -> LevelPlan:
        """This level as worker ``worker`` of ``n_workers`` runs it (``max_in_flight`` stays
        the level's: the workers draw on shared credits, see :mod:`loadgen.load.credits`)."""
        return dataclasses.replace(self, worker=worker, n_workers=n_workers, start_ns=start_ns)

    def split_share(self, worker: int, n_workers: int, start_ns: int) -> LevelPlan:
        """:meth:`share` for senders that share no credits (Ray actors on other machines):
        ``max_in_flight`` is split so that the shares add up to the cap."""
        cap = self.max_in_flight
        if cap is not None:
            cap = max(cap // n_workers + (1 if worker < cap % n_workers else 0), 1)
        return dataclasses.replace(self.share(worker, n_workers, start_ns), max_in_flight=cap)

    @property
    def load(self) -> Load:
        """The offered load: whole users in closed loop, a rate in open loop."""
        return Load(self.mode, int(self.value) if self.mode == "concurrency" else float(self.value))

    def last_send_s(self) -> float | None:
        """Open loop: when the level's last request is due, in seconds from its start (None:
        a closed loop, whose pace the server sets)."""
        if self.mode != "rate":
            return None
        offsets = level_schedule(self)
        return float(offsets[-1]) if len(offsets) else 0.0


Keep = Literal["all", "compact", "none"]


@dataclass(slots=True)
class LevelResult:
    """One level's outcome. Its finished records are in ``records`` as they came, or —
    a result made with ``keep="compact"`` — in ``store`` (:meth:`add` decides), or
    nowhere (``keep="none"``: a worker, whose coordinator keeps them)."""

    plan: LevelPlan
    records: list[RequestRecord] = field(default_factory=list)
    store: RecordStore | None = None
    loop_lag_ms: array[float] = field(default_factory=lambda: array("d"))  # every 10 ms: compact
    loop_lag_t_ns: array[int] = field(default_factory=lambda: array("q"))
    start_ns: int = 0
    end_ns: int = 0
    scheduled: int = 0  # requests the schedule asked for (open loop)
    dropped: int = 0  # open loop: never sent, the cap stayed full past max_lateness_s
    interrupted: bool = False
    worker_stats: list[WorkerStats] = field(default_factory=list)  # worker processes: each one's health
    lost_workers: list[int] = field(default_factory=list)  # workers lost during the level (it is partial)
    silent_workers: dict[int, float] = field(default_factory=dict)  # worker: its longest silence (s), when flagged
    clock_uncertainty_ns: int | None = None  # workers on other clocks: the worst offset uncertainty
    keep: Keep = "all"
    events: tuple[I64, I64, I64] | None = None  # pooled trials of compact results: their events apart

    def __post_init__(self) -> None:
        if self.keep == "compact" and self.store is None:
            self.store = RecordStore()

    def add(self, rec: RequestRecord) -> None:
        """Keep a finished record as ``keep`` says (compact: its events and vendor
        timings are not referenced afterwards)."""
        if self.store is not None:
            self.store.add(rec)
        elif self.keep == "all":
            self.records.append(rec)

    def for_summary(self) -> tuple[list[RequestRecord], tuple[I64, I64, I64] | None]:
        """The records and, when compact, their events apart (as ``summarize_level`` takes them)."""
        if self.store is None:
            return self.records, self.events
        return self.store.records(), self.store.events()


def level_schedule(plan: LevelPlan) -> np.ndarray:
    """The level's whole open-loop schedule (offsets in s), the same in every worker."""
    n = None if plan.requests is None else plan.requests + plan.warmup_requests
    if plan.offsets is not None:  # a trace's recorded times, cut to the level's bounds
        cut = plan.offsets[:n]
        return cut if plan.duration_s is None else cut[cut < plan.duration_s]
    return schedule(
        plan.arrival, plan.value, n=n, duration_s=plan.duration_s, seed=plan.seed, burstiness=plan.burstiness
    )
