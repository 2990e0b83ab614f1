"""The torch engine: Llama-style decoders with random or real weights, run for real.

Importing this package does not import torch.
"""

from loadgen.server.torch.loader import build_model, load_tokenizer, model_names, resolve_dtype

__all__ = ["build_model", "load_tokenizer", "model_names", "resolve_dtype"]
