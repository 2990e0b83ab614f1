"""The cost model of one engine step, kernel group by kernel group (the sim runner prices steps with it).

The kernels of a step run one after another on each GPU of a tensor-parallel group of
``tp``; each *kernel group* (projections, MLP, prefill and decode attention, LM head) is
bounded by its own roofline and the step is their sum::

    step = sum over groups of max(FLOPs / (peak * eff(M)), bytes / (bandwidth * mbu))
           + layers * layer_latency + all-reduce time + overhead
    eff(M) = mfu * M / (M + gemm_half_m)

so a mixed step costs more than the larger of its prefill and decode parts. It also prices
the vision encoder (:meth:`RooflineModel.encoder_time`) and fp8 weights and KV.

Docs: docs/server.md ("The cost of a step": each group's FLOPs and bytes, the defaults and
their calibration; "Pooling routes and images" for the encoder).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from loadgen.errors import EngineError
from loadgen.server.engine.models import ModelShape
from loadgen.server.sim.gpus import GpuSpec

__all__ = ["DTYPES", "KV_CACHE_DTYPES", "KernelCost", "RooflineModel", "StepCost"]

DTYPES = ("bf16", "fp8")
KV_CACHE_DTYPES = ("auto", "fp8")
ACT_BYTES = 2  # activations stay bf16
LOGIT_BYTES = 4  # vLLM computes logits in fp32


@dataclass(frozen=True, slots=True)
class KernelCost:
    """One kernel group of a step on one GPU: its work and its two roofline bounds."""

    name: str
    flops: float
    bytes: float
    compute_s: float
    memory_s: float

    @property
    def time_s(self) -> float:
        """The group's time: the larger of its compute and memory bounds."""
        return max(self.compute_s, self.memory_s)


@dataclass(frozen=True, slots=True)
class StepCost:
    """The modelled cost of one step on one GPU of the group.

    ``flops``/``bytes``/``compute_s``/``memory_s`` are totals over ``kernels``;
    ``latency_s`` is the kernels' fixed latency (``layers * layer_latency_s``).
    """

    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    kernels: tuple[KernelCost, ...] = ()
    latency_s: float = 0.0

    @property
    def kernel_s(self) -> float:
        """The kernel groups one after another."""
        return sum(k.time_s for k in self.kernels)

    @property
    def total_s(self) -> float:
        """The step time: the kernel groups plus their fixed latencies, all-reduce and
        overhead."""
        return self.kernel_s + self.latency_s + self.comm_s + self.overhead_s

    def kernel(self, name: str) -> KernelCost | None:
        """The kernel group called ``name`` (None when the step has none)."""
        return next((k for k in self.kernels if k.name == name), None)


class RooflineModel:
    """Per-kernel roofline of ``model`` on ``tp`` GPUs of type ``gpu`` (module docstring).

    The efficiencies, overhead and dtypes are taken as given (``loadgen serve`` checks
    them in :class:`~loadgen.server.config.SimOptions`). ``decode_query_len``: a sequence
    with at most this many new tokens is priced as a decode (1; ``1 + K`` with ``K``
    speculative tokens).
    """

    def __init__(
        self,
        gpu: GpuSpec,
        model: ModelShape,
        tp: int = 1,
        *,
        mfu: float = 0.6,
        mbu: float = 0.8,
        overhead_s: float = 5e-4,
        allreduce_latency_s: float = 20e-6,
        gemm_half_m: float = 128.0,
        layer_latency_s: float = 30e-6,
        dtype: str = "bf16",
        kv_cache_dtype: str = "auto",
        decode_query_len: int = 1,
    ) -> None:
        if dtype not in DTYPES or kv_cache_dtype not in KV_CACHE_DTYPES:
            raise EngineError(f"unknown dtype {dtype!r} / kv cache dtype {kv_cache_dtype!r}")
        self.gpu, self.model, self.tp = gpu, model, tp
        self.mfu, self.mbu, self.gemm_half_m = mfu, mbu, gemm_half_m
        self.overhead_s, self.allreduce_latency_s = overhead_s, allreduce_latency_s
        self.layer_latency_s = layer_latency_s
        self.dtype, self.kv_cache_dtype = dtype, kv_cache_dtype
        self.decode_query_len = decode_query_len
        m = model
        fp8 = dtype == "fp8"
        self.weight_bytes_per_param = 1 if fp8 else m.bytes_per_param
        self.gemm_peak = (gpu.fp8_flops or gpu.peak_flops) if fp8 else gpu.peak_flops
        kv_bytes = 1 if kv_cache_dtype == "fp8" else m.bytes_per_param
        self.kv_bytes_per_token = m.kv_values_per_token * kv_bytes
        kv_heads_per_gpu = -(-m.num_kv_heads // tp)  # replicated when tp > kv heads
        self.kv_bytes_per_token_per_gpu = 2 * m.num_layers * kv_heads_per_gpu * m.head_dim * kv_bytes
        L = m.num_layers
        self._attn_params = L * (m.attn_params_per_layer + 2 * m.hidden_size)  # norms ride along
        self._router_params = L * (m.hidden_size * m.num_experts if m.num_experts > 1 else 0)
        self._expert_params = L * m.expert_params_per_layer
        # activations in and out of the GEMMs, per token (all layers)
        self._attn_act = L * ACT_BYTES * (2 * m.hidden_size + 2 * m.q_size + 2 * m.kv_size)
        self._mlp_act = L * ACT_BYTES * m.experts_per_token * (2 * m.hidden_size + 3 * m.intermediate_size)
        self._attn_flops_per_pair = 4.0 * L * m.q_size

    # ------------------------------------------------------------------ memory
    @property
    def weight_bytes(self) -> float:
        """All weights (every GPU together): linear layers at ``dtype``, embedding, LM
        head and norms at the model's precision."""
        m = self.model
        linear = m.num_layers * (m.attn_params_per_layer + m.num_experts * m.expert_params_per_layer)
        return linear * self.weight_bytes_per_param + (m.num_params - linear) * m.bytes_per_param

    def num_kv_blocks(
        self,
        block_size: int = 16,
        gpu_memory_utilization: float = 0.9,
        extra_bytes_per_gpu: float = 0.0,
        extra_kv_bytes_per_token: float = 0.0,
    ) -> int:
        """KV blocks that fit: GPU memory * utilisation minus the weights (and
        ``extra_bytes_per_gpu``, a draft model's weights), per GPU; each token costs
        ``extra_kv_bytes_per_token`` more (a draft model's KV)."""
        weights = self.weight_bytes / self.tp + extra_bytes_per_gpu
        free = self.gpu.memory_bytes * gpu_memory_utilization - weights
        per_block = (self.kv_bytes_per_token_per_gpu + extra_kv_bytes_per_token) * block_size
        blocks = int(free // per_block)
        if blocks < 1:
            raise EngineError(
                f"{self.model.name} needs {weights / 1e9:.1f} GB of weights per GPU, more than "
                f"{gpu_memory_utilization:.0%} of a {self.gpu.name}'s "
                f"{self.gpu.memory_bytes / 1e9:.0f} GB; use a larger --tp"
            )
        return blocks

    def kv_transfer_s(self, num_tokens: int, link_bytes_per_s: float) -> float:
        """Time to move ``num_tokens`` tokens of KV (all layers) over one link."""
        return num_tokens * self.kv_bytes_per_token / link_bytes_per_s

    # ------------------------------------------------------------------ step time
    def gemm_efficiency(self, m: float) -> float:
        """The fraction of the peak a GEMM of ``m`` rows reaches (module docstring);
        ``m = 0``: the plateau."""
        return self.mfu * m / (m + self.gemm_half_m) if m > 0 else self.mfu

    def _kernel(self, name: str, flops: float, nbytes: float, peak: float, rows: float) -> KernelCost:
        compute = flops / (peak * self.gemm_efficiency(rows)) if flops else 0.0
        return KernelCost(name, flops, nbytes, compute, nbytes / (self.gpu.mem_bandwidth * self.mbu))

    def step_cost(self, seqs: Iterable[tuple[int, int, int]]) -> StepCost:
        """Cost of a step given ``(new_tokens, cached_context, samples)`` per sequence;
        ``samples``: the LM-head rows it computes (a bool: one or none; ``K + 1`` for a
        speculative verify)."""
        m, tp = self.model, self.tp
        tokens = sampled = 0
        pre_tokens = pre_pairs = pre_context = 0
        dec_pairs = dec_context = dec_tokens = 0
        for new, cached, samples in seqs:
            tokens += new
            sampled += int(samples)
            pairs = new * cached + new * (new + 1) // 2
            if new > self.decode_query_len:
                pre_tokens += new
                pre_pairs += pairs
                pre_context += cached
            else:
                dec_tokens += new
                dec_pairs += pairs
                dec_context += cached
        if tokens == 0:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        wb, kv = self.weight_bytes_per_param, self.kv_bytes_per_token_per_gpu
        kernels = [
            self._kernel(
                "projections",
                2.0 * self._attn_params * tokens / tp,
                (self._attn_params * wb + self._attn_act * tokens) / tp,
                self.gemm_peak,
                tokens,
            )
        ]
        experts, k = m.num_experts, m.experts_per_token
        touched = experts * (1.0 - (1.0 - k / experts) ** tokens) if experts > 1 else 1.0
        mlp_bytes = (self._router_params + self._expert_params * touched) * wb + self._mlp_act * tokens
        kernels.append(
            self._kernel(
                "mlp",
                2.0 * (self._router_params + k * self._expert_params) * tokens / tp,
                mlp_bytes / tp,
                self.gemm_peak,
                tokens * k / experts,
            )
        )
        act = ACT_BYTES * m.num_layers * 2 * m.q_size / tp  # Q in, O out per token
        if pre_tokens:
            kernels.append(
                self._kernel(
                    "attention_prefill",
                    self._attn_flops_per_pair * pre_pairs / tp,
                    (pre_context + pre_tokens) * kv + pre_tokens * act,
                    self.gpu.peak_flops,
                    pre_tokens,
                )
            )
        if dec_tokens:
            kernels.append(
                self._kernel(
                    "attention_decode",
                    self._attn_flops_per_pair * dec_pairs / tp,
                    (dec_context + dec_tokens) * kv + dec_tokens * act,
                    self.gpu.peak_flops,
                    0,
                )
            )
        if sampled:
            head_bytes = m.lm_head_params * m.bytes_per_param + sampled * (
                m.hidden_size * ACT_BYTES + m.vocab_size * LOGIT_BYTES
            )
            kernels.append(
                self._kernel(
                    "lm_head",
                    2.0 * m.hidden_size * m.vocab_size * sampled / tp,
                    head_bytes / tp,
                    self.gpu.peak_flops,
                    sampled,
                )
            )
        comm = 0.0
        if tp > 1:
            volume = 2.0 * (tp - 1) / tp * tokens * m.hidden_size * ACT_BYTES
            comm = 2 * m.num_layers * (self.allreduce_latency_s + volume / self.gpu.link_bandwidth)
        return StepCost(
            sum(x.flops for x in kernels),
            sum(x.bytes for x in kernels),
            sum(x.compute_s for x in kernels),
            sum(x.memory_s for x in kernels),
            comm,
            self.overhead_s,
            tuple(kernels),
            m.num_layers * self.layer_latency_s,
        )

    def encoder_time(self, patches: int) -> float:
        """The vision encoder's work on ``patches`` image patches (module docstring):
        ``2 * vision_encoder_params * patches`` FLOPs at the bf16 peak times ``mfu``, or
        its weights read once, whichever is longer (split ``tp`` ways)."""
        if patches <= 0:
            return 0.0
        params = self.model.vision_encoder_params
        compute = 2.0 * params * patches / self.tp / (self.gpu.peak_flops * self.mfu)
        memory = params * self.model.bytes_per_param / self.tp / (self.gpu.mem_bandwidth * self.mbu)
        return max(compute, memory)

    def step_time(self, seqs: Iterable[tuple[int, int, int]]) -> float:
        """``step_cost(seqs).total_s``."""
        return self.step_cost(seqs).total_s

    def prefill_time(self, num_tokens: int, cached: int = 0) -> float:
        """One sequence's prefill of ``num_tokens`` new tokens (sampling at the end)."""
        return self.step_time([(num_tokens, cached, True)])

    def decode_time(self, batch_size: int, context: int) -> float:
        """A decode step of ``batch_size`` sequences with ``context`` cached tokens each."""
        return self.step_time([(1, context, True)] * batch_size)
