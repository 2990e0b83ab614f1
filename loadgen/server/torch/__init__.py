"""The torch engine: a real Llama-style decoder runs the shared scheduler.

The server process holds :class:`~.engine.TorchEngine` (no torch there); the engine
process (or a thread, in tests) runs the shared step loop over the torch runner.

- :mod:`.engine` — ``TorchEngine`` / ``torch_engine(config)``: the server's side, a pipe
  to the engine process.
- :mod:`.worker` — the engine process: builds model, runner and a real-time
  ``EngineCore`` from the ``ServeConfig`` and serves the pipe.
- :mod:`.runner` — ``TorchRunner``: one forward pass per step over a paged KV pool.
- :mod:`.cuda_graphs` — decode steps replayed as CUDA graphs at padded shapes.
- :mod:`.memory` — how many KV blocks fit (a profile run on CUDA).
- :mod:`.model` — the decoder (RMSNorm, RoPE, GQA, SwiGLU); :mod:`.loader` — builds it
  with seeded random or real weights, loads the model's tokenizer;
  :mod:`.gguf_weights` / :mod:`.text_tokenizer` — SmolLM2's GGUF weights and tokenizer.

The model shapes are shared with the sim (:mod:`loadgen.server.engine.models`). Importing
this package does not import torch.
"""

from loadgen.server.torch.engine import TorchEngine, torch_engine
from loadgen.server.torch.loader import build_model, load_tokenizer, model_names, resolve_dtype

__all__ = ["TorchEngine", "build_model", "load_tokenizer", "model_names", "resolve_dtype", "torch_engine"]
