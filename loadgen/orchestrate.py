"""One benchmark run, wired end to end: target → calibration → levels → files → summary.

The CLI parses flags into a :class:`RunConfig` and calls :func:`execute`; so do the demo
and the tests. Nothing here reads argv or prints except through the given console.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator, Sequence, Union

import numpy as np
from rich.console import Console
from rich.live import Live
from rich.markup import escape

from loadgen.aio import new_event_loop
from loadgen.client.dialects import DialectOptions, dialect_names, get_dialect
from loadgen.client.discovery import ServerInfo, discover, redact_url
from loadgen.client.probe import ProbeResult, probe_prompt_tokens
from loadgen.client.transport import TransportConfig, make_transport
from loadgen.errors import ConfigError, TargetError
from loadgen.load.profiles import Profile, check_limits
from loadgen.load.runner import LevelPlan, LevelResult, Runner
from loadgen.load.share import measure_share
from loadgen.load.ray_pool import RayCluster, RayPool, connect
from loadgen.load.share import WorkerSetup
from loadgen.load.workers import WorkerPool, auto_workers
from loadgen.load.sweeps import Sweep, planned_levels, sweep
from loadgen.metrics.gates import Gates, level_failures
from loadgen.metrics.trials import trial_summary
from loadgen.metrics.results import SCHEMA_VERSION, LevelSummary, RunSummary
from loadgen.metrics.run import summarize_run
from loadgen.metrics.slo import SLO, level_slos
from loadgen.metrics.summary import summarize_level
from loadgen.records import RequestRecord, RequestSpec
from loadgen.signals import STOP_SIGNALS, raise_on_sigterm
from loadgen.report.console import LiveStats, level_heading, level_line, show_summary
from loadgen.report.files import RunWriter, check_out_folder, holds_run, lock_run_folder, machine_info
from loadgen.report.recordio import decode_batch, encode_batch
from loadgen.workload.datasets import Dataset, DatasetSource, load_dataset, measure
from loadgen.workload.sessions import SessionSource
from loadgen.workload.source import WorkloadSource
from loadgen.workload.prompts import PromptSynthesizer, TokenizerCounter
from loadgen.workload.spec import Workload
from loadgen.workload.traces import Trace, TraceSource

__all__ = ["RunConfig", "RunOutcome", "Resume", "execute", "calibrate", "summarize_result", "run_summary",
           "WRITE_FAILED", "finish_unwritable"]

WRITE_FAILED = 74  # exit code of a run whose folder could not be written (sysexits' EX_IOERR)


@dataclass
class Resume:
    """A run continued in its own folder from its first unfinished level (``--resume``;
    see :mod:`loadgen.recover`): the sweep, fed the finished levels' summaries, and the
    plan of the level to run next."""

    run: dict[str, Any]  # the folder's run.json
    gen: Sweep
    plan: LevelPlan
    levels: list[LevelSummary]


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
    scrape_urls: list[str] = field(default_factory=list)  # other Prometheus endpoints read with it (DCGM)
    workers: int | str = 1  # worker processes that send (the coordinator sends nothing), or "auto"
    ray: str | None = None  # workers are Ray actors of this cluster ("auto" or an address) instead
    gates: Gates = field(default_factory=Gates)  # --fail-on: what makes the run fail (exit code)
    abort_on_fail: bool = False  # stop the sweep at the first level that fails a gate
    trials: int = 1  # --trials: each level runs this many times (its own requests, arrival seed + i)
    resume: Resume | None = None  # continue the run in ``out`` instead of starting one
    tokenizer: Path | None = None  # a tokenizer.json: exact prompt lengths (else calibrated words)
    trace: Trace | None = None  # replay this trace's rows at their recorded times (one open-loop level)

    def __post_init__(self) -> None:
        check_limits(self.profile)  # the CLI and profile files check theirs; a profile made in code too


@dataclass
class RunOutcome:
    folder: Path
    summary: RunSummary
    interrupted: bool
    records: int
    signum: int | None = None  # the signal that stopped the run (SIGINT or SIGTERM)
    write_error: str | None = None  # the run folder could not be written (a full disk...): the run stopped
    lost: int = 0  # records that could not be written


Probe = Callable[[RequestSpec], Awaitable[ProbeResult]]


async def _streamed_prompt_tokens(transport: Any, spec: RequestSpec) -> int | None:
    rec = RequestRecord(index=spec.index)
    await transport.send(spec, rec)
    if not rec.ok:
        raise TargetError(f"calibration request failed ({rec.status.value}): {rec.error}")
    return rec.prompt_tokens


async def calibrate(transport: Any, synth: PromptSynthesizer, api: str, probe: Probe | None = None,
                    deadline_s: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Two short requests of known word counts fit tokens-per-word and the template overhead.

    They are streamed like the run's requests; when a stream carries no
    ``usage.prompt_tokens`` (llama.cpp's server and others ignore
    ``stream_options.include_usage``), both prompts go through ``probe`` instead, which
    asks without streaming. ``method`` in the result says which answers the fit came from.
    ``deadline_s`` bounds the whole calibration (a :class:`TargetError` past it).
    """
    if deadline_s is not None:
        try:
            async with asyncio.timeout(deadline_s):
                return await calibrate(transport, synth, api, probe)
        except TimeoutError as exc:
            raise TargetError(f"calibration did not finish within {deadline_s:g} s (the --timeout of a request)") from exc
    specs = [
        (words, RequestSpec(index=-1 - i, prompt=text, prompt_tokens=words, max_tokens=1))
        for i, (words, text) in enumerate(synth.calibration_texts((32, 256)))
    ]
    method = "stream"
    counts: list[int] = []
    for _, spec in specs:
        n = await _streamed_prompt_tokens(transport, spec)
        if n is None:
            break
        counts.append(n)
    if len(counts) < len(specs):
        if probe is None:
            return {"calibrated": False, "method": None, "reason": "the server streams no usage.prompt_tokens"}
        method, counts = "non-stream", []
        for _, spec in specs:
            res = await probe(spec)
            if res.prompt_tokens is None:
                return {"calibrated": False, "method": None,
                        "reason": f"the server streams no usage.prompt_tokens and {res.error}"}  # fmt: skip
            counts.append(res.prompt_tokens)
    samples = [(words, n) for (words, _), n in zip(specs, counts)]
    try:
        synth.calibrate(samples)
    except ConfigError as exc:
        return {"calibrated": False, "method": method, "reason": str(exc), "samples": samples}
    return {
        "calibrated": True,
        "method": method,
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
            **({} if cfg.workload.sessions is None else {"sessions": cfg.workload.sessions.to_dict()}),
            **({} if cfg.workload.tools is None else {"tools": len(cfg.workload.tools)}),
            **({"dataset": cfg.workload.dataset.describe()} if cfg.workload.dataset is not None else {}),
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
            "workers": cfg.workers,
            "ray": None if cfg.ray is None else redact_url(cfg.ray),
            "trials": cfg.trials,
        },
        "calibration": calib,
        "machine": machine_info(),
        **({"tokenizer": str(cfg.tokenizer)} if cfg.tokenizer is not None else {}),
        **({"trace": cfg.trace.describe()} if cfg.trace is not None else {}),
    }


def merge_trials(results: Sequence[LevelResult]) -> LevelResult:
    """One level's repeated trials as one result (records and their events, loop lag,
    schedule counts and worker health pooled); a single trial as it is."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    merged = LevelResult(first.plan, start_ns=first.start_ns, end_ns=results[-1].end_ns)
    columns: list[tuple[Any, Any, Any]] = []
    for r in results:
        records, events = r.for_summary()
        merged.records.extend(records)
        if events is not None:
            columns.append(events)
        merged.loop_lag_ms.extend(r.loop_lag_ms)
        merged.loop_lag_t_ns.extend(r.loop_lag_t_ns)
        merged.scheduled += r.scheduled
        merged.dropped += r.dropped
        merged.interrupted |= r.interrupted
        merged.worker_stats.extend(r.worker_stats)
        merged.lost_workers.extend(w for w in r.lost_workers if w not in merged.lost_workers)
        for w, s in r.silent_workers.items():
            merged.silent_workers[w] = max(merged.silent_workers.get(w, 0.0), s)
        if r.clock_uncertainty_ns is not None:
            merged.clock_uncertainty_ns = max(merged.clock_uncertainty_ns or 0, r.clock_uncertainty_ns)
    if columns:  # compact results: their events apart, in record order
        merged.events = tuple(np.concatenate([c[k] for c in columns]) for k in range(3))  # type: ignore[assignment]
    return merged


def summarize_result(result: LevelResult, prof: Profile, slos: Sequence[SLO], anchor_ns: int) -> LevelSummary:
    """One level's summary, as a run writes it (and as ``loadgen report`` rebuilds it)."""
    plan = result.plan
    records, events = result.for_summary()
    return summarize_level(
        records,
        events=events,
        load=plan.load,
        slos=level_slos(slos, plan.mode, prof.slo_latency),
        loop_lag_ms=result.loop_lag_ms,
        loop_lag_t_ns=result.loop_lag_t_ns,
        anchor_ns=anchor_ns,
        scheduled=result.scheduled if plan.mode == "rate" else None,
        dropped=result.dropped,
        interrupted=result.interrupted,
        window_s=prof.window_s if prof.kind in ("soak", "ramp") else None,
        trim=prof.trim,
        workers=result.worker_stats or None,
        lost_workers=result.lost_workers or None,
        silent_workers=result.silent_workers or None,
        clock_uncertainty_ms=None if result.clock_uncertainty_ns is None else result.clock_uncertainty_ns / 1e6,
    )


def run_summary(levels: list[LevelSummary], prof: Profile, stopped: str | None, interrupted: bool) -> RunSummary:
    """The whole run's summary over its level summaries."""
    return summarize_run(
        levels, mode=prof.mode, mixed_modes=prof.kind != "levels", attainment_target=prof.attainment_target,
        knee_metric=prof.knee_metric, knee_throughput_gain=prof.knee_throughput_gain,
        knee_latency_growth=prof.knee_latency_growth, stopped=stopped, interrupted=interrupted,
    )  # fmt: skip


def _options(cfg: RunConfig, info: ServerInfo) -> DialectOptions:
    wl = cfg.workload
    if wl.tools is not None and not get_dialect(cfg.api).tools:
        takes = " or ".join(n for n in dialect_names() if get_dialect(n).tools)
        raise ConfigError(f"workload {wl.name!r} sends tools: they need --api {takes}", key="--api")
    return DialectOptions(model=info.model, strict=cfg.strict, continuous_usage=cfg.continuous_usage,
                          tools=wl.tools, tool_choice=wl.tool_choice)  # fmt: skip


def _source_type(workload: Workload) -> type[WorkloadSource | SessionSource]:
    """Multi-turn sessions when the workload has a ``[sessions]`` table, else single requests."""
    return WorkloadSource if workload.sessions is None else SessionSource


def _probe(cfg: RunConfig, info: ServerInfo) -> Probe:
    """Calibration's non-streamed fallback: the run's URL, dialect, options and headers."""
    dialect, options = get_dialect(cfg.api), _options(cfg, info)

    async def probe(spec: RequestSpec) -> ProbeResult:
        return await probe_prompt_tokens(cfg.url, dialect, options, spec, cfg.headers, cfg.read_timeout_s)

    return probe


def _max_streams(prof: Profile) -> int:
    """The most requests the profile keeps in flight at once (0: unknown, open loop)."""
    users = [int(v) for v in prof.levels if prof.mode == "concurrency"]
    return max([*users, prof.max_in_flight or 0, prof.max_concurrency if prof.kind == "sweep-rate" else 0])


def _transport_config(cfg: RunConfig, info: ServerInfo) -> TransportConfig:
    """The transport's settings, with room for the run's largest number of requests in flight."""
    max_conc = _max_streams(cfg.profile)
    return TransportConfig(
        base_url=cfg.url,
        dialect=get_dialect(cfg.api),
        options=_options(cfg, info),
        headers=cfg.headers,
        max_connections=max_conc + 16 if max_conc else 10_000,
        read_timeout_s=cfg.read_timeout_s,
        request_timeout_s=cfg.request_timeout_s,
        http2=cfg.http2,
    )


def _workers(cfg: RunConfig, cluster: RayCluster | None = None) -> tuple[int, str]:
    """How many workers, and why (``auto``: by the streams the profile keeps open, up to
    this machine's CPUs or the Ray cluster's)."""
    if cfg.workers == "auto":
        streams = _max_streams(cfg.profile)
        if not streams:  # open loop without a cap: size by the highest rate x a 1 s request
            streams = int(max(cfg.profile.levels or [1.0]))
        if cluster is None:
            return auto_workers(streams)
        return auto_workers(streams, cpus=max(cluster.cpus, 1), cpus_of="the Ray cluster's")
    n = int(cfg.workers)
    return n, f"--workers {n}"


Levels = Union["_InProcess", WorkerPool, RayPool]


class _InProcess:
    """Levels run by one runner in this process (``--workers 1``)."""

    def __init__(self, runner: Runner, source: Any) -> None:
        self.runner, self.source = runner, source

    @property
    def in_flight(self) -> int:
        return self.runner.in_flight

    @property
    def interrupted(self) -> bool:
        return self.runner.interrupted

    def interrupt(self) -> None:
        self.runner.interrupt()

    async def run_level(self, plan: LevelPlan) -> LevelResult:
        res, stats = await measure_share(self.runner, plan, self.runner.prepare(plan, self.source), 0)
        res.worker_stats = [stats]  # this process's own CPU and run-queue wait
        return res


async def _sweep_levels(
    cfg: RunConfig, runner: Levels, writer: RunWriter, stats: LiveStats, console: Console, anchor_ns: int,
    after_level: Callable[[], None] = lambda: None,
) -> RunSummary:  # fmt: skip
    """Drive the profile's sweep: run each level, summarise it, feed the summary back."""
    prof = cfg.profile
    levels: list[LevelSummary] = []
    plan: LevelPlan | None
    if cfg.resume is not None:  # the finished levels' summaries are in the sweep already
        gen, plan, levels = cfg.resume.gen, cfg.resume.plan, list(cfg.resume.levels)
    else:
        gen = sweep(prof, cfg.seed) if cfg.trace is None else _trace_levels(sweep(prof, cfg.seed), cfg.trace)
        plan = next(gen)
    stopped: str | None = None
    while plan is not None:
        results = []
        for t in range(cfg.trials):
            trial = plan if t == 0 else dataclasses.replace(plan, trial=t, seed=plan.seed + t)
            stats.start_level(level_heading(plan.index, planned_levels(prof), t, cfg.trials), plan.load.label(),
                              level=plan.index, trial=t, requests=plan.requests, warmup=plan.warmup_requests,
                              duration_s=plan.duration_s, sends_s=trial.last_send_s())  # fmt: skip
            results.append(await runner.run_level(trial))
            if runner.interrupted:
                break
        result = merge_trials(results)
        level = summarize_result(result, cfg.profile, cfg.slos, anchor_ns)
        if len(results) > 1:
            per_trial = [summarize_result(r, cfg.profile, cfg.slos, anchor_ns) for r in results]
            level = dataclasses.replace(level, trials=trial_summary(per_trial))
        levels.append(level)
        writer.write_summary({"schema_version": SCHEMA_VERSION, "levels": [lv.to_json() for lv in levels]})
        after_level()
        if not cfg.live:
            console.print(level_line(level), highlight=False, markup=False, soft_wrap=True)
        if runner.interrupted:
            return run_summary(levels, prof, None, True)
        failed = level_failures(level, len(levels) - 1, cfg.gates) if cfg.abort_on_fail else []
        if failed:
            stopped = f"--abort-on-fail: {failed[0].message}"
            break
        try:
            plan = gen.send(level)
        except StopIteration as stop:
            stopped, plan = stop.value, None
    return run_summary(levels, prof, stopped, False)


def _trace_levels(gen: Any, trace: Trace) -> Any:
    """The sweep's levels with the trace's recorded send times."""
    plan = next(gen)
    while True:
        summary = yield dataclasses.replace(plan, offsets=trace.offsets)
        try:
            plan = gen.send(summary)
        except StopIteration as stop:
            return stop.value


def _source_factory(cfg: RunConfig, synth: PromptSynthesizer, data: Dataset | None, console: Console,
                    stats: dict[str, Any]) -> Callable[[], Any]:  # fmt: skip
    """A picklable factory of the run's request source: a trace, a dataset (its counts go
    into ``stats``) or the workload."""
    if cfg.trace is not None:
        return functools.partial(TraceSource, cfg.trace, cfg.seed, synth)
    opts = cfg.workload.dataset
    if opts is not None and data is not None:
        measured = measure(data, opts, synth)
        how = "exact (tokenizer)" if measured.exact else "estimated from the calibration"
        console.print(f"[dim]dataset: {len(measured):,} of {measured.total:,} entries of {escape(opts.path)}, prompt "
                      f"lengths {how}[/dim]", highlight=False, soft_wrap=True)  # fmt: skip
        stats.update(entries=len(measured), file_entries=measured.total, skipped_without_prompt=data.skipped,
                     lengths="exact" if measured.exact else "calibrated")  # fmt: skip
        if cfg.ray is not None:  # actors on other nodes cannot read the file: the kept prompts travel with them
            measured = measured.held()
        return functools.partial(DatasetSource, measured, cfg.seed, opts.replacement)
    return functools.partial(_source_type(cfg.workload), cfg.workload, cfg.seed, synth)


async def _execute(cfg: RunConfig, console: Console) -> RunOutcome:
    check_out_folder(cfg.out)  # before anything is sent
    with lock_run_folder(cfg.out, key="--out" if cfg.resume is None else "--resume"):  # one run per folder
        return await _execute_locked(cfg, console)


def _write_error(exc: OSError) -> str:
    return exc.strerror or str(exc)


async def _execute_locked(cfg: RunConfig, console: Console) -> RunOutcome:
    counter = None
    if cfg.tokenizer is not None:
        counter = TokenizerCounter(cfg.tokenizer)
        counter.count("loadgen")  # a bad file: one line now, not mid-run
    data = load_dataset(cfg.workload.dataset) if cfg.workload.dataset is not None else None
    info = await discover(cfg.url, cfg.headers, cfg.model)
    tcfg = _transport_config(cfg, info)
    transport = make_transport(cfg.transport, tcfg)
    synth = PromptSynthesizer(seed=cfg.seed, counter=counter)
    started, anchor_ns = time.time(), time.perf_counter_ns()
    try:
        if cfg.resume is not None:  # the run's own fit: the same prompts as before
            calib = cfg.resume.run.get("calibration") or {"calibrated": False}
            if calib.get("calibrated"):
                synth.calibrate([(int(w), int(n)) for w, n in calib["samples"]])
        elif cfg.calibrate:
            calib = await calibrate(transport, synth, cfg.api, _probe(cfg, info), cfg.request_timeout_s)
        else:
            calib = {"calibrated": False, "method": None, "reason": "--no-calibrate"}
        if cfg.calibrate and not calib["calibrated"]:
            console.print(f"[yellow]warning: prompt lengths not calibrated: {escape(calib['reason'])}; prompts assume "
                          "one token per word and no chat template, so compare them with the server's own prompt "
                          "counts[/yellow]", highlight=False, soft_wrap=True)  # fmt: skip
        dataset_stats: dict[str, Any] = {}
        make_source = _source_factory(cfg, synth, data, console, dataset_stats)
        source = make_source()
        with contextlib.ExitStack() as files:
            cluster = None if cfg.ray is None else files.enter_context(connect(cfg.ray))
            if cluster is not None:
                raise_on_sigterm()  # ray.init() put its own (sys.exit) in place of ours
            n_workers, why = _workers(cfg, cluster)
            if cluster is not None:
                console.print(f"[dim]workers: {n_workers} Ray actor{'s' if n_workers > 1 else ''} over the cluster's "
                              f"{cluster.nodes} node{'s' if cluster.nodes > 1 else ''} ({why})[/dim]")  # fmt: skip
            elif n_workers > 1 or cfg.workers == "auto":
                console.print(f"[dim]workers: {n_workers} process{'es' if n_workers > 1 else ''} ({why})[/dim]")
            running: list[Levels] = []  # the levels, once they exist

            def stop_on_write_error(exc: OSError) -> None:  # a full disk stops the run as SIGTERM does
                console.print(f"[bold red]error: cannot write {escape(str(cfg.out))}: {escape(_write_error(exc))}; "
                              "stopping the run[/bold red]", highlight=False, soft_wrap=True)  # fmt: skip
                for lv in running:
                    lv.interrupt()

            if cfg.resume is not None:
                run_info = dict(cfg.resume.run)
                run_info.pop("finished", None)
                run_info.setdefault("resumed", []).append({
                    "at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                    "level": cfg.resume.plan.index, "command": cfg.command})  # fmt: skip
                anchor_ns = int((run_info.get("clock_anchor") or {}).get("perf_counter_ns", anchor_ns))
                writer = files.enter_context(RunWriter(cfg.out, keep_levels_below=cfg.resume.plan.index,
                                                       on_error=stop_on_write_error))  # fmt: skip
                console.print(f"[dim]resuming {cfg.out} at level {cfg.resume.plan.index + 1} "
                              f"({writer.count} records of finished levels kept)[/dim]")  # fmt: skip
            else:
                if holds_run(cfg.out):
                    console.print(f"[yellow]note: replacing the earlier run in {cfg.out}[/yellow]")
                writer = files.enter_context(RunWriter(cfg.out, on_error=stop_on_write_error))
                run_info = _run_json(cfg, info, calib, started, anchor_ns)
            if dataset_stats:
                run_info["workload"]["dataset"].update(dataset_stats)
            writer.write_run(run_info)
            if writer.error is not None:  # nothing of the run was sent yet
                raise ConfigError(f"cannot write the run folder: {_write_error(writer.error)}", key="--out")
            def on_record(rec: RequestRecord) -> None:
                writer.append(rec)
                stats.add(rec)

            def on_records(recs: Sequence[RequestRecord]) -> None:  # a worker's batch: one write
                writer.append_batch(encode_batch(recs))
                for rec in recs:
                    stats.add(rec)

            levels: Levels
            setup = WorkerSetup(make_transport=functools.partial(make_transport, cfg.transport, tcfg),
                                make_source=make_source,
                                encode=encode_batch, decode=decode_batch)  # fmt: skip
            if cluster is not None:
                levels = RayPool(setup, n_workers, on_records)
            elif n_workers > 1:
                levels = WorkerPool(setup, n_workers, on_records, max_in_flight=cfg.profile.max_in_flight)
            else:
                levels = _InProcess(Runner(transport, on_record, keep="compact"), source)
            running.append(levels)
            stats = LiveStats(lambda: levels.in_flight)
            scraper = None
            stop = files.enter_context(_stop_signals(asyncio.get_running_loop(), levels))  # until summary.json

            def after_level() -> None:
                if isinstance(levels, RayPool):  # the clock offsets re-estimated before each level
                    run_info["workers"] = levels.clock_report()
                    writer.write_run(run_info)

            async with contextlib.AsyncExitStack() as stack:
                if isinstance(levels, (WorkerPool, RayPool)):
                    await stack.enter_async_context(levels)
                    after_level()
                if cfg.scrape_metrics:
                    from loadgen.client.scrape import MetricsScraper

                    scraper = MetricsScraper(cfg.url, cfg.out / "server_metrics.jsonl", headers=cfg.headers,
                                             extra_urls=cfg.scrape_urls)
                    await stack.enter_async_context(scraper)
                if cfg.live:
                    stack.enter_context(Live(stats, console=console, refresh_per_second=4, transient=True))
                summary = await _sweep_levels(cfg, levels, writer, stats, console, anchor_ns, after_level)
            if scraper is not None and scraper.failures and not scraper.scrapes:
                console.print(f"[yellow]warning: no server metrics scraped: {scraper.last_error}[/yellow]")
            if writer.error is not None:
                summary = dataclasses.replace(summary, interrupted=True,
                                              stopped=f"the run folder could not be written: {_write_error(writer.error)}")
            writer.write_summary(summary.to_json())  # attempted: after a full disk it may fail again
            run_info["finished"] = {"interrupted": summary.interrupted, "levels": len(summary.levels),
                                    "stopped": summary.stopped}  # fmt: skip
            writer.write_run(run_info)  # how the run ended: what `loadgen report` and --resume go by
            n_records = writer.count
            write_error = None if writer.error is None else _write_error(writer.error)
    finally:
        await transport.aclose()
    return RunOutcome(cfg.out, summary, summary.interrupted, n_records, stop.signum, write_error, writer.lost)


@dataclass
class _Stop:
    signum: int | None = None  # the first stop signal received


@contextlib.contextmanager
def _stop_signals(loop: asyncio.AbstractEventLoop, runner: Levels) -> Iterator[_Stop]:
    """SIGINT or SIGTERM: stop the level, keep every record, write the summary.

    A second Ctrl-C is not caught (it interrupts at once). SIGTERM stays handled: ``timeout``
    sends it twice (to the process, then to its group), and a later one from the same
    supervisor adds nothing; SIGKILL is what ends a run that will not stop.
    """
    stop = _Stop()
    before = signal.getsignal(signal.SIGTERM)

    def handler(signum: int) -> None:
        if stop.signum is None:
            stop.signum = signum
        runner.interrupt()
        if signum == signal.SIGINT:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGINT)

    installed = []
    for sig in STOP_SIGNALS:
        try:
            loop.add_signal_handler(sig, handler, sig)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / Windows
            pass
    try:
        yield stop
    finally:
        for sig in installed:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        if signal.SIGTERM in installed and before is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, before)  # the loop's removal left SIG_DFL


def finish_unwritable(outcome: RunOutcome) -> str:
    """After a run stopped because its folder could not be written: try the report (it
    may fit where records did not), and say in one line what was kept."""
    from loadgen.errors import LoadgenError
    from loadgen.report.html import render_run_report

    report = "no report"
    if outcome.records:
        try:
            report = f"report {render_run_report(outcome.folder)}"
        except (LoadgenError, OSError):
            report = "no report (it did not fit either)"
    lost = f", {outcome.lost:,} could not be written" if outcome.lost else ""
    return (f"cannot write {outcome.folder}: {outcome.write_error}; the run stopped with {outcome.records:,} records "
            f"kept{lost}; {report}")


CLEANUP_S = 5.0  # the longest an interrupted start (discovery, calibration) waits for its cleanup


def execute(cfg: RunConfig, console: Console) -> RunOutcome:
    """Run synchronously on a fresh (uvloop when available) event loop."""
    loop = new_event_loop()
    task = loop.create_task(_execute(cfg, console))
    try:
        outcome = loop.run_until_complete(task)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM before the run's own handler (discovery, calibration)
        # Let the run's cleanup (closing the transport) run on this loop, for at most
        # CLEANUP_S: the signal may have landed inside a transport's callback, and a
        # library's shielded close can then wait for a connection_lost that never comes.
        task.cancel()
        with contextlib.suppress(BaseException):
            loop.run_until_complete(asyncio.wait({task}, timeout=CLEANUP_S))
        if not task.done():
            task._log_destroy_pending = False  # type: ignore[attr-defined]  # abandoned on purpose
        raise
    finally:
        gens = loop.create_task(loop.shutdown_asyncgens())
        with contextlib.suppress(BaseException):
            loop.run_until_complete(asyncio.wait({gens}, timeout=CLEANUP_S))
        if not gens.done():
            gens._log_destroy_pending = False  # type: ignore[attr-defined]
        loop.close()
    show_summary(outcome.summary, console, cfg.out)
    return outcome
