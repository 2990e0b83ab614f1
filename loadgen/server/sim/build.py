"""Build the sim engine from a :class:`~loadgen.server.config.ServeConfig`.

The roofline model of ``tp`` GPUs of the chosen type runs the shared scheduler; the KV
pool of each GPU group is sized from its memory, ``memory * gpu_memory_utilization * tp -
weights`` (a draft model's weights and KV too), unless ``num_gpu_blocks`` is given, and its
batch limits default to
``vllm serve``'s for its GPU. Disaggregated (:mod:`.disagg`), ``prefill_replicas`` prefill
engines and ``decode_replicas`` decode engines, each with its own GPU type and TP, are
joined by per-rank KV links.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import TYPE_CHECKING

from loadgen.server.engine.core import Clock, Core, EngineCore, StepHook
from loadgen.server.engine.models import MODELS, ModelShape
from loadgen.server.sim.disagg import DisaggCore
from loadgen.server.sim.engine import SimEngine
from loadgen.server.sim.gpus import get_gpu
from loadgen.server.sim.roofline import RooflineModel
from loadgen.server.sim.runner import SimRunner, Speculation
from loadgen.server.sim.telemetry import GpuTelemetry, Pool

if TYPE_CHECKING:
    from loadgen.server.config import ServeConfig

__all__ = ["kv_blocks", "sim_engine"]


def _roofline(
    config: ServeConfig, gpu: str | None = None, tp: int | None = None, model: ModelShape | None = None
) -> RooflineModel:
    """The cost model of ``model`` (default: the served one) on ``tp`` GPUs of type ``gpu``
    (default: the engine's); the served model prices ``1 + K`` query tokens per decode as
    decodes when speculating."""
    sim = config.sim
    query = 1 + sim.speculative_tokens if model is None else 1
    return RooflineModel(
        get_gpu(gpu or sim.gpu),
        model or config.shape,
        tp or config.tp,
        mfu=sim.mfu,
        mbu=sim.mbu,
        overhead_s=sim.overhead_ms / 1e3,
        allreduce_latency_s=sim.allreduce_latency_s,
        dtype=sim.dtype,
        kv_cache_dtype=sim.kv_cache_dtype,
        decode_query_len=query,
    )


def _speculation(config: ServeConfig, gpu: str | None = None, tp: int | None = None) -> Speculation | None:
    sim = config.sim
    if not sim.speculative_tokens:
        return None
    draft = _roofline(config, gpu, tp, MODELS[sim.draft_model.strip().lower()]) if sim.draft_model else None
    return Speculation(sim.speculative_tokens, sim.acceptance_rate, draft, sim.proposer, sim.ngram_match_rate)


def _num_blocks(roofline: RooflineModel, spec: Speculation | None, block_size: int, utilization: float) -> int:
    draft = spec.draft if spec is not None else None
    extra = (draft.weight_bytes / draft.tp, draft.kv_bytes_per_token_per_gpu) if draft else (0.0, 0.0)
    return roofline.num_kv_blocks(block_size, utilization, *extra)


def kv_blocks(config: ServeConfig) -> int:
    """KV blocks of one pool of ``config``: ``num_gpu_blocks``, else sized from memory."""
    limits = config.limits
    return limits.num_gpu_blocks or _num_blocks(
        _roofline(config), _speculation(config), limits.block_size, limits.gpu_memory_utilization
    )


def sim_engine(config: ServeConfig, *, clock: Clock = time.monotonic, on_step: StepHook | None = None) -> SimEngine:
    """The sim engine of ``config`` on ``clock`` (a :class:`ManualClock` for virtual
    time); ``on_step`` is called with every step of every pool."""
    sim, shape = config.sim, config.shape
    seeds = itertools.count(config.seed)
    pools: list[Pool] = []

    def make_core(gpu: str | None, tp: int | None, *, decode: bool) -> tuple[EngineCore, RooflineModel]:
        roofline = _roofline(config, gpu, tp)
        speculation = _speculation(config, gpu, tp)
        spec = get_gpu(gpu or sim.gpu)
        limits = config.scheduler.resolved(spec, shape.max_model_len)
        blocks = limits.num_gpu_blocks or _num_blocks(
            roofline, speculation, limits.block_size, limits.gpu_memory_utilization
        )
        cfg = limits.engine_config(shape, num_gpu_blocks=blocks, eos_token_id=shape.eos_token_id)
        cfg = dataclasses.replace(cfg, num_speculative_tokens=sim.speculative_tokens)
        if decode:
            cfg = dataclasses.replace(cfg, max_waiting=10**9)
        runner = SimRunner(
            roofline,
            seed=next(seeds),
            jitter=sim.jitter,
            eos_probability=sim.eos_probability,
            min_token_id=sim.min_token_id,
            speculation=speculation,
        )
        pools.append(
            Pool(
                spec,
                roofline.tp,
                weight_bytes_per_gpu=roofline.weight_bytes / roofline.tp,
                kv_bytes_per_gpu=blocks * limits.block_size * roofline.kv_bytes_per_token_per_gpu,
            )
        )
        return EngineCore(cfg, runner, clock, time_scale=sim.time_scale, on_step=on_step), roofline

    core: Core
    if sim.disaggregated:
        pre = [make_core(sim.prefill_gpu, sim.prefill_tp, decode=False) for _ in range(sim.prefill_replicas)]
        dec = [make_core(sim.decode_gpu, sim.decode_tp, decode=True) for _ in range(sim.decode_replicas)]
        link = sim.kv_link_bytes_per_s

        def transfer_s(num_tokens: int, p: int, d: int) -> float:
            links = min(pre[p][1].tp, dec[d][1].tp)  # one link per tensor-parallel rank
            return num_tokens * pre[p][1].kv_bytes_per_token / (link * links)

        core = DisaggCore(
            [c for c, _ in pre],
            [c for c, _ in dec],
            transfer_s,
            clock,
            time_scale=sim.time_scale,
            router=sim.pd_router,
        )
        engines = core.cores
    else:
        single, _ = make_core(None, None, decode=False)
        core, engines = single, [single]
    max_len = min(
        min(e.scheduler.config.max_model_len, e.scheduler.config.num_gpu_blocks * e.scheduler.config.block_size)
        for e in engines
    )
    return SimEngine(
        core,
        model_name=config.model,
        vocab_size=shape.vocab_size,
        max_model_len=max_len,
        clock=clock,
        telemetry=GpuTelemetry(pools),
        supports_pooling=not sim.disaggregated,
    )
