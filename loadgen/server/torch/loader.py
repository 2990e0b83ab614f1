"""Build a preset's model (torch) and its tokenizer (no torch): what the engine calls.

:func:`load_tokenizer` runs in the server process, which never imports torch: it returns
None for random-weight presets (the API then uses the word tokenizer of the model's
vocabulary) and the real tokenizer for ``smollm2-135m`` (converting the GGUF file into
the cache the first time). :func:`build_model` runs in the engine process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadgen.errors import ConfigError
from loadgen.server.engine.models import MODELS, ModelShape

if TYPE_CHECKING:
    import torch

    from loadgen.server.torch.model import LlamaModel
    from loadgen.server.torch.text_tokenizer import TextTokenizer

__all__ = ["DTYPES", "build_model", "load_tokenizer", "model_names", "resolve_dtype"]

DTYPES = ("float32", "bfloat16", "float16")


def model_names() -> list[str]:
    """The presets (aliases included) the torch decoder implements: dense Llama-style ones."""
    return [name for name, shape in MODELS.items() if shape.dense_llama]


def load_tokenizer(cfg: ModelShape) -> TextTokenizer | None:
    """The model's own tokenizer, or None for random weights (see the module docstring)."""
    if cfg.weights == "random":
        return None
    from loadgen.server.torch.gguf_weights import prepare_cache
    from loadgen.server.torch.text_tokenizer import TextTokenizer

    cache = prepare_cache(cfg)
    meta = cache.meta()
    return TextTokenizer(cache.tokenizer_file, chat_template=meta["chat_template"], eos_token_id=meta["eos_token_id"])


def resolve_dtype(dtype: str | None, device: str) -> str:
    """``None``/``"auto"``: bfloat16 on CUDA, float32 elsewhere (bf16 matmuls are several
    times slower than fp32 on AVX2 CPUs); else one of float32, bfloat16, float16."""
    if dtype in (None, "auto"):
        return "bfloat16" if device.startswith("cuda") else "float32"
    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; valid: auto, {', '.join(DTYPES)}", key="--dtype")
    return dtype


def build_model(cfg: ModelShape, *, device: torch.device | str, dtype: torch.dtype, seed: int = 0) -> LlamaModel:
    """The model on ``device`` in ``dtype``: seeded random weights, or the cached real ones."""
    import torch

    from loadgen.server.torch.model import LlamaModel

    model = LlamaModel(cfg, device="meta", dtype=dtype)
    if cfg.weights == "random":
        model = model.to_empty(device=device)
        model.init_random(seed)
    else:
        from loadgen.server.torch.gguf_weights import load_arrays, prepare_cache

        arrays = load_arrays(prepare_cache(cfg))
        state = {name: torch.from_numpy(arr).to(device=device, dtype=dtype) for name, arr in arrays.items()}
        model.load_state_dict(state, assign=True)
    return model.eval().requires_grad_(False)
