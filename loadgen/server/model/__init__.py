"""The torch engine's models: Llama-style decoders with random or real weights.

- :mod:`.config` — ``ModelConfig`` and the preset registry (no torch).
- :mod:`.llama` — the decoder (torch): RMSNorm, RoPE, grouped-query attention, SwiGLU.
- :mod:`.gguf_weights` — SmolLM2-135M from a GGUF file: dequantise once, cache (no torch).
- :mod:`.text_tokenizer` — a real tokenizer and chat template for the API (no torch).
- :mod:`.loader` — ``build_model`` (torch) and ``load_tokenizer`` (no torch).

Importing this package does not import torch.
"""

from loadgen.server.model.config import ModelConfig, get_model_config, model_names
from loadgen.server.model.loader import build_model, load_tokenizer, resolve_dtype

__all__ = ["ModelConfig", "get_model_config", "model_names", "build_model", "load_tokenizer",
           "resolve_dtype"]
