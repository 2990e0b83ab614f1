"""Console output with rich: the live progress line and the result tables.

Reads records and summaries only; computes nothing beyond running medians for the live
display (the reported numbers come from :mod:`loadgen.metrics`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from loadgen.metrics.catalog import Metric, metrics
from loadgen.metrics.results import Distribution, LevelSummary, RunSummary, StatInterval, unit_label
from loadgen.report.live import LiveStats, fmt_latency, fmt_ms, level_heading
from loadgen.report.page import fmt
from loadgen.report.task_lines import task_lines
from loadgen.report.verdict_lines import attainment_confidence, capacity_interval_line, mlperf_line, steady_line
from loadgen.report.window_lines import rate_window_line

__all__ = [
    "LiveStats",
    "answer_lines",
    "client_line",
    "fmt_latency",
    "fmt_ms",
    "interval_lines",
    "level_heading",
    "level_line",
    "level_notes",
    "level_table",
    "metrics_table",
    "schedule_line",
    "show_summary",
    "token_source_line",
    "with_pm",
]


def _num(v: Any, digits: int = 1) -> str:
    return "–" if v is None else f"{float(v):,.{digits}f}"


def _shown(level: LevelSummary) -> list[tuple[Metric, Distribution]]:
    """The catalogue's metrics with a console label that ``level`` has, with their
    distributions (a summary written before a metric was registered lacks it)."""
    out = []
    for m in metrics():
        if m.console is not None:
            try:
                out.append((m, level.dist(m.name)))
            except KeyError:
                continue
    return out


_STATS = ("mean", "p50", "p90", "p99", "p99.9", "max")
_DOCUMENTS = frozenset({"rerank", "score"})  # APIs whose inputs are documents


def inputs_noun(api: str) -> str:
    """What a non-streamed API's inputs are called: ``documents`` (rerank, score) or ``inputs``."""
    return "documents" if api in _DOCUMENTS else "inputs"


def answers_line(level: LevelSummary, api: str = "") -> str:
    """A non-streamed API's level: requests, inputs and input tokens per second ("" for others)."""
    ns = level.non_streamed
    if ns is None:
        return ""
    noun = inputs_noun(api)
    return (
        f"{_num(ns.inputs_per_s)} {noun}/s   {_num(ns.input_tokens_per_s)} input tok/s   "
        f"{_num(ns.inputs.mean)} {noun}/request"
    )


UNBOUNDED = "—"
"""Shown instead of a value whose interval the data cannot bound (the reason is printed below)."""


def _pct(rel: float) -> str:
    return f"{100 * rel:.0f}%" if rel >= 0.01 else f"{100 * rel:.1f}%"


def with_pm(text: str, value: float | None, iv: StatInterval | None) -> str:
    """``text`` (the formatted ``value``) with its interval: ``±6%`` (the larger side of
    the interval, relative to the value) up to ±100%; wider, the bounds themselves
    (``24.9 ms [0.51, 413]``, by the pages' :func:`~loadgen.report.page.fmt`: a percentage over 100 reads as noise); ``±—`` when the data
    cannot bound it (the value is still shown; the reason is printed once, below); ``text``
    alone without an interval."""
    if iv is None or value is None:
        return text
    if not iv.bounded:
        return f"{text} ±{UNBOUNDED}"
    rel = iv.relative_half_width(value)
    if rel is None:
        return text
    if rel > 1 and iv.low is not None and iv.high is not None:
        return f"{text} [{fmt(iv.low)}, {fmt(iv.high)}]"
    return f"{text} ±{_pct(rel)}"


def _dist_cell(d: Distribution, stat: str, fmt: Any = fmt_latency) -> str:
    value = d.stat(stat)
    return with_pm(fmt(value), value, (d.intervals or {}).get(stat))


def n_eff_text(level: LevelSummary) -> str:
    """``"n_eff 180 of 200"``: the effective sample size of the level's TTFT series (the
    requests in send order; their mean's interval), "" without intervals."""
    iv = (level.ttft_ms.intervals or {}).get("mean")
    return "" if iv is None else f"n_eff {iv.n_eff:.0f} of {level.ttft_ms.count}"


def interval_lines(level: LevelSummary, stats: Sequence[str] = ("mean", "p50", "p90", "p99", "p99.9")) -> list[str]:
    """Under a level's numbers: the confidence and ``n_eff``, and which of the ``stats``
    shown with ``±—`` have no interval, with one reason ([] without intervals)."""
    neff = n_eff_text(level)
    if not neff:
        return []
    conf = (level.ttft_ms.intervals or {})["mean"].confidence  # there is one: n_eff_text found it
    out = [
        f"±: {100 * conf:g}% intervals (the larger side, relative; wider than the value: [low, high]); "
        f"{neff} requests (TTFT, send order)"
    ]
    which, reasons = [], []
    for m, d in _shown(level):  # those with intervals: TTFT, ITL, TPOT, E2E
        ivs = d.intervals or {}
        bad = [s for s in stats if s in ivs and not ivs[s].bounded]
        if bad:
            which.append(f"{m.console} {', '.join(bad)}")
            reasons.append(f"{bad[-1]}: {ivs[bad[-1]].reason}" if bad[-1] == "mean" else str(ivs[bad[-1]].reason))
    if which:
        out.append(f"±{UNBOUNDED} not bounded: {'; '.join(which)} (too few effective values; {reasons[0]})")
    return out


def client_line(level: LevelSummary) -> str:
    """The client's verdict with the reasons summary.json gives for it (and the loop lag)."""
    client = level.client
    lag = f"event-loop lag p99 {fmt_latency(client.loop_lag_ms.p99)}"
    if client.client_bound and client.reasons:
        return f"client-bound: {'; '.join(client.reasons)}"
    return f"client: {client.verdict} ({lag})"


def schedule_line(level: LevelSummary) -> str:
    """Open loop or trace replay: the sends that went out late or never ("" for a closed loop)."""
    sch = level.schedule
    if sch is None:
        return ""
    line = (
        f"sends: {sch.late} of {sch.scheduled} late (over {fmt_latency(sch.late_threshold_ms)}), {sch.dropped} dropped"
    )
    if sch.credit_wait_ms is not None and sch.credit_wait_ms.count:
        line += f"; waited for the in-flight cap p99 {fmt_latency(sch.credit_wait_ms.p99)}"
    return line


def metrics_table(level: LevelSummary, title: str = "", api: str = "") -> Group:
    """One level in detail: latency percentiles, throughput, goodput, failures, client
    (a non-streamed API's level: E2E only, and its inputs per second, named as ``api``'s)."""
    tab = Table(title=title or None, title_justify="left", header_style="bold")
    tab.add_column("latency")
    for col in _STATS:
        tab.add_column(col, justify="right")
    answered = level.non_streamed is not None
    for m, d in _shown(level):
        if answered and m.streamed_only:
            continue
        tab.add_row(m.console, *(_dist_cell(d, c) for c in _STATS))
    req, thr, good, client = level.requests, level.throughput, level.goodput, level.client
    lines = Text()
    tivs, givs = thr.intervals or {}, good.intervals or {}
    rps = with_pm(_num(thr.requests_per_s, 2), thr.requests_per_s, tivs.get("requests_per_s"))
    tps = with_pm(_num(thr.output_tokens_per_s), thr.output_tokens_per_s, tivs.get("output_tokens_per_s"))
    rates = answers_line(level, api) if answered else f"{tps} out tok/s   {_num(thr.total_tokens_per_s)} total tok/s"
    lines.append(
        f"requests {req.ok} ok / {req.failed} failed in {_num(level.duration_s, 2)} s   {rps} req/s   {rates}\n"
    )
    if rate_window_line(level):
        lines.append(rate_window_line(level) + "\n", style="dim")
    if answered:
        lines.append("one JSON answer per request (not streamed): no TTFT, ITL or TPOT\n", style="dim")
    sends, sch = schedule_line(level), level.schedule
    if sends:
        lines.append(sends + "\n", style="yellow" if sch is not None and (sch.late or sch.dropped) else "")
    if good.slos:
        att = givs.get("slo_attainment")
        span = "" if att is None or not att.bounded else f" [{100 * (att.low or 0):.1f}–{100 * (att.high or 0):.1f}%]"
        gps = with_pm(_num(good.requests_per_s, 2), good.requests_per_s, givs.get("requests_per_s"))
        lines.append(
            f"SLO {', '.join(good.slos)}: attainment {100 * (good.slo_attainment or 0):.1f}%{span}"
            f"   goodput {gps} req/s\n"
        )
    for line in interval_lines(level, _STATS):
        lines.append(line + "\n", style="dim")
    for chk in good.checks:
        lines.append(f"check {chk.slo}: {fmt_latency(chk.value_ms)} {'pass' if chk.passed else 'FAIL'}\n")
    if req.by_error:
        errs = ", ".join(f"{k} {v}" for k, v in sorted(req.by_error.items()))
        lines.append(f"failures: {errs}\n", style="red")
    if req.retried:
        lines.append(
            f"{req.retried} request(s) sent again on a new connection: the server closed a kept-alive "
            "connection before answering (docs/client.md)\n",
            style="yellow",
        )
    for text, style in ((steady_line(level), "bold red" if not level.stationary else "dim"), (mlperf_line(level), "")):
        if text:
            lines.append(text + "\n", style=style)
    lines.append(client_line(level), style="bold red" if client.client_bound else "dim")
    for note in client.notes or ():
        lines.append(f"\nnote: {note}", style="yellow")
    return Group(tab, lines)


def _latency_column(
    values: Sequence[float | None], intervals: Sequence[StatInterval | None] | None = None
) -> tuple[str, list[str]]:
    """A column of latencies in one unit: ``("ms", cells)``, or ``("s", cells)`` when one
    of them is 10 s or more; each cell with its interval (:func:`with_pm`) when given."""
    known = [v for v in values if v is not None]
    if known and max(known) >= 10_000:
        unit, cells = "s", ["–" if v is None else f"{v / 1000:,.1f}" for v in values]
    else:
        unit, cells = "ms", [fmt_ms(v) for v in values]
    ivs = intervals or [None] * len(values)
    return unit, [with_pm(c, v, iv) for c, v, iv in zip(cells, values, ivs)]


_LEVEL_LATENCIES = (
    ("TTFT p50", "ttft_ms", "p50"),
    ("TTFT p99", "ttft_ms", "p99"),
    ("ITL p50", "itl_ms", "p50"),
    ("ITL p99", "itl_ms", "p99"),
    ("TPOT p50", "tpot_ms", "p50"),
)


_ANSWER_LATENCIES = (("E2E p50", "e2e_ms", "p50"), ("E2E p90", "e2e_ms", "p90"), ("E2E p99", "e2e_ms", "p99"))


def level_table(levels: Sequence[LevelSummary], title: str = "", api: str = "") -> Table:
    """One row per load level (the rising-load view); every header names its unit (under
    the name), and a latency column is in seconds only when one of its cells is 10 s or more.
    Levels of a non-streamed API show E2E and their inputs (named as ``api``'s) per second."""
    tab = Table(title=title or None, title_justify="left", header_style="bold")
    columns: list[tuple[str, list[Any]]] = [
        ("load", [lv.load.label() for lv in levels]),
        ("requests\nok/failed", [f"{lv.requests.ok}/{lv.requests.failed}" for lv in levels]),
        ("\nreq/s", [_num(lv.throughput.requests_per_s, 2) for lv in levels]),
    ]
    answered = any(lv.non_streamed is not None for lv in levels)
    if answered:
        ns = [lv.non_streamed for lv in levels]
        columns.append((f"{inputs_noun(api)}\n/s", [_num(None if n is None else n.inputs_per_s) for n in ns]))
        columns.append(("input\ntok/s", [_num(None if n is None else n.input_tokens_per_s, 0) for n in ns]))
    else:
        columns.append(("out\ntok/s", [_num(lv.throughput.output_tokens_per_s, 0) for lv in levels]))
    for name, key, stat in _ANSWER_LATENCIES if answered else _LEVEL_LATENCIES:
        ivs = [(lv.dist(key).intervals or {}).get(stat) for lv in levels]
        unit, cells = _latency_column([lv.dist(key).stat(stat) for lv in levels], ivs)
        columns.append((f"{name}\n{unit}", cells))
    att = [lv.goodput.slo_attainment for lv in levels]
    columns.append(("attain\n%", ["–" if a is None else f"{100 * a:.0f}" for a in att]))
    columns.append(("goodput\nreq/s", [_num(lv.goodput.requests_per_s, 2) for lv in levels]))
    if any(n_eff_text(lv) for lv in levels):
        columns.append(("\nn_eff", [n_eff_text(lv).removeprefix("n_eff ").split(" ")[0] or "–" for lv in levels]))
    if any(lv.schedule is not None for lv in levels):
        columns.append(
            (
                "late\nsends",
                ["–" if lv.schedule is None else f"{lv.schedule.late}/{lv.schedule.scheduled}" for lv in levels],
            )
        )
    columns.append(
        ("client", [Text(lv.client.verdict, style="red" if lv.client.verdict != "ok" else "green") for lv in levels])
    )
    for header, _ in columns:
        tab.add_column(header, justify="right")
    for row in zip(*(cells for _, cells in columns)):
        tab.add_row(*row)
    return tab


def level_notes(levels: Sequence[LevelSummary]) -> list[str]:
    """Under the level table: why a level was client-bound or non-stationary, the late sends
    of rate levels, MLPerf's early-stopping verdicts, why a latency shown is :data:`UNBOUNDED`,
    and the level's notes (``client.notes``)."""
    out: list[str] = []
    for lv in levels:
        if lv.client.client_bound:
            out.append(f"{lv.load.label()}: {client_line(lv)}")
        out.extend(f"{lv.load.label()}: {line}" for line in (steady_line(lv), mlperf_line(lv)) if line)
        sch = lv.schedule
        if sch is not None and (sch.late or sch.dropped):
            out.append(f"{lv.load.label()}: {schedule_line(lv)}")
        shown = tuple(dict.fromkeys(s for _, _, s in _LEVEL_LATENCIES))
        out.extend(f"{lv.load.label()}: {line}" for line in interval_lines(lv, shown)[1:])
        out.extend(f"{lv.load.label()}: note: {note}" for note in lv.client.notes or ())
    return out


def level_line(level: LevelSummary) -> str:
    """One line per finished level (printed when the live display is off)."""
    thr, req, att = level.throughput, level.requests, level.goodput.slo_attainment
    sch = level.schedule
    late = "" if sch is None else f", {sch.late} of {sch.scheduled} sends late, {sch.dropped} dropped"
    neff = f", {n_eff_text(level)}" if n_eff_text(level) else ""
    ns = level.non_streamed
    if ns is not None:  # not streamed: no tokens out, no TTFT or ITL
        middle = (
            f"{thr.requests_per_s or 0:.2f} req/s, {ns.inputs_per_s or 0:.1f} inputs/s, "
            f"E2E p50 {_dist_cell(level.e2e_ms, 'p50')}, p99 {_dist_cell(level.e2e_ms, 'p99')}, "
        )
    else:
        middle = (
            f"{thr.requests_per_s or 0:.2f} req/s, {thr.output_tokens_per_s or 0:.0f} out tok/s, "
            f"TTFT p50 {_dist_cell(level.ttft_ms, 'p50')}, p99 {_dist_cell(level.ttft_ms, 'p99')}, "
            f"ITL p50 {_dist_cell(level.itl_ms, 'p50')}, "
        )
    if req.retried:  # the stale keep-alive race (docs/client.md): never hidden
        late += f", {req.retried} sent again on a new connection"
    return (
        f"level {level.load.label()}: "
        f"{req.ok} ok / {req.failed} failed, {middle}"
        f"attainment {'–' if att is None else f'{100 * att:.0f}%'}{neff}{late}"
        + ("" if not level.client.client_bound else f"; {client_line(level)}")
        + ("" if level.stopped is None else f"; stopped: {level.stopped}")
        + ("" if level.stationary else f"; {steady_line(level)}")
        + (f"\n  {mlperf_line(level)}" if level.mlperf else "")
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
        if cap.interval is not None:
            out.append(capacity_interval_line(cap, attainment_confidence(summary.levels)))
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
    ]
    return prefix + "; ".join(parts) if parts else ""


_with_unit = fmt_latency


def session_lines(levels: Sequence[LevelSummary]) -> list[str]:
    """Per level with sessions, reasoning or images, one line each: sessions and TTFT p50 by
    turn (the first turns and the last), reasoning's time to first answer and token split,
    images per request and prompt tokens as the server counted them beside the text's."""
    lines = []
    multi = len(levels) > 1
    for lv in levels:
        where = f"{lv.load.value} {lv.load.unit}: " if multi else ""
        if lv.sessions is not None and lv.by_turn:
            turns = sorted(lv.by_turn, key=int)
            shown = turns if len(turns) <= 6 else [*turns[:4], turns[-1]]
            ttft = " · ".join(f"{t}: {_with_unit(lv.by_turn[t].ttft_ms.p50)}" for t in shown)
            lines.append(
                f"{where}sessions {lv.sessions.sessions} ({lv.sessions.completed} completed); TTFT p50 by turn {ttft}"
            )
        if lv.reasoning is not None:
            r = lv.reasoning
            lines.append(
                f"{where}reasoning in {r.requests} answers: first answer token p50 "
                f"{_with_unit(r.time_to_first_answer_ms.p50)} (TTFT p50 {_with_unit(lv.ttft_ms.p50)}); tokens p50 "
                f"{_num(r.reasoning_tokens.p50, 0)} reasoning, {_num(r.answer_tokens.p50, 0)} answer"
            )
        if lv.images is not None:
            im = lv.images
            counted = "not reported" if im.prompt_tokens_reported is None else _num(im.prompt_tokens_reported, 0)
            lines.append(
                f"{where}images: {_num(im.images_per_request, 2)} a request ({_num(im.bytes_per_request / 1e3, 1)} kB); "
                f"prompt tokens mean {counted} as the server counted them (images included), "
                f"{_num(im.prompt_tokens_text, 0)} text tokens sent"
            )
        lines.extend(task_lines(lv, where))  # agentic levels
    return lines


def show_summary(summary: RunSummary, console: Console, folder: Path, api: str = "") -> None:
    """The end-of-run view: one level's table or the level table with the answers."""
    levels = summary.levels
    if len(levels) == 1:
        lv = levels[0]
        console.print(metrics_table(lv, title=f"Results — {lv.load.label()}", api=api))
    elif levels:
        console.print(level_table(levels, title="Results per load level", api=api))
        for line in level_notes(levels):
            console.print(line, style="yellow", highlight=False, markup=False, soft_wrap=True)
        for line in answer_lines(summary):
            console.print(line)
    for line in session_lines(levels):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    tokens = "" if all(lv.non_streamed is not None for lv in levels) else token_source_line(levels)
    if tokens:
        console.print(tokens, style="dim", highlight=False, markup=False, soft_wrap=True)
    if summary.stopped:
        console.print(f"[yellow]stopped early: {summary.stopped}[/yellow]")
    if summary.interrupted:
        console.print("[yellow]interrupted: the summary covers the requests that finished[/yellow]")
    console.print(f"[dim]run folder: {folder}[/dim]")
