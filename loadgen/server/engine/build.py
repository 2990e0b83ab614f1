"""Build engines from presets: what ``loadgen serve --engine sim ...`` calls.

:func:`from_preset` takes the engine's own option names (``EngineConfig`` fields and
the sim knobs); :func:`build_engine` takes the CLI's flag names and validates them.
The KV pool of each GPU group is sized from its memory: ``memory * 0.9 * tp - weights``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from loadgen.errors import ConfigError
from loadgen.server.engine.core import Clock, EngineCore, StepHook
from loadgen.server.engine.disagg import DisaggCore
from loadgen.server.engine.engine import SimEngine
from loadgen.server.engine.presets import get_gpu, get_model
from loadgen.server.engine.scheduler import EngineConfig
from loadgen.server.engine.sim import RooflineModel, SimRunner

__all__ = ["ENGINES", "SIM_OPTIONS", "from_preset", "build_engine"]

ENGINES = ("sim",)
_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(EngineConfig))
SIM_OPTIONS: dict[str, Any] = {
    "mfu": 0.6, "mbu": 0.8, "overhead_s": 5e-4, "allreduce_latency_s": 5e-6,
    "jitter": 0.0, "seed": 0, "eos_probability": 0.0, "min_token_id": 4,
    "gpu_memory_utilization": 0.9,
    "time_scale": 1.0, "disaggregate": False, "kv_link_gbps": 50.0, "clock": time.monotonic,
    "on_step": None,
}


def from_preset(gpu: str, model: str, tp: int = 1, **options: Any) -> SimEngine:
    """A sim engine for ``model`` on ``tp`` GPUs of type ``gpu``.

    ``options``: any :class:`EngineConfig` field (``num_gpu_blocks``, ``max_model_len``
    and ``eos_token_id`` default to the presets' values) and the keys of
    :data:`SIM_OPTIONS`: roofline knobs ``mfu``, ``mbu``, ``overhead_s``,
    ``allreduce_latency_s``; runner knobs ``jitter``, ``seed``, ``eos_probability``,
    ``min_token_id`` (default 4: ids 0-3 are the word tokenizer's special tokens);
    ``gpu_memory_utilization``; ``time_scale`` (real seconds per modelled second);
    ``disaggregate`` and ``kv_link_gbps`` (GB/s, gigabytes); ``clock``; ``on_step``
    (called with every step of every pool). Unknown keys raise :class:`ConfigError`.
    """
    unknown = sorted(set(options) - set(_CONFIG_FIELDS) - set(SIM_OPTIONS))
    if unknown:
        valid = ", ".join(sorted((*_CONFIG_FIELDS, *SIM_OPTIONS)))
        raise ConfigError(f"unknown option(s) {', '.join(unknown)}; valid: {valid}")
    sim = {**SIM_OPTIONS, **{k: v for k, v in options.items() if k in SIM_OPTIONS}}
    gpu_spec, model_spec = get_gpu(gpu), get_model(model)
    if not isinstance(tp, int) or not 1 <= tp <= 64:
        raise ConfigError(f"must be an integer in [1, 64], got {tp!r}", key="--tp")
    time_scale = sim["time_scale"]
    if not isinstance(time_scale, (int, float)) or not time_scale > 0:
        raise ConfigError(f"must be > 0, got {time_scale!r}", key="time_scale")
    link_gbps = sim["kv_link_gbps"]
    if not isinstance(link_gbps, (int, float)) or not link_gbps > 0:
        raise ConfigError(f"must be > 0 (GB/s), got {link_gbps!r}", key="kv_link_gbps")
    clock: Clock = sim["clock"]
    on_step: StepHook | None = sim["on_step"]

    def make_core(seed: int, **overrides: Any) -> tuple[EngineCore, RooflineModel, EngineConfig]:
        roofline = RooflineModel(gpu_spec, model_spec, tp, mfu=sim["mfu"], mbu=sim["mbu"],
                                 overhead_s=sim["overhead_s"],
                                 allreduce_latency_s=sim["allreduce_latency_s"])
        cfg_args = {k: v for k, v in options.items() if k in _CONFIG_FIELDS}
        cfg_args.setdefault("max_model_len", model_spec.max_model_len)
        cfg_args.setdefault("eos_token_id", model_spec.eos_token_id)
        if "num_gpu_blocks" not in cfg_args:
            block_size = cfg_args.get("block_size", EngineConfig().block_size)
            cfg_args["num_gpu_blocks"] = roofline.num_kv_blocks(block_size, sim["gpu_memory_utilization"])
        cfg_args.update(overrides)
        config = EngineConfig(**cfg_args)
        runner = SimRunner(roofline, seed=seed, jitter=sim["jitter"],
                           eos_probability=sim["eos_probability"], eos_token_id=config.eos_token_id,
                           min_token_id=sim["min_token_id"])
        core = EngineCore(config, runner, clock, time_scale=time_scale, on_step=on_step)
        return core, roofline, config

    core: EngineCore | DisaggCore
    core, roofline, config = make_core(sim["seed"])
    if sim["disaggregate"]:
        decode, _, config = make_core(sim["seed"] + 1, max_waiting=10**9)
        link = link_gbps * 1e9
        core = DisaggCore(core, decode, lambda n: roofline.kv_transfer_s(n, link), clock,
                          time_scale=time_scale)
    max_len = min(config.max_model_len, config.num_gpu_blocks * config.block_size)
    return SimEngine(core, model_name=model_spec.name, vocab_size=model_spec.vocab_size,
                     max_model_len=max_len, clock=clock)


def build_engine(engine: str = "sim", *, gpu: str = "h100", model: str = "llama-3.1-8b",
                 tp: int = 1, chunked_prefill: bool = True, max_num_batched_tokens: int = 2048,
                 max_num_seqs: int = 256, prefix_caching: bool = False, mfu: float = 0.6,
                 mbu: float = 0.8, overhead_ms: float = 0.5, jitter: float = 0.0, seed: int = 0,
                 disaggregate: bool = False, kv_link_gbps: float = 50.0,
                 time_scale: float = 1.0, **options: Any) -> SimEngine:
    """The engine for ``loadgen serve`` (flag names as on the command line).

    Extra ``options`` go to :func:`from_preset` unchanged (e.g. ``long_prefill_token_threshold``,
    ``eos_probability``, ``max_model_len``). Raises :class:`ConfigError` naming the flag.
    """
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}", key="--engine")
    for key, value, low, high in (("--mfu", mfu, 1e-6, 1.0), ("--mbu", mbu, 1e-6, 1.0),
                                  ("--overhead-ms", overhead_ms, 0.0, 10_000.0),
                                  ("--jitter", jitter, 0.0, 1.0),
                                  ("--time-scale", time_scale, 1e-9, 1e9),
                                  ("--kv-link-gbps", kv_link_gbps, 1e-9, 1e9)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ConfigError(f"must be a number in [{low:g}, {high:g}], got {value!r}", key=key)
    for key, value in (("--tp", tp), ("--max-num-batched-tokens", max_num_batched_tokens),
                       ("--max-num-seqs", max_num_seqs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"must be an integer >= 1, got {value!r}", key=key)
    return from_preset(
        gpu, model, tp, enable_chunked_prefill=chunked_prefill,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        enable_prefix_caching=prefix_caching, mfu=mfu, mbu=mbu, overhead_s=overhead_ms / 1e3,
        jitter=jitter, seed=seed, disaggregate=disaggregate, kv_link_gbps=kv_link_gbps,
        time_scale=time_scale, **options)
