"""One benchmark run, wired end to end: target → calibration → levels → files → summary.

The CLI parses flags into a :class:`RunConfig` and calls :func:`execute`; so do the demo
and the tests. Nothing here reads argv or prints except through the given console.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from rich.console import Console
from rich.live import Live

from loadgen.aio import new_event_loop
from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.discovery import ServerInfo, discover, redact_url
from loadgen.client.transport import TransportConfig, make_transport
from loadgen.errors import ConfigError, TargetError
from loadgen.load.profiles import Profile
from loadgen.load.runner import LevelPlan, LevelResult, Runner
from loadgen.load.sweeps import metric_value, sweep
from loadgen.metrics.capacity import capacity, knee, windows
from loadgen.metrics.client import LATE_NS, lag_over_time, late_sends
from loadgen.metrics.slo import SLO
from loadgen.metrics.summary import summarize_level
from loadgen.records import RequestRecord, RequestSpec
from loadgen.report.console import LiveStats, answer_lines, level_table, metrics_table
from loadgen.report.files import RunWriter, holds_run, machine_info
from loadgen.workload.generate import spec_stream
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.spec import Workload

__all__ = ["RunConfig", "RunOutcome", "execute", "calibrate"]


@dataclass
class RunConfig:
    """Everything a run needs. ``headers`` may hold secrets and is never written."""

    url: str
    api: str
    workload: Workload
    profile: Profile
    out: Path
    model: str | None = None
    slos: list[SLO] = field(default_factory=list)
    seed: int = 0
    transport: str = "aiohttp"
    http2: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    strict: bool = False
    continuous_usage: bool = False
    calibrate: bool = True
    read_timeout_s: float = 120.0
    request_timeout_s: float = 600.0
    label: str = ""
    command: list[str] = field(default_factory=list)
    live: bool = True
    scrape_metrics: bool = False  # poll the target's /metrics into server_metrics.jsonl


@dataclass
class RunOutcome:
    folder: Path
    summary: dict[str, Any]
    interrupted: bool
    records: int


async def calibrate(transport: Any, synth: PromptSynthesizer, api: str) -> dict[str, Any]:
    """Two short requests of known word counts fit tokens-per-word and the template overhead."""
    samples: list[tuple[int, int]] = []
    for i, (words, text) in enumerate(synth.calibration_texts((32, 256))):
        spec = RequestSpec(index=-1 - i, prompt=text, prompt_tokens=words, max_tokens=1)
        rec = RequestRecord(index=spec.index)
        await transport.send(spec, rec)
        if not rec.ok:
            raise TargetError(f"calibration request failed ({rec.status.value}): {rec.error}")
        if rec.prompt_tokens is None:
            return {"calibrated": False, "reason": "server reports no usage.prompt_tokens"}
        samples.append((words, rec.prompt_tokens))
    try:
        synth.calibrate(samples)
    except ConfigError as exc:
        return {"calibrated": False, "reason": str(exc), "samples": samples}
    return {
        "calibrated": True,
        "samples": samples,
        "tokens_per_word": synth.tokens_per_word,
        "overhead_tokens": synth.overhead_tokens,
        "api": api,
    }


def _run_json(cfg: RunConfig, info: ServerInfo, calib: dict[str, Any], started: float, anchor_ns: int) -> dict[str, Any]:
    return {
        "tool": "loadgen",
        "label": cfg.label,
        "command": cfg.command,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "clock_anchor": {"unix_s": started, "perf_counter_ns": anchor_ns},
        "target": {"url": redact_url(cfg.url), "api": cfg.api, "model": info.model, "max_model_len": info.max_model_len},
        "workload": {
            "name": cfg.workload.name,
            "description": cfg.workload.description,
            "source": cfg.workload.source,
            "classes": [
                {
                    "name": c.name,
                    "weight": c.weight,
                    "prompt_tokens": c.prompt_tokens.describe(),
                    "output_tokens": c.output_tokens.describe(),
                    "shared_prefix_groups": c.shared_prefix_groups,
                    "shared_prefix_tokens": c.shared_prefix_tokens,
                }
                for c in cfg.workload.classes
            ],
        },
        "profile": {k: v for k, v in asdict(cfg.profile).items()},
        "slos": [str(s) for s in cfg.slos],
        "config": {
            "seed": cfg.seed,
            "transport": cfg.transport,
            "http2": cfg.http2,
            "strict": cfg.strict,
            "continuous_usage": cfg.continuous_usage,
            "read_timeout_s": cfg.read_timeout_s,
            "request_timeout_s": cfg.request_timeout_s,
            "header_names": sorted(cfg.headers),  # names only: values may be secrets
        },
        "calibration": calib,
        "machine": machine_info(),
    }


def level_slos(slos: Sequence[SLO], mode: str, slo_latency: str) -> list[SLO]:
    """Open-loop levels judge TTFT and E2E from the scheduled time (unless told otherwise):
    a client that sent late must not make the server look faster than it was."""
    if mode != "rate" or slo_latency != "queued":
        return list(slos)
    swap = {"ttft": "ttft_queued", "e2e": "e2e_queued"}
    return [SLO(swap.get(s.metric, s.metric), s.limit_ms, s.stat) for s in slos]


def _summarize(result: LevelResult, cfg: RunConfig, anchor_ns: int) -> dict[str, Any]:
    slos = level_slos(cfg.slos, result.plan.mode, cfg.profile.slo_latency)
    level = summarize_level(
        result.records, load=result.plan.load, slos=slos, loop_lag_ms=result.loop_lag_ms, trim=cfg.profile.trim
    )
    if result.plan.mode == "rate":
        late = late_sends(result.records)
        level["schedule"] = {"scheduled": result.scheduled, "late": late, "late_threshold_ms": LATE_NS / 1e6,
                             "dropped": result.dropped}  # fmt: skip
    level["client"]["loop_lag_over_time"] = lag_over_time(result.loop_lag_t_ns, result.loop_lag_ms, anchor_ns)
    level["interrupted"] = result.interrupted
    return level


async def _execute(cfg: RunConfig, console: Console) -> RunOutcome:
    base = cfg.url
    info = await asyncio.to_thread(discover, base, cfg.headers, cfg.model)
    opts = DialectOptions(model=info.model, strict=cfg.strict, continuous_usage=cfg.continuous_usage)
    prof = cfg.profile
    max_conc = max([int(v) for v in prof.levels if prof.mode == "concurrency"] + [prof.max_in_flight or 0, prof.max_concurrency if prof.kind == "sweep-rate" else 0])
    tcfg = TransportConfig(
        base_url=base,
        dialect=get_dialect(cfg.api),
        options=opts,
        headers=cfg.headers,
        max_connections=max_conc + 16 if max_conc else 10_000,
        read_timeout_s=cfg.read_timeout_s,
        request_timeout_s=cfg.request_timeout_s,
        http2=cfg.http2,
    )
    transport = make_transport(cfg.transport, tcfg)
    synth = PromptSynthesizer(seed=cfg.seed)
    started, anchor_ns = time.time(), time.perf_counter_ns()
    levels_out: list[dict[str, Any]] = []
    interrupted = False
    try:
        calib = await calibrate(transport, synth, cfg.api) if cfg.calibrate else {"calibrated": False}
        if cfg.calibrate and not calib["calibrated"]:
            console.print(f"[yellow]warning: prompt lengths not calibrated: {calib['reason']}[/yellow]")
        specs: Iterator[RequestSpec] = spec_stream(cfg.workload, seed=cfg.seed, synth=synth)
        if holds_run(cfg.out):
            console.print(f"[yellow]note: replacing the earlier run in {cfg.out}[/yellow]")
        with RunWriter(cfg.out) as writer:
            writer.write_run(_run_json(cfg, info, calib, started, anchor_ns))
            runner = Runner(transport)
            label = {"text": ""}
            stats = LiveStats(lambda: runner.in_flight, lambda: label["text"])

            def on_record(rec: RequestRecord) -> None:
                writer.append(rec)
                stats.add(rec)

            runner.on_record = on_record
            loop = asyncio.get_running_loop()
            scraper = None
            gen = sweep(prof, cfg.seed)
            plan: LevelPlan | None = next(gen)
            stopped: str | None = None
            live = Live(stats, console=console, refresh_per_second=4, transient=True) if cfg.live else contextlib.nullcontext()
            async with contextlib.AsyncExitStack() as stack:
                if cfg.scrape_metrics:
                    from loadgen.client.scrape import MetricsScraper

                    scraper = MetricsScraper(base, cfg.out / "server_metrics.jsonl", headers=cfg.headers)
                    await stack.enter_async_context(scraper)
                stack.enter_context(_sigint(loop, runner))
                stack.enter_context(live)
                while plan is not None:
                    unit = "users" if plan.mode == "concurrency" else "req/s"
                    label["text"] = f"level {plan.index + 1}: {plan.load['value']} {unit}"
                    result = await runner.run_level(plan, _prepare(specs, plan))
                    level = _summarize(result, cfg, anchor_ns)
                    if prof.kind in ("soak", "ramp"):
                        level["windows"] = windows(result.records, prof.window_s)
                    levels_out.append(level)
                    writer.write_summary({"levels": levels_out})
                    if not cfg.live:
                        console.print(_level_line(level), highlight=False)
                    if runner.interrupted:
                        interrupted = True
                        break
                    try:
                        plan = gen.send(level)
                    except StopIteration as stop:
                        stopped = stop.value
                        plan = None
            if scraper is not None and scraper.failures and not scraper.scrapes:
                console.print(f"[yellow]warning: no server metrics scraped: {scraper.last_error}[/yellow]")
            summary = {"levels": levels_out, **across_levels(levels_out, prof), "stopped": stopped, "interrupted": interrupted}
            writer.write_summary(summary)
            n_records = writer.count
    finally:
        await transport.aclose()
    return RunOutcome(cfg.out, summary, interrupted, n_records)


def across_levels(levels: Sequence[dict[str, Any]], prof: Profile) -> dict[str, Any]:
    """The run-wide answers: capacity at the SLO target and the saturation knee."""
    mode = "rate" if any(lv["load"]["mode"] == "rate" for lv in levels) and prof.kind != "levels" else prof.mode
    pts = sorted((lv for lv in levels if lv["load"]["mode"] == mode), key=lambda lv: lv["load"]["value"])
    out: dict[str, Any] = {"capacity": None, "saturation": None}
    if not pts:
        return out
    cap = capacity([(lv["load"]["value"], lv["goodput"]["slo_attainment"]) for lv in pts], prof.attainment_target)
    cap["mode"] = mode
    cap["slos"] = pts[0]["goodput"].get("slos", [])
    out["capacity"] = cap
    sat = knee(
        [(lv["load"]["value"], (lv["throughput"] or {}).get("output_tokens_per_s") or 0.0,
          metric_value(lv, prof.knee_metric) or 0.0) for lv in pts],
        prof.knee_throughput_gain,
        prof.knee_latency_growth,
    )  # fmt: skip
    sat["mode"] = mode
    sat["metric"] = prof.knee_metric
    out["saturation"] = sat
    return out


def _level_line(level: dict[str, Any]) -> str:
    load = level["load"]
    thr = level.get("throughput") or {}
    ttft = (level.get("ttft_ms") or {}).get("p50")
    itl = (level.get("itl_ms") or {}).get("p50")
    req = level.get("requests", {})
    att = (level.get("goodput") or {}).get("slo_attainment")
    return (
        f"level {load['value']} {'users' if load['mode'] == 'concurrency' else 'req/s'}: "
        f"{req.get('ok', 0)} ok / {req.get('failed', 0)} failed, "
        f"{thr.get('requests_per_s') or 0:.2f} req/s, {thr.get('output_tokens_per_s') or 0:.0f} out tok/s, "
        f"TTFT p50 {0 if ttft is None else ttft:.1f} ms, ITL p50 {0 if itl is None else itl:.2f} ms, "
        f"attainment {'–' if att is None else f'{100 * att:.0f}%'}"
    )


def _prepare(stream: Iterator[RequestSpec], plan: LevelPlan) -> Iterator[RequestSpec]:
    """Build the level's prompts before it starts, so no send waits for prompt synthesis.

    A duration-bound level gets a generous head start and then continues from the
    stream (a rare extra block shows up as event-loop lag, where the verdict sees it).
    """
    n = None if plan.requests is None else plan.requests + plan.warmup_requests
    if plan.mode == "rate" and plan.duration_s is not None:
        est = int(plan.value * plan.duration_s * 1.5) + 64
        n = est if n is None else min(n, est)
    ahead = n if n is not None and n <= 20_000 else 4096
    head = list(itertools.islice(stream, ahead))
    rest = stream if n is None else itertools.islice(stream, n - ahead)
    return itertools.chain(head, rest)


@contextlib.contextmanager
def _sigint(loop: asyncio.AbstractEventLoop, runner: Runner) -> Iterator[None]:
    """First Ctrl-C: stop the level, keep every record; the second one is not caught."""

    def handler() -> None:
        runner.interrupt()
        with contextlib.suppress(Exception):
            loop.remove_signal_handler(signal.SIGINT)

    try:
        loop.add_signal_handler(signal.SIGINT, handler)
        installed = True
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / Windows
        installed = False
    try:
        yield
    finally:
        if installed:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGINT)


def execute(cfg: RunConfig, console: Console) -> RunOutcome:
    """Run synchronously on a fresh (uvloop when available) event loop."""
    loop = new_event_loop()
    try:
        outcome = loop.run_until_complete(_execute(cfg, console))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    show_summary(outcome.summary, console, cfg.out)
    return outcome


def show_summary(summary: dict[str, Any], console: Console, folder: Path) -> None:
    levels: Sequence[dict[str, Any]] = summary.get("levels", [])
    if len(levels) == 1:
        lv = levels[0]
        unit = "users" if lv["load"]["mode"] == "concurrency" else "req/s"
        console.print(metrics_table(lv, title=f"Results — {lv['load']['value']} {unit}"))
    elif levels:
        console.print(level_table(levels, title="Results per load level"))
        for line in answer_lines(summary):
            console.print(line)
    if summary.get("stopped"):
        console.print(f"[yellow]stopped early: {summary['stopped']}[/yellow]")
    if summary.get("interrupted"):
        console.print("[yellow]interrupted: the summary covers the requests that finished[/yellow]")
    console.print(f"[dim]run folder: {folder}[/dim]")
