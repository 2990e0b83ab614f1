"""Build the sim engine from a :class:`~loadgen.server.config.ServeConfig`.

The roofline model of ``tp`` GPUs of the chosen type runs the shared scheduler; the KV
pool of each GPU group is sized from its memory, ``memory * gpu_memory_utilization * tp -
weights`` (a draft model's weights and KV included), unless ``num_gpu_blocks`` is given.
With ``disaggregate`` a second, identical pool decodes what the first prefilled
(:mod:`.disagg`).
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
from loadgen.server.sim.telemetry import GpuTelemetry, Pool

if TYPE_CHECKING:
    from loadgen.server.config import ServeConfig

__all__ = ["sim_engine", "kv_blocks"]


def _roofline(config: ServeConfig, model: ModelShape | None = None) -> RooflineModel:
    """The cost model of ``model`` (default: the served one) on ``config``'s GPU group;
    the served model prices ``1 + K`` query tokens per decode as decodes when speculating."""
    sim = config.sim
    query = 1 + sim.speculative_tokens if model is None else 1
    return RooflineModel(get_gpu(sim.gpu), model or config.shape, config.tp, mfu=sim.mfu,
                         mbu=sim.mbu, overhead_s=sim.overhead_ms / 1e3,
                         allreduce_latency_s=sim.allreduce_latency_s, dtype=sim.dtype,
                         kv_cache_dtype=sim.kv_cache_dtype, decode_query_len=query)


def _speculation(config: ServeConfig) -> Speculation | None:
    sim = config.sim
    if not sim.speculative_tokens:
        return None
    draft = _roofline(config, MODELS[sim.draft_model.strip().lower()]) if sim.draft_model else None
    return Speculation(sim.speculative_tokens, sim.acceptance_rate, draft)


def kv_blocks(config: ServeConfig) -> int:
    """KV blocks of one pool of ``config``: ``num_gpu_blocks``, else sized from memory
    (a draft model's weights and KV taken out)."""
    limits = config.limits
    if limits.num_gpu_blocks:
        return limits.num_gpu_blocks
    spec = _speculation(config)
    draft = spec.draft if spec is not None else None
    extra = (draft.weight_bytes / config.tp, draft.kv_bytes_per_token_per_gpu) if draft else (0.0, 0.0)
    return _roofline(config).num_kv_blocks(limits.block_size, limits.gpu_memory_utilization, *extra)


def sim_engine(config: ServeConfig, *, clock: Clock = time.monotonic,
               on_step: StepHook | None = None) -> SimEngine:
    """The sim engine of ``config`` on ``clock`` (a :class:`ManualClock` for virtual
    time); ``on_step`` is called with every step of every pool."""
    sim, limits, shape = config.sim, config.limits, config.shape
    roofline = _roofline(config)
    speculation = _speculation(config)
    blocks = kv_blocks(config)
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
    pool = Pool(tp=config.tp, weight_bytes_per_gpu=roofline.weight_bytes / config.tp,
                kv_bytes_per_gpu=blocks * limits.block_size * roofline.kv_bytes_per_token_per_gpu)
    pools = [pool, dataclasses.replace(pool)] if sim.disaggregate else [pool]
    return SimEngine(core, model_name=config.model, vocab_size=shape.vocab_size,
                     max_model_len=max_len, clock=clock, telemetry=GpuTelemetry(get_gpu(sim.gpu), pools))
