"""The run report: one self-contained HTML page from a run folder.

:func:`render_run_report` reads ``summary.json``, ``records.jsonl``, ``run.json`` and
``server_metrics.jsonl`` (when scraped) and writes ``report.html`` with these sections
(each a ``<section id=...>``): ``headline`` (the answer: capacity at the SLO and its
interval, knee, peak goodput; the client verdict), ``levels`` (the level table),
``latency`` (TTFT, ITL, TPOT, E2E against load), ``throughput`` (throughput, goodput and
SLO attainment against load, the capacity interval shaded), ``distributions`` (CDFs per level), ``timeline`` (the requests of one level,
phase by phase), ``tasks`` (agentic levels: the task timeline, TTFT by step and by context;
:mod:`loadgen.report.task_figures`), ``itl-time`` (ITL over time, long prompts marked), ``tokens`` (tokens
per event, coalesced reads, output lengths, how tokens were counted), ``client`` (client
health), ``failures`` and ``server`` (scraped server metrics). Numbers come from the
summary; nothing here computes a reported metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadgen.metrics.results import LevelSummary, RunSummary, unit_label
from loadgen.numfmt import fmt_rel, fmt_share
from loadgen.report import figures as F
from loadgen.report import request_figures as R
from loadgen.report import server_figures as S
from loadgen.report import time_figures as T
from loadgen.report.answer_html import answered, answers_table_html, verdict_html
from loadgen.report.console import fmt_ms, inputs_noun, session_lines, token_source_line
from loadgen.report.error_bars import interval_note, pm_cell
from loadgen.report.page import Page, esc, fmt, write_page
from loadgen.report.rundata import SERVER_METRICS_FILE, RunData, load_run
from loadgen.report.task_figures import task_section
from loadgen.report.verdict_lines import (
    attainment_confidence,
    capacity_interval_range,
    capacity_words,
    level_verdict_cells,
    mlperf_line,
    mlperf_undecided_line,
    steady_line,
)
from loadgen.report.window_lines import held_text, window_note
from loadgen.runinfo import Calibration, RunInfo

__all__ = ["SECTIONS", "answer_cards", "build_run_page", "client_banner", "level_table_html", "render_run_report"]

SECTIONS: tuple[str, ...] = (
    "headline",
    "levels",
    "latency",
    "throughput",
    "distributions",
    "timeline",
    "itl-time",
    "tokens",
    "client",
    "failures",
    "server",
)


def _card(key: str, value: str, sub: str = "", card_id: str = "", extra: str = "") -> str:
    ident = f' id="{card_id}"' if card_id else ""
    return (
        f'<div class="card"{ident}><div class="k">{esc(key)}</div><div class="v">{value}</div>'
        f'<div class="s">{sub}</div>{extra}</div>'
    )


def _capacity_interval(summary: RunSummary) -> str:
    """The capacity card's interval line ("" when the summary has no interval)."""
    cap = summary.capacity
    span = None if cap is None else capacity_interval_range(cap)
    if span is None:
        return ""
    conf = attainment_confidence(summary.levels)
    what = "interval" if conf is None else f"{100 * conf:g}% interval"
    text = f"{what} {span}" if span else f"{what}: no level decided either side"
    tip = "loads shown to pass and to fail the attainment target by the levels' attainment intervals"
    return f'<div class="s" id="capacity-interval" title="{esc(tip)}">{esc(text)}</div>'


def _peak(levels: Sequence[LevelSummary], path: str) -> tuple[LevelSummary, float] | None:
    """The level with the highest value at ``path`` (first on a tie) and that value."""
    best: tuple[LevelSummary, float] | None = None
    for lv in levels:
        v = lv.metric(path)
        if v is not None and (best is None or v > best[1]):
            best = (lv, v)
    return best


def answer_cards(summary: RunSummary) -> str:
    """The headline's answer: capacity at the SLO, the knee, peak goodput and throughput."""
    levels = summary.levels
    cap = summary.capacity
    cards = []
    words = capacity_words(summary)
    if cap is not None:
        if words is None:
            value, sub = "no SLO given", "pass <code>--slo</code> (e.g. ttft=500ms) to find the capacity"
        else:
            value = esc(words.value)
            head = f"{esc(', '.join(cap.slos))} for {fmt_share(cap.target)} of requests"
            if cap.status == "ok" and cap.between is not None:
                head += f"; between {fmt(cap.between[0])} and {fmt(cap.between[1])} {unit_label(cap.mode)}"
            sub = head
        extra = _capacity_interval(summary)
        if words is not None:
            notes = "".join(f'<div class="s capacity-note">{esc(n)}</div>' for n in words.notes)
            extra = f'<div class="s" id="capacity-verdict">{esc(words.verdict)}</div>{extra}{notes}'
        cards.append(_card("capacity at the SLO", value, sub, "answer-capacity", extra))
    sat = summary.saturation
    if sat is not None:
        if sat.found:
            value = f"{fmt(sat.load)} {unit_label(sat.mode)}"
            sub = (
                f"throughput {fmt_rel(sat.throughput_gain or 0, signed=True)} while "
                f"{esc(sat.metric)} {fmt_rel(sat.latency_growth or 0, signed=True)}"
            )
        else:
            value, sub = "none", "no knee within the levels run"
        cards.append(_card("saturation (knee)", value, sub, "answer-knee"))
    peak = _peak(levels, "goodput.requests_per_s")
    if peak is not None:
        lv, g = peak
        good_slos = lv.goodput.slos
        what = (
            f"requests/s meeting {esc(', '.join(good_slos))}" if good_slos else "successful requests/s (no SLO given)"
        )
        cards.append(
            _card(
                "peak goodput", f"{fmt(g)} req/s", f"{what}, at {esc(lv.load.label())}{held_text(lv)}", "answer-goodput"
            )
        )
    peak = _peak(levels, "throughput.output_tokens_per_s")
    if peak is not None:
        lv, t = peak
        cards.append(
            _card(
                "peak output throughput",
                f"{fmt(t)} tok/s",
                f"at {esc(lv.load.label())}{held_text(lv)}",
                "answer-throughput",
            )
        )
    return f'<div class="cards">{"".join(cards)}</div>'


def steady_banner(levels: Sequence[LevelSummary]) -> str:
    """A warning banner listing the non-stationary levels and their trends ("" when none)."""
    bad = [(i, lv) for i, lv in enumerate(levels) if not lv.stationary]
    if not bad:
        return ""
    items = "".join(f"<li>level {i + 1} ({esc(lv.load.label())}): {esc(steady_line(lv))}</li>" for i, lv in bad)
    return (
        f'<div class="banner warn" id="steady-verdict">⚠ Non-stationary: at {len(bad)} of {len(levels)} levels '
        "latency kept trending (a growing queue: the server was overloaded), so their numbers depend on how "
        f"long they ran.<ul>{items}</ul></div>"
    )


def mlperf_notes(levels: Sequence[LevelSummary]) -> str:
    """MLPerf's early-stopping verdicts that decide (met or failed), one item per level, and
    one line for the checks that decide nothing ("" when no level has a check)."""
    items = "".join(
        f"<li>level {i + 1} ({esc(lv.load.label())}): {esc(mlperf_line(lv))}</li>"
        for i, lv in enumerate(levels)
        if mlperf_line(lv)
    )
    undecided = mlperf_undecided_line(levels)
    if not items:
        return f'<div class="banner" id="mlperf-verdict">{esc(undecided)}</div>' if undecided else ""
    rest = f"<div>{esc(undecided)}</div>" if undecided else ""
    return f'<div class="banner" id="mlperf-verdict">MLPerf early stopping<ul>{items}</ul>{rest}</div>'


def client_banner(levels: Sequence[LevelSummary]) -> str:
    """A warning banner listing client-bound levels and why, or a quiet all-clear."""
    bound = [(i, lv) for i, lv in enumerate(levels) if lv.client.client_bound]
    if not bound:
        return (
            '<div class="banner ok" id="client-verdict">Client verdict: ok at every level — the load generator '
            "kept up (event-loop lag and send lateness within bounds).</div>"
        )
    items = "".join(
        f"<li>level {i + 1} ({esc(lv.load.label())}): {esc('; '.join(lv.client.reasons))}</li>" for i, lv in bound
    )
    return (
        f'<div class="banner warn" id="client-verdict">⚠ Client-bound: at {len(bound)} of {len(levels)} levels '
        "the load generator itself lagged, so latencies there may be inflated by the client, not the server. "
        f"Use more worker processes or a faster machine.<ul>{items}</ul></div>"
    )


def level_table_html(levels: Sequence[LevelSummary], verdicts: Sequence[str] = ()) -> str:
    """One row per level, the console table's columns (and open-loop lateness); ``verdicts``
    (one per level, :func:`~loadgen.report.verdict_lines.level_verdict_cells`) in a column
    after the attainment when given."""
    has_sched = any(lv.schedule is not None for lv in levels)
    head = [
        "#",
        "load",
        "ok/fail",
        "req/s",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "ITL p99",
        "TPOT p50",
        "E2E p50",
        "attain",
        "goodput",
        "client",
    ]
    has_verdict = any(verdicts)
    if has_verdict:
        head.insert(head.index("attain") + 1, "SLO verdict")
    if has_sched:
        head += ["late/dropped"]
    has_iv = any(lv.ttft_ms.intervals for lv in levels)
    if has_iv:  # after "TTFT p99", "out tok/s": their intervals (summaries with intervals only)
        head.insert(head.index("TTFT p99") + 1, "TTFT p99 ±")
        head.insert(head.index("out tok/s") + 1, "out tok/s ±")
    rows = []
    for i, lv in enumerate(levels):
        req, thr, good, verdict = lv.requests, lv.throughput, lv.goodput, lv.client.verdict
        cells = [
            str(i + 1),
            esc(lv.load.label()),
            f"{req.ok}/{req.failed}",
            fmt(thr.requests_per_s),
            fmt(thr.output_tokens_per_s),
            fmt_ms(lv.ttft_ms.p50),
            fmt_ms(lv.ttft_ms.p99),
            fmt_ms(lv.itl_ms.p50),
            fmt_ms(lv.itl_ms.p99),
            fmt_ms(lv.tpot_ms.p50),
            fmt_ms(lv.e2e_ms.p50),
            fmt_share(good.slo_attainment),
            fmt(good.requests_per_s),
            f'<span class="{"bad" if verdict != "ok" else "good"}">{esc(verdict)}</span>',
        ]
        if has_verdict:
            cells.insert(12, verdict_html(verdicts[i]))
        if has_sched:
            sch = lv.schedule
            cells.append(f"{sch.late}/{sch.dropped}" if sch is not None else "–")
        if has_iv:
            cells.insert(7, pm_cell(lv.ttft_ms.p99, (lv.ttft_ms.intervals or {}).get("p99")))
            cells.insert(5, pm_cell(thr.output_tokens_per_s, (thr.intervals or {}).get("output_tokens_per_s")))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    ths = "".join(f"<th>{esc(h)}</th>" for h in head)
    return (
        f'<div class="scroll"><table id="level-table"><thead><tr>{ths}</tr></thead><tbody>{"".join(rows)}'
        '</tbody></table></div><p class="note">Latencies in ms (TTFT and E2E from the send; the queue-inclusive '
        f"values are in summary.json). {esc(window_note(levels))} Goodput = requests meeting every SLO per second.</p>"
        + interval_note(levels)
    )


_CALIBRATED_FROM = {
    "stream": "the server's streamed usage",
    "non-stream": "non-streamed answers' usage (the server streams none)",
}


def _calibration(calib: Calibration | None) -> str | None:
    """run.json's prompt calibration in words (None when the run recorded none)."""
    if calib is None:
        return None
    if not calib.calibrated:
        return f"not calibrated: {calib.reason or 'turned off'}"
    method = calib.method or "stream"  # runs from before the non-streamed fallback
    where = _CALIBRATED_FROM.get(method, method)
    slope, overhead = calib.tokens_per_word, calib.overhead_tokens
    fit = ""
    if slope is not None and overhead is not None:
        fit = f": {slope:.2f} tokens per word + {overhead:.2f} template tokens"
    return f"calibrated from {where}{fit}"


def _meta(data: RunData) -> str:
    run = data.run or RunInfo()  # no run.json: only what the summary and records say
    target, wl, machine = run.target, run.workload, run.machine
    pairs = [
        ("target", target and target.url),
        ("model", target and target.model),
        ("API", target and target.api),
        ("workload", wl and " — ".join(x for x in (wl.name, wl.description) if x)),
        ("profile", data.run and " — ".join(x for x in (run.profile.name, run.profile.description) if x)),
        ("SLOs", ", ".join(run.slos) or "none"),
        ("prompt lengths", _calibration(run.calibration)),
        ("output tokens", "" if answered(data.levels) else token_source_line(data.levels, prefix="")),
        ("started", run.started_at),
        ("label", run.label),
        ("command", " ".join(run.command)),
        (
            "machine",
            machine and " / ".join(str(x) for x in (machine.hostname, machine.platform, f"{machine.cpus} CPUs") if x),
        ),
        ("run folder", str(data.folder)),
    ]
    return '<dl class="kv">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs if v) + "</dl>"


def _headline(data: RunData) -> str:
    s = data.summary
    notes = []
    if s.stopped:
        notes.append(f'<div class="banner warn">Stopped early: {esc(s.stopped)}</div>')
    if s.interrupted:
        notes.append('<div class="banner warn">Interrupted: the report covers the requests that finished.</div>')
    for lv in data.levels:  # a level whose warm-up used up its duration says so (its reason)
        if not lv.requests.total and lv.stopped:
            notes.append(f'<div class="banner warn">Level {esc(lv.load.label())}: {esc(lv.stopped)}</div>')
    verdicts = client_banner(data.levels) + steady_banner(data.levels) + mlperf_notes(data.levels)
    return answer_cards(s) + verdicts + "".join(notes) + _meta(data)


def _errors_table(data: RunData) -> str:
    if not data.errors:
        return ""
    rows = []
    for kind, counter in sorted(data.errors.items()):
        for msg, n in counter.most_common(5):
            rows.append(f'<tr><td class="l">{esc(kind)}</td><td>{n}</td><td class="l">{esc(msg) or "–"}</td></tr>')
    return (
        '<div class="scroll"><table id="error-messages"><thead><tr><th class="l">kind</th><th>count</th>'
        f'<th class="l">message (most frequent, first 200 characters)</th></tr></thead><tbody>{"".join(rows)}'
        "</tbody></table></div>"
    )


def _maybe(page: Page, fig_id: str, fig: dict[str, Any] | None, empty: str, height: int = 420) -> str:
    return page.figure(fig_id, fig, height) if fig is not None else f'<p class="note">{esc(empty)}</p>'


def _server_latencies(data: RunData) -> str:
    """The server's own latency means per level (vLLM's histograms, scraped), when scraped."""
    levels = S.server_latency_means(data)
    if not levels:
        return ""
    head = "".join(f"<th>server {esc(label)} mean</th>" for _, label in S.SERVER_LATENCIES)
    rows = "".join(
        f"<tr><td>{esc(level)}</td>"
        + "".join(f"<td>{fmt_ms(means[label])}</td>" for _, label in S.SERVER_LATENCIES)
        + "</tr>"
        for level, means in levels
    )
    note = (
        '<p class="note">The server\'s own latency means per level, from its scraped histograms '
        "(vLLM's <code>_sum</code> and <code>_count</code>): the change over the level, from the last scrape "
        "before its first request to the first after its last answer, sum over count. The client's TTFT "
        "less the server's is what the network and the client add.</p>"
    )
    return (
        note + f'<table id="server-latency"><thead><tr><th>level</th>{head}</tr></thead><tbody>{rows}</tbody></table>'
    )


def _gpu(page: Page, data: RunData) -> str:
    """GPU telemetry (DCGM names) and each level's energy per output token, when scraped."""
    fig = S.gpu_telemetry(data)
    if fig is None:
        return ""
    rows = "".join(
        f"<tr><td>{esc(label)}</td><td>{fmt(w)}</td><td>{fmt(j)}</td></tr>" for label, w, j in S.level_energy(data)
    )
    table = (
        (
            '<table id="energy"><thead><tr><th>level</th><th>mean power (W)</th><th>energy per output token (J)'
            f"</th></tr></thead><tbody>{rows}</tbody></table>"
        )
        if rows
        else ""
    )
    note = (
        '<p class="note">GPU telemetry scraped under NVIDIA DCGM exporter names (the reference server\'s '
        "simulated GPUs model power between idle and board power). Energy per token: the power samples "
        "integrated over the part of each level they cover, divided by the output tokens streamed then.</p>"
    )
    return note + page.figure("fig-gpu", fig, 380) + table


def _token_source(levels: Sequence[LevelSummary]) -> str:
    line = token_source_line(levels)
    return f'<p class="note" id="token-source">{esc(line[:1].upper() + line[1:])}.</p>' if line else ""


def build_run_page(data: RunData) -> Page:
    """Assemble the run report's page (see the module docstring for the sections)."""
    s = data.summary
    levels = data.levels
    run = data.run or RunInfo()
    target, wl = run.target, run.workload
    label = run.label or data.folder.name
    page = Page(
        title=f"loadgen report — {label}",
        subtitle=esc(
            " · ".join(
                str(x)
                for x in (
                    target and target.model,
                    target and target.url,
                    wl and wl.name,
                    data.run and run.profile.name,
                    run.started_at,
                )
                if x
            )
        ),
    )
    page.section("headline", "Answer", _headline(data))
    turns = "".join(f'<p class="note session-line">{esc(line)}</p>' for line in session_lines(levels))
    pooled = answered(levels)  # a non-streamed API: no tokens streamed, no TTFT or ITL
    table = (
        answers_table_html(levels, target.api if target else "")
        if pooled
        else level_table_html(levels, level_verdict_cells(s))
    )
    page.section("levels", "Levels", table + turns)
    _mode, idx = F.plotted_levels(levels)
    other = len(levels) - len(idx)
    skipped = f" {other} level(s) of another load mode are in the table only." if other else ""
    page.section(
        "latency",
        "Latency vs load",
        f'<p class="note">p50 solid (circles), p90 dashed (squares), p99 dotted (diamonds), with shaded bands, per level; SLO limits dashed red.{esc(skipped)}</p>'
        + _maybe(page, "fig-latency", F.latency_vs_load(levels), "No level to plot.", 640),
    )
    noun = inputs_noun(target.api if target else "")
    fig = F.throughput_vs_load(levels, s.capacity, s.saturation, noun)
    thr = _maybe(page, "fig-throughput", fig, "No level to plot.")
    win = F.windows_over_time(levels)
    if win is not None:
        thr += '<p class="note">Over time, per window of the level:</p>' + page.figure("fig-windows", win, 600)
    page.section("throughput", "Throughput, goodput and SLO attainment vs load", thr)
    page.section(
        "distributions",
        "Distributions per level",
        '<p class="note">Empirical CDFs of successful requests (log x); click a level in the legend to hide it.</p>'
        + _maybe(page, "fig-cdf", R.cdfs(data), "No successful request to plot."),
    )
    page.section(
        "timeline",
        "Request timeline",
        (
            '<p class="note">Each request is a bar: waiting to be sent (grey), sent to its answer (orange); '
            "failed requests in red. Pick the level in the menu.</p>"
            if pooled
            else '<p class="note">Each request is a bar: waiting to be sent (grey), prefill — sent to first token '
            "(orange), decode — first to last token (blue); failed requests in red. Pick the level in the menu."
            "</p>"
        )
        + _maybe(page, "fig-timeline", R.timeline(data), "No request was sent.", 560),
    )
    task_section(page, data)  # agentic levels: the task timeline, TTFT by step
    if pooled:  # the sections about tokens and inter-token gaps have nothing to show
        return _rest(page, data)
    itl_fig, itl_note = T.itl_over_time(data)
    page.section(
        "itl-time",
        "ITL over time",
        f'<p class="note">Per-token ITL p50, p99 and max per time bin over the whole run (levels shaded). '
        f"{esc(itl_note)}</p>" + _maybe(page, "fig-itl-time", itl_fig, "No ITL samples."),
    )
    page.section(
        "tokens",
        "Tokens per event and output lengths",
        '<p class="note">Several tokens in one SSE event, or several events in one socket read (coalesced), '
        "hide inter-token gaps; a server that stops short of max_tokens shifts TPOT and throughput.</p>"
        + _token_source(levels)
        + _maybe(page, "fig-tokens", R.tokens_and_lengths(data), "No level."),
    )
    return _rest(page, data)


def _rest(page: Page, data: RunData) -> Page:
    """The report's sections after the tokens': client health, failures, server metrics."""
    levels = data.levels
    lag_note = (
        ""
        if any(lv.client.loop_lag_over_time for lv in levels)
        else " Event-loop lag is summarised per level (the summary holds no lag time series)."
    )
    page.section(
        "client",
        "Client health",
        f'<p class="note">Send lateness of each request over time (how late the client sent it).{esc(lag_note)}</p>'
        + _maybe(page, "fig-lateness", T.lateness_over_time(data), "No request was sent.", 380)
        + _maybe(page, "fig-client", F.client_summary(levels), "No level.", 380),
    )
    n_failed = int((~data.frame["ok"].to_numpy(dtype=bool)).sum())
    page.section(
        "failures",
        "Failures",
        (
            f'<p class="note">{n_failed} failed request(s), by kind and completion time.</p>'
            + _maybe(page, "fig-failures", T.failures_over_time(data), "")
            + _errors_table(data)
        )
        if n_failed
        else '<p class="note">No failed requests.</p>',
    )
    page.section(
        "server",
        "Server metrics",
        _maybe(
            page,
            "fig-server",
            S.server_metrics(data),
            f"Not scraped ({SERVER_METRICS_FILE} absent): run with --scrape-metrics to poll the server's "
            "Prometheus /metrics.",
            600,
        )
        + _server_latencies(data)
        + _gpu(page, data),
    )
    return page


def render_run_report(folder: Path, out: Path | None = None) -> Path:
    """Write the HTML report of run folder ``folder`` to ``out`` (default
    ``folder/report.html``) and return its path. Raises
    :class:`~loadgen.errors.ConfigError` when the folder is not a run folder."""
    folder = Path(folder)
    data = load_run(folder)
    page = build_run_page(data)
    return write_page(Path(out) if out is not None else folder / "report.html", page.render())
