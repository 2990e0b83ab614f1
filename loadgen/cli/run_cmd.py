"""``loadgen run``: its options, by panel, and the exit codes of a run.

The command only parses: :class:`~loadgen.orchestrate.RunFlags` takes the options as given
(``None``: not given), :func:`~loadgen.orchestrate.build_run_config` builds the one
:class:`~loadgen.orchestrate.RunConfig` (which checks itself), and
:func:`~loadgen.orchestrate.execute` runs it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from loadgen.cli.common import console, err_console, friendly, sigterm_unwinds
from loadgen.cli.config_file import config_callback
from loadgen.load.arrivals import arrival_help
from loadgen.signals import exit_code

if TYPE_CHECKING:
    from loadgen.orchestrate import RunConfig

__all__ = ["execute_and_exit", "run"]

_TARGET, _WORKLOAD, _LOAD, _SLOS = "Target", "Workload", "Load", "SLOs and gates"


def api_help() -> str:
    """The registered dialects, for ``--api``'s help: ``chat: ...; completions: ...``."""
    from loadgen.client.dialects import dialect_names, get_dialect

    return "; ".join(f"{name}: {get_dialect(name).description}" for name in dialect_names())


_OUTPUT, _SCALE, _ADVANCED = "Output", "Scale-out", "Advanced"


def _opt(*names: str, panel: str, help: str) -> typer.models.OptionInfo:
    return typer.Option(*names, rich_help_panel=panel, help=help)  # type: ignore[no-any-return]


OptStr = str | None
OptInt = int | None
OptFloat = float | None
Url = Annotated[
    OptStr,
    _opt(
        "--url",
        "--base-url",
        panel=_TARGET,
        help="Base URL of the server, e.g. "
        "http://127.0.0.1:8000 (an endpoint's path, e.g. /v1/chat/completions, is taken off; "
        "required unless --resume; --base-url as in vllm bench serve)",
    ),
]
Api = Annotated[OptStr, _opt("--api", panel=_TARGET, help=f"API dialect (default chat): {api_help()}")]
Model = Annotated[OptStr, _opt("--model", panel=_TARGET, help="Model name (default: the first of /v1/models)")]
Header = Annotated[
    list[str] | None,
    _opt("--header", panel=_TARGET, help="Extra header 'Name: value', repeatable (values never stored)"),
]
ApiKeyEnv = Annotated[
    OptStr, _opt("--api-key-env", panel=_TARGET, help="Env var holding the API key (default OPENAI_API_KEY if set)")
]
WorkloadOpt = Annotated[
    OptStr,
    _opt("--workload", panel=_WORKLOAD, help="Named workload (workloads/NAME.toml) or a .toml path (default chat)"),
]
PromptTokens = Annotated[
    OptStr,
    _opt(
        "--prompt-tokens",
        panel=_WORKLOAD,
        help="Prompt length: 256 or e.g. normal:mean=512,std=128,min=16; with --workload, every class's "
        "whole prompt (a shared prefix kept)",
    ),
]
BatchSize = Annotated[
    OptStr,
    _opt("--batch-size", panel=_WORKLOAD, help="--api embeddings: inputs per request, 8 or e.g. uniform:min=1,max=32"),
]
Documents = Annotated[
    OptStr, _opt("--documents", panel=_WORKLOAD, help="--api rerank/score: documents per request, 16 or a distribution")
]
OutputTokens = Annotated[
    OptStr,
    _opt(
        "--output-tokens",
        panel=_WORKLOAD,
        help="Output length: 64 or e.g. lognormal:median=200,sigma=0.5; with --workload, every class's",
    ),
]
Dataset = Annotated[
    OptStr,
    _opt(
        "--dataset",
        panel=_WORKLOAD,
        help="Replay a dataset's prompts: ShareGPT .json, "
        "chat/prompt .jsonl, .csv or .parquet (see workloads/README.md)",
    ),
]
DatasetFormat = Annotated[
    OptStr,
    _opt(
        "--dataset-format",
        panel=_WORKLOAD,
        help="With --dataset: auto (default), sharegpt, chat, prompts, csv or parquet",
    ),
]
MinPrompt = Annotated[OptInt, _opt("--min-prompt-tokens", panel=_WORKLOAD, help="With --dataset: skip shorter prompts")]
MaxPrompt = Annotated[OptInt, _opt("--max-prompt-tokens", panel=_WORKLOAD, help="With --dataset: skip longer prompts")]
Replacement = Annotated[
    bool,
    _opt(
        "--replacement/--no-replacement",
        panel=_WORKLOAD,
        help="With --dataset: sample entries with replacement (default: without)",
    ),
]
Tokenizer = Annotated[
    OptStr,
    _opt(
        "--tokenizer",
        panel=_WORKLOAD,
        help="A tokenizer.json, or a Hugging Face model "
        "id (ORG/NAME) already in the local Hugging Face cache (never downloaded): exact "
        "prompt lengths (default: words calibrated from the server's usage); needs "
        "loadgen\\[tokenizer]",
    ),
]
TraceOpt = Annotated[
    OptStr,
    _opt(
        "--trace",
        panel=_WORKLOAD,
        help="Replay a trace at its recorded times: Mooncake "
        ".jsonl, Azure or BurstGPT .csv (--rate R rescales it to R req/s), or an agent trace's tasks "
        "(loadgen agent-trace or AIPerf session .jsonl; --concurrency N: N users replay them closed loop)",
    ),
]
TraceFormat = Annotated[
    OptStr,
    _opt(
        "--trace-format",
        panel=_WORKLOAD,
        help="With --trace: auto (default), mooncake, azure, burstgpt, agent or aiperf-sessions",
    ),
]
Speed = Annotated[
    OptFloat, _opt("--speed", panel=_WORKLOAD, help="With --trace: time compression (default 1; 2 = twice as fast)")
]
Window = Annotated[OptStr, _opt("--window", panel=_WORKLOAD, help="With --trace: START:END seconds of the trace")]
Seed = Annotated[OptInt, _opt("--seed", panel=_WORKLOAD, help="Seed for lengths, prompts and arrivals (default 0)")]
RepeatPrompts = Annotated[
    bool,
    _opt(
        "--repeat-prompts",
        panel=_WORKLOAD,
        help="Send the seed's same prompt text every run (default: each run salts its prompts, so a server's "
        "prefix cache holds nothing from an earlier run)",
    ),
]
PromptSalt = Annotated[
    OptStr,
    _opt(
        "--prompt-salt",
        panel=_ADVANCED,
        help="The prompts' salt (16 hex digits, as run.json's config.prompt_salt): the prompt text of that run again",
    ),
]
Concurrency = Annotated[
    OptInt,
    _opt(
        "--concurrency",
        panel=_LOAD,
        help="Closed loop: number of concurrent users (default 8 when no --rate, --levels or --profile sets "
        "the load; vllm bench serve's --max-concurrency is --max-in-flight)",
    ),
]
Rate = Annotated[
    OptFloat,
    _opt(
        "--rate",
        "--request-rate",
        panel=_LOAD,
        help="Open loop: requests per second (--request-rate as in vllm bench serve)",
    ),
]
Arrival = Annotated[
    OptStr, _opt("--arrival", panel=_LOAD, help=f"Open-loop arrivals (default poisson): {arrival_help()}")
]
Burstiness = Annotated[
    OptFloat, _opt("--burstiness", panel=_LOAD, help="Gamma shape (default 1 = Poisson, < 1 burstier)")
]
MaxInFlight = Annotated[
    OptInt,
    _opt(
        "--max-in-flight",
        "--max-concurrency",
        panel=_LOAD,
        help="Open loop: cap on requests in flight (--max-concurrency as in vllm bench serve)",
    ),
]
ProfileOpt = Annotated[
    OptStr, _opt("--profile", panel=_LOAD, help="Named load profile (profiles/NAME.toml) or a .toml path")
]
Levels = Annotated[
    OptStr,
    _opt(
        "--levels",
        panel=_LOAD,
        help="Load levels, e.g. 1,2,4,8 (with --profile or alone; default: one level of 8 users)",
    ),
]
Requests = Annotated[
    OptInt,
    _opt(
        "--requests",
        "--num-prompts",
        panel=_LOAD,
        help="Requests per level, warm-up "
        "excluded (default 100 unless --duration; --num-prompts as in vllm bench serve)",
    ),
]
Duration = Annotated[OptFloat, _opt("--duration", panel=_LOAD, help="Seconds per level")]
Precision = Annotated[
    list[str] | None,
    _opt(
        "--precision",
        panel=_LOAD,
        help="Run each level until this statistic is known within ±N% (repeatable): ttft.p99=5%, "
        "e2e.mean=2%; metrics ttft, ttft_queued, tpot, e2e, e2e_queued, ttfa; stats mean, p50, p99, p99.9…",
    ),
]
Confidence = Annotated[
    OptFloat,
    _opt(
        "--confidence",
        panel=_LOAD,
        help="Confidence of every interval in summary.json and of --precision's stopping rule (default 0.95)",
    ),
]
MinDuration = Annotated[
    OptFloat, _opt("--min-duration", panel=_LOAD, help="With --precision: seconds a level runs at least (default 0)")
]
MaxDuration = Annotated[
    OptFloat,
    _opt(
        "--max-duration",
        panel=_LOAD,
        help=(
            "With --precision: seconds after which a level stops, precise or not (default 600); "
            "it stops sooner, saying so, once a target needs over twice the requests this allows"
        ),
    ),
]
Warmup = Annotated[OptInt, _opt("--warmup", panel=_LOAD, help="Requests sent first in each level and excluded")]
Trials = Annotated[
    OptInt,
    _opt(
        "--trials",
        panel=_LOAD,
        help="Repeat each level this many times (default 1; new "
        "requests, arrival seed + i); summary.json, the level's intervals (from 3 trials), "
        "--precision and compare then use between-trial variation",
    ),
]
Slo = Annotated[
    list[str] | None,
    _opt("--slo", panel=_SLOS, help="SLO, repeatable: ttft=500ms, tpot=50ms, itl=80ms, e2e=10s, ttft:p90=300ms"),
]
SloLatency = Annotated[
    OptStr, _opt("--slo-latency", panel=_SLOS, help="Rate levels judge TTFT/E2E SLOs from: queued (default) or sent")
]
FailOn = Annotated[
    list[str] | None,
    _opt(
        "--fail-on",
        panel=_SLOS,
        help="CI gates: exit non-zero when a level "
        "fails them: slo, errors, client-bound, non-stationary (comma-separated or repeated; "
        "exit 3 errors, 4 slo, 5 client-bound, 6 non-stationary)",
    ),
]
MaxErrorRate = Annotated[
    OptFloat,
    _opt(
        "--max-error-rate",
        panel=_SLOS,
        help="Gate on errors above this share of requests, e.g. 0.01 (implies --fail-on errors; default 0 with it)",
    ),
]
AbortOnFail = Annotated[
    bool,
    _opt(
        "--abort-on-fail/--no-abort-on-fail",
        panel=_SLOS,
        help="Stop a sweep at the first level that fails a gate (the --fail-on gates; slo,errors when none is given)",
    ),
]
Out = Annotated[
    OptStr,
    _opt("--out", panel=_OUTPUT, help="Run folder: new, empty or an earlier run's (default reports/<time>-<label>)"),
]
Label = Annotated[
    OptStr, _opt("--label", panel=_OUTPUT, help="A name for this run (shown in reports; default the workload's name)")
]
SaveResult = Annotated[
    Path | None,
    _opt(
        "--save-result",
        panel=_OUTPUT,
        help="Also write the headline numbers "
        "as JSON in the shape of vllm bench serve's result file (see "
        "docs/metrics.md); unlike vLLM's flag, it takes the file's path",
    ),
]
Quiet = Annotated[bool, _opt("--quiet/--no-quiet", panel=_OUTPUT, help="No live display")]
ScrapeMetrics = Annotated[
    bool,
    _opt(
        "--scrape-metrics/--no-scrape-metrics", panel=_OUTPUT, help="Poll the server's Prometheus /metrics every second"
    ),
]
ScrapeUrl = Annotated[
    list[str] | None,
    _opt(
        "--scrape-url",
        panel=_OUTPUT,
        help="Another Prometheus endpoint to "
        "poll with it, e.g. a DCGM exporter's http://127.0.0.1:9400/metrics "
        "(repeatable; implies --scrape-metrics)",
    ),
]
Dashboard = Annotated[
    bool,
    _opt(
        "--dashboard/--no-dashboard",
        panel=_OUTPUT,
        help="Serve a live page of the run (curves, Stop, Skip level) on 127.0.0.1:8089; see docs/dashboard.md",
    ),
]
DashboardPort = Annotated[
    OptInt,
    _opt(
        "--dashboard-port",
        panel=_OUTPUT,
        help="The dashboard's port (default 8089; 0: any free one; implies --dashboard)",
    ),
]
DashboardHost = Annotated[
    OptStr,
    _opt(
        "--dashboard-host",
        panel=_OUTPUT,
        help="The interface the dashboard listens on (default 127.0.0.1; another one needs the printed token)",
    ),
]
Resume = Annotated[
    Path | None,
    _opt(
        "--resume",
        panel=_OUTPUT,
        help="Continue the run in this folder (killed "
        "mid-sweep) at its first unfinished level, with its run.json's settings; "
        "takes only --url, --header, --api-key-env, --quiet, --fail-on and "
        "--max-error-rate besides",
    ),
]
Workers = Annotated[
    OptStr,
    _opt(
        "--workers",
        panel=_SCALE,
        help="Worker processes that send; the main process then only coordinates and "
        "writes. Default auto: the events/s the busiest level needs at ~3,800 per worker, "
        "at most the free cores (1 at low load); on Ray, one per 128 concurrent streams",
    ),
]
Ray = Annotated[
    OptStr,
    _opt(
        "--ray",
        panel=_SCALE,
        help="Workers are Ray actors spread over a cluster's nodes: auto "
        "(the cluster in RAY_ADDRESS or started here by ray start, else a local one) or the "
        "cluster's HOST:PORT; needs pip install 'loadgen\\[distributed]'",
    ),
]
Config = Annotated[
    Path | None,
    typer.Option(
        "--config",
        is_eager=True,
        callback=config_callback,
        rich_help_panel=_ADVANCED,
        help="Options from a TOML file, or a run folder's run.json to repeat that run (same seed, requests and "
        "prompt text); flags given here win. Header values and API keys are never in run.json: pass them again",
    ),
]
Transport = Annotated[
    OptStr,
    _opt("--transport", panel=_ADVANCED, help="fast (default: HTTP/1.1 on httptools), aiohttp, or httpx (HTTP/2)"),
]
Http2 = Annotated[bool, _opt("--http2/--no-http2", panel=_ADVANCED, help="HTTP/2 (httpx transport)")]
Strict = Annotated[
    bool,
    _opt("--strict/--no-strict", panel=_ADVANCED, help="Send only standard OpenAI fields (no ignore_eos/min_tokens)"),
]
ContinuousUsage = Annotated[
    bool,
    _opt(
        "--continuous-usage/--no-continuous-usage",
        panel=_ADVANCED,
        help="Ask for per-event usage (vLLM continuous_usage_stats)",
    ),
]
Calibrate = Annotated[
    bool, _opt("--calibrate/--no-calibrate", panel=_ADVANCED, help="Calibrate words per token with two short requests")
]
Timeout = Annotated[OptFloat, _opt("--timeout", panel=_ADVANCED, help="Whole-request timeout in seconds (default 600)")]
ReadTimeout = Annotated[
    OptFloat, _opt("--read-timeout", panel=_ADVANCED, help="Longest silence within a stream, seconds (default 120)")
]

WarmConnections = Annotated[
    bool,
    _opt(
        "--warm-connections/--no-warm-connections",
        panel=_ADVANCED,
        help="Open each level's connections before its clock starts (one per user; open loop: rate x latency)",
    ),
]
RampUp = Annotated[
    OptFloat,
    _opt(
        "--ramp-up",
        panel=_LOAD,
        help="Closed loop: users start evenly over this many seconds, which are left out of the measurement",
    ),
]


@friendly
@sigterm_unwinds
def run(
    ctx: typer.Context,
    url: Url = None,
    api: Api = None,
    model: Model = None,
    header: Header = None,
    api_key_env: ApiKeyEnv = None,
    workload: WorkloadOpt = None,
    prompt_tokens: PromptTokens = None,
    batch_size: BatchSize = None,
    documents: Documents = None,
    output_tokens: OutputTokens = None,
    dataset: Dataset = None,
    dataset_format: DatasetFormat = None,
    min_prompt_tokens: MinPrompt = None,
    max_prompt_tokens: MaxPrompt = None,
    replacement: Replacement = False,
    tokenizer: Tokenizer = None,
    trace: TraceOpt = None,
    trace_format: TraceFormat = None,
    speed: Speed = None,
    window: Window = None,
    seed: Seed = None,
    repeat_prompts: RepeatPrompts = False,
    concurrency: Concurrency = None,
    rate: Rate = None,
    arrival: Arrival = None,
    burstiness: Burstiness = None,
    max_in_flight: MaxInFlight = None,
    profile: ProfileOpt = None,
    levels: Levels = None,
    requests: Requests = None,
    duration: Duration = None,
    warmup: Warmup = None,
    precision: Precision = None,
    confidence: Confidence = None,
    min_duration: MinDuration = None,
    max_duration: MaxDuration = None,
    trials: Trials = None,
    slo: Slo = None,
    slo_latency: SloLatency = None,
    fail_on: FailOn = None,
    max_error_rate: MaxErrorRate = None,
    abort_on_fail: AbortOnFail = False,
    out: Out = None,
    label: Label = None,
    save_result: SaveResult = None,
    quiet: Quiet = False,
    scrape_metrics: ScrapeMetrics = False,
    scrape_url: ScrapeUrl = None,
    resume: Resume = None,
    workers: Workers = None,
    ray: Ray = None,
    config: Config = None,
    transport: Transport = None,
    http2: Http2 = False,
    strict: Strict = False,
    continuous_usage: ContinuousUsage = False,
    calibrate: Calibrate = True,
    prompt_salt: PromptSalt = None,
    timeout: Timeout = None,
    read_timeout: ReadTimeout = None,
    warm_connections: WarmConnections = True,
    ramp_up: RampUp = None,
    dashboard: Dashboard = False,
    dashboard_port: DashboardPort = None,
    dashboard_host: DashboardHost = None,
) -> None:
    """Measure TTFT, ITL, TPOT, throughput and goodput of a streaming endpoint."""
    from loadgen.client.redact import redact_argv
    from loadgen.orchestrate import RunFlags, build_run_config, resume_run_config

    flags = RunFlags.from_params(ctx.params)
    command = ["loadgen", *redact_argv(sys.argv[1:])]
    live = not quiet and sys.stdout.isatty()
    if resume is not None:
        given = [name for name in ctx.params if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"]
        cfg = resume_run_config(flags, given, command, live=live)
    else:
        cfg = build_run_config(flags, command, live=live)
    _say_endpoint_taken_off(flags.url, cfg.url)
    execute_and_exit(cfg, save_result)


def _say_endpoint_taken_off(given: str | None, base: str) -> None:
    """One dim line when ``--url`` named an endpoint (``/v1/chat/completions``), not the base URL."""
    from loadgen.client.discovery import endpoint_path

    path = None if given is None else endpoint_path(given)
    if path is not None:
        err_console.print(
            f"[dim]--url: {escape(path)} taken off; --url takes the server's base URL ({escape(base)})[/dim]",
            soft_wrap=True,
        )


def execute_and_exit(cfg: RunConfig, save_result: Path | None = None) -> None:
    """Run ``cfg``, write its report, and exit with the run's code: 130/143/129 interrupted,
    74 an unwritable folder, 1 every request failed, 3-5 a failed gate."""
    from loadgen.orchestrate import execute

    out = console()
    if save_result is not None:
        from loadgen.report.headline import check_result_path

        check_result_path(save_result, cfg.out)  # before anything is sent
    outcome = execute(cfg, out)
    if outcome.write_error is not None:  # a full disk: the run stopped as SIGTERM stops it
        from loadgen.orchestrate import WRITE_FAILED, finish_unwritable

        err_console.print(f"[bold red]error:[/bold red] {escape(finish_unwritable(outcome))}", soft_wrap=True)
        raise typer.Exit(WRITE_FAILED)
    if outcome.records:
        from loadgen.report.html import render_run_report

        out.print(f"[dim]report: {render_run_report(outcome.folder)}[/dim]")
    if save_result is not None:
        from loadgen.report.files import read_run_info
        from loadgen.report.headline import write_result

        write_result(save_result, outcome.summary, read_run_info(outcome.folder), outcome.folder)
        out.print(f"[dim]result: {escape(str(save_result))}[/dim]")
    if outcome.interrupted or outcome.signum:
        raise typer.Exit(exit_code(outcome.signum))
    failed = sum(lv.requests.failed for lv in outcome.summary.levels)
    if failed and not any(lv.requests.ok for lv in outcome.summary.levels):
        err_console.print(f"[bold red]error:[/bold red] every request failed ({failed}); see the failures above")
        raise typer.Exit(1)
    from loadgen.metrics.gates import exit_code as gate_exit_code
    from loadgen.metrics.gates import run_failures

    failures = run_failures(outcome.summary.levels, cfg.gates)
    for failure in failures:
        err_console.print(
            f"[bold red]gate failed ({failure.reason}):[/bold red] {escape(failure.message)}", soft_wrap=True
        )
    if failures:
        raise typer.Exit(gate_exit_code(failures))
