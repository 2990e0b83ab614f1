"""The ``loadgen`` command line (typer). The only module that touches argv and exit codes.

Every :class:`loadgen.errors.LoadgenError` becomes one line on stderr and exit code 2;
Ctrl-C (SIGINT) or SIGTERM during a run keeps every finished record, writes the summary
and the report, and exits 130 or 143 (128 + the signal); a run folder that cannot be
written (a full disk) stops the run the same way and exits 74.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from loadgen import __version__
from loadgen.errors import ConfigError, LoadgenError
from loadgen.paths import search_dirs, shipped
from loadgen.signals import exit_code, raise_on_sigterm

__all__ = ["app", "main"]

if TYPE_CHECKING:
    from loadgen.metrics.gates import Gates
    from loadgen.orchestrate import RunConfig

app = typer.Typer(
    name="loadgen",
    help="Load testing and latency benchmarking for LLM inference servers (TTFT, ITL, TPOT, goodput).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True, highlight=False)
F = TypeVar("F", bound=Callable[..., Any])
# the panels of ``loadgen run --help``
_TARGET, _WORKLOAD, _LOAD, _SLOS = "Target", "Workload", "Load", "SLOs and gates"
_OUTPUT, _SCALE, _ADVANCED = "Output", "Scale-out", "Advanced"

def friendly(fn: F) -> F:
    """LoadgenError → one red line and exit 2; Ctrl-C or SIGTERM outside a run → exit 130 or 143."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LoadgenError as exc:
            err_console.print(f"[bold red]error:[/bold red] {escape(str(exc))}", soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", signal.SIGINT)
            err_console.print("[yellow]interrupted[/yellow]" if signum == signal.SIGINT else "[yellow]terminated[/yellow]")
            raise typer.Exit(exit_code(signum)) from None

    return wrapper  # type: ignore[return-value]


def sigterm_unwinds(fn: F) -> F:
    """SIGTERM while ``fn`` runs, outside a run's own handler (discovery, calibration),
    unwinds like Ctrl-C: one line and exit 143 (see :mod:`loadgen.signals`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous = signal.getsignal(signal.SIGTERM)
        raise_on_sigterm()
        try:
            return fn(*args, **kwargs)
        finally:
            if previous is not None:
                with contextlib.suppress(ValueError):  # not the main thread
                    signal.signal(signal.SIGTERM, previous)

    return wrapper  # type: ignore[return-value]


def _console() -> Console:
    """stdout console; wide enough for the level table when output is not a terminal."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else 150)


def _mib(value: float, flag: str) -> int:
    """``value`` MiB as a whole number of bytes (one-line error outside (0, 1e6])."""
    if not 0 < value <= 1e6:  # False for NaN too
        raise ConfigError(f"must be a number of MiB in (0, 1e6], got {value!r}", key=flag)
    return max(1, int(value * 2**20))


def _headers(header: list[str], api_key_env: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for h in header:
        if ":" not in h:
            raise ConfigError(f"expected 'Name: value', got {h.split(':')[0]!r}…", key="--header")
        name, value = (x.strip() for x in h.split(":", 1))
        if not name or any(c in name + value for c in "\r\n\x00") or " " in name:
            raise ConfigError(f"invalid header {name[:40]!r} (a name without spaces, no line breaks)", key="--header")
        out[name] = value
    env = api_key_env or ("OPENAI_API_KEY" if os.environ.get("OPENAI_API_KEY") else None)
    if env:
        key = os.environ.get(env)
        if key is None and api_key_env:
            raise ConfigError(f"environment variable {api_key_env} is not set", key="--api-key-env")
        if key:
            out.setdefault("Authorization", f"Bearer {key}")
    return out


def _redact_argv(argv: list[str]) -> list[str]:
    """argv for run.json: header values and URL credentials/query strings removed."""
    from loadgen.client.discovery import redact_url

    def header(value: str) -> str:  # the name only; a value without one (refused later) shows nothing
        return (value.split(":", 1)[0] if ":" in value else "") + ": ***"

    out, hide = [], False
    for a in argv:
        if hide:
            a, hide = header(a), False
        elif a == "--header":
            hide = True
        elif a.startswith("--header="):
            a = "--header=" + header(a.split("=", 1)[1])
        elif "://" in a:
            head, sep, url = a.partition("=") if a.startswith("--") else ("", "", a)
            a = head + sep + redact_url(url)
        out.append(a)
    return out


def _config_defaults(command: Any, path: Path) -> dict[str, Any]:
    """The options a ``--config`` file gives ``loadgen run`` (see :func:`_config_callback`)."""
    import json
    import tomllib

    from loadgen.inputs import open_input

    names = {p.name for p in command.params if p.name}
    try:
        with open_input(path) as fh:  # (a FIFO or a device: refused, not read)
            text = fh.read().decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
            argv = [str(a) for a in data["command"]][2:]  # a run folder's run.json: its command
        except (ValueError, KeyError, TypeError):
            raise typer.BadParameter(f"{path} is not a loadgen run.json (no 'command' list)") from None
        kept, skip = [], False
        for i, arg in enumerate(argv):
            flag = arg.split("=", 1)[0]
            if skip:
                skip = False
                continue
            if flag in ("--out", "--header", "--config", "--label", "--save-result"):  # a new run, and values never stored
                skip = "=" not in arg and i + 1 < len(argv)
                continue
            kept.append(arg)
        sub = command.make_context("run", kept, resilient_parsing=True)
        return {k: v for k, v in sub.params.items()
                if getattr(sub.get_parameter_source(k), "name", "") == "COMMANDLINE"}
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise typer.BadParameter(f"{path}: not valid TOML ({exc})") from None
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in names or name in ("config",):
            raise typer.BadParameter(f"{path}: unknown option {key!r} (keys are loadgen run's options, "
                                     "e.g. url, workload, concurrency, slo)")
        out[name] = value
    return out


def _config_callback(ctx: typer.Context, param: typer.CallbackParam, value: Optional[Path]) -> Optional[Path]:
    """``--config FILE``: every option from a TOML file (keys are the options' names) or a
    run folder's ``run.json`` (its command line); flags given on the command line win."""
    if value is not None:
        ctx.default_map = {**(ctx.default_map or {}), **_config_defaults(ctx.command, value)}
    return value


@app.command()
@friendly
@sigterm_unwinds
def run(
    ctx: typer.Context,
    url: Optional[str] = typer.Option(None, "--url", "--base-url", rich_help_panel=_TARGET,
                                      help="Base URL of the server, e.g. http://127.0.0.1:8000 (required unless "
                                      "--resume; --base-url as in vllm bench serve)"),
    api: str = typer.Option("chat", help="API dialect: chat or completions", rich_help_panel=_TARGET),
    model: Optional[str] = typer.Option(None, help="Model name (default: the first of /v1/models)",
                                        rich_help_panel=_TARGET),
    header: List[str] = typer.Option([], help="Extra header 'Name: value', repeatable (values never stored)",
                                     rich_help_panel=_TARGET),
    api_key_env: Optional[str] = typer.Option(None, help="Env var holding the API key (default OPENAI_API_KEY if set)",
                                              rich_help_panel=_TARGET),
    workload: Optional[str] = typer.Option(None, help="Named workload (workloads/NAME.toml) or a .toml path",
                                           rich_help_panel=_WORKLOAD),
    prompt_tokens: Optional[str] = typer.Option(None, help="Prompt length: 256 or e.g. normal:mean=512,std=128,min=16",
                                                rich_help_panel=_WORKLOAD),
    output_tokens: Optional[str] = typer.Option(None, help="Output length: 64 or e.g. lognormal:median=200,sigma=0.5",
                                                rich_help_panel=_WORKLOAD),
    dataset: str | None = typer.Option(None, help="Replay a dataset's prompts: ShareGPT .json, chat/prompt .jsonl, "
                                       ".csv or .parquet (see workloads/README.md)", rich_help_panel=_WORKLOAD),
    dataset_format: str = typer.Option("auto", help="With --dataset: auto, sharegpt, chat, prompts, csv or parquet",
                                       rich_help_panel=_WORKLOAD),
    min_prompt_tokens: int | None = typer.Option(None, help="With --dataset: skip shorter prompts",
                                                 rich_help_panel=_WORKLOAD),
    max_prompt_tokens: int | None = typer.Option(None, help="With --dataset: skip longer prompts",
                                                 rich_help_panel=_WORKLOAD),
    replacement: bool = typer.Option(False, "--replacement/--no-replacement", rich_help_panel=_WORKLOAD,
                                     help="With --dataset: sample entries with replacement (default: without)"),
    tokenizer: str | None = typer.Option(None, rich_help_panel=_WORKLOAD,
                                         help="A tokenizer.json, or a Hugging Face model id (ORG/NAME) already in the "
                                         "local Hugging Face cache (never downloaded): exact prompt lengths (default: "
                                         "words calibrated from the server's usage); needs loadgen\\[tokenizer]"),
    trace: str | None = typer.Option(None, help="Replay a trace at its recorded times: Mooncake .jsonl, Azure or "
                                     "BurstGPT .csv (--rate R rescales it to R req/s)", rich_help_panel=_WORKLOAD),
    trace_format: str = typer.Option("auto", help="With --trace: auto, mooncake, azure or burstgpt",
                                     rich_help_panel=_WORKLOAD),
    speed: float = typer.Option(1.0, help="With --trace: time compression (2 = twice as fast)",
                                rich_help_panel=_WORKLOAD),
    window: str | None = typer.Option(None, help="With --trace: START:END seconds of the trace to replay",
                                      rich_help_panel=_WORKLOAD),
    seed: int = typer.Option(0, help="Seed for lengths, prompts and arrivals", rich_help_panel=_WORKLOAD),
    concurrency: Optional[int] = typer.Option(None, help="Closed loop: number of concurrent users (vllm bench "
                                              "serve's --max-concurrency is --max-in-flight)", rich_help_panel=_LOAD),
    rate: Optional[float] = typer.Option(None, "--rate", "--request-rate", rich_help_panel=_LOAD,
                                         help="Open loop: requests per second (--request-rate as in vllm bench serve)"),
    arrival: str = typer.Option("poisson", help="Open-loop arrivals: poisson, gamma or constant", rich_help_panel=_LOAD),
    burstiness: float = typer.Option(1.0, help="Gamma shape (1 = Poisson, < 1 burstier)", rich_help_panel=_LOAD),
    max_in_flight: Optional[int] = typer.Option(None, "--max-in-flight", "--max-concurrency", rich_help_panel=_LOAD,
                                                help="Open loop: cap on requests in flight (--max-concurrency as in "
                                                "vllm bench serve)"),
    profile: Optional[str] = typer.Option(None, help="Named load profile (profiles/NAME.toml) or a .toml path",
                                          rich_help_panel=_LOAD),
    levels: Optional[str] = typer.Option(None, help="Load levels, e.g. 1,2,4,8 (with --profile or alone)",
                                         rich_help_panel=_LOAD),
    requests: Optional[int] = typer.Option(None, "--requests", "--num-prompts", rich_help_panel=_LOAD,
                                           help="Requests per level, warm-up excluded (default 100 unless --duration; "
                                           "--num-prompts as in vllm bench serve)"),
    duration: Optional[float] = typer.Option(None, help="Seconds per level", rich_help_panel=_LOAD),
    warmup: Optional[int] = typer.Option(None, help="Requests sent first in each level and excluded",
                                         rich_help_panel=_LOAD),
    trials: int = typer.Option(1, help="Repeat each level this many times (new requests, arrival seed + i); "
                               "summary.json and compare then use between-trial variation", rich_help_panel=_LOAD),
    slo: List[str] = typer.Option([], help="SLO, repeatable: ttft=500ms, tpot=50ms, itl=80ms, e2e=10s, ttft:p90=300ms",
                                  rich_help_panel=_SLOS),
    slo_latency: Optional[str] = typer.Option(None, help="Rate levels judge TTFT/E2E SLOs from: queued (default) or "
                                              "sent", rich_help_panel=_SLOS),
    fail_on: List[str] = typer.Option([], help="CI gates: exit non-zero when a level fails them: slo, errors, "
                                      "client-bound (comma-separated or repeated; exit 3 errors, 4 slo, 5 client-bound)",
                                      rich_help_panel=_SLOS),
    max_error_rate: Optional[float] = typer.Option(None, help="Gate on errors above this share of requests, e.g. "
                                                   "0.01 (implies --fail-on errors; default 0 with it)",
                                                   rich_help_panel=_SLOS),
    abort_on_fail: bool = typer.Option(False, help="Stop a sweep at the first level that fails a gate "
                                       "(the --fail-on gates; slo,errors when none is given)", rich_help_panel=_SLOS),
    out: Optional[str] = typer.Option(None, help="Run folder: new, empty or an earlier run's (default "
                                      "reports/<time>-<label>)", rich_help_panel=_OUTPUT),
    label: str = typer.Option("", help="A name for this run (shown in reports)", rich_help_panel=_OUTPUT),
    save_result: Optional[Path] = typer.Option(None, rich_help_panel=_OUTPUT,
                                               help="Also write the headline numbers as JSON in the shape of vllm "
                                               "bench serve's result file (see docs/metrics.md); unlike vLLM's flag, "
                                               "it takes the file's path"),
    quiet: bool = typer.Option(False, help="No live display", rich_help_panel=_OUTPUT),
    scrape_metrics: bool = typer.Option(False, help="Poll the server's Prometheus /metrics every second",
                                        rich_help_panel=_OUTPUT),
    scrape_url: List[str] = typer.Option([], help="Another Prometheus endpoint to poll with it, e.g. a DCGM "
                                         "exporter's http://127.0.0.1:9400/metrics (repeatable; implies "
                                         "--scrape-metrics)", rich_help_panel=_OUTPUT),
    resume: Optional[Path] = typer.Option(None, help="Continue the run in this folder (killed mid-sweep) at its "
                                          "first unfinished level, with its run.json's settings; takes only "
                                          "--url, --header, --api-key-env, --quiet, --fail-on and --max-error-rate "
                                          "besides", rich_help_panel=_OUTPUT),
    workers: Optional[str] = typer.Option(None, help="Worker processes that send (auto: one per 128 concurrent "
                                          "streams, up to the CPUs); the main process then only coordinates and "
                                          "writes. Default 1, or auto with --ray", rich_help_panel=_SCALE),
    ray: Optional[str] = typer.Option(None, help="Workers are Ray actors spread over a cluster's nodes: auto (the "
                                      "cluster in RAY_ADDRESS or started here by ray start, else a local one) or "
                                      "the cluster's HOST:PORT; needs pip install 'loadgen\\[distributed]'",
                                      rich_help_panel=_SCALE),
    config: Optional[Path] = typer.Option(None, "--config", is_eager=True, callback=_config_callback,
                                          rich_help_panel=_ADVANCED,
                                          help="Options from a TOML file, or a run folder's run.json to repeat that "
                                          "run (same seed, same requests); flags given here win. Header values and "
                                          "API keys are never in run.json: pass them again"),
    transport: str = typer.Option("aiohttp", help="aiohttp or httpx", rich_help_panel=_ADVANCED),
    http2: bool = typer.Option(False, help="HTTP/2 (httpx transport)", rich_help_panel=_ADVANCED),
    strict: bool = typer.Option(False, help="Send only standard OpenAI fields (no ignore_eos/min_tokens)",
                                rich_help_panel=_ADVANCED),
    continuous_usage: bool = typer.Option(False, help="Ask for per-event usage (vLLM continuous_usage_stats)",
                                          rich_help_panel=_ADVANCED),
    calibrate: bool = typer.Option(True, help="Calibrate words per token with two short requests",
                                   rich_help_panel=_ADVANCED),
    timeout: float = typer.Option(600.0, help="Whole-request timeout in seconds", rich_help_panel=_ADVANCED),
    read_timeout: float = typer.Option(120.0, help="Longest silence within a stream, seconds",
                                       rich_help_panel=_ADVANCED),
) -> None:  # fmt: skip
    """Measure TTFT, ITL, TPOT, throughput and goodput of a streaming endpoint."""
    from loadgen.client.discovery import normalize_url, split_credentials
    from loadgen.metrics.slo import parse_slo
    from loadgen.orchestrate import RunConfig
    from loadgen.report.files import default_run_dir
    from loadgen.workload.hf_cache import resolve_tokenizer
    from loadgen.workload.spec import load_workload, workload_from_flags

    if resume is not None:
        _resume(ctx, resume, url, header, api_key_env, quiet, fail_on, max_error_rate, save_result)
        return
    if url is None:
        raise ConfigError("required (the server's base URL, e.g. http://127.0.0.1:8000)", key="--url")
    base, url_auth = split_credentials(normalize_url(url))
    if out is not None and not out.strip():
        raise ConfigError("give a folder (an empty name would mean the current directory)", key="--out")
    for key, seconds in (("--timeout", timeout), ("--read-timeout", read_timeout)):
        if not seconds > 0:
            raise ConfigError(f"must be a number of seconds > 0, got {seconds:g}", key=key)
    if not 1 <= trials <= 100:
        raise ConfigError(f"must be between 1 and 100, got {trials}", key="--trials")
    if ray is not None:
        from loadgen.load.ray_pool import import_ray

        if not ray.strip():
            raise ConfigError("give auto or a Ray cluster's address", key="--ray")
        import_ray()  # before anything else: one clear line when Ray is missing
    if workload and (prompt_tokens or output_tokens):
        raise ConfigError("give either --workload or --prompt-tokens/--output-tokens, not both")
    replay = _replay(dataset, dataset_format, min_prompt_tokens, max_prompt_tokens, replacement, trace, trace_format,
                     speed, window, rate, workload, prompt_tokens, output_tokens, (arrival, burstiness))  # fmt: skip
    if replay is not None:
        wl, loaded = replay
    elif prompt_tokens or output_tokens:
        wl, loaded = workload_from_flags(prompt_tokens or "256", output_tokens or "128"), None
    else:
        wl, loaded = load_workload(str(shipped(workload)) if workload else "chat", search_dirs("workloads")), None
    if loaded is not None:
        prof = _trace_profile(loaded, profile, concurrency, levels, requests, duration, warmup, max_in_flight,
                              slo_latency)  # fmt: skip
    else:
        if wl.arrivals is not None and profile is None and concurrency is None and rate is None and not levels:
            rate = wl.arrivals.rate  # a fitted workload's own arrivals
            if arrival == "poisson" and burstiness == 1.0:
                arrival, burstiness = "gamma", wl.arrivals.burstiness
        prof = _profile(profile, concurrency, rate, levels, requests, duration, warmup, arrival, burstiness,
                        max_in_flight, slo_latency)  # fmt: skip
    gates = _gates(fail_on, max_error_rate, abort_on_fail, prof.attainment_target)
    run_label = label or wl.name
    cfg = RunConfig(
        url=base,
        api=api,
        workload=wl,
        profile=prof,
        out=Path(out) if out is not None else default_run_dir(Path("reports"), run_label),
        model=model,
        slos=[parse_slo(s) for s in (slo or prof.slos)],
        seed=seed,
        transport=transport,
        http2=http2,
        headers={**url_auth, **_headers(header, api_key_env)},
        strict=strict,
        continuous_usage=continuous_usage,
        calibrate=calibrate,
        read_timeout_s=read_timeout,
        request_timeout_s=timeout,
        label=run_label,
        command=["loadgen", *_redact_argv(sys.argv[1:])],
        live=not quiet and sys.stdout.isatty(),
        scrape_metrics=scrape_metrics or bool(scrape_url),
        scrape_urls=[_metrics_url(u) for u in scrape_url],
        workers=_workers_flag(workers or ("auto" if ray is not None else "1")),
        ray=ray,
        tokenizer=None if tokenizer is None else resolve_tokenizer(str(shipped(tokenizer))),
        trace=loaded,
        gates=gates,
        abort_on_fail=abort_on_fail,
        trials=trials,
    )
    from loadgen.client.dialects import get_dialect
    from loadgen.client.transport import TRANSPORTS

    get_dialect(api)
    if transport not in TRANSPORTS:
        raise ConfigError(f"unknown transport {transport!r}; choose one of: {', '.join(TRANSPORTS)}", key="--transport")
    _execute_and_exit(cfg, save_result)


_RESUME_FLAGS = {"resume", "url", "header", "api_key_env", "quiet", "fail_on", "max_error_rate", "save_result"}


def _resume(ctx: typer.Context, folder: Path, url: str | None, header: list[str], api_key_env: str | None,
            quiet: bool, fail_on: list[str], max_error_rate: float | None, save_result: Path | None) -> None:  # fmt: skip
    """``run --resume FOLDER``: the run's own settings from its run.json; only the URL and the
    headers (never stored) may be given again, and the CI gates that judge the result."""
    from loadgen.client.discovery import normalize_url, split_credentials
    from loadgen.recover import resume_config

    sources = {name: ctx.get_parameter_source(name) for name in ctx.params if name not in _RESUME_FLAGS}
    given = sorted(name for name, src in sources.items() if src is not None and src.name != "DEFAULT")
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ConfigError(f"the run's settings come from its run.json; {flags} cannot change them (give only --url, "
                          "--header, --api-key-env, --quiet, --fail-on, --max-error-rate, --save-result)",
                          key="--resume")  # fmt: skip
    from loadgen.report.files import read_run

    if (folder / "run.json").is_file():
        earlier = read_run(folder)
        if "trace" in earlier or "dataset" in (earlier.get("workload") or {}):
            raise ConfigError("a dataset or trace replay cannot be resumed yet; run it again", key="--resume")
    base, url_auth = (None, {}) if url is None else split_credentials(normalize_url(url))
    cfg, _ = resume_config(folder, base, {**url_auth, **_headers(header, api_key_env)},
                           command=["loadgen", *_redact_argv(sys.argv[1:])], live=not quiet and sys.stdout.isatty())  # fmt: skip
    cfg.gates = _gates(fail_on, max_error_rate, False, cfg.profile.attainment_target)
    _execute_and_exit(cfg, save_result)


def _execute_and_exit(cfg: RunConfig, save_result: Path | None = None) -> None:
    from loadgen.orchestrate import execute

    console = _console()
    if save_result is not None:
        from loadgen.report.headline import check_result_path

        check_result_path(save_result)  # before anything is sent
    outcome = execute(cfg, console)
    if outcome.write_error is not None:  # a full disk: the run stopped as SIGTERM stops it
        from loadgen.orchestrate import WRITE_FAILED, finish_unwritable

        err_console.print(f"[bold red]error:[/bold red] {escape(finish_unwritable(outcome))}", soft_wrap=True)
        raise typer.Exit(WRITE_FAILED)
    if outcome.records:
        from loadgen.report.html import render_run_report

        console.print(f"[dim]report: {render_run_report(outcome.folder)}[/dim]")
    if save_result is not None:
        from loadgen.report.files import read_run
        from loadgen.report.headline import write_result

        write_result(save_result, outcome.summary, read_run(outcome.folder), outcome.folder)
        console.print(f"[dim]result: {escape(str(save_result))}[/dim]")
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
        err_console.print(f"[bold red]gate failed ({failure.reason}):[/bold red] {escape(failure.message)}",
                          soft_wrap=True)
    if failures:
        raise typer.Exit(gate_exit_code(failures))


def _gates(fail_on: list[str], max_error_rate: float | None, abort_on_fail: bool,
           attainment_target: float) -> Gates:
    """The --fail-on gates; --max-error-rate implies errors, --abort-on-fail alone slo,errors."""
    from loadgen.metrics.gates import Gates, parse_fail_on

    reasons = parse_fail_on(fail_on)
    if max_error_rate is not None:
        if not 0.0 <= max_error_rate < 1.0:
            raise ConfigError(f"must be a share in [0, 1), got {max_error_rate:g}", key="--max-error-rate")
        reasons |= {"errors"}
    if abort_on_fail and not reasons:
        reasons = frozenset({"slo", "errors"})
    return Gates(reasons, max_error_rate or 0.0, attainment_target)


def _metrics_url(text: str) -> str:
    """A --scrape-url: http(s) with a host (one-line error otherwise); kept as given."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text.strip())
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"expected an http(s) URL such as http://127.0.0.1:9400/metrics, got {text!r}",
                          key="--scrape-url")
    return text.strip()


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``; ``""`` -> ``()``; anything else a one-line error."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"expected integers separated by commas, got {text!r}", key=flag) from None


def _workers_flag(text: str) -> int | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        n = int(text)
    except ValueError:
        raise ConfigError(f"expected a whole number or 'auto', got {text!r}", key="--workers") from None
    if not 1 <= n <= 1024:
        raise ConfigError(f"must be between 1 and 1024, got {n}", key="--workers")
    return n


def _profile(
    name: str | None, concurrency: int | None, rate: float | None, levels: str | None, requests: int | None,
    duration: float | None, warmup: int | None, arrival: str, burstiness: float, max_in_flight: int | None,
    slo_latency: str | None,
) -> Any:  # fmt: skip
    """A profile from --profile (or a one-level default), with the flags laid over it."""
    from dataclasses import replace

    from loadgen.load.profiles import Profile, check_limits, load_profile, with_budget

    if concurrency is not None and rate is not None:
        raise ConfigError("give either --concurrency (closed loop) or --rate (open loop), not both")
    if concurrency is not None and concurrency < 1:
        raise ConfigError("must be >= 1", key="--concurrency")
    if rate == float("inf"):  # vllm bench serve's default
        raise ConfigError("inf (vllm bench serve's every request at once) has no open-loop schedule here: give a "
                          "finite rate, or --concurrency N for N requests in flight", key="--rate/--request-rate")
    if rate is not None and not rate > 0:
        raise ConfigError("must be > 0", key="--rate")
    if requests is not None and requests < 1:
        raise ConfigError("must be >= 1", key="--requests")
    if duration is not None and not 0 < duration < float("inf"):
        raise ConfigError(f"must be a number of seconds > 0, got {duration:g}", key="--duration")
    if warmup is not None and warmup < 0:
        raise ConfigError(f"must be >= 0, got {warmup}", key="--warmup")
    if max_in_flight is not None and max_in_flight < 1:
        raise ConfigError(f"must be >= 1 (leave it out for no cap), got {max_in_flight}", key="--max-in-flight")
    prof = load_profile(name, search_dirs("profiles")) if name else Profile(levels=[8.0])
    if levels:
        try:
            values = [float(v) for v in levels.split(",") if v.strip()]
        except ValueError:
            raise ConfigError(f"expected numbers separated by commas, got {levels!r}", key="--levels") from None
        if not values or min(values) <= 0:
            raise ConfigError("levels must be positive numbers", key="--levels")
        prof = replace(prof, levels=values)
    if concurrency is not None:
        prof = replace(prof, mode="concurrency", levels=[float(concurrency)] if not levels else prof.levels)
    if rate is not None:
        prof = replace(prof, mode="rate", levels=[rate] if not levels else prof.levels)
    if not name and (rate is not None or concurrency is not None or levels):
        prof = replace(prof, name="cli", kind="levels")
    prof = with_budget(prof, requests, duration, warmup)
    if slo_latency is not None:
        if slo_latency not in ("queued", "sent"):
            raise ConfigError("choose queued or sent", key="--slo-latency")
        prof = replace(prof, slo_latency=slo_latency)
    from loadgen.load.arrivals import ARRIVALS, check_rate

    if prof.mode == "rate" and prof.kind == "levels":  # sweeps pick their rates from measurements
        n = None if prof.requests is None else prof.requests + (prof.warmup_requests or 0)
        for value in prof.levels:
            check_rate(value, n, prof.duration_s, key="--levels" if levels else "--rate")
    if arrival not in ARRIVALS:
        raise ConfigError(f"unknown arrival process {arrival!r}; choose one of: {', '.join(ARRIVALS)}", key="--arrival")
    if arrival != "poisson" or not name:
        prof = replace(prof, arrival=arrival)
    if burstiness != 1.0 or not name:
        prof = replace(prof, burstiness=burstiness)
    if max_in_flight is not None:
        if prof.mode == "concurrency" and prof.kind not in ("sweep-rate", "capacity"):
            raise ConfigError("caps the requests in flight of an open loop (--rate/--request-rate); vllm bench serve's "
                              "--max-concurrency N without a rate is --concurrency N here",
                              key="--max-in-flight/--max-concurrency")  # fmt: skip
        prof = replace(prof, max_in_flight=max_in_flight)
    check_limits(prof, _limit_flags(levels, concurrency))
    return prof


def _limit_flags(levels: str | None, concurrency: int | None) -> dict[str, str]:
    """Which flag set each bounded profile field (a file's values are checked as it is read)."""
    level_flag = "--levels" if levels else "--concurrency" if concurrency is not None else "--rate"
    return {"levels": level_flag, "requests": "--requests", "duration_s": "--duration", "warmup_requests": "--warmup",
            "max_in_flight": "--max-in-flight"}  # fmt: skip


def _replay(
    dataset: str | None, dataset_format: str, min_prompt: int | None, max_prompt: int | None, replacement: bool,
    trace: str | None, trace_format: str, speed: float, window: str | None, rate: float | None,
    workload: str | None, prompt_tokens: str | None, output_tokens: str | None, arrival: tuple[str, float],
) -> Any:  # fmt: skip
    """``(workload, trace or None)`` for --dataset / --trace, or None without either."""
    from loadgen.workload.datasets import DatasetOptions

    dataset = None if dataset is None else str(shipped(dataset))
    trace = None if trace is None else str(shipped(trace))
    from loadgen.workload.spec import Workload
    from loadgen.workload.traces import TraceOptions, load_trace, parse_window

    for flag, given in (("--speed", speed != 1.0), ("--window", window is not None), ("--trace-format",
                        trace_format != "auto")):  # fmt: skip
        if given and trace is None:
            raise ConfigError("only goes with --trace", key=flag)
    for flag, given in (("--min-prompt-tokens", min_prompt is not None), ("--max-prompt-tokens", max_prompt is not None),
                        ("--replacement", replacement), ("--dataset-format", dataset_format != "auto")):  # fmt: skip
        if given and dataset is None:
            raise ConfigError("only goes with --dataset", key=flag)
    if dataset is None and trace is None:
        return None
    sources = [f for f, v in (("--dataset", dataset), ("--trace", trace), ("--workload", workload),
                              ("--prompt-tokens", prompt_tokens)) if v]  # fmt: skip
    if len(sources) > 1:
        raise ConfigError(f"give one of --dataset, --trace, --workload or --prompt-tokens, not {' and '.join(sources)}")
    if trace is not None:
        if output_tokens:
            raise ConfigError("a trace gives each request's output length; remove it", key="--output-tokens")
        if arrival != ("poisson", 1.0):
            raise ConfigError("a trace replays at its recorded times; remove it", key="--arrival/--burstiness")
        tr = load_trace(TraceOptions(trace, trace_format, speed, parse_window(window) if window else None, rate))
        name = Path(trace).stem
        return Workload(name=name, description=f"{tr.format} trace {trace}", classes=[], source=trace), tr
    if dataset is None:
        return None
    for flag, v in (("--min-prompt-tokens", min_prompt), ("--max-prompt-tokens", max_prompt)):
        if v is not None and v < 1:
            raise ConfigError(f"must be >= 1, got {v}", key=flag)
    out = None
    if output_tokens is not None:
        try:
            out = int(output_tokens)
        except ValueError:
            raise ConfigError(f"with --dataset, a whole number of tokens for every request, got {output_tokens!r}",
                              key="--output-tokens") from None  # fmt: skip
        if out < 1:
            raise ConfigError(f"must be >= 1, got {out}", key="--output-tokens")
    opts = DatasetOptions(dataset, dataset_format, min_prompt, max_prompt, replacement, out)
    return Workload(name=Path(dataset).stem, description=f"dataset {dataset}", classes=[], source=dataset,
                    dataset=opts), None  # fmt: skip


def _trace_profile(
    tr: Any, name: str | None, concurrency: int | None, levels: str | None, requests: int | None,
    duration: float | None, warmup: int | None, max_in_flight: int | None, slo_latency: str | None,
) -> Any:  # fmt: skip
    """One open-loop level: the trace's rows at their recorded times (--requests/--duration cut it)."""
    from loadgen.load.profiles import Profile, check_limits

    for flag, given in (("--profile", name), ("--concurrency", concurrency is not None), ("--levels", levels)):
        if given:
            raise ConfigError("a trace replays as one open-loop level at its recorded times; remove it", key=flag)
    warm = warmup or 0
    if warm < 0 or warm >= len(tr):
        raise ConfigError(f"must be >= 0 and below the trace's {len(tr)} rows, got {warm}", key="--warmup")
    if requests is not None and requests < 1:
        raise ConfigError("must be >= 1", key="--requests")
    if duration is not None and not duration > 0:
        raise ConfigError(f"must be a number of seconds > 0, got {duration:g}", key="--duration")
    if max_in_flight is not None and max_in_flight < 1:
        raise ConfigError(f"must be >= 1 (leave it out for no cap), got {max_in_flight}", key="--max-in-flight")
    if slo_latency is not None and slo_latency not in ("queued", "sent"):
        raise ConfigError("choose queued or sent", key="--slo-latency")
    n = min(requests if requests is not None else len(tr), len(tr) - warm)
    prof = Profile(name="trace", kind="levels", mode="rate", levels=[round(tr.mean_rate, 6)], requests=n,
                   duration_s=duration, warmup_requests=warm, arrival="trace", max_in_flight=max_in_flight,
                   slo_latency=slo_latency or "queued", source=tr.path)  # fmt: skip
    check_limits(prof, {**_limit_flags(None, None), "levels": "--trace"})
    return prof


@app.command()
@friendly
def report(
    folder: Path = typer.Argument(..., help="A run folder (with summary.json and records.jsonl)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output file (default FOLDER/report.html)"),
) -> None:
    """Re-render a run's self-contained HTML report from its files.

    A run that never reached its end (kill -9, or a SIGTERM after the supervisor's patience)
    has no summary.json, or only the one written level by level: it is rebuilt from
    records.jsonl and run.json first, marked interrupted unless the run finished."""
    from loadgen.recover import needs_rebuild, rebuild_summary
    from loadgen.report.html import render_run_report

    console = _console()
    if needs_rebuild(folder):
        rec, summary = rebuild_summary(folder)
        if rec.torn:
            console.print("[yellow]note: the last line of records.jsonl was cut off mid-write (a killed run); "
                          "skipped[/yellow]")  # fmt: skip
        n = len(summary.levels)
        console.print(f"summary.json rebuilt from records.jsonl and run.json: {n} level{'s' if n != 1 else ''} "
                      f"({rec.rebuilt} from their records){', interrupted' if summary.interrupted else ''}")  # fmt: skip
    console.print(f"report: {render_run_report(folder, out)}")


@app.command()
@friendly
@sigterm_unwinds
def matrix(
    file: Path = typer.Argument(..., help="A matrix file (TOML): server configurations, workload, profile, SLOs"),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="Output folder (default reports/<time>-matrix-<name>)"),
) -> None:
    """Run one workload against several server configurations, then compare them."""
    from loadgen.matrix import load_matrix, run_matrix
    from loadgen.report.files import default_run_dir

    spec = load_matrix(shipped(file))
    if out is not None and not out.strip():
        raise ConfigError("give a folder (an empty name would mean the current directory)", key="--out")
    folder = Path(out) if out else default_run_dir(Path("reports"), f"matrix-{spec.name}")
    console = _console()
    doc = run_matrix(spec, folder, console)
    ok = [c for c in doc["configs"] if c["status"] == "ok"]
    console.print(f"matrix: {len(ok)} of {len(doc['configs'])} configurations ran in {doc['wall_s']:.0f} s; "
                  f"{folder / 'matrix.json'}" + (f", {folder / doc['html']}" if doc.get("html") else ""))
    stopped = [c for c in doc["configs"] if c["status"] == "interrupted"]
    if stopped:
        raise typer.Exit(exit_code(stopped[0].get("signal")))
    if not ok:
        raise typer.Exit(1)


@app.command()
@friendly
def export(
    folder: Path = typer.Argument(..., help="A run folder"),
    format: str = typer.Option("csv", "--format", help="csv or parquet (needs pyarrow)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (default: the run folder)"),
) -> None:
    """Write a run's per-request and per-level tables (requests.csv, levels.csv)."""
    from loadgen.report.export import export_run

    for path in export_run(folder, format, out):
        _console().print(f"wrote {path}")


@app.command()
@friendly
def schema(
    what: str = typer.Argument("summary", help="Which file's schema: summary"),
) -> None:
    """Print the JSON Schema of summary.json (generated from the typed results)."""
    import json

    from loadgen.metrics.schema import summary_schema

    if what != "summary":
        raise ConfigError(f"unknown schema {what!r}; valid: summary", key="WHAT")
    typer.echo(json.dumps(summary_schema(), indent=2))


@app.command()
@friendly
def compare(
    folders: List[Path] = typer.Argument(..., help="Two or more run folders; the first is the baseline"),
    out: Path = typer.Option(Path("reports/comparison.html"), "--out", "-o", help="Output HTML file"),
    label: List[str] = typer.Option([], help="A label per run, in order (default: the run labels)"),
    force: bool = typer.Option(False, help="Compare even when the workloads differ"),
) -> None:
    """Compare runs side by side: overlaid curves, differences with 95% bootstrap intervals."""
    from loadgen.report.compare import render_comparison

    _console().print(f"comparison: {render_comparison(folders, out, labels=label or None, force=force)}")


@app.command()
@friendly
def profiles() -> None:
    """List the named load profiles, one line each."""
    from loadgen.load.profiles import list_profiles

    console = _console()
    for pname, desc in list_profiles(search_dirs("profiles")):
        console.print(f"[bold]{pname:<18}[/bold] {desc}")


@app.command()
@friendly
def workloads() -> None:
    """List the named workloads."""
    from loadgen.workload.spec import list_workloads

    console = _console()
    for name, desc in list_workloads(search_dirs("workloads")):
        console.print(f"[bold]{name:<12}[/bold] {desc}")


workload_app = typer.Typer(help="Workload files: fit one from real traffic.", no_args_is_help=True)
app.add_typer(workload_app, name="workload")


@workload_app.command("fit")
@friendly
def workload_fit(
    path: str = typer.Argument(..., help="A dataset (ShareGPT, chat/prompt JSONL, CSV, Parquet) or a trace "
                               "(Mooncake JSONL, Azure or BurstGPT CSV)"),
    out: Path = typer.Option(..., "--out", "-o", help="The workload file to write, e.g. workloads/mine.toml"),
    name: str | None = typer.Option(None, help="The workload's name (default: the output file's name)"),
    bins: int = typer.Option(32, help="Histogram bins per length (quantile-spaced)"),
    kind: str = typer.Option("auto", help="auto, dataset or trace"),
    tokenizer: str | None = typer.Option(None, help="A tokenizer.json or a Hugging Face model id in the local cache: "
                                         "exact dataset lengths (default: words)"),
) -> None:
    """Write a workload with the joint (prompt, output) length histogram of real traffic
    (and, for a trace, its arrival rate and burstiness)."""
    from loadgen.workload.fit import fit_workload
    from loadgen.workload.hf_cache import resolve_tokenizer
    from loadgen.workload.prompts import TokenizerCounter

    if out.suffix != ".toml":
        raise ConfigError(f"the workload file must end in .toml, got {str(out)!r}", key="--out")
    counter = TokenizerCounter(resolve_tokenizer(str(shipped(tokenizer)))) if tokenizer is not None else None
    fit = fit_workload(str(shipped(path)), name or out.stem, bins=bins, counter=counter, kind=kind)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(fit.to_toml(), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", source=str(out)) from None
    arrivals = f", {fit.rate:.3g} req/s, burstiness {fit.burstiness:.3g}" if fit.rate is not None else ""
    _console().print(f"{out}: {fit.rows:,} requests, {len(fit.joint.cells)} histogram cells, log-length "
                     f"correlation {fit.correlation:.2f}{arrivals}")  # fmt: skip


@app.command()
@friendly
def serve(
    engine: str = typer.Option("sim", help="Engine: sim (roofline-simulated GPU) or torch (a real model)"),
    gpu: str = typer.Option("h100", help="Simulated GPU: a100-80gb, a100-40gb, h100, h200, b200, l40s, mi300x"),
    model: Optional[str] = typer.Option(
        None,
        help="sim: llama-3.1-8b (default), llama-3.1-70b, qwen2.5-7b, mixtral-8x7b or any torch model; "
        "torch: tiny (default), small, llama-3.2-1b(-shape), llama-3.1-8b(-shape), llama-3.1-70b, smollm2-135m",
    ),
    tp: int = typer.Option(1, help="Tensor-parallel GPUs"),
    replicas: int = typer.Option(1, help="sim: independent engines (each of --tp GPUs) behind one API"),
    router: str = typer.Option("round-robin", help="With --replicas: round-robin, least-loaded or prefix-aware"),
    host: str = typer.Option("127.0.0.1", help="Address to bind (loopback by default)"),
    port: int = typer.Option(8000, help="Port (0 = any free port)"),
    chunked_prefill: bool = typer.Option(True, "--chunked-prefill/--no-chunked-prefill", help="Split long prefills"),
    max_num_batched_tokens: int | None = typer.Option(
        None, help="Token budget per engine step (default as vllm serve: 8192 on H100/H200/B200/MI300X, "
        "2048 on A100/L40S; max_model_len without chunked prefill)"),
    max_num_seqs: int | None = typer.Option(
        None, help="Most sequences running at once (default as vllm serve: 1024 on H100/H200/B200/MI300X, 256 on A100/L40S)"),
    prefix_caching: bool = typer.Option(True, "--prefix-caching/--no-prefix-caching", help="Reuse KV of shared prefixes"),
    max_model_len: Optional[int] = typer.Option(None, help="Context length served (default: the model's, capped by the KV cache)"),
    mfu: float = typer.Option(0.6, help="Model FLOPs utilisation of the simulated GPU (large GEMMs)"),
    mbu: float = typer.Option(0.8, help="Memory bandwidth utilisation of the simulated GPU"),
    overhead_ms: float = typer.Option(0.5, help="Fixed cost per engine step, ms"),
    jitter: float = typer.Option(0.0, help="Seeded multiplicative noise on step times (0.05 = ±5%)"),
    disaggregate: bool = typer.Option(False, help="Separate prefill and decode GPU pools"),
    kv_link_gbps: float = typer.Option(50.0, help="KV transfer bandwidth between pools, GB/s per tensor-parallel rank"),
    prefill_replicas: int = typer.Option(1, help="Disaggregated: prefill engines (xPyD; above 1 implies --disaggregate)"),
    decode_replicas: int = typer.Option(1, help="Disaggregated: decode engines (xPyD; above 1 implies --disaggregate)"),
    prefill_tp: Optional[int] = typer.Option(None, help="Disaggregated: GPUs per prefill engine (default --tp)"),
    decode_tp: Optional[int] = typer.Option(None, help="Disaggregated: GPUs per decode engine (default --tp)"),
    prefill_gpu: Optional[str] = typer.Option(None, help="Disaggregated: the prefill engines' GPU (default --gpu)"),
    decode_gpu: Optional[str] = typer.Option(None, help="Disaggregated: the decode engines' GPU (default --gpu)"),
    time_scale: float = typer.Option(1.0, help="Real seconds per simulated second"),
    fail_rate: float = typer.Option(0.0, help="Fault: fraction of requests answered HTTP 500"),
    stall_ms: float = typer.Option(0.0, help="Fault: length of a stall before a token, ms"),
    stall_rate: float = typer.Option(0.0, help="Fault: probability of a stall per token"),
    disconnect_rate: float = typer.Option(0.0, help="Fault: fraction of streams cut mid-way"),
    seed: int = typer.Option(0, help="Seed for sampling, jitter and faults"),
    device: str = typer.Option("auto", help="torch: auto, cpu, cuda or cuda:N"),
    threads: Optional[int] = typer.Option(None, help="torch on CPU: threads (default: all cores but one)"),
    dtype: str = typer.Option("auto", help="sim: auto (bf16) or fp8 weights; torch: auto (bf16 on CUDA, fp32 on CPU), "
                              "float32, bfloat16, float16"),
    kv_cache_dtype: str = typer.Option("auto", help="sim: auto (bf16) or fp8 KV cache"),
    speculative_tokens: int = typer.Option(0, help="sim: draft tokens verified per decode step (speculative decoding)"),
    acceptance_rate: float = typer.Option(0.7, help="sim: probability each draft token is accepted"),
    draft_model: str = typer.Option("", help="sim: model preset that drafts (its cost is modelled); default: n-gram, free"),
    kv_cache_gb: Optional[float] = typer.Option(None, help="torch: KV-cache pool size in GB (default: from free memory)"),
    cuda_graphs: bool = typer.Option(True, "--cuda-graphs/--no-cuda-graphs", help="torch on CUDA: graphs for decode"),
    cuda_graph_sizes: str = typer.Option(
        "", help="torch on CUDA: decode batch sizes captured at start-up, e.g. 1,2,4,8 (default 1,2,4..256)"),
    api_key: str | None = typer.Option(
        None, envvar="LOADGEN_API_KEY", show_default=False,
        help="Require the header Authorization: Bearer KEY on /v1/* (as vllm serve --api-key); /health and /metrics stay open",
    ),
    body_timeout: float = typer.Option(30.0, help="Seconds a request body may take to arrive (then 408, connection closed)"),
    max_body_mb: float = typer.Option(64.0, help="Largest request body in MiB (larger: 413)"),
    header_timeout: float = typer.Option(10.0, help="Seconds a connection may take to send a request's headers (then closed)"),
    drain_timeout: float = typer.Option(30.0, help="On SIGTERM: seconds open requests may take to finish (new ones get 503)"),
    reasoning_tokens: str = typer.Option(
        "", help="Chat answers reason first: this many tokens (a length distribution, e.g. 64 or "
        "uniform:min=32,max=256) stream as delta.reasoning before the content"),
    request_log: int = typer.Option(10_000, help="Finished requests kept for GET /loadgen/requests (0: none)"),
) -> None:
    """Run the reference OpenAI-compatible server (simulated GPU or a real torch model)."""
    from loadgen.server.api import create_app
    from loadgen.server.app import run_forever
    from loadgen.server.build import build_engine
    from loadgen.server.config import HttpLimits, Network, SchedulerLimits, ServeConfig, SimOptions, TorchOptions
    from loadgen.server.faults import FaultConfig

    config = ServeConfig(
        engine=engine, model=model or "", tp=tp, seed=seed, replicas=replicas, router=router,
        scheduler=SchedulerLimits(enable_chunked_prefill=chunked_prefill, max_num_batched_tokens=max_num_batched_tokens,
                                  max_num_seqs=max_num_seqs, enable_prefix_caching=prefix_caching,
                                  max_model_len=max_model_len),
        sim=SimOptions(gpu=gpu, mfu=mfu, mbu=mbu, overhead_ms=overhead_ms, jitter=jitter, time_scale=time_scale,
                       disaggregate=disaggregate, kv_link_gbps=kv_link_gbps,
                       dtype={"auto": "bf16", "bfloat16": "bf16"}.get(dtype, dtype), kv_cache_dtype=kv_cache_dtype,
                       speculative_tokens=speculative_tokens, acceptance_rate=acceptance_rate, draft_model=draft_model,
                       prefill_replicas=prefill_replicas, decode_replicas=decode_replicas, prefill_tp=prefill_tp,
                       decode_tp=decode_tp, prefill_gpu=prefill_gpu, decode_gpu=decode_gpu),
        torch=TorchOptions(device=device, dtype=dtype, threads=threads, kv_cache_gb=kv_cache_gb, cuda_graphs=cuda_graphs,
                           cuda_graph_sizes=_int_list(cuda_graph_sizes, "--cuda-graph-sizes")),
        faults=FaultConfig(fail_rate=fail_rate, stall_ms=stall_ms, stall_rate=stall_rate,
                           disconnect_rate=disconnect_rate, seed=seed),
        network=Network(host=host, port=port),
        http=HttpLimits(api_key=api_key, body_timeout_s=body_timeout, max_body_bytes=_mib(max_body_mb, "--max-body-mb"),
                        header_timeout_s=header_timeout, drain_timeout_s=drain_timeout),
    )  # fmt: skip
    reasoning = None
    if reasoning_tokens:
        from loadgen.workload.distributions import parse_distribution

        reasoning = parse_distribution(reasoning_tokens, source="command line", key="--reasoning-tokens")
    if request_log < 0:
        raise ConfigError(f"must be >= 0, got {request_log}", key="--request-log")
    eng = build_engine(config)
    application = create_app(eng, faults=config.faults, http=config.http, reasoning_tokens=reasoning, seed=seed,
                              history=request_log)
    mode = "chunked prefill" if chunked_prefill else "no chunked prefill"
    print(f"loadgen serve: {config.limits.describe()}", flush=True)

    def ready(url: str) -> None:
        info = getattr(eng, "info", None)
        if engine == "torch" and info:
            where = f"{info.get('device')}, {info.get('dtype')}, {info.get('threads')} threads, {info.get('num_gpu_blocks')} KV blocks"
            if info.get("cuda_graphs"):
                where += f", {info['cuda_graphs']} CUDA graphs captured in {info.get('graph_capture_s')} s"
        else:
            where = f"{tp}x {gpu}" if replicas == 1 else f"{replicas} replicas of {tp}x {gpu}, {router} routing"
            if config.sim.disaggregated:
                where = (f"{prefill_replicas} prefill x {prefill_tp or tp}x {prefill_gpu or gpu} + "
                         f"{decode_replicas} decode x {decode_tp or tp}x {decode_gpu or gpu}, KV links "
                         f"{kv_link_gbps:g} GB/s per rank") + ("" if replicas == 1 else f"; {replicas} replicas")
            sim = config.sim
            extras = [f"{what} fp8" for what, dt in (("weights", sim.dtype), ("KV cache", sim.kv_cache_dtype))
                      if dt == "fp8"]
            if sim.speculative_tokens:
                extras.append(f"speculative decoding: {sim.speculative_tokens} draft tokens per step "
                              f"({sim.draft_model or 'n-gram'}), acceptance {sim.acceptance_rate:g}")
            where += "".join(f", {x}" for x in extras)
        auth = ", API key required on /v1" if api_key is not None else ""
        print(f"loadgen serve: listening on {url} ({engine}: {eng.model_name} on {where}, {mode}{auth})", flush=True)

    try:
        run_forever(application, config.network.host, config.network.port, on_ready=ready)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", key="--port") from None


@app.command()
@friendly
def demo(
    out: Path = typer.Option(Path("reports/demo"), help="Where the two run folders go"),
    seconds: float = typer.Option(7.0, help="Seconds per load level"),
    quiet: bool = typer.Option(False, help="No live display"),
) -> None:
    """Chunked prefill on vs off on a simulated H100: starts its own server on loopback."""
    from loadgen.demo import run_demo

    run_demo(out, _console(), seconds_per_level=seconds, live=not quiet and sys.stdout.isatty())


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(__version__)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
