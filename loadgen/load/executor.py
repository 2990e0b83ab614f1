"""Where a run's levels execute: the :class:`LevelExecutor` Protocol and its in-process kind.

A run's sweep hands each level's plan to one executor and reads back the level's result;
it never asks which kind it holds. Three kinds satisfy the Protocol:

- :class:`InProcess`: one :class:`~loadgen.load.runner.Runner` in this process
  (``--workers 1``);
- :class:`~loadgen.load.workers.WorkerPool`: worker processes on this machine;
- :class:`~loadgen.load.ray_pool.RayPool`: Ray actors across a cluster.

A level that runs until precise hands its :class:`~loadgen.load.precision.LevelWatch` to
``run_level``; each kind feeds it the level's records as they finish and ends the level
when it says so. Each is entered as an async context manager before its first level (the pools start
their workers there; the in-process kind has nothing to start) and reports, through
:meth:`LevelExecutor.clock_report`, what ``run.json`` should say of its workers' clocks
(None: every sender shares this machine's monotonic clock).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from loadgen.load.plan import LevelPlan, LevelResult
from loadgen.load.precision import LevelWatch
from loadgen.load.runner import Runner
from loadgen.load.share import measure_share
from loadgen.records import RequestRecord

__all__ = ["InProcess", "LevelExecutor"]


class LevelExecutor(Protocol):
    """Runs a run's levels one at a time; :meth:`interrupt` stops the one running."""

    @property
    def in_flight(self) -> int:
        """Requests in flight now (the live display reads it)."""
        ...

    @property
    def interrupted(self) -> bool:
        """Whether :meth:`interrupt` was called."""
        ...

    def interrupt(self) -> None:
        """Stop sending and end the level: what is in flight ends as ``cancelled``."""
        ...

    def end_level(self) -> bool:
        """End the level running now as at its duration (what is in flight finishes) and
        go on with the next; False where the executor cannot (Ray actors)."""
        ...

    async def run_level(self, plan: LevelPlan, watch: LevelWatch | None = None) -> LevelResult:
        """Run one level (or one trial of it) and return its result; with ``watch``, every
        finished record goes to it too, and the level ends (as at its duration) when it
        says the level's precision targets are met."""
        ...

    async def __aenter__(self) -> object: ...

    async def __aexit__(self, *exc: object) -> None: ...

    def clock_report(self) -> list[dict[str, Any]] | None:
        """For ``run.json``: each worker's clock offset and its uncertainty, when the
        workers run on other machines' clocks; None when all share this one's."""
        ...


class InProcess:
    """Levels run by one runner in this process (``--workers 1``), with the requests of
    ``source`` (a :class:`~loadgen.load.source.SpecSource`, a session source or, in
    tests, one iterator for the whole run)."""

    def __init__(self, runner: Runner, source: Any) -> None:
        self.runner, self.source = runner, source

    @property
    def in_flight(self) -> int:
        return self.runner.in_flight

    @property
    def interrupted(self) -> bool:
        return self.runner.interrupted

    def interrupt(self) -> None:
        self.runner.interrupt()

    def end_level(self) -> bool:
        self.runner.end_level()
        return True

    async def run_level(self, plan: LevelPlan, watch: LevelWatch | None = None) -> LevelResult:
        runner = self.runner
        on_record = runner.on_record
        if watch is not None:

            def tap(rec: RequestRecord) -> None:
                if on_record is not None:
                    on_record(rec)
                if watch.add((rec,)):
                    runner.end_level()

            runner.on_record = tap  # the level's context takes it at its start
        try:
            res, stats = await measure_share(runner, plan, runner.prepare(plan, self.source), 0)
        finally:
            runner.on_record = on_record
        res.worker_stats = [stats]  # this process's own CPU and run-queue wait
        return res

    async def __aenter__(self) -> InProcess:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def clock_report(self) -> None:
        """None: the runner is on this machine's clock."""
        return None


if TYPE_CHECKING:  # mypy checks every kind against the Protocol here, structurally
    from loadgen.load.ray_pool import RayPool
    from loadgen.load.workers import WorkerPool

    def _kinds(here: InProcess, processes: WorkerPool, ray: RayPool) -> list[LevelExecutor]:
        return [here, processes, ray]
