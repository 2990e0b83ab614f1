"""``loadgen serve``: the reference OpenAI-compatible server (simulated GPU or a real torch model).

The options build one :class:`~loadgen.server.config.ServeConfig`, which checks itself.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from loadgen.cli.common import friendly
from loadgen.errors import ConfigError

if TYPE_CHECKING:
    from loadgen.server.config import ServeConfig

__all__ = ["serve"]


def _describe(config: ServeConfig, eng: Any) -> str:
    """What ``loadgen serve`` runs, as its ready line says it."""
    info = getattr(eng, "info", None)
    sim, tp, gpu, replicas = config.sim, config.tp, config.sim.gpu, config.replicas
    if config.engine == "torch" and info:
        where = (
            f"{info.get('device')}, {info.get('dtype')}, {info.get('threads')} threads, "
            f"{info.get('num_gpu_blocks')} KV blocks"
        )
        if info.get("cuda_graphs"):
            where += f", {info['cuda_graphs']} CUDA graphs captured in {info.get('graph_capture_s')} s"
    else:
        where = f"{tp}x {gpu}" if replicas == 1 else f"{replicas} replicas of {tp}x {gpu}, {config.router} routing"
        if sim.disaggregated:
            where = (
                f"{sim.prefill_replicas} prefill x {sim.prefill_tp or tp}x {sim.prefill_gpu or gpu} + "
                f"{sim.decode_replicas} decode x {sim.decode_tp or tp}x {sim.decode_gpu or gpu}, KV links "
                f"{sim.kv_link_gbps:g} Gbit/s = {sim.kv_link_bytes_per_s / 1e9:g} GB/s per rank, "
                f"{sim.pd_router} routing"
            ) + ("" if replicas == 1 else f"; {replicas} replicas")
        extras = [
            f"{what} fp8" for what, dt in (("weights", sim.dtype), ("KV cache", sim.kv_cache_dtype)) if dt == "fp8"
        ]
        if sim.speculative_tokens:
            extras.append(
                f"speculative decoding: {sim.speculative_tokens} draft tokens per step "
                f"({sim.draft_model or 'n-gram'}), acceptance {sim.acceptance_rate:g}"
                + (f", n-gram match rate {sim.ngram_match_rate:g}" if sim.proposer == "ngram" else ", fixed length")
            )
        where += "".join(f", {x}" for x in extras)
    mode = "chunked prefill" if config.scheduler.enable_chunked_prefill else "no chunked prefill"
    auth = ", API key required on /v1" if config.http.api_key is not None else ""
    return f"{config.engine}: {eng.model_name} on {where}, {mode}{auth}"


def _mib(value: float, flag: str) -> int:
    """``value`` MiB as a whole number of bytes (one-line error outside (0, 1e6])."""
    if not 0 < value <= 1e6:  # False for NaN too
        raise ConfigError(f"must be a number of MiB in (0, 1e6], got {value!r}", key=flag)
    return max(1, int(value * 2**20))


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``; ``""`` -> ``()``; anything else a one-line error."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"expected integers separated by commas, got {text!r}", key=flag) from None


EngineOpt = Annotated[str, typer.Option(help="Engine: sim (roofline-simulated GPU) or torch (a real model)")]
GpuOpt = Annotated[str, typer.Option(help="Simulated GPU: a100-80gb, a100-40gb, h100, h200, b200, l40s, mi300x")]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        help="sim: llama-3.1-8b (default), llama-3.1-70b, qwen2.5-7b, mixtral-8x7b or any torch model; torch: tiny (default), small, llama-3.2-1b(-shape), llama-3.1-8b(-shape), llama-3.1-70b, smollm2-135m"
    ),
]
TpOpt = Annotated[int, typer.Option(help="Tensor-parallel GPUs")]
ReplicasOpt = Annotated[int, typer.Option(help="sim: independent engines (each of --tp GPUs) behind one API")]
RouterOpt = Annotated[str, typer.Option(help="With --replicas: round-robin, least-loaded or prefix-aware")]
HostOpt = Annotated[str, typer.Option(help="Address to bind (loopback by default)")]
PortOpt = Annotated[int, typer.Option(help="Port (0 = any free port)")]
ChunkedPrefillOpt = Annotated[bool, typer.Option("--chunked-prefill/--no-chunked-prefill", help="Split long prefills")]
MaxNumBatchedTokensOpt = Annotated[
    int | None,
    typer.Option(
        help="Token budget per engine step (default as vllm serve: 16384 on B200/MI300X, 8192 on H100/H200, 2048 on A100/L40S; at least max_model_len without chunked prefill)"
    ),
]
MaxNumSeqsOpt = Annotated[
    int | None,
    typer.Option(
        help="Most sequences running at once (default as vllm serve: 1024 on H100/H200/B200/MI300X, 256 on A100/L40S)"
    ),
]
PrefixCachingOpt = Annotated[
    bool, typer.Option("--prefix-caching/--no-prefix-caching", help="Reuse KV of shared prefixes")
]
MaxModelLenOpt = Annotated[
    int | None, typer.Option(help="Context length served (default: the model's, capped by the KV cache)")
]
MfuOpt = Annotated[float, typer.Option(help="Model FLOPs utilisation of the simulated GPU (large GEMMs)")]
MbuOpt = Annotated[float, typer.Option(help="Memory bandwidth utilisation of the simulated GPU")]
OverheadMsOpt = Annotated[float, typer.Option(help="Fixed cost per engine step, ms")]
JitterOpt = Annotated[float, typer.Option(help="Seeded multiplicative noise on step times (0.05 = ±5%)")]
DisaggregateOpt = Annotated[bool, typer.Option(help="Separate prefill and decode GPU pools")]
KvLinkGbpsOpt = Annotated[
    float,
    typer.Option(
        help="KV link between pools per tensor-parallel rank, Gbit/s as NICs are sold (400 Gbps RoCE = 50 GB/s)"
    ),
]
PdRouterOpt = Annotated[
    str, typer.Option(help="Disaggregated: round-robin (as vLLM's toy proxy) or least-loaded, both sides")
]
PrefillReplicasOpt = Annotated[
    int, typer.Option(help="Disaggregated: prefill engines (xPyD; above 1 implies --disaggregate)")
]
DecodeReplicasOpt = Annotated[
    int, typer.Option(help="Disaggregated: decode engines (xPyD; above 1 implies --disaggregate)")
]
PrefillTpOpt = Annotated[int | None, typer.Option(help="Disaggregated: GPUs per prefill engine (default --tp)")]
DecodeTpOpt = Annotated[int | None, typer.Option(help="Disaggregated: GPUs per decode engine (default --tp)")]
PrefillGpuOpt = Annotated[str | None, typer.Option(help="Disaggregated: the prefill engines' GPU (default --gpu)")]
DecodeGpuOpt = Annotated[str | None, typer.Option(help="Disaggregated: the decode engines' GPU (default --gpu)")]
TimeScaleOpt = Annotated[float, typer.Option(help="Real seconds per simulated second")]
FailRateOpt = Annotated[float, typer.Option(help="Fault: fraction of requests answered HTTP 500")]
StallMsOpt = Annotated[float, typer.Option(help="Fault: length of a stall before a token, ms")]
StallRateOpt = Annotated[float, typer.Option(help="Fault: probability of a stall per token")]
DisconnectRateOpt = Annotated[float, typer.Option(help="Fault: fraction of streams cut mid-way")]
SeedOpt = Annotated[int, typer.Option(help="Seed for sampling, jitter and faults")]
DeviceOpt = Annotated[str, typer.Option(help="torch: auto, cpu, cuda or cuda:N")]
ThreadsOpt = Annotated[int | None, typer.Option(help="torch on CPU: threads (default: all cores but one)")]
DtypeOpt = Annotated[
    str,
    typer.Option(
        help="sim: auto (bf16) or fp8 weights; torch: auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16, float16"
    ),
]
KvCacheDtypeOpt = Annotated[str, typer.Option(help="sim: auto (bf16) or fp8 KV cache")]
SpeculativeTokensOpt = Annotated[
    int, typer.Option(help="sim: draft tokens verified per decode step (speculative decoding)")
]
AcceptanceRateOpt = Annotated[float, typer.Option(help="sim: probability each draft token is accepted")]
DraftModelOpt = Annotated[
    str, typer.Option(help="sim: model preset that drafts (its cost is modelled); default: n-gram, free")
]
SpecMethodOpt = Annotated[
    str,
    typer.Option(
        help="sim: draft proposer, draft (K every step) or ngram (0..K); default ngram, draft with --draft-model"
    ),
]
NgramMatchRateOpt = Annotated[
    float, typer.Option(help="sim, ngram proposer: probability the draft grows by each further token (0..K)")
]
KvCacheGbOpt = Annotated[float | None, typer.Option(help="torch: KV-cache pool size in GB (default: from free memory)")]
CudaGraphsOpt = Annotated[bool, typer.Option("--cuda-graphs/--no-cuda-graphs", help="torch on CUDA: graphs for decode")]
CudaGraphSizesOpt = Annotated[
    str, typer.Option(help="torch on CUDA: decode batch sizes captured at start-up, e.g. 1,2,4,8 (default 1,2,4..256)")
]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        envvar="LOADGEN_API_KEY",
        show_default=False,
        help="Require the header Authorization: Bearer KEY on /v1/* (as vllm serve --api-key); /health and /metrics stay open",
    ),
]
BodyTimeoutOpt = Annotated[
    float, typer.Option(help="Seconds a request body may take to arrive (then 408, connection closed)")
]
MaxBodyMbOpt = Annotated[float, typer.Option(help="Largest request body in MiB (larger: 413)")]
HeaderTimeoutOpt = Annotated[
    float, typer.Option(help="Seconds a request's headers may take to arrive (then closed; bodies, answers not timed)")
]
DrainTimeoutOpt = Annotated[
    float,
    typer.Option(help="On SIGTERM, SIGINT or SIGHUP: seconds open requests may take to finish (new ones get 503)"),
]
ReasoningTokensOpt = Annotated[
    str,
    typer.Option(
        help="Chat answers reason first: this many tokens (a length distribution, e.g. 64 or uniform:min=32,max=256) stream as delta.reasoning before the content"
    ),
]
ToolCallShareOpt = Annotated[
    float,
    typer.Option(
        help="Share of requests with tools and tool_choice auto answered with a tool call (seeded per request)"
    ),
]
MaxToolResultsOpt = Annotated[
    int,
    typer.Option(help="With tool_choice auto, a history holding this many tool results gets a text answer"),
]
RequestLogOpt = Annotated[int, typer.Option(help="Finished requests kept for GET /loadgen/requests (0: none)")]


def _serve_config(p: Any) -> ServeConfig:
    """The options (``ctx.params``, by name) as one :class:`ServeConfig`, which checks itself."""
    from loadgen.server.config import HttpLimits, Network, SchedulerLimits, ServeConfig, SimOptions, TorchOptions
    from loadgen.server.faults import FaultConfig

    return ServeConfig(
        engine=p.engine,
        model=p.model or "",
        tp=p.tp,
        seed=p.seed,
        replicas=p.replicas,
        router=p.router,
        scheduler=SchedulerLimits(
            enable_chunked_prefill=p.chunked_prefill,
            max_num_batched_tokens=p.max_num_batched_tokens,
            max_num_seqs=p.max_num_seqs,
            enable_prefix_caching=p.prefix_caching,
            max_model_len=p.max_model_len,
        ),
        sim=SimOptions(
            gpu=p.gpu,
            mfu=p.mfu,
            mbu=p.mbu,
            overhead_ms=p.overhead_ms,
            jitter=p.jitter,
            time_scale=p.time_scale,
            disaggregate=p.disaggregate,
            kv_link_gbps=p.kv_link_gbps,
            pd_router=p.pd_router,
            dtype={"auto": "bf16", "bfloat16": "bf16"}.get(p.dtype, p.dtype),
            kv_cache_dtype=p.kv_cache_dtype,
            speculative_tokens=p.speculative_tokens,
            acceptance_rate=p.acceptance_rate,
            draft_model=p.draft_model,
            spec_method=p.spec_method,
            ngram_match_rate=p.ngram_match_rate,
            prefill_replicas=p.prefill_replicas,
            decode_replicas=p.decode_replicas,
            prefill_tp=p.prefill_tp,
            decode_tp=p.decode_tp,
            prefill_gpu=p.prefill_gpu,
            decode_gpu=p.decode_gpu,
        ),
        torch=TorchOptions(
            device=p.device,
            dtype=p.dtype,
            threads=p.threads,
            kv_cache_gb=p.kv_cache_gb,
            cuda_graphs=p.cuda_graphs,
            cuda_graph_sizes=_int_list(p.cuda_graph_sizes, "--cuda-graph-sizes"),
        ),
        faults=FaultConfig(
            fail_rate=p.fail_rate,
            stall_ms=p.stall_ms,
            stall_rate=p.stall_rate,
            disconnect_rate=p.disconnect_rate,
            seed=p.seed,
        ),
        network=Network(host=p.host, port=p.port),
        http=HttpLimits(
            api_key=p.api_key,
            body_timeout_s=p.body_timeout,
            max_body_bytes=_mib(p.max_body_mb, "--max-body-mb"),
            header_timeout_s=p.header_timeout,
            drain_timeout_s=p.drain_timeout,
        ),
    )


@friendly
def serve(
    ctx: typer.Context,
    engine: EngineOpt = "sim",
    gpu: GpuOpt = "h100",
    model: ModelOpt = None,
    tp: TpOpt = 1,
    replicas: ReplicasOpt = 1,
    router: RouterOpt = "round-robin",
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    chunked_prefill: ChunkedPrefillOpt = True,
    max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    prefix_caching: PrefixCachingOpt = True,
    max_model_len: MaxModelLenOpt = None,
    mfu: MfuOpt = 0.6,
    mbu: MbuOpt = 0.8,
    overhead_ms: OverheadMsOpt = 0.5,
    jitter: JitterOpt = 0.0,
    disaggregate: DisaggregateOpt = False,
    kv_link_gbps: KvLinkGbpsOpt = 400.0,
    pd_router: PdRouterOpt = "round-robin",
    prefill_replicas: PrefillReplicasOpt = 1,
    decode_replicas: DecodeReplicasOpt = 1,
    prefill_tp: PrefillTpOpt = None,
    decode_tp: DecodeTpOpt = None,
    prefill_gpu: PrefillGpuOpt = None,
    decode_gpu: DecodeGpuOpt = None,
    time_scale: TimeScaleOpt = 1.0,
    fail_rate: FailRateOpt = 0.0,
    stall_ms: StallMsOpt = 0.0,
    stall_rate: StallRateOpt = 0.0,
    disconnect_rate: DisconnectRateOpt = 0.0,
    seed: SeedOpt = 0,
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = None,
    dtype: DtypeOpt = "auto",
    kv_cache_dtype: KvCacheDtypeOpt = "auto",
    speculative_tokens: SpeculativeTokensOpt = 0,
    acceptance_rate: AcceptanceRateOpt = 0.7,
    draft_model: DraftModelOpt = "",
    spec_method: SpecMethodOpt = "",
    ngram_match_rate: NgramMatchRateOpt = 0.5,
    kv_cache_gb: KvCacheGbOpt = None,
    cuda_graphs: CudaGraphsOpt = True,
    cuda_graph_sizes: CudaGraphSizesOpt = "",
    api_key: ApiKeyOpt = None,
    body_timeout: BodyTimeoutOpt = 30.0,
    max_body_mb: MaxBodyMbOpt = 64.0,
    header_timeout: HeaderTimeoutOpt = 10.0,
    drain_timeout: DrainTimeoutOpt = 30.0,
    reasoning_tokens: ReasoningTokensOpt = "",
    tool_call_share: ToolCallShareOpt = 0.7,
    max_tool_results: MaxToolResultsOpt = 8,
    request_log: RequestLogOpt = 10000,
) -> None:
    """Run the reference OpenAI-compatible server (simulated GPU or a real torch model)."""
    from loadgen.server.api import create_app
    from loadgen.server.app import run_forever
    from loadgen.server.build import build_engine

    config = _serve_config(SimpleNamespace(**ctx.params))
    reasoning = None
    if reasoning_tokens:
        from loadgen.workload.distributions import parse_distribution

        reasoning = parse_distribution(reasoning_tokens, source="command line", key="--reasoning-tokens")
    if request_log < 0:
        raise ConfigError(f"must be >= 0, got {request_log}", key="--request-log")
    from loadgen.server.tools import ToolPolicy

    tools = ToolPolicy(share=tool_call_share, max_results=max_tool_results)
    eng = build_engine(config)
    application = create_app(
        eng,
        faults=config.faults,
        http=config.http,
        reasoning_tokens=reasoning,
        seed=seed,
        history=request_log,
        tools=tools,
    )
    print(f"loadgen serve: {config.limits.describe()}", flush=True)

    def ready(url: str) -> None:
        print(f"loadgen serve: listening on {url} ({_describe(config, eng)})", flush=True)

    try:
        run_forever(application, config.network.host, config.network.port, on_ready=ready)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", key="--port") from None
