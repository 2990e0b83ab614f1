"""The torch engine: Llama-style decoders with random or real weights, run for real.

Importing this package does not import torch.
"""

from loadgen.server.engine.models import ModelConfig, get_model_config, model_names
from loadgen.server.torch.loader import build_model, load_tokenizer, resolve_dtype

__all__ = ["ModelConfig", "get_model_config", "model_names", "build_model", "load_tokenizer",
           "resolve_dtype"]
