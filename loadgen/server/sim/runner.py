"""The sim runner: a step lasts what the roofline model says and samples made-up tokens.

Tokens are a pure function of (request seed, position), so a request preempted and
recomputed, or moved from a prefill pool to a decode pool, gets the same tokens.
"""

from __future__ import annotations

import random
from typing import Iterable

from loadgen.errors import EngineError
from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq
from loadgen.server.engine.runner import StepResult, request_seed
from loadgen.server.sim.roofline import RooflineModel, StepCost

__all__ = ["SimRunner", "sim_token"]

_MASK = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64 finaliser: a well-spread 64-bit hash of ``x``."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def sim_token(seed: int, position: int, vocab_size: int, avoid: Iterable[int] = (),
              min_token_id: int = 0) -> int:
    """The sim's token at ``position`` of a request seeded ``seed``: an id in
    ``[min_token_id, vocab_size)`` that is not in ``avoid``."""
    span = vocab_size - min_token_id
    offset = _mix64((seed * 0x100000001B3 + position) & _MASK) % span
    banned = avoid if isinstance(avoid, (set, frozenset)) else set(avoid)
    for _ in range(span):
        token = min_token_id + offset
        if token not in banned:
            return token
        offset = (offset + 1) % span
    raise EngineError("every token id is banned")


class SimRunner:
    """A :class:`~loadgen.server.engine.runner.ModelRunner` that computes nothing.

    Each step lasts the roofline time (times a seeded log-normal factor with sigma
    ``jitter`` and mean 1). Tokens are pseudo-random per (request seed, position), so a
    recomputed or disaggregated request gets the same tokens. EOS, the request's stop
    tokens and ids below ``min_token_id`` (special tokens of the server's tokenizer) are
    never produced, except EOS with probability ``eos_probability`` per token (then the
    scheduler ends the request unless ``ignore_eos``; a model without an EOS id never
    ends this way). ``temperature`` is ignored.
    """

    def __init__(self, roofline: RooflineModel, *, seed: int = 0, jitter: float = 0.0,
                 eos_probability: float = 0.0, eos_token_id: int | None = None,
                 min_token_id: int = 0) -> None:
        self.roofline = roofline
        self.vocab_size = roofline.model.vocab_size
        self.eos_token_id = roofline.model.eos_token_id if eos_token_id is None else eos_token_id
        self.jitter, self.eos_probability = jitter, eos_probability
        self.min_token_id = min_token_id
        self._eos_only = frozenset(() if self.eos_token_id is None else (self.eos_token_id,))
        self._rng = random.Random(seed)
        self.last_cost: StepCost | None = None

    def execute(self, batch: ScheduledBatch) -> StepResult:
        """The modelled duration of ``batch`` and a token for each sampling sequence."""
        cost = self.roofline.step_cost((len(s.token_ids), s.start_pos, s.sample) for s in batch.seqs)
        self.last_cost = cost
        duration = cost.total_s
        if self.jitter > 0.0:
            duration *= self._rng.lognormvariate(-self.jitter ** 2 / 2, self.jitter)
        sampled = {s.seq_id: [self._sample(s)] for s in batch.seqs if s.sample}
        return StepResult(sampled, duration)

    def _sample(self, seq: ScheduledSeq) -> int:
        seed, position = request_seed(seq), seq.context_len
        if self.eos_probability > 0.0 and self.eos_token_id is not None:
            draw = _mix64(((seed * 0x100000001B3 + position) ^ 0xD1B54A32D192ED03) & _MASK)
            if draw / 2.0 ** 64 < self.eos_probability:
                return self.eos_token_id
        stops = seq.params.stop_token_ids
        avoid = self._eos_only if not stops else {*self._eos_only, *stops}
        return sim_token(seed, position, self.vocab_size, avoid, self.min_token_id)
