"""The roofline model of one engine step (the sim runner, :mod:`.runner`, prices steps with it).

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

from dataclasses import dataclass
from typing import Iterable

from loadgen.errors import EngineError
from loadgen.server.engine.models import ModelShape
from loadgen.server.sim.gpus import GpuSpec

__all__ = ["StepCost", "RooflineModel"]


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
    """Roofline step-time model of ``model`` on ``tp`` GPUs of type ``gpu``.

    The efficiencies and overhead are taken as given (``loadgen serve`` checks them in
    :class:`~loadgen.server.config.SimOptions`).
    """

    def __init__(self, gpu: GpuSpec, model: ModelShape, tp: int = 1, *, mfu: float = 0.6,
                 mbu: float = 0.8, overhead_s: float = 5e-4,
                 allreduce_latency_s: float = 5e-6) -> None:
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
