"""GPU and model presets for the roofline simulator, with their sources.

GPU numbers are the vendors' datasheet peaks: *dense* BF16 tensor FLOP/s (datasheets
often print the 2:4-sparsity figure, twice as large, next to it), HBM bandwidth and
capacity, and GPU-to-GPU bandwidth in *one direction* (datasheets quote NVLink as the
bidirectional total) used for tensor-parallel all-reduces.

Model shapes come from each model's ``config.json``; parameter counts are derived from
the shape (see :class:`ModelSpec`) and agree with the published totals to < 1 %.
Weights are bf16 (2 bytes per parameter).

Registries are dicts filled by the :func:`gpu_preset` / :func:`model_preset` decorators;
a failed lookup raises :class:`~loadgen.errors.ConfigError` listing the valid names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

from loadgen.errors import ConfigError

__all__ = ["GpuSpec", "ModelSpec", "GPUS", "MODELS", "gpu_preset", "model_preset",
           "get_gpu", "get_model"]

TERA = 1e12
GB = 1e9


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator: ``peak_flops`` dense BF16, bytes/s, bytes; ``link_bandwidth`` is
    the per-GPU, one-direction bandwidth to its tensor-parallel peers."""

    name: str
    peak_flops: float
    mem_bandwidth: float
    memory_bytes: float
    link_bandwidth: float


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer (Llama-style: GQA attention, SwiGLU MLP, optional MoE)."""

    name: str
    hf_id: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_model_len: int
    eos_token_id: int
    num_experts: int = 1
    experts_per_token: int = 1
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    bytes_per_param: int = 2

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def attn_params_per_layer(self) -> int:
        h = self.hidden_size
        bias = self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0
        return h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h + bias

    @property
    def expert_params_per_layer(self) -> int:
        """One expert's (or the dense) SwiGLU MLP: gate, up and down projections."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def shared_params_per_layer(self) -> int:
        """Per-layer parameters every token uses: attention, router, two RMSNorms."""
        router = self.hidden_size * self.num_experts if self.num_experts > 1 else 0
        return self.attn_params_per_layer + router + 2 * self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        layer = self.shared_params_per_layer + self.num_experts * self.expert_params_per_layer
        head = 0 if self.tie_word_embeddings else self.lm_head_params
        return self.num_layers * layer + self.embedding_params + head + self.hidden_size

    @property
    def num_active_params(self) -> int:
        """Parameters one token touches (MoE: ``experts_per_token`` experts per layer)."""
        layer = self.shared_params_per_layer + self.experts_per_token * self.expert_params_per_layer
        head = 0 if self.tie_word_embeddings else self.lm_head_params
        return self.num_layers * layer + self.embedding_params + head + self.hidden_size

    @property
    def weight_bytes(self) -> int:
        return self.num_params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token (all GPUs together)."""
        return 2 * self.num_layers * self.kv_dim * self.bytes_per_param


GPUS: dict[str, GpuSpec] = {}
MODELS: dict[str, ModelSpec] = {}


def gpu_preset(*names: str) -> Callable[[Callable[[], GpuSpec]], Callable[[], GpuSpec]]:
    """Register the decorated factory's :class:`GpuSpec` under ``names`` (aliases)."""

    def register(factory: Callable[[], GpuSpec]) -> Callable[[], GpuSpec]:
        spec = factory()
        for name in names:
            GPUS[name] = spec
        return factory

    return register


def model_preset(*names: str) -> Callable[[Callable[[], ModelSpec]], Callable[[], ModelSpec]]:
    """Register the decorated factory's :class:`ModelSpec` under ``names`` (aliases)."""

    def register(factory: Callable[[], ModelSpec]) -> Callable[[], ModelSpec]:
        spec = factory()
        for name in names:
            MODELS[name] = spec
        return factory

    return register


_T = TypeVar("_T", GpuSpec, ModelSpec)


def _lookup(registry: dict[str, _T], name: str, what: str, key: str) -> _T:
    found = registry.get(name.strip().lower())
    if found is None:
        valid = ", ".join(sorted(registry))
        raise ConfigError(f"unknown {what} {name!r}; valid: {valid}", key=key)
    return found


def get_gpu(name: str) -> GpuSpec:
    """The GPU preset called ``name`` (case-insensitive)."""
    return _lookup(GPUS, name, "GPU", "--gpu")


def get_model(name: str) -> ModelSpec:
    """The model preset called ``name`` (case-insensitive)."""
    return _lookup(MODELS, name, "model", "--model")


# ---------------------------------------------------------------------------- GPUs


@gpu_preset("a100-80gb", "a100")
def _a100() -> GpuSpec:
    # NVIDIA A100 datasheet (SXM 80GB): BF16 tensor 312 TFLOPS dense (624 sparse),
    # HBM2e 2,039 GB/s, 80 GB; NVLink 3 600 GB/s bidirectional -> 300 GB/s one way.
    return GpuSpec("a100-80gb", 312 * TERA, 2039 * GB, 80 * GB, 300 * GB)


@gpu_preset("h100", "h100-sxm")
def _h100() -> GpuSpec:
    # NVIDIA H100 SXM5 datasheet: BF16 tensor 989 TFLOPS dense (1,979 sparse),
    # HBM3 3.35 TB/s, 80 GB; NVLink 4 900 GB/s bidirectional -> 450 GB/s one way.
    return GpuSpec("h100", 989 * TERA, 3350 * GB, 80 * GB, 450 * GB)


@gpu_preset("h200")
def _h200() -> GpuSpec:
    # NVIDIA H200 SXM datasheet: BF16 tensor 989 TFLOPS dense (1,979 sparse),
    # HBM3e 4.8 TB/s, 141 GB; NVLink 4 900 GB/s bidirectional -> 450 GB/s one way.
    return GpuSpec("h200", 989 * TERA, 4800 * GB, 141 * GB, 450 * GB)


@gpu_preset("b200")
def _b200() -> GpuSpec:
    # NVIDIA HGX/DGX B200 (1,000 W): FP16/BF16 tensor 2.25 PFLOPS dense per GPU, the
    # commonly published figure (4.5 sparse; the HGX "36 PFLOPS" is 8 GPUs with sparsity;
    # the B200 inside a GB200 at 1,200 W: 2.5 dense), HBM3e 8 TB/s, 180 GB usable of
    # 192 GB (1,440 GB per 8-GPU system); NVLink 5 1.8 TB/s bidirectional.
    return GpuSpec("b200", 2250 * TERA, 8000 * GB, 180 * GB, 900 * GB)


@gpu_preset("l40s")
def _l40s() -> GpuSpec:
    # NVIDIA L40S datasheet: BF16 tensor "362.05 | 733*" TFLOPS, * = with sparsity, so
    # 362 dense; GDDR6 864 GB/s, 48 GB; no NVLink: PCIe Gen4 x16 64 GB/s bidirectional.
    return GpuSpec("l40s", 362 * TERA, 864 * GB, 48 * GB, 32 * GB)


@gpu_preset("mi300x")
def _mi300x() -> GpuSpec:
    # AMD Instinct MI300X datasheet: BF16 matrix 1,307.4 TFLOPS dense (2,614.9 sparse),
    # HBM3 5.3 TB/s, 192 GB; 7 Infinity Fabric links, 896 GB/s aggregate bidirectional.
    return GpuSpec("mi300x", 1307.4 * TERA, 5300 * GB, 192 * GB, 448 * GB)


# ---------------------------------------------------------------------------- models


@model_preset("llama-3.1-8b")
def _llama_8b() -> ModelSpec:
    # meta-llama/Llama-3.1-8B-Instruct config.json; 8.03 B parameters (model card).
    return ModelSpec("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", num_layers=32,
                     hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128,
                     intermediate_size=14336, vocab_size=128256, max_model_len=131072,
                     eos_token_id=128009)


@model_preset("llama-3.1-70b")
def _llama_70b() -> ModelSpec:
    # meta-llama/Llama-3.1-70B-Instruct config.json; 70.6 B parameters.
    return ModelSpec("llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct", num_layers=80,
                     hidden_size=8192, num_heads=64, num_kv_heads=8, head_dim=128,
                     intermediate_size=28672, vocab_size=128256, max_model_len=131072,
                     eos_token_id=128009)


@model_preset("qwen2.5-7b")
def _qwen_7b() -> ModelSpec:
    # Qwen/Qwen2.5-7B-Instruct config.json (q/k/v biases, untied head); 7.61 B parameters.
    return ModelSpec("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", num_layers=28,
                     hidden_size=3584, num_heads=28, num_kv_heads=4, head_dim=128,
                     intermediate_size=18944, vocab_size=152064, max_model_len=32768,
                     eos_token_id=151645, qkv_bias=True)


@model_preset("mixtral-8x7b")
def _mixtral() -> ModelSpec:
    # mistralai/Mixtral-8x7B-Instruct-v0.1 config.json: 8 experts, top-2 routing;
    # 46.7 B parameters in total, 12.9 B active per token (Mistral's announcement).
    return ModelSpec("mixtral-8x7b", "mistralai/Mixtral-8x7B-Instruct-v0.1", num_layers=32,
                     hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128,
                     intermediate_size=14336, vocab_size=32000, max_model_len=32768,
                     eos_token_id=2, num_experts=8, experts_per_token=2)
