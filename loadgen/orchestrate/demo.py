"""``loadgen demo``: chunked prefill on vs off, measured end to end, in about a minute.

Starts the reference server (simulated H100 running Llama-3.1-8B, at most
:data:`DEMO_MAX_SEQS` sequences at once) on a free loopback port twice — with chunked
prefill (a 2,048-token budget) and without — and drives each with the same seeded ``demo``
workload (chat requests plus a few 10k-14k-token prompts) at rising concurrency, with the
server's ``/metrics`` scraped. Without chunking a long prefill stalls every running decode
and the chat requests' ITL p99 jumps; the headline printed at the end is that gap.

docs/guide.md, "The demo", has what to look for, why the budget and the batch limit are
what they are, and why the reports declare no knee.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from loadgen.load.profiles import Profile, with_budget
from loadgen.metrics.results import LevelSummary, RunSummary
from loadgen.metrics.slo import parse_slo
from loadgen.numfmt import fmt, fmt_latency, fmt_ms, fmt_rel
from loadgen.orchestrate.config import RunConfig
from loadgen.orchestrate.execution import execute
from loadgen.paths import search_dirs
from loadgen.server.process import ServerProcess
from loadgen.workload.spec import load_workload

__all__ = ["DEMO_LEVELS", "run_demo"]

DEMO_LEVELS = [4.0, 8.0, 16.0, 32.0]
DEMO_MAX_SEQS = 8
CHUNK_BUDGET = 2048
CONFIGS = (
    ("chunked", ["--chunked-prefill", "--max-num-batched-tokens", str(CHUNK_BUDGET)]),
    ("unchunked", ["--no-chunked-prefill"]),
)


def _chat(level: LevelSummary, metric: str, stat: str) -> float | None:
    """A statistic of the level's chat requests (None when the level has none)."""
    cls = level.by_class.get("chat")
    return None if cls is None else getattr(cls, metric).stat(stat)


def run_demo(
    out: Path, console: Console, *, seconds_per_level: float = 7.0, live: bool = True
) -> dict[str, RunSummary]:
    """Run both configurations; return ``{name: summary}`` and print the headline."""
    workload = load_workload("demo", search_dirs("workloads"))
    profile = with_budget(
        Profile(
            name="demo",
            description="rising concurrency, duration-bound levels",
            levels=list(DEMO_LEVELS),
            trim=(0.1, 0.1),
        ),
        duration_s=seconds_per_level,
        warmup_requests=0,
    )
    results: dict[str, RunSummary] = {}
    for name, flags in CONFIGS:
        console.rule(f"[bold]{name}[/bold]: reference server, simulated H100 + Llama-3.1-8B, {' '.join(flags)}")
        server = ["--engine", "sim", "--gpu", "h100", "--model", "llama-3.1-8b", "--max-num-seqs", str(DEMO_MAX_SEQS)]
        with ServerProcess([*server, *flags]) as url:
            cfg = RunConfig(
                url=url,
                api="completions",
                workload=workload,
                profile=profile,
                out=out / name,
                slos=[parse_slo("ttft=2s"), parse_slo("tpot=40ms")],
                seed=0,
                label=f"demo-{name}",
                command=["loadgen", "demo"],
                live=live,
                scrape_metrics=True,  # its own server: the reports show its queue and KV cache
            )
            results[name] = execute(cfg, console).summary
    _headline(results, console)
    _reports(out, results, console)
    return results


def _headline(results: dict[str, RunSummary], console: Console) -> None:
    tab = Table(title="The lesson: chat-request ITL with and without chunked prefill (ms)", title_justify="left")
    tab.add_column("users", justify="right")
    cols = [("itl_ms", "p99", "ITL p99"), ("itl_ms", "max", "ITL max"), ("ttft_ms", "p99", "TTFT p99")]
    for _, _, title in cols:
        for name in results:
            tab.add_column(f"{title} {name}", justify="right")
    levels = {name: s.levels for name, s in results.items()}
    n = min(len(v) for v in levels.values())
    for i in range(n):
        row = [str(next(iter(levels.values()))[i].load.value)]
        for metric, stat, _ in cols:
            row += [fmt_ms(_chat(levels[name][i], metric, stat)) for name in results]
        tab.add_row(*row)
    console.print(tab)
    if {"chunked", "unchunked"} <= set(levels):
        worst = {name: max(_chat(lv, "itl_ms", "max") or 0 for lv in levels[name]) for name in levels}
        p99 = {name: max(_chat(lv, "itl_ms", "p99") or 0 for lv in levels[name]) for name in levels}
        console.print(
            f"Without chunked prefill a long prompt stalls every running decode for its whole prefill: "
            f"worst chat ITL {fmt_latency(worst['unchunked'])} (p99 up to {fmt_latency(p99['unchunked'])}). "
            f"With chunking a stall is one {CHUNK_BUDGET}-token step: worst {fmt_latency(worst['chunked'])} "
            f"(p99 up to {fmt_latency(p99['chunked'])}) — more, shorter stalls; the long prompts' TTFT pays."
        )
    for name, s in results.items():
        knee = s.saturation
        cap = s.capacity
        knee_text = (
            (
                f"saturates at {fmt(knee.load)} users (throughput {fmt_rel(knee.throughput_gain or 0, signed=True)}, "
                f"TTFT p99 {fmt_rel(knee.latency_growth or 0, signed=True)})"
            )
            if knee and knee.found
            else "no knee"
        )
        cap_text = (
            f"capacity {fmt(cap.value)} users at the SLOs"
            if cap and cap.status == "ok" and cap.value
            else f"capacity {cap.status if cap else 'unknown'}"
        )
        console.print(f"{name}: {knee_text}; {cap_text} (at most {DEMO_MAX_SEQS} sequences run at once).")


def _reports(out: Path, results: dict[str, RunSummary], console: Console) -> None:
    """Write the HTML reports and the comparison when the report module is present."""
    try:
        from loadgen.report.compare import render_comparison
        from loadgen.report.html import render_run_report
    except ImportError:
        return
    for name in results:
        path = render_run_report(out / name)
        console.print(f"[dim]report: {path}[/dim]")
    cmp = render_comparison([out / name for name in results], out / "comparison.html", labels=list(results))
    console.print(f"[dim]comparison: {cmp}[/dim]")
