"""Console output with rich: the live progress line and the result tables.

Reads records and summaries only; computes nothing beyond running medians for the live
display (the reported numbers come from :mod:`loadgen.metrics`).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from pathlib import Path
from typing import Any, Callable, Sequence

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from loadgen.metrics.results import Distribution, LevelSummary, RunSummary, unit_label
from loadgen.records import RequestRecord

__all__ = [
    "LiveStats", "level_table", "metrics_table", "answer_lines", "token_source_line", "fmt_ms", "level_line",
    "show_summary",
]  # fmt: skip


def ms_text(v: Any) -> str:
    """``v`` milliseconds with its unit: ``12.5 ms``, or ``168.3s`` from 10 s up."""
    text = fmt_ms(v)
    return text if text.endswith("s") else f"{text} ms"


def fmt_ms(v: Any) -> str:
    if v is None:
        return "–"
    v = float(v)
    if v >= 10_000:
        return f"{v / 1000:.1f}s"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _num(v: Any, digits: int = 1) -> str:
    return "–" if v is None else f"{float(v):,.{digits}f}"


_TOK_WINDOW_S = 5.0  # the display's tokens/s is over this many seconds


class LiveStats:
    """Running counters for the progress display, fed one finished record at a time;
    ``label`` names what is running (the level)."""

    def __init__(self, in_flight: Callable[[], int], label: str = "") -> None:
        self._in_flight = in_flight
        self.label = label
        self.done = 0
        self.failed = 0
        self.tokens = 0
        self._tok_window: deque[tuple[float, int]] = deque()
        self._ttft: deque[float] = deque(maxlen=2000)
        self._itl: deque[float] = deque(maxlen=2000)
        self.started = time.monotonic()

    def add(self, rec: RequestRecord) -> None:
        if rec.ok:
            self.done += 1
        else:
            self.failed += 1
        n = rec.output_tokens
        self.tokens += n
        now = time.monotonic()
        w = self._tok_window
        w.append((now, n))
        while now - w[0][0] > _TOK_WINDOW_S:  # bounded without a display to prune it (--quiet)
            w.popleft()
        ev = rec.events
        if ev and rec.sent_ns:
            self._ttft.append((ev[0][0] - rec.sent_ns) / 1e6)
            if len(ev) > 1 and rec.output_tokens > 1:
                self._itl.append((ev[-1][0] - ev[0][0]) / 1e6 / max(rec.output_tokens - 1, 1))

    def _tokens_per_s(self) -> float:
        now = time.monotonic()
        w = self._tok_window
        while w and now - w[0][0] > _TOK_WINDOW_S:
            w.popleft()
        span = min(_TOK_WINDOW_S, now - self.started) or 1e-9
        return sum(n for _, n in w) / span

    @staticmethod
    def _median(xs: deque[float]) -> float | None:
        if not xs:
            return None
        s = sorted(xs)
        return s[len(s) // 2]

    def __rich__(self) -> Text:
        elapsed = time.monotonic() - self.started
        t = Text()
        t.append(f"{self.label}  ", style="bold cyan")
        t.append(f"done {self.done}", style="green")
        t.append("  failed ")
        t.append(str(self.failed), style="red" if self.failed else "")
        t.append(f"  in flight {self._in_flight()}  {self._tokens_per_s():,.0f} tok/s")
        t.append(f"  TTFT p50 {ms_text(self._median(self._ttft))}  TPOT p50 {ms_text(self._median(self._itl))}")
        t.append(f"  {elapsed:,.0f}s", style="dim")
        return t


_METRICS: tuple[tuple[str, str], ...] = (
    ("TTFT", "ttft_ms"),
    ("TTFT (queued)", "ttft_queued_ms"),
    ("ITL", "itl_ms"),
    ("TPOT", "tpot_ms"),
    ("E2E", "e2e_ms"),
    ("Inter-chunk", "inter_chunk_ms"),
)
_STATS = ("mean", "p50", "p90", "p99", "p99.9", "max")


def metrics_table(level: LevelSummary, title: str = "") -> Group:
    """One level in detail: latency percentiles, throughput, goodput, failures, client."""
    tab = Table(title=title or None, title_justify="left", header_style="bold")
    tab.add_column("metric (ms)")
    for col in _STATS:
        tab.add_column(col, justify="right")
    for name, key in _METRICS:
        d: Distribution = getattr(level, key)
        tab.add_row(name, *(fmt_ms(d.stat(c)) for c in _STATS))
    req, thr, good, client = level.requests, level.throughput, level.goodput, level.client
    lines = Text()
    lines.append(
        f"requests {req.ok} ok / {req.failed} failed in {_num(level.duration_s, 2)} s"
        f"   {_num(thr.requests_per_s, 2)} req/s   {_num(thr.output_tokens_per_s)} out tok/s"
        f"   {_num(thr.total_tokens_per_s)} total tok/s\n"
    )
    if good.slos:
        lines.append(
            f"SLO {', '.join(good.slos)}: attainment {100 * (good.slo_attainment or 0):.1f}%"
            f"   goodput {_num(good.requests_per_s, 2)} req/s\n"
        )
    for chk in good.checks:
        lines.append(f"check {chk.slo}: {ms_text(chk.value_ms)} {'pass' if chk.passed else 'FAIL'}\n")
    if req.by_error:
        errs = ", ".join(f"{k} {v}" for k, v in sorted(req.by_error.items()))
        lines.append(f"failures: {errs}\n", style="red")
    lines.append(
        f"client: {client.verdict}  (event-loop lag p99 {ms_text(client.loop_lag_ms.p99)})",
        style="bold red" if client.client_bound else "dim",
    )
    for note in client.notes or ():
        lines.append(f"\nnote: {note}", style="yellow")
    return Group(tab, lines)


def level_table(levels: Sequence[LevelSummary], title: str = "") -> Table:
    """One row per load level (the rising-load view)."""
    tab = Table(title=title or None, title_justify="left", header_style="bold")
    cols = ["load", "ok/fail", "req/s", "out tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50"]
    cols += ["attain", "goodput", "client"]
    for c in cols:
        tab.add_column(c, justify="right")
    for lv in levels:
        att = lv.goodput.slo_attainment
        verdict = lv.client.verdict
        tab.add_row(
            f"{lv.load.value} {lv.load.unit}",
            f"{lv.requests.ok}/{lv.requests.failed}",
            _num(lv.throughput.requests_per_s, 2),
            _num(lv.throughput.output_tokens_per_s, 0),
            fmt_ms(lv.ttft_ms.p50),
            fmt_ms(lv.ttft_ms.p99),
            fmt_ms(lv.itl_ms.p50),
            fmt_ms(lv.itl_ms.p99),
            fmt_ms(lv.tpot_ms.p50),
            "–" if att is None else f"{100 * att:.0f}%",
            _num(lv.goodput.requests_per_s, 2),
            Text(verdict, style="red" if verdict != "ok" else "green"),
        )
    return tab


def level_line(level: LevelSummary) -> str:
    """One line per finished level (printed when the live display is off)."""
    thr, req, att = level.throughput, level.requests, level.goodput.slo_attainment
    ttft, itl = level.ttft_ms.p50, level.itl_ms.p50
    return (
        f"level {level.load.value} {level.load.unit}: "
        f"{req.ok} ok / {req.failed} failed, "
        f"{thr.requests_per_s or 0:.2f} req/s, {thr.output_tokens_per_s or 0:.0f} out tok/s, "
        f"TTFT p50 {0 if ttft is None else ttft:.1f} ms, ITL p50 {0 if itl is None else itl:.2f} ms, "
        f"attainment {'–' if att is None else f'{100 * att:.0f}%'}"
    )


def answer_lines(summary: RunSummary) -> list[str]:
    """The capacity and knee lines printed under the level table (and used in reports)."""
    out: list[str] = []
    cap = summary.capacity
    if cap is not None and cap.slos:
        unit = unit_label(cap.mode)
        slos = ", ".join(cap.slos)
        tgt = f"{100 * cap.target:.0f}%"
        if cap.status == "ok" and cap.between is not None and cap.value is not None:
            lo, hi = cap.between
            out.append(f"capacity at {slos} ({tgt} attainment): {cap.value:.3g} {unit} (between {lo:g} and {hi:g})")
        elif cap.status == "not_reached":
            out.append(f"capacity at {slos}: not reached — every level met {tgt} (at least {cap.value:g} {unit})")
        else:
            out.append(f"capacity at {slos}: never met — even the lowest level missed {tgt} attainment")
    sat = summary.saturation
    if sat is not None:
        if sat.found:
            out.append(
                f"saturation (knee) at {sat.load:g} {unit_label(sat.mode)}: throughput "
                f"{100 * (sat.throughput_gain or 0):+.0f}% while {sat.metric} {100 * (sat.latency_growth or 0):+.0f}%"
            )
        else:
            out.append("saturation: no knee within the levels run")
    return out


# how the output tokens were counted (RequestRecord.token_source), for a reader judging them
_TOKEN_SOURCES = {
    "usage_delta": "from the server's usage on every event (exact)",
    "events_corrected": "counted one per event, scaled to the server's final usage.completion_tokens",
    "events": "counted one per event (the server streamed no usage; exact when each event holds one token)",
    "usage_rejected": "counted one per event (the server's usage was not a count >= 0, or more than it streamed)",
}


def token_source_line(levels: Sequence[LevelSummary], prefix: str = "output tokens ") -> str:
    """How the output tokens of the successful requests were counted, in words ("" if none)."""
    counts: Counter[str] = Counter()
    for lv in levels:
        counts.update(lv.events.token_source)
    total = sum(counts.values())
    parts = [
        _TOKEN_SOURCES.get(src, f"counted as {src!r}") + ("" if n == total else f" for {n} of {total} requests")
        for src, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if n > 0
    ]  # fmt: skip
    return prefix + "; ".join(parts) if parts else ""


def _with_unit(v: Any) -> str:
    text = fmt_ms(v)
    return text if text == "–" or text.endswith("s") else f"{text} ms"


def session_lines(levels: Sequence[LevelSummary]) -> list[str]:
    """Per level with sessions or reasoning, one line each: sessions and TTFT p50 by turn
    (the first turns and the last), reasoning's time to first answer and token split."""
    lines = []
    multi = len(levels) > 1
    for lv in levels:
        where = f"{lv.load.value} {lv.load.unit}: " if multi else ""
        if lv.sessions is not None and lv.by_turn:
            turns = sorted(lv.by_turn, key=int)
            shown = turns if len(turns) <= 6 else [*turns[:4], turns[-1]]
            ttft = " · ".join(f"{t}: {_with_unit(lv.by_turn[t].ttft_ms.p50)}" for t in shown)
            lines.append(f"{where}sessions {lv.sessions.sessions} ({lv.sessions.completed} completed); "
                         f"TTFT p50 by turn {ttft}")  # fmt: skip
        if lv.reasoning is not None:
            r = lv.reasoning
            lines.append(f"{where}reasoning in {r.requests} answers: first answer token p50 "
                         f"{_with_unit(r.time_to_first_answer_ms.p50)} (TTFT p50 {_with_unit(lv.ttft_ms.p50)}); tokens p50 "
                         f"{_num(r.reasoning_tokens.p50, 0)} reasoning, {_num(r.answer_tokens.p50, 0)} answer")  # fmt: skip
    return lines


def show_summary(summary: RunSummary, console: Console, folder: Path) -> None:
    """The end-of-run view: one level's table or the level table with the answers."""
    levels = summary.levels
    if len(levels) == 1:
        lv = levels[0]
        console.print(metrics_table(lv, title=f"Results — {lv.load.value} {lv.load.unit}"))
    elif levels:
        console.print(level_table(levels, title="Results per load level"))
        for line in answer_lines(summary):
            console.print(line)
    for line in session_lines(levels):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    tokens = token_source_line(levels)
    if tokens:
        console.print(tokens, style="dim", highlight=False, markup=False, soft_wrap=True)
    if summary.stopped:
        console.print(f"[yellow]stopped early: {summary.stopped}[/yellow]")
    if summary.interrupted:
        console.print("[yellow]interrupted: the summary covers the requests that finished[/yellow]")
    console.print(f"[dim]run folder: {folder}[/dim]")
