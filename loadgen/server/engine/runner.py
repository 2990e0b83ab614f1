"""The seam between the scheduler and whatever executes a step (simulated or real).

A runner receives a :class:`~loadgen.server.engine.batch.ScheduledBatch` — one
flattened batch of decode tokens and prefill chunks, with positions and block tables —
and returns the sampled tokens and how long the step took.

- The sim runner (:mod:`loadgen.server.sim.runner`) returns at once with a *modelled*
  ``duration_s``; the engine then waits that long (scaled) before delivering tokens.
- A real runner (:mod:`loadgen.server.torch.runner`) computes the step and returns
  ``duration_s = 0.0`` ("already elapsed"): the engine takes the step's end from its
  clock.

How a real (torch) runner plugs in: for every ``ScheduledSeq`` it feeds ``token_ids``
at ``positions``, writes their K/V at slot ``block_table[p // batch.block_size] *
batch.block_size + p % batch.block_size``, attends causally over ``context_len``
positions (the first ``start_pos`` already cached, prefix-cache hits included), and
computes logits only where ``sample`` is true (seeded by :func:`request_seed`,
``params.temperature``). ``finished_seq_ids`` / ``preempted_seq_ids`` say which
sequences' state may be dropped. The number of KV blocks is the runner's to decide
(``EngineConfig.num_gpu_blocks``). Drive it with ``EngineCore(config, runner,
time.monotonic, realtime=True)`` (``poll`` / ``next_event_time``), or with the bare
``Scheduler``: ``batch = schedule(); result = runner.execute(batch);
update(batch, result.sampled)``.
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
