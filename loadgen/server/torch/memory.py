"""How many KV blocks the torch engine gets: a fixed budget on CPU, free memory on CUDA.

- ``kv_cache_gb`` given: that many GiB of KV pool, on any device.
- CPU: 1 GiB by default (the tiny preset then holds 262k tokens).
- CUDA (in the style of vLLM's profile run): after the weights are loaded, one forward
  pass of a ``max_num_batched_tokens`` prefill measures the activation peak; the pool
  gets ``total * gpu_memory_utilization`` minus what is already in use (weights, other
  processes), minus that peak, the logits of ``max_num_seqs`` sampled rows and the
  memory reserved for CUDA graphs — and what decode steps gather as they run: a decode
  step copies the K and V of one layer's blocks into a padded batch (at most twice the
  blocks in use, since each group pads to a power of two), so every KV block costs
  ``2 / num_layers`` of its size again (:func:`blocks_within`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from loadgen.errors import EngineError
from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq
from loadgen.server.engine.interface import SamplingParams
from loadgen.server.torch.model import LlamaModel
from loadgen.server.torch.runner import TorchRunner

if TYPE_CHECKING:
    from loadgen.server.config import SchedulerLimits

__all__ = ["CPU_KV_CACHE_GB", "blocks_within", "plan_kv_blocks"]

CPU_KV_CACHE_GB = 1.0


def _block_bytes(model: LlamaModel, block_size: int) -> int:
    return block_size * model.cfg.kv_values_per_token * model.embed.element_size()


def blocks_within(budget: int, block_bytes: int, num_layers: int) -> int:
    """KV blocks that fit ``budget`` bytes with their decode gather: one layer's K and V of
    every block, padded at most twofold, is ``2 * block_bytes / num_layers`` a block."""
    return max(0, budget * num_layers // (block_bytes * (num_layers + 2)))


def plan_kv_blocks(
    model: LlamaModel, limits: SchedulerLimits, *, kv_cache_gb: float | None, graph_memory_bytes: int = 0
) -> int:
    """The number of KV blocks for ``model`` (see the module docstring)."""
    per_block = _block_bytes(model, limits.block_size)
    if kv_cache_gb is not None:
        return max(1, int(kv_cache_gb * 2**30) // per_block)
    if model.embed.device.type != "cuda":
        return max(1, int(CPU_KV_CACHE_GB * 2**30) // per_block)
    peak = _profile_activations(model, limits)
    free, total = torch.cuda.mem_get_info(model.embed.device)
    logits = limits.seq_limit * model.cfg.vocab_size * 4 * 3  # logits, softmax, scratch
    usable = int(total * limits.gpu_memory_utilization) - (total - free)
    budget = usable - peak - logits - graph_memory_bytes
    blocks = blocks_within(budget, per_block, model.cfg.num_layers)
    needed = -(-limits.token_budget // limits.block_size)
    if blocks < needed:
        raise EngineError(
            f"not enough GPU memory for the KV cache: {max(budget, 0) / 2**30:.2f} GiB left "
            f"after the weights ({model.weight_bytes / 2**30:.2f} GiB) and activations "
            f"({peak / 2**30:.2f} GiB); lower --max-num-batched-tokens or use a smaller model"
        )
    return int(blocks)


@torch.inference_mode()
def _profile_activations(model: LlamaModel, limits: SchedulerLimits) -> int:
    """Peak bytes allocated by one full-budget prefill step beyond what is resident."""
    device = model.embed.device
    n = limits.token_budget
    blocks = -(-n // limits.block_size)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    runner = TorchRunner(model, num_blocks=blocks, block_size=limits.block_size)
    seq = ScheduledSeq(0, "profile", [0] * n, 0, list(range(blocks)), True, False, SamplingParams(temperature=0.0))
    runner.execute(ScheduledBatch(step=0, seqs=[seq], block_size=limits.block_size))
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    del runner
    torch.cuda.empty_cache()
    return int(peak)
