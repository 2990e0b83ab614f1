"""Build engines from presets: what ``loadgen serve --engine sim|torch ...`` calls.

:func:`from_preset` takes the engine's own option names (``EngineConfig`` fields and
the sim knobs); :func:`build_engine` takes the CLI's flag names and validates them.
The KV pool of each GPU group is sized from its memory: ``memory * 0.9 * tp - weights``.
:func:`torch_engine` builds the real engine (:mod:`loadgen.server.torch.engine`; torch is imported
only in the engine process, or thread).
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Union

from loadgen.errors import ConfigError
from loadgen.server.engine.core import Clock, EngineCore, StepHook
from loadgen.server.engine.models import get_model
from loadgen.server.engine.scheduler import EngineConfig
from loadgen.server.sim.disagg import DisaggCore
from loadgen.server.sim.engine import SimEngine
from loadgen.server.sim.gpus import get_gpu
from loadgen.server.sim.roofline import RooflineModel, SimRunner

if TYPE_CHECKING:
    from loadgen.server.torch.engine import TorchEngine

__all__ = ["ENGINES", "SIM_OPTIONS", "TORCH_OPTIONS", "DEFAULT_MODELS", "from_preset",
           "torch_engine", "build_engine"]

ENGINES = ("sim", "torch")
DEFAULT_MODELS = {"sim": "llama-3.1-8b", "torch": "tiny"}
TORCH_OPTIONS: dict[str, Any] = {
    "device": "auto", "dtype": None, "threads": None, "seed": 0, "kv_cache_gb": None,
    "gpu_memory_utilization": 0.9, "cuda_graphs": True, "engine_mode": "process",
    "startup_timeout_s": 600.0,
}
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


def torch_engine(model: str = "tiny", **options: Any) -> TorchEngine:
    """The torch engine for preset ``model`` (see :mod:`loadgen.server.engine.models`).

    ``options``: any :class:`EngineConfig` field (``num_gpu_blocks`` overrides the KV
    sizing; ``eos_token_id`` and ``max_model_len`` default to the preset's) and the keys
    of :data:`TORCH_OPTIONS`: ``device`` (auto, cpu, cuda, cuda:N), ``dtype`` (None: bf16
    on CUDA, fp32 on CPU), ``threads`` (None: all cores but one), ``seed`` (weights and
    default sampling), ``kv_cache_gb`` (None: 1 GiB on CPU, free memory on CUDA),
    ``gpu_memory_utilization``, ``cuda_graphs``, ``engine_mode`` (``process``: a spawned
    engine process; ``thread``: a thread of this process) and ``startup_timeout_s``.
    The model's own tokenizer (``smollm2-135m``) is loaded here, converting its GGUF file
    into the cache the first time. Unknown keys raise :class:`ConfigError`.
    """
    from loadgen.server.engine.models import MODELS
    from loadgen.server.torch.engine import TorchEngine
    from loadgen.server.torch.loader import load_tokenizer, model_names
    from loadgen.server.torch.worker import TorchEngineSpec

    unknown = sorted(set(options) - set(_CONFIG_FIELDS) - set(TORCH_OPTIONS))
    if unknown:
        valid = ", ".join(sorted((*_CONFIG_FIELDS, *TORCH_OPTIONS)))
        raise ConfigError(f"unknown option(s) {', '.join(unknown)}; valid: {valid}")
    opts = {**TORCH_OPTIONS, **{k: v for k, v in options.items() if k in TORCH_OPTIONS}}
    device = opts["device"]
    if not isinstance(device, str) or not (device in ("auto", "cpu", "cuda")
                                           or device.startswith("cuda:")):
        raise ConfigError(f"must be auto, cpu, cuda or cuda:N, got {device!r}", key="--device")
    threads = opts["threads"]
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ConfigError(f"must be an integer >= 1, got {threads!r}", key="--threads")
    kv_gb = opts["kv_cache_gb"]
    if kv_gb is not None and (isinstance(kv_gb, bool) or not isinstance(kv_gb, (int, float))
                              or not kv_gb > 0):
        raise ConfigError(f"must be a number > 0, got {kv_gb!r}", key="--kv-cache-gb")
    cfg = MODELS.lookup(model, model_names(), what="torch model")
    config = {k: v for k, v in options.items() if k in _CONFIG_FIELDS}
    EngineConfig(**{"num_gpu_blocks": 1, **config}).validate()
    from loadgen.server.torch import resolve_dtype

    resolve_dtype(opts["dtype"], "cuda" if device.startswith("cuda") else "cpu")
    spec = TorchEngineSpec(model=model.strip().lower(), device=device, dtype=opts["dtype"], threads=threads,
                           seed=opts["seed"], kv_cache_gb=kv_gb,
                           gpu_memory_utilization=opts["gpu_memory_utilization"],
                           cuda_graphs=bool(opts["cuda_graphs"]), config=config)
    return TorchEngine(spec, mode=opts["engine_mode"], tokenizer=load_tokenizer(cfg),
                       startup_timeout_s=opts["startup_timeout_s"])


def build_engine(engine: str = "sim", *, gpu: str = "h100", model: str | None = None,
                 tp: int = 1, chunked_prefill: bool = True, max_num_batched_tokens: int = 2048,
                 max_num_seqs: int = 256, prefix_caching: bool = False, mfu: float = 0.6,
                 mbu: float = 0.8, overhead_ms: float = 0.5, jitter: float = 0.0, seed: int = 0,
                 disaggregate: bool = False, kv_link_gbps: float = 50.0,
                 time_scale: float = 1.0, device: str = "auto", threads: int | None = None,
                 dtype: str | None = None, kv_cache_gb: float | None = None,
                 cuda_graphs: bool = True, **options: Any) -> Union[SimEngine, TorchEngine]:
    """The engine for ``loadgen serve`` (flag names as on the command line).

    ``model`` defaults to the engine's default (:data:`DEFAULT_MODELS`). For
    ``engine="sim"`` extra ``options`` go to :func:`from_preset` unchanged (e.g.
    ``long_prefill_token_threshold``, ``eos_probability``, ``max_model_len``); ``device``,
    ``threads``, ``dtype``, ``kv_cache_gb`` and ``cuda_graphs`` are ignored. For
    ``engine="torch"`` the scheduler flags, ``seed``, ``device``, ``threads``, ``dtype``,
    ``kv_cache_gb``, ``cuda_graphs`` and ``options`` go to :func:`torch_engine`;
    the simulation flags (``gpu``, ``mfu``, ``mbu``, ``overhead_ms``, ``jitter``,
    ``disaggregate``, ``kv_link_gbps``, ``time_scale``) are ignored and ``tp`` must be 1.
    Raises :class:`ConfigError` naming the flag.
    """
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}", key="--engine")
    model = model or DEFAULT_MODELS[engine]
    if engine == "torch":
        for flag, count in (("--max-num-batched-tokens", max_num_batched_tokens),
                            ("--max-num-seqs", max_num_seqs)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ConfigError(f"must be an integer >= 1, got {count!r}", key=flag)
        if tp != 1:
            raise ConfigError(f"the torch engine runs on one device; got {tp!r}", key="--tp")
        return torch_engine(
            model, enable_chunked_prefill=chunked_prefill,
            max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
            enable_prefix_caching=prefix_caching, seed=seed, device=device, threads=threads,
            dtype=dtype, kv_cache_gb=kv_cache_gb, cuda_graphs=cuda_graphs, **options)
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
