"""The ``loadgen`` commands besides ``run`` and ``serve``: reports, comparisons, matrices,
exports, schemas, the named files, fitting a workload, the demo."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from loadgen import __version__
from loadgen.cli.common import console, friendly, out_folder, sigterm_unwinds
from loadgen.errors import ConfigError
from loadgen.paths import search_dirs, shipped
from loadgen.signals import exit_code

__all__ = ["watch", "workload_app"]

workload_app = typer.Typer(help="Workload files: fit one from real traffic.", no_args_is_help=True)


@friendly
def report(
    folder: Path = typer.Argument(..., help="A run folder (with summary.json and records.jsonl)"),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output file (default FOLDER/report.html)"),
) -> None:
    """Re-render a run's self-contained HTML report from its files.

    A run that never reached its end (kill -9, or a SIGTERM after the supervisor's patience)
    has no summary.json, or only the one written level by level: it is rebuilt from
    records.jsonl and run.json first, marked interrupted unless the run finished."""
    from loadgen.orchestrate import needs_rebuild, rebuild_summary
    from loadgen.report.html import render_run_report

    con = console()
    if needs_rebuild(folder):
        rec, summary = rebuild_summary(folder)
        if rec.torn:
            con.print(
                "[yellow]note: the last line of records.jsonl was cut off mid-write (a killed run); skipped[/yellow]"
            )
        n = len(summary.levels)
        con.print(
            f"summary.json rebuilt from records.jsonl and run.json: {n} level{'s' if n != 1 else ''} "
            f"({rec.rebuilt} from their records){', interrupted' if summary.interrupted else ''}"
        )
    con.print(f"report: {render_run_report(folder, out)}")


@friendly
@sigterm_unwinds
def matrix(
    file: Path = typer.Argument(..., help="A matrix file (TOML): server configurations, workload, profile, SLOs"),
    out: str | None = typer.Option(None, "--out", "-o", help="Output folder (default reports/<time>-matrix-<name>)"),
    duration: float | None = typer.Option(
        None, "--duration", help="Seconds per level, over the matrix file's profile (no request cap, as run --duration)"
    ),
    dashboard: bool = typer.Option(False, "--dashboard/--no-dashboard", help="Serve the live page of each run in turn"),
    dashboard_port: int | None = typer.Option(
        None, "--dashboard-port", help="The dashboard's port (default 8089; 0: any free one; implies --dashboard)"
    ),
    dashboard_host: str | None = typer.Option(
        None, "--dashboard-host", help="The dashboard's interface (default 127.0.0.1; another needs the token)"
    ),
) -> None:
    """Run one workload against several server configurations, then compare them."""
    from loadgen.orchestrate import RunFlags, dashboard_at, load_matrix, run_matrix
    from loadgen.report.files import default_run_dir

    spec = load_matrix(shipped(file), duration)
    out = out_folder(out)
    folder = Path(out) if out else default_run_dir(Path("reports"), f"matrix-{spec.name}")
    con = console()
    at = dashboard_at(RunFlags(dashboard=dashboard, dashboard_port=dashboard_port, dashboard_host=dashboard_host))
    doc = run_matrix(spec, folder, con, dashboard=at)
    ok = [c for c in doc["configs"] if c["status"] == "ok"]
    con.print(
        f"matrix: {len(ok)} of {len(doc['configs'])} configurations ran in {doc['wall_s']:.0f} s; "
        f"{folder / 'matrix.json'}" + (f", {folder / doc['html']}" if doc.get("html") else "")
    )
    stopped = [c for c in doc["configs"] if c["status"] == "interrupted"]
    if stopped:
        raise typer.Exit(exit_code(stopped[0].get("signal")))
    if not ok:
        raise typer.Exit(1)


@friendly
def watch(
    folder: Path = typer.Argument(..., help="A run folder that a run is writing (or has written)"),
    port: int = typer.Option(8089, "--port", help="The page's port (0: any free one)"),
    host: str = typer.Option("127.0.0.1", "--host", help="The interface (another than loopback needs the token)"),
    until_done: bool = typer.Option(False, "--until-done", help="Exit once the run has finished"),
) -> None:
    """Serve the live dashboard of a run folder another process is writing: it follows
    records.jsonl, events.bin, server_metrics.jsonl and summary.json, and links the report
    once the run has ended. Ctrl-C stops watching."""
    from loadgen.orchestrate import DashboardAt, Origin, check_dashboard, watch_folder

    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder", key="FOLDER")
    at = DashboardAt(host=host.strip(), port=port)
    check_dashboard(at, Origin(keys={"dashboard": "--port"}))
    watch_folder(folder, at, console(), until_done=until_done)


@friendly
def export(
    folder: Path = typer.Argument(..., help="A run folder"),
    format: str = typer.Option("csv", "--format", help="csv or parquet (needs pyarrow)"),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output folder (default: the run folder)"),
) -> None:
    """Write a run's per-request and per-level tables (requests.csv, levels.csv)."""
    from loadgen.report.export import export_run

    for path in export_run(folder, format, out):
        console().print(f"wrote {path}")


@friendly
def schema(
    what: str = typer.Argument("summary", help="Which file's schema: summary (summary.json) or run (run.json)"),
) -> None:
    """Print the JSON Schema of summary.json or run.json (generated from their typed dataclasses)."""
    import json

    from loadgen.metrics.schema import summary_schema
    from loadgen.runinfo import run_schema

    schemas = {"summary": summary_schema, "run": run_schema}
    if what not in schemas:
        raise ConfigError(f"unknown schema {what!r}; valid: {', '.join(schemas)}", key="WHAT")
    typer.echo(json.dumps(schemas[what](), indent=2))


@friendly
def compare(
    folders: list[Path] = typer.Argument(..., help="Two or more run folders; the first is the baseline"),
    out: Path = typer.Option(Path("reports/comparison.html"), "--out", "-o", help="Output HTML file"),
    label: list[str] = typer.Option([], help="A label per run, in order (default: the run labels)"),
    force: bool = typer.Option(False, help="Compare even when the workloads differ"),
) -> None:
    """Compare runs side by side: overlaid curves, differences with 95% bootstrap intervals.

    Prints the verdict (the largest significant changes, then the tally), per request class when
    the workload has several (docs/metrics.md, "Comparing runs"), and the page's path."""
    from loadgen.report.compare import compare_runs

    result = compare_runs(folders, out, labels=label or None, force=force)
    con = console()
    for line in result.lines:
        con.print(line, markup=False, highlight=False, soft_wrap=True)
    con.print(f"comparison: {result.path}")


@friendly
def profiles() -> None:
    """List the named load profiles, one line each."""
    from loadgen.load.profiles import list_profiles

    con = console()
    for pname, desc in list_profiles(search_dirs("profiles")):
        con.print(f"[bold]{pname:<18}[/bold] {desc}")


@friendly
def workloads() -> None:
    """List the named workloads."""
    from loadgen.workload.spec import list_workloads

    con = console()
    for name, desc in list_workloads(search_dirs("workloads")):
        con.print(f"[bold]{name:<12}[/bold] {desc}")


@workload_app.command("fit")
@friendly
def workload_fit(
    path: str = typer.Argument(
        ...,
        help="A dataset (ShareGPT, chat/prompt JSONL, CSV, Parquet), a trace (Mooncake JSONL, Azure or BurstGPT "
        "CSV) or an agent trace (loadgen's agent-trace JSONL, AIPerf session rows with --kind agent)",
    ),
    out: Path = typer.Option(..., "--out", "-o", help="The workload file to write, e.g. workloads/mine.toml"),
    name: str | None = typer.Option(None, help="The workload's name (default: the output file's name)"),
    bins: int = typer.Option(32, help="Histogram bins per length (quantile-spaced)"),
    kind: str = typer.Option("auto", help="auto, dataset, trace or agent"),
    tokenizer: str | None = typer.Option(
        None,
        help="A tokenizer.json or a Hugging Face model id in the local cache: exact dataset lengths (default: words)",
    ),
) -> None:
    """Write a workload with the joint (prompt, output) length histogram of real traffic
    (and, for a trace, its arrival rate and burstiness; for an agent trace, its [agent] table)."""
    from loadgen.workload.agent_fit import AgentFit
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
    if isinstance(fit, AgentFit):
        starts = f", {fit.rate:.3g} tasks/s, burstiness {fit.burstiness or 1.0:.3g}" if fit.rate is not None else ""
        console().print(
            f"{out}: {len(fit.trace.tasks):,} tasks, {fit.rows:,} calls, {float(fit.steps.mean()):.3g} steps a task, "
            f"fan-out probability {fit.fan_probability:.2f}{starts}"
        )
        return
    arrivals = f", {fit.rate:.3g} req/s, burstiness {fit.burstiness:.3g}" if fit.rate is not None else ""
    console().print(
        f"{out}: {fit.rows:,} requests, {len(fit.joint.cells)} histogram cells, log-length "
        f"correlation {fit.correlation:.2f}{arrivals}"
    )


@friendly
def demo(
    out: Path = typer.Option(Path("reports/demo"), help="Where the two run folders go"),
    seconds: float = typer.Option(7.0, help="Seconds per load level"),
    quiet: bool = typer.Option(False, help="No live display"),
) -> None:
    """Chunked prefill on vs off on a simulated H100: starts its own server on loopback."""
    from loadgen.orchestrate import run_demo

    run_demo(out, console(), seconds_per_level=seconds, live=not quiet and sys.stdout.isatty())


def version() -> None:
    """Print the version."""
    typer.echo(__version__)
