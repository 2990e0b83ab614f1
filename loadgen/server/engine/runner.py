"""The seam between the scheduler and whatever executes a step (simulated or real).

A runner receives a :class:`~loadgen.server.engine.batch.ScheduledBatch` — one flattened
batch of decode tokens and prefill chunks, with positions and block tables — and returns
the sampled tokens and how long the step took: the sim runner
(:mod:`loadgen.server.sim.runner`) a *modelled* ``duration_s``, a real runner
(:mod:`loadgen.server.torch.runner`) ``0.0`` ("already elapsed": the engine reads its
clock). :func:`request_seed` seeds a request's sampling.

What a real runner must do with a batch, and how to drive one: docs/server.md, "The runner
seam".
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Protocol

from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq

__all__ = ["ModelRunner", "StepResult", "request_seed"]


@dataclass(slots=True)
class StepResult:
    """``sampled[seq_id]`` holds the new token(s) of every sequence whose ``sample`` is
    true (usually one token). ``duration_s`` is the modelled step time, or 0.0 when the
    time has already elapsed in :meth:`ModelRunner.execute`. ``drafts[seq_id]``: the
    draft tokens a speculative proposer made for the sequence's next step (how many; the
    scheduler schedules at most ``EngineConfig.num_speculative_tokens`` of them)."""

    sampled: dict[int, list[int]] = field(default_factory=dict)
    duration_s: float = 0.0
    drafts: dict[int, int] = field(default_factory=dict)


class ModelRunner(Protocol):
    """Executes one engine step. ``execute`` must not keep ``batch`` after returning."""

    def execute(self, batch: ScheduledBatch) -> StepResult:
        """Run one step: a token for every sequence whose ``sample`` is true."""
        ...


def request_seed(seq: ScheduledSeq) -> int:
    """The sampling seed of a sequence: ``params.seed``, else a stable hash of its id."""
    if seq.params.seed is not None:
        return seq.params.seed
    return zlib.crc32(seq.request_id.encode())
