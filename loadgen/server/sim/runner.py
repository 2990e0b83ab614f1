"""The sim runner: a step lasts what the roofline model says and samples made-up tokens.

Tokens are a pure function of (request seed, position), so a request preempted and
recomputed, or moved from a prefill pool to a decode pool, gets the same tokens.
Speculative decoding (:class:`Speculation`, ``--speculative-tokens K --acceptance-rate
A``): after each step the proposer (``draft``: always ``K``; ``ngram``: a truncated
geometric length) drafts for every sequence that sampled, and a step's accepted drafts are
a geometric draw, also a pure function of (seed, position). Pooling sequences sample
nothing and pay no LM head; a step that admits images first runs their vision encoder.

Docs: docs/server.md ("The cost of a step": speculative decoding; "The runner seam").
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from loadgen.errors import EngineError
from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq
from loadgen.server.engine.runner import StepResult, request_seed
from loadgen.server.sim.roofline import RooflineModel, StepCost

__all__ = ["PROPOSERS", "SimRunner", "Speculation", "sim_token"]

_MASK = (1 << 64) - 1
_EOS_SALT = 0xD1B54A32D192ED03
_ACCEPT_SALT = 0x8CB92BA72F3D8DD7
_MATCH_SALT = 0x5851F42D4C957F2D
PROPOSERS = ("draft", "ngram")


@dataclass(frozen=True, slots=True)
class Speculation:
    """Speculative decoding (module docstring): at most ``tokens`` (K) drafts per decode
    step, each accepted with ``acceptance_rate``; ``draft`` prices the draft model (None:
    drafting is free); ``proposer``: ``draft`` (always K) or ``ngram`` (0..K, each further
    token with probability ``match_rate``)."""

    tokens: int
    acceptance_rate: float
    draft: RooflineModel | None = None
    proposer: str = "draft"
    match_rate: float = 0.5

    @property
    def expected_tokens_per_step(self) -> float:
        """``(1 - A^(K+1)) / (1 - A)``: accepted drafts plus the target's own token."""
        a, k = self.acceptance_rate, self.tokens
        return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def _mix64(x: int) -> int:
    """splitmix64 finaliser: a well-spread 64-bit hash of ``x``."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def sim_token(seed: int, position: int, vocab_size: int, avoid: Iterable[int] = (), min_token_id: int = 0) -> int:
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

    def __init__(
        self,
        roofline: RooflineModel,
        *,
        seed: int = 0,
        jitter: float = 0.0,
        eos_probability: float = 0.0,
        eos_token_id: int | None = None,
        min_token_id: int = 0,
        speculation: Speculation | None = None,
    ) -> None:
        self.roofline = roofline
        self.vocab_size = roofline.model.vocab_size
        self.eos_token_id = roofline.model.eos_token_id if eos_token_id is None else eos_token_id
        self.jitter, self.eos_probability = jitter, eos_probability
        self.min_token_id = min_token_id
        self._eos_only = frozenset(() if self.eos_token_id is None else (self.eos_token_id,))
        self._rng = random.Random(seed)
        self.last_cost: StepCost | None = None
        self.speculation = speculation if speculation is not None and speculation.tokens > 0 else None

    def execute(self, batch: ScheduledBatch) -> StepResult:
        """The modelled duration of ``batch`` and the new token(s) of each sampling
        sequence (several for a decode when speculating)."""
        spec = self.speculation
        if spec is None:
            cost = self.roofline.step_cost(
                (len(s.token_ids), s.start_pos, s.sample and not s.params.pooling) for s in batch.seqs
            )
            self.last_cost = cost
            duration = cost.total_s
            sampled = {s.seq_id: [self._sample(s)] for s in batch.seqs if self._samples(s)}
            drafts: dict[int, int] = {}
        else:
            verify = [
                (s.num_tokens + s.num_draft_tokens, s.start_pos, (1 + s.num_draft_tokens) * self._samples(s))
                for s in batch.seqs
            ]
            cost = self.roofline.step_cost(verify)
            self.last_cost = cost
            duration = cost.total_s
            sampled = {s.seq_id: self._speculate(s, spec) for s in batch.seqs if self._samples(s)}
            drafts = {
                s.seq_id: self._propose(spec, s, len(sampled[s.seq_id])) for s in batch.seqs if s.seq_id in sampled
            }
            drafting = [(1, s.context_len, True) for s in batch.seqs if drafts.get(s.seq_id)]
            if spec.draft is not None and drafting:
                draft = spec.draft.step_cost(drafting)
                duration += max(drafts.values()) * (draft.kernel_s + draft.latency_s + draft.comm_s)
        patches = sum(s.encoder_patches for s in batch.seqs)
        if patches:
            duration += self.roofline.encoder_time(patches)
        if self.jitter > 0.0:
            duration *= self._rng.lognormvariate(-(self.jitter**2) / 2, self.jitter)
        return StepResult(sampled, duration, drafts)

    @staticmethod
    def _samples(seq: ScheduledSeq) -> bool:
        return seq.sample and not seq.params.pooling

    def _propose(self, spec: Speculation, seq: ScheduledSeq, new_tokens: int) -> int:
        """Drafts for the sequence's next step, whose context then ends ``new_tokens``
        after this step's fed tokens (module docstring)."""
        if spec.proposer != "ngram":
            return spec.tokens
        seed, position = request_seed(seq), seq.context_len + new_tokens
        length = 0
        while length < spec.tokens:
            draw = _mix64(((seed * 0x100000001B3 + position + length) ^ _MATCH_SALT) & _MASK)
            if draw / 2.0**64 >= spec.match_rate:
                break
            length += 1
        return length

    def _speculate(self, seq: ScheduledSeq, spec: Speculation) -> list[int]:
        """The tokens a verify step yields: the accepted drafts and the target's own."""
        seed, position = request_seed(seq), seq.context_len
        accepted = 0
        while accepted < seq.num_draft_tokens:
            draw = _mix64(((seed * 0x100000001B3 + position + accepted) ^ _ACCEPT_SALT) & _MASK)
            if draw / 2.0**64 >= spec.acceptance_rate:
                break
            accepted += 1
        return [self._sample(seq, position + i) for i in range(accepted + 1)]

    def _sample(self, seq: ScheduledSeq, position: int | None = None) -> int:
        seed = request_seed(seq)
        position = seq.context_len if position is None else position
        if self.eos_probability > 0.0 and self.eos_token_id is not None:
            draw = _mix64(((seed * 0x100000001B3 + position) ^ _EOS_SALT) & _MASK)
            if draw / 2.0**64 < self.eos_probability:
                return self.eos_token_id
        stops = seq.params.stop_token_ids
        avoid = self._eos_only if not stops else {*self._eos_only, *stops}
        return sim_token(seed, position, self.vocab_size, avoid, self.min_token_id)
