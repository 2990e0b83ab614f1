"""Build the sim engine from a :class:`~loadgen.server.config.ServeConfig`.

The roofline model of ``tp`` GPUs of the chosen type runs the shared scheduler; the KV
pool of each GPU group is sized from its memory, ``memory * gpu_memory_utilization * tp -
weights`` (a draft model's weights and KV included), unless ``num_gpu_blocks`` is given. With ``disaggregate`` a second, identical
pool decodes what the first prefilled (:mod:`.disagg`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from loadgen.server.engine.core import Clock, Core, EngineCore, StepHook
from loadgen.server.engine.models import MODELS, ModelShape
from loadgen.server.engine.scheduler import EngineConfig
from loadgen.server.sim.disagg import DisaggCore
from loadgen.server.sim.engine import SimEngine
from loadgen.server.sim.gpus import get_gpu
from loadgen.server.sim.roofline import RooflineModel
from loadgen.server.sim.runner import SimRunner, Speculation

if TYPE_CHECKING:
    from loadgen.server.config import ServeConfig

__all__ = ["sim_engine"]


def sim_engine(config: ServeConfig, *, clock: Clock = time.monotonic,
               on_step: StepHook | None = None) -> SimEngine:
    """The sim engine of ``config`` on ``clock`` (a :class:`ManualClock` for virtual
    time); ``on_step`` is called with every step of every pool."""
    sim, limits, shape = config.sim, config.scheduler, config.shape
    gpu = get_gpu(sim.gpu)

    def roofline_of(model: ModelShape, decode_query_len: int = 1) -> RooflineModel:
        return RooflineModel(gpu, model, config.tp, mfu=sim.mfu, mbu=sim.mbu,
                             overhead_s=sim.overhead_ms / 1e3,
                             allreduce_latency_s=sim.allreduce_latency_s, dtype=sim.dtype,
                             kv_cache_dtype=sim.kv_cache_dtype, decode_query_len=decode_query_len)

    roofline = roofline_of(shape, 1 + sim.speculative_tokens)
    speculation = None
    draft_weights = draft_kv = 0.0
    if sim.speculative_tokens:
        draft = roofline_of(MODELS[sim.draft_model.strip().lower()]) if sim.draft_model else None
        speculation = Speculation(sim.speculative_tokens, sim.acceptance_rate, draft)
        if draft is not None:
            draft_weights = draft.weight_bytes / config.tp
            draft_kv = draft.kv_bytes_per_token_per_gpu
    blocks = limits.num_gpu_blocks or roofline.num_kv_blocks(
        limits.block_size, limits.gpu_memory_utilization, draft_weights, draft_kv)
    engine_config = limits.engine_config(shape, num_gpu_blocks=blocks,
                                         eos_token_id=shape.eos_token_id)

    def make_core(cfg: EngineConfig, seed: int) -> EngineCore:
        runner = SimRunner(roofline, seed=seed, jitter=sim.jitter,
                           eos_probability=sim.eos_probability, min_token_id=sim.min_token_id,
                           speculation=speculation)
        return EngineCore(cfg, runner, clock, time_scale=sim.time_scale, on_step=on_step)

    prefill = make_core(engine_config, config.seed)
    core: Core = prefill
    if sim.disaggregate:
        decode = make_core(dataclasses.replace(engine_config, max_waiting=10**9), config.seed + 1)
        link = sim.kv_link_gbps * 1e9
        core = DisaggCore(prefill, decode, lambda n: roofline.kv_transfer_s(n, link), clock,
                          time_scale=sim.time_scale)
    max_len = min(engine_config.max_model_len, blocks * engine_config.block_size)
    return SimEngine(core, model_name=config.model, vocab_size=shape.vocab_size,
                     max_model_len=max_len, clock=clock)
