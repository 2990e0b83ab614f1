"""One configuration of the reference server, built once and validated once.

``loadgen serve`` (and the tests, the demo, the benchmarks) build one :class:`ServeConfig`:
the engine kind, the model preset, tensor parallelism and the seed, with nested parts —
:class:`SchedulerLimits` (both engines), :class:`SimOptions` (the sim only),
:class:`TorchOptions` (the torch engine only), the
:class:`~loadgen.server.faults.FaultConfig`, the :class:`Network` address and the
:class:`HttpLimits` (API key, body timeout and size).

Constructing a :class:`ServeConfig` checks every value the chosen engine reads and raises
:class:`~loadgen.errors.ConfigError` naming the flag (``--max-num-seqs: must be an integer
>= 1, got 0``); the other engine's options are not read, so not checked. Scheduler limits
left unset take ``vllm serve``'s defaults for the chosen GPU (:func:`batch_defaults`);
:attr:`ServeConfig.limits` holds the effective ones. Past that point
nothing re-checks them: the engines take the config as it is. All parts are frozen,
picklable dataclasses — the torch engine's process receives the :class:`ServeConfig`
itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from loadgen.errors import ConfigError
from loadgen.server.engine.models import MODELS, ModelShape
from loadgen.server.engine.scheduler import EngineConfig
from loadgen.server.faults import FaultConfig
from loadgen.server.replicas import ROUTERS
from loadgen.server.sim.disagg import PD_ROUTERS
from loadgen.server.sim.gpus import GPUS, GpuSpec
from loadgen.server.sim.roofline import DTYPES as SIM_DTYPES
from loadgen.server.sim.roofline import KV_CACHE_DTYPES
from loadgen.server.torch.loader import DTYPES, model_names

__all__ = [
    "DEFAULT_MODELS",
    "ENGINES",
    "ENGINE_MODES",
    "PD_ROUTERS",
    "HttpLimits",
    "Network",
    "SchedulerLimits",
    "ServeConfig",
    "SimOptions",
    "TorchOptions",
    "batch_defaults",
]

ENGINES = ("sim", "torch")
ENGINE_MODES = ("process", "thread")  # where the torch engine runs: TorchOptions.engine_mode
DEFAULT_MODELS = {"sim": "llama-3.1-8b", "torch": "tiny"}


GIB = 1 << 30


def batch_defaults(gpu: GpuSpec | None) -> tuple[int, int]:
    """``(max_num_batched_tokens, max_num_seqs)`` that ``vllm serve`` (the OpenAI API
    server usage context) picks when neither is given, by the GPU's memory class:

    - at least 160 GiB (B200, MI300X): 16,384 and 1,024;
    - at least 70 GiB and not an A100 (H100, H200): 8,192 and 1,024;
    - anything else (A100 of either size, L40S, or no GPU known — the torch engine's
      device is only found in its own process): 2,048 and 256.

    vLLM v0.28.0, ``vllm/engine/arg_utils.py``, ``EngineArgs.get_batch_defaults``
    (v0.28.0 added the 160 GiB class; up to v0.27 the two lower ones were all). The
    ``LLM`` class's defaults (16,384 / 8,192 tokens) are not modelled: this is a server.
    Memory is the datasheet's, in bytes, as ``get_device_total_memory`` reports it.
    """
    if gpu is not None and gpu.memory_bytes >= 160 * GIB:
        return 16384, 1024
    if gpu is not None and gpu.memory_bytes >= 70 * GIB and "a100" not in gpu.name.lower():
        return 8192, 1024
    return 2048, 256


def _integer(value: object, key: str, low: int = 1, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ConfigError(f"must be an integer {bound}, got {value!r}", key=key)


def _number(value: object, key: str, low: float, high: float, *, above: bool = False) -> None:
    """``value`` in ``[low, high]`` (``(low, high]`` when ``above``)."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and (low < value if above else low <= value)
        and value <= high
    )
    if not ok:
        bounds = f"{'(' if above else '['}{low:g}, {high:g}]"
        raise ConfigError(f"must be a number in {bounds}, got {value!r}", key=key)


@dataclass(frozen=True, slots=True)
class SchedulerLimits:
    """The scheduler's and the KV cache's settings (vLLM's names), for both engines.

    ``max_num_batched_tokens`` / ``max_num_seqs`` None: ``vllm serve``'s defaults for the
    GPU (:func:`batch_defaults`); without chunked prefill the token budget defaults to the
    larger of that default and ``max_model_len`` (a whole prompt must fit one step; a
    smaller budget given explicitly is refused, as vLLM does), and an unset budget never
    exceeds ``max_num_seqs * max_model_len``. ``max_num_seqs`` unset is at most the token
    budget. (vLLM's ``_set_default_max_num_seqs_and_batched_tokens_args``.)
    ``max_model_len`` None: the model's (the API caps it at the KV cache's size).
    ``num_gpu_blocks`` None: sized from device memory (``gpu_memory_utilization`` of it,
    less the weights; the torch engine on a CPU takes 1 GiB unless ``--kv-cache-gb``).
    Prefix caching is on by default, as in vLLM V1.
    """

    enable_chunked_prefill: bool = True
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enable_prefix_caching: bool = True
    long_prefill_token_threshold: int | None = None
    max_model_len: int | None = None
    max_waiting: int = 10_000
    block_size: int = 16
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float = 0.9

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid setting."""
        if self.max_num_batched_tokens is not None:
            _integer(self.max_num_batched_tokens, "--max-num-batched-tokens")
        if self.max_num_seqs is not None:
            _integer(self.max_num_seqs, "--max-num-seqs")
        for key in ("long_prefill_token_threshold", "max_model_len", "num_gpu_blocks"):
            if getattr(self, key) is not None:
                _integer(getattr(self, key), key)
        _integer(self.max_waiting, "max_waiting")
        _integer(self.block_size, "block_size")
        _number(self.gpu_memory_utilization, "gpu_memory_utilization", 0.0, 1.0, above=True)

    def resolved(self, gpu: GpuSpec | None, model_max_len: int) -> SchedulerLimits:
        """These limits with every default filled in for ``gpu`` (None: unknown) and a
        model of context ``model_max_len``; raises :class:`ConfigError` for a token budget
        below ``max_model_len`` without chunked prefill."""
        tokens, seqs = batch_defaults(gpu)
        max_len = self.max_model_len or model_max_len
        seq_limit = self.max_num_seqs or seqs
        budget = self.max_num_batched_tokens
        if budget is None:
            # vLLM: unchunked, at least max_model_len; never above what the sequences hold
            budget = tokens if self.enable_chunked_prefill else max(max_len, tokens)
            budget = min(seq_limit * max_len, budget)
        elif not self.enable_chunked_prefill and budget < max_len:
            raise ConfigError(
                f"{budget} is smaller than max_model_len ({max_len}): without chunked "
                f"prefill a whole prompt must fit one step; raise it, leave it unset, "
                f"or keep chunked prefill",
                key="--max-num-batched-tokens",
            )
        return replace(self, max_num_batched_tokens=budget, max_num_seqs=self.max_num_seqs or min(seqs, budget))

    @property
    def token_budget(self) -> int:
        """``max_num_batched_tokens`` of resolved limits (:attr:`ServeConfig.limits`)."""
        if self.max_num_batched_tokens is None:
            raise ValueError("unresolved scheduler limits: use ServeConfig.limits")
        return self.max_num_batched_tokens

    @property
    def seq_limit(self) -> int:
        """``max_num_seqs`` of resolved limits (:attr:`ServeConfig.limits`)."""
        if self.max_num_seqs is None:
            raise ValueError("unresolved scheduler limits: use ServeConfig.limits")
        return self.max_num_seqs

    def engine_config(self, model: ModelShape, *, num_gpu_blocks: int, eos_token_id: int | None) -> EngineConfig:
        """The scheduler's :class:`EngineConfig` for ``model`` with a sized KV cache (of
        resolved limits: :attr:`ServeConfig.limits`)."""
        return EngineConfig(
            block_size=self.block_size,
            num_gpu_blocks=num_gpu_blocks,
            max_num_batched_tokens=self.token_budget,
            max_num_seqs=self.seq_limit,
            enable_chunked_prefill=self.enable_chunked_prefill,
            long_prefill_token_threshold=self.long_prefill_token_threshold,
            enable_prefix_caching=self.enable_prefix_caching,
            max_model_len=self.max_model_len or model.max_model_len,
            max_waiting=self.max_waiting,
            eos_token_id=eos_token_id,
        )

    def describe(self) -> str:
        """One line of the effective limits, as ``vllm serve`` logs them at start-up."""
        return (
            f"max_num_batched_tokens={self.max_num_batched_tokens}, "
            f"max_num_seqs={self.max_num_seqs}, chunked prefill "
            f"{'on' if self.enable_chunked_prefill else 'off'}, prefix caching "
            f"{'on' if self.enable_prefix_caching else 'off'}"
        )


@dataclass(frozen=True, slots=True)
class SimOptions:
    """The sim engine's GPU, roofline efficiencies, noise, speed and disaggregation.

    ``mfu``/``mbu``: FLOPs and bandwidth utilisation; ``overhead_ms`` per step;
    ``jitter``: sigma of a seeded mean-one log-normal factor on step times;
    ``eos_probability`` per token; ``min_token_id``: lower ids are never generated (the
    word tokenizer's special tokens); ``time_scale``: real seconds per modelled second;
    ``kv_link_gbps``: gigabits per second of each tensor-parallel rank's link between the
    prefill and decode pools when ``disaggregate``, as NICs are sold (400: a 400 Gbps
    RoCE NIC, 50 GB/s); ``pd_router``: how the proxy picks a request's prefill and decode
    engines (:data:`PD_ROUTERS`); ``prefill_replicas``/``decode_replicas`` engines
    in each pool (xPyD; either above 1 implies ``disaggregate``), each of
    ``prefill_tp``/``decode_tp`` GPUs of type ``prefill_gpu``/``decode_gpu`` (None: the
    engine's ``tp`` and ``gpu``).
    ``dtype``/``kv_cache_dtype``: bf16 or fp8 weights, auto (bf16) or fp8 KV cache;
    ``speculative_tokens`` K drafts per decode step, each accepted with probability
    ``acceptance_rate`` until the first rejection; ``draft_model``: a model preset that
    drafts them (its K steps are priced), or ``""`` for none (drafting free);
    ``spec_method``: the proposer, ``draft`` (K drafts every step) or ``ngram`` (0..K,
    each further draft token with probability ``ngram_match_rate``); ``""``: ``draft``
    with a draft model, else ``ngram`` — see :mod:`loadgen.server.sim.runner`.
    """

    gpu: str = "h100"
    mfu: float = 0.6
    mbu: float = 0.8
    overhead_ms: float = 0.5
    allreduce_latency_s: float = 20e-6
    jitter: float = 0.0
    eos_probability: float = 0.0
    min_token_id: int = 4
    time_scale: float = 1.0
    disaggregate: bool = False
    kv_link_gbps: float = 400.0
    pd_router: str = "round-robin"
    dtype: str = "bf16"
    kv_cache_dtype: str = "auto"
    speculative_tokens: int = 0
    acceptance_rate: float = 0.7
    draft_model: str = ""
    spec_method: str = ""
    ngram_match_rate: float = 0.5
    prefill_replicas: int = 1
    decode_replicas: int = 1
    prefill_tp: int | None = None
    decode_tp: int | None = None
    prefill_gpu: str | None = None
    decode_gpu: str | None = None

    @property
    def kv_link_bytes_per_s(self) -> float:
        """Each rank's KV link in bytes per second (``kv_link_gbps`` is in Gbit/s)."""
        return self.kv_link_gbps * 1e9 / 8

    @property
    def proposer(self) -> str:
        """The speculative proposer: ``spec_method``, else ``draft`` with a draft model
        and ``ngram`` without."""
        return self.spec_method or ("draft" if self.draft_model else "ngram")

    @property
    def disaggregated(self) -> bool:
        """Whether prefill and decode run in separate pools."""
        return self.disaggregate or self.prefill_replicas > 1 or self.decode_replicas > 1

    def validate(self, model: ModelShape) -> None:
        """Raise :class:`ConfigError` naming the first invalid option."""
        GPUS.lookup(self.gpu)
        for gpu in (self.prefill_gpu, self.decode_gpu):
            if gpu is not None:
                GPUS.lookup(gpu)
        if self.pd_router not in PD_ROUTERS:
            raise ConfigError(
                f"unknown P/D router {self.pd_router!r}; valid: {', '.join(PD_ROUTERS)}", key="--pd-router"
            )
        _integer(self.prefill_replicas, "--prefill-replicas", 1, 64)
        _integer(self.decode_replicas, "--decode-replicas", 1, 64)
        for key, tp in (("--prefill-tp", self.prefill_tp), ("--decode-tp", self.decode_tp)):
            if tp is not None:
                _integer(tp, key, 1, 64)
        for key, value, low, high in (
            ("--mfu", self.mfu, 1e-6, 1.0),
            ("--mbu", self.mbu, 1e-6, 1.0),
            ("--overhead-ms", self.overhead_ms, 0.0, 10_000.0),
            ("allreduce_latency_s", self.allreduce_latency_s, 0.0, 1.0),
            ("--jitter", self.jitter, 0.0, 1.0),
            ("eos_probability", self.eos_probability, 0.0, 1.0),
            ("--time-scale", self.time_scale, 1e-9, 1e9),
            ("--kv-link-gbps", self.kv_link_gbps, 1e-9, 1e9),
        ):
            _number(value, key, low, high)
        _integer(self.min_token_id, "min_token_id", 0, model.vocab_size - 2)
        for flag, dtype, valid in (
            ("--dtype", self.dtype, SIM_DTYPES),
            ("--kv-cache-dtype", self.kv_cache_dtype, KV_CACHE_DTYPES),
        ):
            if dtype not in valid:
                raise ConfigError(f"unknown dtype {dtype!r}; valid: {', '.join(valid)}", key=flag)
        _integer(self.speculative_tokens, "--speculative-tokens", 0, 16)
        _number(self.acceptance_rate, "--acceptance-rate", 0.0, 1.0)
        _number(self.ngram_match_rate, "--ngram-match-rate", 0.0, 1.0)
        if self.spec_method not in ("", "draft", "ngram"):
            raise ConfigError(
                f"unknown speculative method {self.spec_method!r}; valid: draft, ngram", key="--spec-method"
            )
        if self.spec_method == "ngram" and self.draft_model:
            raise ConfigError("--spec-method ngram drafts without a model; drop --draft-model", key="--spec-method")
        if self.draft_model:
            if self.draft_model.strip().lower() not in MODELS:
                raise ConfigError(
                    f"unknown draft model {self.draft_model!r}; valid: {', '.join(MODELS)}", key="--draft-model"
                )
            draft = MODELS[self.draft_model.strip().lower()]
            if draft.vocab_size != model.vocab_size:
                raise ConfigError(
                    f"{draft.name} has a vocabulary of {draft.vocab_size}, "
                    f"{model.name} of {model.vocab_size}: they must match",
                    key="--draft-model",
                )


@dataclass(frozen=True, slots=True)
class TorchOptions:
    """The torch engine's device and process.

    ``device``: auto (CUDA when available), cpu, cuda or cuda:N. ``dtype``: auto (bf16 on
    CUDA, fp32 on CPU) or a dtype name. ``threads``: torch CPU threads (None: all cores
    but one). ``kv_cache_gb``: the KV pool (None: 1 GiB on CPU, free memory on CUDA).
    ``engine_mode``: ``process`` (a spawned engine process) or ``thread`` (tests).
    ``cuda_graph_sizes``: padded decode batch sizes captured as CUDA graphs at start-up
    (empty: 1, 2, 4, ... 256, and ``max_num_seqs``).
    """

    device: str = "auto"
    dtype: str = "auto"
    threads: int | None = None
    kv_cache_gb: float | None = None
    cuda_graphs: bool = True
    cuda_graph_sizes: tuple[int, ...] = ()
    engine_mode: str = "process"
    startup_timeout_s: float = 600.0

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid option."""
        device = self.device
        if not isinstance(device, str) or not (device in ("auto", "cpu", "cuda") or device.startswith("cuda:")):
            raise ConfigError(f"must be auto, cpu, cuda or cuda:N, got {device!r}", key="--device")
        if self.dtype not in ("auto", *DTYPES):
            raise ConfigError(f"unknown dtype {self.dtype!r}; valid: auto, {', '.join(DTYPES)}", key="--dtype")
        if self.threads is not None:
            _integer(self.threads, "--threads")
        for size in self.cuda_graph_sizes:
            _integer(size, "--cuda-graph-sizes", 1, 4096)
        if self.kv_cache_gb is not None:
            _number(self.kv_cache_gb, "--kv-cache-gb", 0.0, 1e6, above=True)
        if self.engine_mode not in ENGINE_MODES:
            raise ConfigError(
                f"unknown engine mode {self.engine_mode!r}; valid: {', '.join(ENGINE_MODES)}", key="engine_mode"
            )
        _number(self.startup_timeout_s, "startup_timeout_s", 0.0, 1e6, above=True)


@dataclass(frozen=True, slots=True)
class Network:
    """Where the server listens (loopback by default; port 0: any free port)."""

    host: str = "127.0.0.1"
    port: int = 8000

    def validate(self) -> None:
        """Raise :class:`ConfigError` for an empty host or a port outside 0-65535."""
        if not isinstance(self.host, str) or not self.host:
            raise ConfigError(f"must be an address, got {self.host!r}", key="--host")
        _integer(self.port, "--port", 0, 65535)


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The HTTP front's guards (:mod:`loadgen.server.guard`, :mod:`loadgen.server.connection`):
    the API key (None: no authentication), the body-read timeout, the body size limit, the
    time a connection has to send a request's headers, and how long SIGTERM lets open
    requests finish. The key never appears in a repr or an error message."""

    api_key: str | None = field(default=None, repr=False)
    body_timeout_s: float = 30.0
    max_body_bytes: int = 64 * 2**20
    header_timeout_s: float = 10.0
    drain_timeout_s: float = 30.0

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid setting."""
        key = self.api_key
        if key is not None and not (
            isinstance(key, str) and key and key.isascii() and key.isprintable() and " " not in key
        ):
            raise ConfigError("must be a non-empty string of printable ASCII without spaces", key="--api-key")
        _number(self.body_timeout_s, "--body-timeout", 0.0, 1e6, above=True)
        _number(self.header_timeout_s, "--header-timeout", 0.0, 1e6, above=True)
        _number(self.drain_timeout_s, "--drain-timeout", 0.0, 1e6)
        _integer(self.max_body_bytes, "max_body_bytes")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Everything ``loadgen serve`` runs with (see the module docstring).

    ``model`` is a preset name (``""``: the engine's default, :data:`DEFAULT_MODELS`); it
    is stored as looked up (lower case) and is the name the server serves. ``tp``: GPUs
    of the sim's tensor-parallel group (the torch engine runs on one device). ``seed``:
    sampling, jitter and the torch engine's random weights (replica ``i`` of the sim
    uses ``seed + 1000 * i``). ``replicas``: independent sim engines behind one API,
    chosen per request by ``router`` (:mod:`loadgen.server.replicas`). :attr:`limits`:
    the scheduler limits in effect (``scheduler`` with the defaults of the GPU filled in).
    """

    engine: str = "sim"
    model: str = ""
    tp: int = 1
    seed: int = 0
    replicas: int = 1
    router: str = "round-robin"
    scheduler: SchedulerLimits = field(default_factory=SchedulerLimits)
    sim: SimOptions = field(default_factory=SimOptions)
    torch: TorchOptions = field(default_factory=TorchOptions)
    faults: FaultConfig = field(default_factory=FaultConfig)
    network: Network = field(default_factory=Network)
    http: HttpLimits = field(default_factory=HttpLimits)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"unknown engine {self.engine!r}; valid: {', '.join(ENGINES)}", key="--engine")
        name = (self.model or DEFAULT_MODELS[self.engine]).strip().lower()
        valid = list(MODELS) if self.engine == "sim" else model_names()
        MODELS.lookup(name, valid, what=f"{self.engine} model")
        object.__setattr__(self, "model", name)
        self.scheduler.validate()
        _integer(self.replicas, "--replicas", 1, 64)
        if self.router not in ROUTERS:
            raise ConfigError(f"unknown router {self.router!r}; valid: {', '.join(ROUTERS)}", key="--router")
        if self.engine == "sim":
            _integer(self.tp, "--tp", 1, 64)
            self.sim.validate(self.shape)
        else:
            if self.tp != 1:
                raise ConfigError(f"the torch engine runs on one device; got {self.tp!r}", key="--tp")
            if self.replicas != 1:
                raise ConfigError(f"the torch engine runs one replica; got {self.replicas!r}", key="--replicas")
            self.torch.validate()
        self.network.validate()
        self.http.validate()
        _ = self.limits  # refuses a token budget below max_model_len without chunking

    @property
    def limits(self) -> SchedulerLimits:
        """The effective scheduler limits: unset ones take ``vllm serve``'s defaults for
        the sim's GPU (the torch engine: the defaults of an unknown device)."""
        gpu = GPUS.lookup(self.sim.gpu) if self.engine == "sim" else None
        return self.scheduler.resolved(gpu, self.shape.max_model_len)

    @property
    def shape(self) -> ModelShape:
        """The model preset's shape."""
        return MODELS[self.model]
