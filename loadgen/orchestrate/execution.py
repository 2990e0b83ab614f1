"""One benchmark run, wired end to end: target → calibration → levels → files → summary.

The CLI parses flags into a :class:`RunConfig` and calls :func:`execute`; so do the demo
and the tests. Nothing here reads argv or prints except through the given console.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape

from loadgen.aio import new_event_loop
from loadgen.client.dialects import dialect_names, get_dialect
from loadgen.client.discovery import ServerInfo, discover
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.errors import ConfigError, WorkloadError
from loadgen.load.executor import InProcess, LevelExecutor
from loadgen.load.ray_pool import RayCluster, RayPool, connect
from loadgen.load.runner import Runner
from loadgen.load.share import WorkerSetup
from loadgen.load.sizing import free_cores, level_need, max_streams, size_workers
from loadgen.load.workers import WorkerPool, auto_workers
from loadgen.metrics.results import RunSummary
from loadgen.numfmt import fmt, fmt_share
from loadgen.orchestrate.calibration import calibrate, dialect_options, probe_for
from loadgen.orchestrate.config import RunConfig
from loadgen.orchestrate.run_json import run_json
from loadgen.orchestrate.sweep_driver import sweep_levels
from loadgen.records import RequestRecord
from loadgen.report.console import LiveStats, show_summary
from loadgen.report.files import FLUSH_S, RunWriter, check_out_folder, holds_run, lock_run_folder
from loadgen.report.recordio import decode_batch, encode_batch
from loadgen.runinfo import (
    Calibration,
    Finished,
    Resumed,
    RunInfo,
    WorkerClock,
)
from loadgen.signals import cancel_on_stop, raise_on_sigterm, stop_signals
from loadgen.workload.agent_trace import AgentTraceSource
from loadgen.workload.datasets import Dataset, DatasetSource, load_dataset, measure
from loadgen.workload.lengths import over_context
from loadgen.workload.prompts import PromptSynthesizer, TokenizerCounter, format_salt, new_salt
from loadgen.workload.sessions import SessionSource
from loadgen.workload.source import WorkloadSource
from loadgen.workload.spec import Workload
from loadgen.workload.tasks import AgentSource
from loadgen.workload.traces import TraceSource

__all__ = ["WRITE_FAILED", "RunOutcome", "execute", "finish_unwritable"]

WRITE_FAILED = 74  # exit code of a run whose folder could not be written (sysexits' EX_IOERR)
_OUTPUT_TOKENS_UNKNOWN = 256.0  # auto workers: mean output tokens assumed when the workload does not say


@dataclass
class RunOutcome:
    folder: Path
    summary: RunSummary
    interrupted: bool
    records: int
    signum: int | None = None  # the signal that stopped the run (SIGINT, SIGTERM, SIGHUP)
    write_error: str | None = None  # the run folder could not be written (a full disk...): the run stopped
    lost: int = 0  # records that could not be written


def _source_type(workload: Workload) -> type[WorkloadSource | SessionSource | AgentSource]:
    """Agents' tasks with an ``[agent]`` table, multi-turn sessions with a ``[sessions]``
    table, else single requests."""
    if workload.agent is not None:
        return AgentSource
    return WorkloadSource if workload.sessions is None else SessionSource


def _transport_config(cfg: RunConfig, info: ServerInfo) -> TransportConfig:
    """The transport's settings, with room for the run's largest number of requests in flight."""
    max_conc = max_streams(cfg.profile)
    return TransportConfig(
        base_url=cfg.url,
        dialect=get_dialect(cfg.api),
        options=dialect_options(cfg, info),
        headers=cfg.headers,
        max_connections=max_conc + 16 if max_conc else 10_000,
        read_timeout_s=cfg.read_timeout_s,
        request_timeout_s=cfg.request_timeout_s,
        http2=cfg.http2,
    )


def _mean_output_tokens(cfg: RunConfig) -> float:
    """The run's mean output tokens a request (a trace's, a dataset's cap, or the
    workload's classes by weight); :data:`_OUTPUT_TOKENS_UNKNOWN` when none says."""
    if cfg.trace is not None:
        return float(cfg.trace.output_tokens.mean()) if len(cfg.trace) else _OUTPUT_TOKENS_UNKNOWN
    if cfg.agent_trace is not None:
        return float(cfg.agent_trace.output_tokens().mean())
    classes = cfg.workload.classes
    if cfg.workload.dataset is not None or not classes:
        opts = cfg.workload.dataset
        return float(opts.output_tokens) if opts is not None and opts.output_tokens else _OUTPUT_TOKENS_UNKNOWN
    total = sum(c.weight for c in classes)
    return sum(c.weight * c.output_tokens.mean() for c in classes) / total if total > 0 else _OUTPUT_TOKENS_UNKNOWN


def _workers(cfg: RunConfig, cluster: RayCluster | None = None) -> tuple[int, str]:
    """How many workers, and why (``auto``: by the events per second the busiest level
    needs, up to this machine's free cores, see :mod:`loadgen.load.sizing`; on Ray, by the
    streams the profile keeps open, up to the cluster's CPUs)."""
    if cfg.workers == "auto":
        if cluster is None:
            return size_workers(level_need(cfg.profile, _mean_output_tokens(cfg)), free_cores)
        streams = max_streams(cfg.profile)
        if not streams:  # open loop without a cap: size by the highest rate x a 1 s request
            streams = int(max(cfg.profile.levels or [1.0]))
        return auto_workers(streams, cpus=max(cluster.cpus, 1), cpus_of="the Ray cluster's")
    n = int(cfg.workers)
    return n, f"--workers {n}"


def _check_dataset_images(cfg: RunConfig, data: Dataset) -> None:
    """A dataset with its own images: refused beside ``[images]`` and with an API that sends none."""
    if cfg.workload.images is not None:
        raise WorkloadError(
            f"{data.with_images:,} of its entries name images: a workload's [images] table is for a dataset "
            "without its own; remove one of them",
            source=data.path,
        )
    if not get_dialect(cfg.api).images:
        names = [n for n in dialect_names() if get_dialect(n).images]
        takes = " or ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " or " + names[-1]
        raise ConfigError(f"the dataset's entries send images: they need the {takes} API", field="api")


def _source_factory(
    cfg: RunConfig, synth: PromptSynthesizer, data: Dataset | None, console: Console, stats: dict[str, Any]
) -> Callable[[], Any]:
    """A picklable factory of the run's request source: a trace, a dataset (its counts go
    into ``stats``) or the workload."""
    if cfg.trace is not None:
        return functools.partial(TraceSource, cfg.trace, cfg.seed, synth)
    if cfg.agent_trace is not None:  # closed loop: each user its own share of the tasks, on any worker
        users = int(cfg.profile.levels[0]) if cfg.profile.mode == "concurrency" else None
        return functools.partial(
            AgentTraceSource, cfg.agent_trace, cfg.seed, synth, tools=cfg.workload.tools, users=users
        )
    opts = cfg.workload.dataset
    if opts is not None and data is not None:
        measured = measure(data, opts, synth)
        how = "exact (tokenizer)" if measured.exact else "estimated from the calibration"
        console.print(
            f"[dim]dataset: {len(measured):,} of {measured.total:,} entries of {escape(opts.path)}, prompt "
            f"lengths {how}[/dim]",
            highlight=False,
            soft_wrap=True,
        )
        stats.update(
            entries=len(measured),
            file_entries=measured.total,
            skipped_without_prompt=data.skipped,
            lengths="exact" if measured.exact else "calibrated",
        )
        if data.with_images:
            stats.update(entries_with_images=data.with_images)
        if cfg.ray is not None:  # actors on other nodes cannot read the file: the kept prompts travel with them
            measured = measured.held()
        images = cfg.workload.images
        return functools.partial(DatasetSource, measured, cfg.seed, opts.replacement, images=images)
    return functools.partial(_source_type(cfg.workload), cfg.workload, cfg.seed, synth)


async def _execute(cfg: RunConfig, console: Console) -> RunOutcome:
    check_out_folder(cfg.out)  # before anything is sent
    with lock_run_folder(cfg.out, "out" if cfg.resume is None else "resume"):  # one run per folder
        return await _execute_locked(cfg, console)


def _write_error(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _salted(cfg: RunConfig) -> RunConfig:
    """The run with its prompt salt: a fresh one unless given or ``repeat_prompts``
    (docs: workloads/README.md, "Prompt text and calibration")."""
    if not cfg.repeat_prompts and cfg.prompt_salt is None:
        return dataclasses.replace(cfg, prompt_salt=new_salt())
    return cfg


def _say_salt(cfg: RunConfig, console: Console) -> None:
    """The console line that says whether the prompts are salted per run or repeated."""
    if cfg.workload.dataset is not None:  # its own text, sent as it is
        line = "dataset prompts sent as they are, the same every run (a server's prefix cache may hold them)"
    elif cfg.prompt_salt is None:
        line = f"prompts repeated across runs (seed {cfg.seed}, unsalted: a server's prefix cache may hold them)"
    else:
        line = (
            f"prompts salted per run (salt {format_salt(cfg.prompt_salt)}; --repeat-prompts sends the same every run)"
        )
    console.print(f"[dim]{line}[/dim]", highlight=False, soft_wrap=True)


async def _execute_locked(cfg: RunConfig, console: Console) -> RunOutcome:
    cfg = _salted(cfg)
    counter = None
    if cfg.tokenizer is not None:
        counter = TokenizerCounter(cfg.tokenizer)
        counter.count("loadgen")  # a bad file: one line now, not mid-run
    data = load_dataset(cfg.workload.dataset) if cfg.workload.dataset is not None else None
    if data is not None and data.with_images:
        _check_dataset_images(cfg, data)
    if cfg.dashboard is not None:
        from loadgen.orchestrate.live_dashboard import check_port

        check_port(cfg.dashboard)  # a port in use: one line before anything is sent
    loop = asyncio.get_running_loop()
    with cancel_on_stop(loop):  # no levels yet: a signal ends the start as Ctrl-C would
        info = await discover(cfg.url, get_dialect(cfg.api).request_headers(cfg.headers), cfg.model)
    _check_lengths(cfg, info, console)  # before the calibration's requests
    tcfg = _transport_config(cfg, info)
    transport = make_transport(cfg.transport, tcfg)
    synth = PromptSynthesizer(seed=cfg.seed, counter=counter, salt=cfg.prompt_salt)
    started = time.time()
    try:
        with cancel_on_stop(loop):
            calib = await _calibration(cfg, transport, synth, info, console)
        _say_salt(cfg, console)
        dataset_stats: dict[str, Any] = {}
        make_source = _source_factory(cfg, synth, data, console, dataset_stats)
        with contextlib.ExitStack() as files:
            cluster = None if cfg.ray is None else files.enter_context(connect(cfg.ray))
            if cluster is not None:
                raise_on_sigterm()  # ray.init() put its own (sys.exit) in place of ours
            n_workers = _worker_count(cfg, cluster, console)
            running: list[LevelExecutor] = []  # the levels, once they exist: a full disk interrupts them
            folder = _RunFolder.open(cfg, files, console, running)
            anchor_ns = folder.start(cfg, info, calib, started, dataset_stats, n_workers)
            stats = LiveStats(lambda: running[0].in_flight if running else 0)
            setup = WorkerSetup(
                make_transport=functools.partial(make_transport, cfg.transport, tcfg),
                make_source=make_source,
                encode=encode_batch,
                decode=decode_batch,
            )
            levels = _executor(
                cfg,
                setup,
                n_workers,
                cluster,
                folder.writer,
                stats,
                lambda: InProcess(Runner(transport, folder.on_record(stats), keep="compact"), make_source()),
            )
            running.append(levels)
            stop = files.enter_context(stop_signals(loop, levels.interrupt))
            summary = await _drive(cfg, info, levels, folder, stats, console, anchor_ns)
            summary = folder.finish(summary)
    finally:
        await transport.aclose()
    return RunOutcome(
        cfg.out, summary, summary.interrupted, folder.writer.count, stop.signum, folder.write_error, folder.writer.lost
    )


def _check_lengths(cfg: RunConfig, info: ServerInfo, console: Console) -> None:
    """Say the flags that set the workload's lengths; refuse lengths over the server's
    context window (``max_model_len`` from /v1/models) before a request is sent."""
    wl = cfg.workload
    if wl.overrides:
        console.print(
            f"[dim]workload {escape(wl.name)}: lengths set by {escape(', '.join(wl.overrides))}[/dim]",
            highlight=False,
            soft_wrap=True,
        )
    over = None if cfg.trace or cfg.agent_trace else over_context(wl, info.max_model_len, cfg.seed)
    if over is not None:
        window = f"the server's max_model_len of {fmt(info.max_model_len)} (from /v1/models)"
        most = fmt(over.bound) if over.bound is not None else f"{fmt(over.longest)} or more"
        what = (
            f"every request asks for {fmt(over.shortest)} tokens or more (prompt + max_tokens), over {window}"
            if over.every
            else f"about {fmt_share(over.share)} of the requests (prompt + max_tokens up to {most} tokens) are "
            f"over {window} and would be rejected"
        )
        raise ConfigError(
            f"workload {wl.name!r}, class {over.cls!r}: {what}: lower the lengths (--prompt-tokens, --output-tokens)"
        )


async def _calibration(
    cfg: RunConfig, transport: Any, synth: PromptSynthesizer, info: ServerInfo, console: Console
) -> Calibration:
    """The prompt fit: the resumed run's own (the same prompts as before), two calibration
    requests, or none (``--no-calibrate``); a failed fit is a warning, not an error."""
    if cfg.resume is not None:
        calib = cfg.resume.run.calibration or Calibration()
        if calib.calibrated and calib.samples:
            synth.calibrate(list(calib.samples))
    elif cfg.calibrate:
        fit = await calibrate(transport, synth, cfg.api, probe_for(cfg, info), cfg.request_timeout_s)
        calib = Calibration.from_json(fit)
    else:
        calib = Calibration(reason="--no-calibrate")
    if synth.counter is not None and calib.calibrated and synth.exact_overhead(calib.samples or []) is None:
        console.print(
            f"[yellow]warning: the tokenizer counts the calibration prompts otherwise than the server "
            f"({escape(str(cfg.tokenizer))} is not the served model's?): the template overhead is fitted "
            "and prompt lengths may miss their targets[/yellow]",
            highlight=False,
            soft_wrap=True,
        )
    if cfg.calibrate and not calib.calibrated:
        console.print(
            f"[yellow]warning: prompt lengths not calibrated: {escape(calib.reason or '')}; prompts assume "
            "one token per word and no chat template, so compare them with the server's own prompt "
            "counts[/yellow]",
            highlight=False,
            soft_wrap=True,
        )
    return calib


def _worker_count(cfg: RunConfig, cluster: RayCluster | None, console: Console) -> int:
    n, why = _workers(cfg, cluster)
    if cluster is not None:
        console.print(
            f"[dim]workers: {n} Ray actor{'s' if n > 1 else ''} over the cluster's "
            f"{cluster.nodes} node{'s' if cluster.nodes > 1 else ''} ({why})[/dim]"
        )
    elif n > 1 or cfg.workers == "auto":
        console.print(
            f"[dim]workers: {n} process{'es' if n > 1 else ''} ({why})[/dim]", highlight=False, soft_wrap=True
        )
    return n


def _executor(
    cfg: RunConfig,
    setup: WorkerSetup,
    n_workers: int,
    cluster: RayCluster | None,
    writer: RunWriter,
    stats: LiveStats,
    in_process: Callable[[], LevelExecutor],
) -> LevelExecutor:
    """Who runs the levels: Ray actors, worker processes (their records arrive in batches),
    or this process."""
    if cluster is None and n_workers == 1:
        return in_process()

    def on_records(recs: Sequence[RequestRecord]) -> None:  # a worker's batch: one write
        writer.append_batch(encode_batch(recs))
        for rec in recs:
            stats.add(rec)

    if cluster is not None:
        return RayPool(setup, n_workers, on_records)
    return WorkerPool(setup, n_workers, on_records, max_in_flight=cfg.profile.max_in_flight)


async def _drive(
    cfg: RunConfig,
    info: ServerInfo,
    levels: LevelExecutor,
    folder: _RunFolder,
    stats: LiveStats,
    console: Console,
    anchor_ns: int,
) -> RunSummary:
    """The levels, with the executor, the metrics scraper and the live display open."""
    scraper = None
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(levels)
        folder.clocks(levels)
        feed = None
        if cfg.dashboard is not None:
            from loadgen.orchestrate.live_dashboard import run_dashboard

            feed = await stack.enter_async_context(run_dashboard(cfg, info, levels, stats, console))
        if cfg.scrape_metrics:
            from loadgen.client.scrape import MetricsScraper

            scraper = MetricsScraper(
                cfg.url,
                cfg.out / "server_metrics.jsonl",
                headers=get_dialect(cfg.api).request_headers(cfg.headers),
                extra_urls=cfg.scrape_urls,
                on_sample=None if feed is None else feed.server_sample,
            )
            await stack.enter_async_context(scraper)
        if cfg.live:
            stack.enter_context(Live(stats, console=console, refresh_per_second=4, transient=True))
        summary = await sweep_levels(
            cfg,
            levels,
            folder.writer,
            stats,
            console,
            anchor_ns,
            lambda: folder.clocks(levels),
            level_end=None if scraper is None else scraper.scrape_now,
        )
    if scraper is not None and scraper.failures and not scraper.scrapes:
        console.print(f"[yellow]warning: no server metrics scraped: {scraper.last_error}[/yellow]")
    return summary


class _RunFolder:
    """The run folder while a run writes it: its writer and its ``run.json`` record."""

    def __init__(self, writer: RunWriter) -> None:
        self.writer = writer
        self.info: RunInfo | None = None
        self._flush: asyncio.TimerHandle | None = None  # writes the held records of a run gone quiet

    @classmethod
    def open(
        cls, cfg: RunConfig, files: contextlib.ExitStack, console: Console, running: list[LevelExecutor]
    ) -> _RunFolder:
        """A writer for ``cfg.out`` (a resumed run's keeps its finished levels' records)."""

        def stop_on_write_error(exc: OSError) -> None:  # a full disk stops the run as SIGTERM does
            console.print(
                f"[bold red]error: cannot write {escape(str(cfg.out))}: {escape(_write_error(exc))}; "
                "stopping the run[/bold red]",
                highlight=False,
                soft_wrap=True,
            )
            for lv in running:
                lv.interrupt()

        if cfg.resume is not None:
            writer = RunWriter(cfg.out, keep_levels_below=cfg.resume.plan.index, on_error=stop_on_write_error)
            console.print(
                f"[dim]resuming {cfg.out} at level {cfg.resume.plan.index + 1} "
                f"({writer.count} records of finished levels kept)[/dim]"
            )
        else:
            if holds_run(cfg.out):
                console.print(f"[yellow]note: replacing the earlier run in {cfg.out}[/yellow]")
            writer = RunWriter(cfg.out, on_error=stop_on_write_error)
        return cls(files.enter_context(writer))

    def start(
        self,
        cfg: RunConfig,
        info: ServerInfo,
        calib: Calibration,
        started: float,
        dataset_stats: dict[str, Any],
        n_workers: int,
    ) -> int:
        """Write ``run.json`` before anything is sent; the run's clock anchor (a resumed
        run keeps its own)."""
        anchor_ns = time.perf_counter_ns()
        if cfg.resume is not None:
            resumed = Resumed(
                at=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                level=cfg.resume.plan.index,
                command=list(cfg.command),
            )
            run_info = dataclasses.replace(
                cfg.resume.run, finished=None, resumed=[*(cfg.resume.run.resumed or []), resumed]
            )
            anchor_ns = run_info.anchor_ns if run_info.anchor_ns is not None else anchor_ns
        else:
            run_info = run_json(cfg, info, calib, started, anchor_ns, n_workers)
        wl_info = run_info.workload
        if dataset_stats and wl_info is not None and wl_info.dataset is not None:
            dataset = dataclasses.replace(wl_info.dataset, **dataset_stats)
            run_info = dataclasses.replace(run_info, workload=dataclasses.replace(wl_info, dataset=dataset))
        self._write(run_info)
        if self.writer.error is not None:  # nothing of the run was sent yet
            raise ConfigError(f"cannot write the run folder: {_write_error(self.writer.error)}", field="out")
        return anchor_ns

    def _write(self, run_info: RunInfo) -> None:
        self.info = run_info
        self.writer.write_run(run_info)

    def on_record(self, stats: LiveStats) -> Callable[[RequestRecord], None]:
        def on_record(rec: RequestRecord) -> None:
            self.writer.append(rec)
            stats.add(rec)
            if self._flush is None and self.writer.held:
                self._flush = asyncio.get_running_loop().call_later(FLUSH_S, self._flush_held)

        return on_record

    def _flush_held(self) -> None:
        self._flush = None
        self.writer.flush()

    def clocks(self, levels: LevelExecutor) -> None:
        """Ray: the workers' clock offsets, estimated again before each level, into run.json."""
        report = levels.clock_report()
        if report is not None and self.info is not None:
            self._write(dataclasses.replace(self.info, workers=[WorkerClock.from_json(w) for w in report]))

    @property
    def write_error(self) -> str | None:
        return None if self.writer.error is None else _write_error(self.writer.error)

    def _with_energy(self, summary: RunSummary) -> RunSummary:
        """``summary`` with each level's energy (docs/metrics.md, "Energy") when the server's
        scraped metrics hold power samples: the one value the report and every other
        surface print. The records are read back for it (only then); a folder that cannot
        be read keeps the summary as it is."""
        from loadgen.report.rundata import SERVER_METRICS_FILE, RunData, load_run, read_server_metrics
        from loadgen.report.server_figures import levels_energy, power_samples

        folder = self.writer.folder
        if len(power_samples(read_server_metrics(folder / SERVER_METRICS_FILE))) < 2:
            return summary
        self.writer.write_summary(summary.to_json())  # what the folder's reader reads
        try:
            data: RunData = load_run(folder)
        except (ConfigError, OSError, ValueError):
            return summary
        energies = levels_energy(data)
        levels = [dataclasses.replace(lv, energy=e) for lv, e in zip(summary.levels, energies)]
        return dataclasses.replace(summary, levels=levels)

    def finish(self, summary: RunSummary) -> RunSummary:
        """The final summary.json, and run.json's ``finished``: what ``loadgen report`` and
        ``--resume`` go by. After a full disk both are attempted (they may fit)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        self.writer.flush()
        if self.write_error is not None:
            summary = dataclasses.replace(
                summary, interrupted=True, stopped=f"the run folder could not be written: {self.write_error}"
            )
        summary = self._with_energy(summary)
        self.writer.write_summary(summary.to_json())
        assert self.info is not None
        stops = [lv.stopped for lv in summary.levels]
        finished = Finished(
            interrupted=summary.interrupted,
            levels=len(summary.levels),
            stopped=summary.stopped,
            level_stops=stops if any(s is not None for s in stops) else None,
        )
        self._write(dataclasses.replace(self.info, finished=finished))
        return summary


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
    return (
        f"cannot write {outcome.folder}: {outcome.write_error}; the run stopped with {outcome.records:,} records "
        f"kept{lost}; {report}"
    )


CLEANUP_S = 5.0  # the longest an interrupted start (discovery, calibration) waits for its cleanup


def _quiet_interrupts(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's exception handler: a Ctrl-C or SIGTERM that landed inside a library's own
    task (aiohttp's body writer) ended that task, and the interrupt is already handled:
    no "Task exception was never retrieved" for it. Anything else as asyncio reports it."""
    if isinstance(context.get("exception"), KeyboardInterrupt):
        return
    loop.default_exception_handler(context)


def execute(cfg: RunConfig, console: Console) -> RunOutcome:
    """Run synchronously on a fresh (uvloop when available) event loop."""
    loop = new_event_loop()
    loop.set_exception_handler(_quiet_interrupts)
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
    show_summary(outcome.summary, console, cfg.out, cfg.api)
    return outcome
