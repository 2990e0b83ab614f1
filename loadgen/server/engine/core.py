"""The step loop both engines run: a scheduler and a runner advanced as discrete events.

The core holds no event loop and never sleeps. It is driven through a clock: its driver
calls :meth:`EngineCore.poll` when the clock reaches :meth:`EngineCore.next_event_time`
— the sim's async engine (:mod:`loadgen.server.sim.engine`), the torch engine's process
(:mod:`loadgen.server.torch.worker`), or tests and offline benchmarks in virtual time,
with a clock they advance themselves. One step is ``schedule()`` → ``runner.execute`` →
``update``.

Modelled steps (the sim) follow each other on *absolute* deadlines: a step ends at its
start plus the runner's duration (times ``time_scale``) and the next starts at that end,
however late the driver polls, so wake-up lag never accumulates. A step never starts
before the last request that arrived (so no request is scheduled before it exists).
With ``realtime=True`` (a real runner, whose ``execute`` takes the time itself) a step
starts at the clock's time, ends when ``execute`` returns, and its outputs come back
from the same :meth:`EngineCore.poll`: one poll runs one step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

from loadgen.server.engine.batch import ScheduledBatch
from loadgen.server.engine.interface import EngineRequest, EngineStats, TokenOutput
from loadgen.server.engine.runner import ModelRunner, StepResult
from loadgen.server.engine.scheduler import EngineConfig, Scheduler

__all__ = ["Clock", "Core", "EngineCore", "ManualClock", "StepHook", "poll_due"]

Clock = Callable[[], float]
StepHook = Callable[[ScheduledBatch, StepResult, float, float], None]  # batch, result, start, end


class Core(Protocol):
    """What the async engine needs from a core (single pool or disaggregated)."""

    def add_request(self, request: EngineRequest) -> None:
        """Queue a request now; raise ``EngineError`` subclasses when it is rejected."""
        ...

    def abort(self, request_id: str) -> bool:
        """Drop a request and free its KV blocks; False if it is unknown (or done)."""
        ...

    def poll(self, now: float | None = None) -> list[TokenOutput]:
        """Process the events due at ``now``; return the new outputs in order."""
        ...

    def next_event_time(self) -> float | None:
        """When :meth:`poll` has work next (clock seconds); None when idle."""
        ...

    def has_unfinished(self) -> bool:
        """Whether any request is still waiting, running or in transfer."""
        ...

    def stats(self) -> EngineStats:
        """Gauges and counters for ``/metrics``."""
        ...


class _Events(Protocol):
    def next_event_time(self) -> float | None: ...

    def process_event(self) -> list[TokenOutput]: ...


def poll_due(core: _Events, now: float, max_events: int) -> list[TokenOutput]:
    """Process ``core``'s events due at ``now`` in time order, at most ``max_events`` of
    them (the catch-up work of one poll); return their outputs in order."""
    outputs: list[TokenOutput] = []
    for _ in range(max_events):
        t = core.next_event_time()
        if t is None or t > now:
            break
        outputs.extend(core.process_event())
    return outputs


class ManualClock:
    """A clock that only moves when told to (virtual time for tests and benchmarks)."""

    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance_to(self, t: float) -> None:
        """Move to ``t`` (never backwards)."""
        self.t = max(self.t, t)


class EngineCore:
    """One scheduler and one runner (one GPU group). See the module docstring.

    ``on_step(batch, result, start, end)`` is called for every executed step.
    ``max_steps_per_poll`` bounds the catch-up work of one :meth:`poll`. ``realtime``: the
    runner computes the step (see the module docstring).
    """

    def __init__(
        self,
        config: EngineConfig,
        runner: ModelRunner,
        clock: Clock,
        *,
        time_scale: float = 1.0,
        on_step: StepHook | None = None,
        max_steps_per_poll: int = 64,
        realtime: bool = False,
    ) -> None:
        if not time_scale > 0.0:
            raise ValueError("time_scale must be > 0")
        self.runner = runner
        self.clock = clock
        self.time_scale = time_scale
        self.realtime = realtime
        self.on_step = on_step
        self.max_steps_per_poll = max_steps_per_poll
        self._t = clock()  # the scheduler's notion of "now": the event being processed
        self.scheduler = Scheduler(config, now=lambda: self._t)
        self._inflight: tuple[ScheduledBatch, StepResult] | None = None
        self._busy_until = -math.inf
        self.last_step_end = -math.inf
        self._last_input = -math.inf
        self._stalled = False
        self.busy_s = 0.0  # clock seconds of the steps started so far

    # ------------------------------------------------------------------ inputs
    def add_request(
        self, request: EngineRequest, *, at: float | None = None, num_external_tokens: int = 0, hold_kv: bool = False
    ) -> None:
        """Queue a request arriving at ``at`` (default: the clock). Raises on rejection.
        ``hold_kv``: its blocks outlive it until :meth:`release` (a prefill pool's)."""
        self._t = self.clock() if at is None else at
        self.scheduler.add_request(request, num_external_tokens=num_external_tokens, hold_kv=hold_kv)
        self._wake(self._t)

    def _wake(self, t: float) -> None:
        self._last_input = max(self._last_input, t)
        self._stalled = False

    def reserve(self, request: EngineRequest, *, at: float, num_external_tokens: int) -> int | None:
        """Reserve blocks at ``at`` for a request whose KV is coming (a decode pool's):
        the prompt tokens its own prefix cache holds, or None (no room)."""
        self._t = at
        return self.scheduler.reserve(request, num_external_tokens=num_external_tokens)

    def kv_received(self, request_id: str, *, at: float) -> None:
        """The reserved request's KV arrived at ``at``: it may be scheduled."""
        self._t = at
        self.scheduler.kv_received(request_id)
        self._wake(at)

    def release(self, request_id: str, *, at: float) -> None:
        """Free the blocks a finished ``hold_kv`` request kept (its KV was read)."""
        self._t = at
        self.scheduler.release(request_id)
        self._wake(at)

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is and free its blocks; False if unknown."""
        self._t = self.clock()
        found = self.scheduler.abort(request_id)
        self._stalled = False
        return found

    def abort_all(self) -> None:
        """Abort every waiting and running request."""
        for seq in [*self.scheduler.waiting, *self.scheduler.running]:
            self.abort(seq.request_id)

    def has_request(self, request_id: str) -> bool:
        """Whether the request is waiting or running here."""
        return self.scheduler.get(request_id) is not None

    def has_unfinished(self) -> bool:
        """Whether any request is waiting or running."""
        return self.scheduler.has_unfinished()

    # ------------------------------------------------------------------ events
    @property
    def busy(self) -> bool:
        """Whether a step is in flight."""
        return self._inflight is not None

    def next_event_time(self) -> float | None:
        """When the core next needs :meth:`process_event`; None when idle."""
        if self._inflight is not None:
            return self._busy_until
        if self._stalled or not self.scheduler.has_unfinished():
            return None
        return max(self.last_step_end, self._last_input)

    def process_event(self) -> list[TokenOutput]:
        """Finish the running step (if any) and start the next one; return new outputs.
        In real time the step started is also finished: its outputs are returned too."""
        outputs = self._finish_step() if self._inflight is not None else []
        if self.scheduler.has_unfinished():
            start = max(self.last_step_end, self._last_input)
            self._start_step(max(start, self.clock()) if self.realtime else start)
            if self.realtime and self._inflight is not None:
                outputs.extend(self._finish_step())
        return outputs

    def _finish_step(self) -> list[TokenOutput]:
        assert self._inflight is not None
        batch, result = self._inflight
        self._inflight = None
        self._t = self.last_step_end = self._busy_until
        return self.scheduler.update(batch, result.sampled, result.drafts)

    def _start_step(self, start: float) -> None:
        self._t = start
        batch = self.scheduler.schedule()
        if batch.is_empty:
            self._stalled = True  # nothing can run until a request arrives or leaves
            return
        result = self.runner.execute(batch)
        if result.duration_s > 0.0 and not self.realtime:
            end = start + result.duration_s * self.time_scale
        else:
            end = max(start, self.clock())
        self._inflight = (batch, result)
        self._busy_until = end
        self.busy_s += end - start
        if self.on_step is not None:
            self.on_step(batch, result, start, end)

    def poll(self, now: float | None = None) -> list[TokenOutput]:
        """Process every event due at ``now`` (default: the clock), at most
        ``max_steps_per_poll`` of them; return the outputs in order."""
        return poll_due(self, self.clock() if now is None else now, self.max_steps_per_poll)

    def stats(self) -> EngineStats:
        """The scheduler's gauges and counters, and the time spent in steps."""
        stats = self.scheduler.stats()
        stats.busy_s = self.busy_s
        return stats
