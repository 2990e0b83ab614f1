"""The roofline model of one engine step and the sim runner built on it.

Step time (per GPU of a tensor-parallel group of ``tp``)::

    max(FLOPs / (peak * mfu), bytes / (bandwidth * mbu)) + all-reduce time + overhead

- FLOPs: ``2 * P_linear`` per scheduled token (every weight matrix of every layer; MoE:
  the routed experts only) + attention ``4 * layers * q_size`` per (query, key) pair,
  causal over each sequence's context + the LM head ``2 * hidden * vocab`` per sampled
  token.
- Bytes: the weights once per step (MoE: only the experts some token was routed to,
  expected ``E * (1 - (1 - k/E)^T)`` of ``E`` for ``T`` tokens; the LM head only when
  a token is sampled; embedding rows are gathered, negligible) + the KV read (each
  sequence's cached context) + the KV written (the new tokens).
- All-reduce (tp > 1): two per layer (after attention and after the MLP) of
  ``tokens * hidden * 2`` bytes, ring algorithm ``2 (tp - 1) / tp`` of it per GPU over
  the GPU's one-way link bandwidth, plus a fixed latency each.

Defaults: ``mfu = 0.6``: large bf16 GEMMs reach 60-70 % of the dense peak on H100-class
GPUs, attention and small chunks less; with it a 2048-token prefill of Llama-3.1-8B on
an H100 takes ≈ 50 ms, the usual measured figure. ``mbu = 0.8``: decode kernels stream
weights at ~80 % of the HBM peak. ``overhead_s = 0.5 ms``: scheduling, input
preparation, sampling and launch gaps per step that remain with CUDA graphs (vLLM v1's
CPU overhead per step is a few hundred µs); a batch-1 decode with 1k context of the
8B model on an H100 then takes ≈ 6.2 ms (measured ITL there is 6-7 ms).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable

from loadgen.errors import ConfigError, EngineError
from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq
from loadgen.server.engine.models import ModelShape
from loadgen.server.engine.runner import StepResult, request_seed
from loadgen.server.sim.gpus import GpuSpec

__all__ = ["StepCost", "RooflineModel", "SimRunner", "sim_token"]

_MASK = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class StepCost:
    """The modelled cost of one step on one GPU of the group."""

    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        """The step time: the roofline bound plus all-reduce and overhead."""
        return max(self.compute_s, self.memory_s) + self.comm_s + self.overhead_s


class RooflineModel:
    """Roofline step-time model of ``model`` on ``tp`` GPUs of type ``gpu``."""

    def __init__(self, gpu: GpuSpec, model: ModelShape, tp: int = 1, *, mfu: float = 0.6,
                 mbu: float = 0.8, overhead_s: float = 5e-4,
                 allreduce_latency_s: float = 5e-6) -> None:
        for key, value, low, high in (("tp", tp, 1, 64), ("mfu", mfu, 1e-6, 1.0),
                                      ("mbu", mbu, 1e-6, 1.0), ("overhead_s", overhead_s, 0.0, 10.0),
                                      ("allreduce_latency_s", allreduce_latency_s, 0.0, 1.0)):
            if not low <= value <= high:
                raise ConfigError(f"must be in [{low}, {high}], got {value!r}", key=key)
        self.gpu, self.model, self.tp = gpu, model, tp
        self.mfu, self.mbu = mfu, mbu
        self.overhead_s, self.allreduce_latency_s = overhead_s, allreduce_latency_s
        m = model
        self._dense_linear = m.num_layers * m.shared_params_per_layer
        self._expert = m.num_layers * m.expert_params_per_layer
        self._flops_per_token = 2.0 * (self._dense_linear + m.experts_per_token * self._expert)
        self._attn_flops_per_pair = 4.0 * m.num_layers * m.q_size
        self._lm_head_flops = 2.0 * m.hidden_size * m.vocab_size
        kv_heads_per_gpu = -(-m.num_kv_heads // tp)  # replicated when tp > kv heads
        self.kv_bytes_per_token_per_gpu = (
            2 * m.num_layers * kv_heads_per_gpu * m.head_dim * m.bytes_per_param)

    # ------------------------------------------------------------------ memory
    def num_kv_blocks(self, block_size: int = 16, gpu_memory_utilization: float = 0.9) -> int:
        """KV blocks that fit: GPU memory * utilisation minus the weights, per GPU."""
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ConfigError(f"must be in (0, 1], got {gpu_memory_utilization!r}",
                              key="gpu_memory_utilization")
        weights = self.model.weight_bytes / self.tp
        free = self.gpu.memory_bytes * gpu_memory_utilization - weights
        blocks = int(free // (self.kv_bytes_per_token_per_gpu * block_size))
        if blocks < 1:
            raise EngineError(
                f"{self.model.name} needs {weights / 1e9:.1f} GB of weights per GPU, more than "
                f"{gpu_memory_utilization:.0%} of a {self.gpu.name}'s "
                f"{self.gpu.memory_bytes / 1e9:.0f} GB; use a larger --tp")
        return blocks

    def kv_transfer_s(self, num_tokens: int, link_bytes_per_s: float) -> float:
        """Time to move ``num_tokens`` tokens of KV (all layers) over one link."""
        return num_tokens * self.model.kv_bytes_per_token / link_bytes_per_s

    # ------------------------------------------------------------------ step time
    def step_cost(self, seqs: Iterable[tuple[int, int, bool]]) -> StepCost:
        """Cost of a step given ``(new_tokens, cached_context, samples)`` per sequence."""
        m, tp = self.model, self.tp
        tokens = pairs = sampled = context = 0
        for new, cached, samples in seqs:
            tokens += new
            context += cached
            pairs += new * cached + new * (new + 1) // 2
            sampled += bool(samples)
        if tokens == 0:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        flops = (self._flops_per_token * tokens + self._attn_flops_per_pair * pairs
                 + self._lm_head_flops * sampled) / tp
        experts = m.num_experts
        if experts > 1:
            touched = experts * (1.0 - (1.0 - m.experts_per_token / experts) ** tokens)
            weights = self._dense_linear + self._expert * touched
        else:
            weights = self._dense_linear + self._expert
        if sampled:
            weights += m.lm_head_params
        nbytes = (weights * m.bytes_per_param / tp
                  + (context + tokens) * self.kv_bytes_per_token_per_gpu)
        comm = 0.0
        if tp > 1:
            volume = 2.0 * (tp - 1) / tp * tokens * m.hidden_size * m.bytes_per_param
            comm = 2 * m.num_layers * (self.allreduce_latency_s + volume / self.gpu.link_bandwidth)
        return StepCost(flops, nbytes, flops / (self.gpu.peak_flops * self.mfu),
                        nbytes / (self.gpu.mem_bandwidth * self.mbu), comm, self.overhead_s)

    def step_time(self, seqs: Iterable[tuple[int, int, bool]]) -> float:
        """``step_cost(seqs).total_s``."""
        return self.step_cost(seqs).total_s

    def prefill_time(self, num_tokens: int, cached: int = 0) -> float:
        """One sequence's prefill of ``num_tokens`` new tokens (sampling at the end)."""
        return self.step_time([(num_tokens, cached, True)])

    def decode_time(self, batch_size: int, context: int) -> float:
        """A decode step of ``batch_size`` sequences with ``context`` cached tokens each."""
        return self.step_time([(1, context, True)] * batch_size)


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
        if not 0.0 <= jitter <= 1.0:
            raise ConfigError(f"must be in [0, 1], got {jitter!r}", key="jitter")
        if not 0.0 <= eos_probability <= 1.0:
            raise ConfigError(f"must be in [0, 1], got {eos_probability!r}", key="eos_probability")
        self.roofline = roofline
        self.vocab_size = roofline.model.vocab_size
        self.eos_token_id = roofline.model.eos_token_id if eos_token_id is None else eos_token_id
        if not 0 <= min_token_id < self.vocab_size - 1:
            raise ConfigError(f"must be in [0, {self.vocab_size - 1}), got {min_token_id!r}",
                              key="min_token_id")
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
