"""Console output with rich: the live progress line and the result tables.

Reads records and summaries only; computes nothing beyond running medians for the live
display (the reported numbers come from :mod:`loadgen.metrics`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from loadgen.metrics.catalog import Metric, metrics
from loadgen.metrics.results import Distribution, LevelSummary, RunSummary, StatInterval, unit_label
from loadgen.metrics.trials import level_trials
from loadgen.metrics.uncertainty import RARE_EVENTS
from loadgen.numfmt import NONE, fmt, fmt_n_eff, fmt_rel, fmt_share
from loadgen.report.live import LiveStats, fmt_latency, fmt_ms, level_heading
from loadgen.report.task_lines import task_lines
from loadgen.report.verdict_lines import (
    attainment_confidence,
    capacity_interval_line,
    capacity_words,
    level_verdict_cells,
    mlperf_line,
    mlperf_undecided_line,
    steady_line,
)
from loadgen.report.window_lines import rate_window_line

__all__ = [
    "N_EFF_SERIES",
    "UNBOUNDED",
    "LiveStats",
    "answer_lines",
    "client_line",
    "fmt_latency",
    "fmt_ms",
    "interval_lines",
    "level_heading",
    "level_line",
    "level_n_eff",
    "level_notes",
    "level_table",
    "metrics_table",
    "schedule_line",
    "show_summary",
    "token_source_line",
    "trials_note",
    "unbounded_cells",
    "unbounded_line",
    "unbounded_reason",
    "with_pm",
]


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


def error_line(message: str, width: int = 240) -> str:
    """A failed request's message on one line: an HTTP error's JSON body by its own
    ``message`` (vLLM's, OpenAI's ``error.message``), quoted and cut to ``width``."""
    text = message
    status, _, body = message.partition(": ")
    found = _MESSAGE_RE.search(body) if status.startswith("HTTP ") else None
    if found is not None:
        quoted = '"' + found.group(1) + '"'
        try:
            text = f"{status}: {json.loads(quoted)}"
        except ValueError:  # cut off inside an escape
            text = f"{status}: {found.group(1)}"
    text = " ".join(text.split())
    return '"' + (text if len(text) <= width else text[: width - 1] + "…") + '"'


_MESSAGE_RE = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)')


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
        f"{fmt(ns.inputs_per_s)} {noun}/s   {fmt(ns.input_tokens_per_s)} input tok/s   "
        f"{fmt(ns.inputs.mean)} {noun}/request"
    )


UNBOUNDED = "—"
"""Shown after ``±`` beside a value whose interval the data cannot bound (the value is still
shown; the reason is printed once under the table)."""


def with_pm(text: str, value: float | None, iv: StatInterval | None) -> str:
    """``text`` (the formatted ``value``) with its interval: ``±6.2%`` (the larger side of
    the interval, relative to the value, by :func:`~loadgen.numfmt.fmt_rel`) up to ±100%;
    wider, the bounds themselves (``24.9 ms [0.51, 413]``: a percentage over 100 reads as
    noise); ``±—`` when the data cannot bound it (the value is still shown; the reason is
    printed once, under the table); ``text`` alone without an interval."""
    if iv is None or value is None:
        return text
    if not iv.bounded:
        return f"{text} ±{UNBOUNDED}"
    rel = iv.relative_half_width(value)
    if rel is None:
        return text
    if rel > 1 and iv.low is not None and iv.high is not None:
        return f"{text} [{fmt(iv.low)}, {fmt(iv.high)}]"
    return f"{text} ±{fmt_rel(rel)}"


def _dist_cell(d: Distribution, stat: str, show: Any = fmt_latency) -> str:
    value = d.stat(stat)
    return with_pm(show(value), value, (d.intervals or {}).get(stat))


N_EFF_SERIES = "TTFT mean"
"""Whose ``n_eff`` a caption shows, once per level: the mean's of the level's TTFT series
(the requests in send order). Each statistic has its own (a quantile's counts its
indicator series), so any other ``n_eff`` printed names its statistic."""


def level_n_eff(level: LevelSummary) -> tuple[float, int] | None:
    """The level's :data:`N_EFF_SERIES` ``n_eff`` and its request count (None without intervals)."""
    iv = (level.ttft_ms.intervals or {}).get("mean")
    return None if iv is None else (iv.n_eff, level.ttft_ms.count)


def n_eff_text(level: LevelSummary) -> str:
    """``"n_eff 180 of 200 (TTFT mean)"``: the level's one ``n_eff`` (:data:`N_EFF_SERIES`),
    "" without intervals."""
    found = level_n_eff(level)
    return "" if found is None else f"n_eff {fmt_n_eff(found[0])} of {found[1]} ({N_EFF_SERIES})"


_NEFF_TAIL = re.compile(r"\s*\(n_eff = [0-9.,]+\)")


def unbounded_reason(iv: StatInterval) -> str:
    """Why ``iv`` is not bounded, its own ``n_eff`` named as its statistic's by the caller:
    ``"p99 needs n_eff ≥ 460 for a 95% interval"`` and, when the reason gave one, ``", its n_eff 41"``."""
    reason = (iv.reason or "too few effective values").replace(">=", "≥")
    core = _NEFF_TAIL.sub("", reason)
    return core if core == reason else f"{core}, its n_eff {fmt_n_eff(iv.n_eff)}"


def unbounded_line(found: Sequence[tuple[str, str, StatInterval]], noun: str = "") -> str:
    """One line for a table: which values it shows with ``±—`` (``found``: the statistic, as
    ``"TTFT p99"``, where it is, as a level's label or number, and its interval), grouped by
    statistic with the levels named, and one reason, its ``n_eff`` named as that statistic's
    at that level ("" when every value is bounded). ``noun`` prefixes the places (``"level"``)."""
    if not found:
        return ""
    places: dict[str, list[str]] = {}
    for stat, where, _ in found:
        places.setdefault(stat, []).append(where)

    def at(ws: Sequence[str]) -> str:
        named = [w for w in ws if w]
        if not named:
            return ""
        return f" at {noun}{'s' if noun and len(named) > 1 else ''}{' ' if noun else ''}{', '.join(named)}"

    which = "; ".join(f"{stat}{at(ws)}" for stat, ws in places.items())
    stat, where, iv = found[0]
    eg = "e.g. " if len(found) > 1 else ""
    return (
        f"±{UNBOUNDED} not bounded: {which} (too few effective values; {eg}{stat}{at([where])}: {unbounded_reason(iv)})"
    )


def unbounded_cells(
    named: Sequence[tuple[str, LevelSummary]], cells: Sequence[tuple[str, str, str]]
) -> list[tuple[str, str, StatInterval]]:
    """The shown ``cells`` (label, distribution, statistic) of each named level whose
    interval is not bounded, in table order (statistic, then level)."""
    out = []
    for label, key, stat in cells:
        for where, lv in named:
            try:
                iv = (lv.dist(key).intervals or {}).get(stat)
            except KeyError:
                continue
            if iv is not None and not iv.bounded:
                out.append((label, where, iv))
    return out


def trials_note(levels: Sequence[LevelSummary]) -> str:
    """What intervals between ``--trials`` are, once, where any level has them ("" else):
    ``"intervals between 5 trials: …"`` (:func:`loadgen.metrics.trials.between_trials`)."""
    counts = sorted({n for lv in levels if (n := level_trials(lv)) is not None})
    if not counts:
        return ""
    shown = " / ".join(str(c) for c in counts)
    return (
        f"intervals between {shown} trials: the pooled value ± Student's t on the trials' spread, "
        "widened to the pooled level's own interval where that is wider (no within-level correlation model; "
        f"a tail some trial cannot bound on its own, or with under {RARE_EVENTS} values past it, is refused)"
    )


def interval_lines(level: LevelSummary, stats: Sequence[str] = ("mean", "p50", "p90", "p99", "p99.9")) -> list[str]:
    """Under a level's numbers: the confidence and its one ``n_eff``, and which of the
    ``stats`` shown with ``±—`` have no interval, with one reason ([] without intervals)."""
    neff = n_eff_text(level)
    if not neff:
        return []
    conf = (level.ttft_ms.intervals or {})["mean"].confidence  # there is one: n_eff_text found it
    out = [
        f"±: {100 * conf:g}% intervals (the larger side, relative; wider than the value: [low, high]); "
        f"{neff}, requests in send order"
    ]
    if note := trials_note([level]):
        out.append(note)
    cells = [(f"{m.console} {s}", m.name, s) for m, _ in _shown(level) for s in stats]
    line = unbounded_line(unbounded_cells([("", level)], cells))
    return out + ([line] if line else [])


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
    rps = with_pm(fmt(thr.requests_per_s), thr.requests_per_s, tivs.get("requests_per_s"))
    tps = with_pm(fmt(thr.output_tokens_per_s), thr.output_tokens_per_s, tivs.get("output_tokens_per_s"))
    rates = answers_line(level, api) if answered else f"{tps} out tok/s   {fmt(thr.total_tokens_per_s)} total tok/s"
    lines.append(f"requests {req.ok} ok / {req.failed} failed in {fmt(level.duration_s)} s   {rps} req/s   {rates}\n")
    if rate_window_line(level):
        lines.append(rate_window_line(level) + "\n", style="dim")
    if answered:
        lines.append("one JSON answer per request (not streamed): no TTFT, ITL or TPOT\n", style="dim")
    sends, sch = schedule_line(level), level.schedule
    if sends:
        lines.append(sends + "\n", style="yellow" if sch is not None and (sch.late or sch.dropped) else "")
    if good.slos:
        att = givs.get("slo_attainment")
        span = "" if att is None or not att.bounded else f" [{fmt_share(att.low)}, {fmt_share(att.high)}]"
        gps = with_pm(fmt(good.requests_per_s), good.requests_per_s, givs.get("requests_per_s"))
        lines.append(
            f"SLO {', '.join(good.slos)}: attainment {fmt_share(good.slo_attainment)}{span}   goodput {gps} req/s\n"
        )
    for line in interval_lines(level, _STATS):
        lines.append(line + "\n", style="dim")
    for chk in good.checks:
        lines.append(f"check {chk.slo}: {fmt_latency(chk.value_ms)} {'pass' if chk.passed else 'FAIL'}\n")
    if req.by_error:
        errs = ", ".join(f"{k} {v}" for k, v in sorted(req.by_error.items()))
        lines.append(f"failures: {errs}\n", style="red")
        for kind, message in sorted((req.first_error or {}).items()):
            lines.append(f"first {kind}: {error_line(message)}\n", style="red")
    if req.retried:
        lines.append(
            f"{req.retried} request(s) sent again on a new connection: the server closed a kept-alive "
            "connection before answering (docs/client.md)\n",
            style="yellow",
        )
    texts = (
        (steady_line(level), "bold red" if not level.stationary else "dim"),
        (mlperf_line(level), ""),
        (mlperf_undecided_line([level]), "dim"),
    )
    for text, style in texts:
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
        unit, cells = "s", [fmt(None if v is None else v / 1000) for v in values]
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


class _SnugTable(Table):
    """A table that fits the console without cutting a cell or a header (a rate sweep's level
    table on 120 columns): when its natural width is too wide, its cells lose their left
    padding, and each column gets at least its longest word (it wraps, never shows ``…``),
    the room left going to the columns that need the least of it to fit whole."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        self._fit(console, options)
        yield from super().__rich_console__(console, options)

    def _fit(self, console: Console, options: ConsoleOptions) -> None:
        wide = options.update_width(1 << 16)
        spans = []
        for col in self.columns:
            ms = [Measurement.get(console, wide, c) for c in (col.header, *col.cells)]
            hi = max(m.maximum for m in ms)
            spans.append((hi if col.no_wrap else max(m.minimum for m in ms), hi))
        borders = len(spans) + 1
        if sum(hi for _, hi in spans) + borders + 2 * len(spans) <= options.max_width:
            return  # fits as it is
        room = options.max_width - borders - len(spans) - sum(lo for lo, _ in spans)  # right padding only
        if room < 0:
            return  # not even the longest words fit: rich's own reduction
        self.padding = (0, 1, 0, 0)
        widths = [lo for lo, _ in spans]
        for i in sorted(range(len(spans)), key=lambda k: spans[k][1] - spans[k][0]):
            give = min(room, spans[i][1] - spans[i][0])
            widths[i] += give
            room -= give
        for col, width in zip(self.columns, widths):
            col.width = width


def level_table(levels: Sequence[LevelSummary], title: str = "", api: str = "", verdicts: Sequence[str] = ()) -> Table:
    """One row per load level (the rising-load view); every header names its unit (under
    the name), and a latency column is in seconds only when one of its cells is 10 s or more.
    Levels of a non-streamed API show E2E and their inputs (named as ``api``'s) per second.
    ``verdicts`` (one per level, :func:`~loadgen.report.verdict_lines.level_verdict_cells`)
    is shown beside the attainment when given."""
    tab = _SnugTable(title=title or None, title_justify="left", header_style="bold")
    columns: list[tuple[str, list[Any]]] = [
        ("load", [lv.load.label() for lv in levels]),
        ("requests\nok/failed", [f"{lv.requests.ok}/{lv.requests.failed}" for lv in levels]),
        ("\nreq/s", [fmt(lv.throughput.requests_per_s) for lv in levels]),
    ]
    answered = any(lv.non_streamed is not None for lv in levels)
    if answered:
        ns = [lv.non_streamed for lv in levels]
        columns.append((f"{inputs_noun(api)}\n/s", [fmt(None if n is None else n.inputs_per_s) for n in ns]))
        columns.append(("input\ntok/s", [fmt(None if n is None else n.input_tokens_per_s) for n in ns]))
    else:
        columns.append(("out\ntok/s", [fmt(lv.throughput.output_tokens_per_s) for lv in levels]))
    for name, key, stat in _ANSWER_LATENCIES if answered else _LEVEL_LATENCIES:
        ivs = [(lv.dist(key).intervals or {}).get(stat) for lv in levels]
        unit, cells = _latency_column([lv.dist(key).stat(stat) for lv in levels], ivs)
        columns.append((f"{name}\n{unit}", cells))
    att = [lv.goodput.slo_attainment for lv in levels]
    columns.append(("attain\n%", [fmt_share(a).removesuffix("%") for a in att]))
    if any(verdicts):
        columns.append(("SLO\nverdict", list(verdicts)))
    columns.append(("goodput\nreq/s", [fmt(lv.goodput.requests_per_s) for lv in levels]))
    neffs = [level_n_eff(lv) for lv in levels]
    if any(neffs):  # one per level: the TTFT mean's (N_EFF_SERIES), as the line under the table says
        columns.append(("n_eff\nTTFT", [NONE if n is None else fmt_n_eff(n[0]) for n in neffs]))
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
    for header, cells in columns:
        # a load's label and the client's verdict are never wrapped or cut: the other columns give way
        keep = header in ("load", "client", "SLO\nverdict")  # never "undecid…"
        widest = max((len(str(c)) for c in cells), default=0)
        tab.add_column(header, justify="right", no_wrap=keep, min_width=widest if keep else None)
    for row in zip(*(cells for _, cells in columns)):
        tab.add_row(*row)
    return tab


def level_notes(levels: Sequence[LevelSummary]) -> list[str]:
    """Under the level table: why a level was client-bound or non-stationary, the late sends
    of rate levels, MLPerf's early-stopping verdicts that decide (then one line for those
    that do not) and the level's notes (``client.notes``); then, once for the table, the
    intervals' confidence and whose ``n_eff`` its column shows, and which latencies shown
    with ``±—`` cannot be bounded, at which levels, and why."""
    out: list[str] = []
    answered = any(lv.non_streamed is not None for lv in levels)
    for lv in levels:
        if lv.client.client_bound:
            out.append(f"{lv.load.label()}: {client_line(lv)}")
        out.extend(f"{lv.load.label()}: {line}" for line in (steady_line(lv), mlperf_line(lv)) if line)
        sch = lv.schedule
        if sch is not None and (sch.late or sch.dropped):
            out.append(f"{lv.load.label()}: {schedule_line(lv)}")
        out.extend(f"{lv.load.label()}: note: {note}" for note in lv.client.notes or ())
    said: set[str] = set()  # each error kind's first message, once for the table
    for lv in levels:
        for kind, message in sorted((lv.requests.first_error or {}).items()):
            if kind not in said:
                said.add(kind)
                out.append(f"{lv.load.label()}: first {kind}: {error_line(message)}")
    confs = sorted({iv.confidence for lv in levels if (iv := (lv.ttft_ms.intervals or {}).get("mean")) is not None})
    if confs:
        conf = " / ".join(f"{100 * c:g}%" for c in confs)
        out.append(
            f"±: {conf} intervals (the larger side, relative; wider than the value: [low, high]); "
            f"n_eff: each level's {N_EFF_SERIES}, requests in send order"
        )
        if note := trials_note(levels):
            out.append(note)
    named = [(lv.load.label(), lv) for lv in levels]
    line = unbounded_line(unbounded_cells(named, _ANSWER_LATENCIES if answered else _LEVEL_LATENCIES))
    undecided = mlperf_undecided_line(levels)
    return out + ([undecided] if undecided else []) + ([line] if line else [])


def level_line(level: LevelSummary) -> str:
    """One line per finished level (printed when the live display is off)."""
    thr, req, att = level.throughput, level.requests, level.goodput.slo_attainment
    sch = level.schedule
    late = "" if sch is None else f", {sch.late} of {sch.scheduled} sends late, {sch.dropped} dropped"
    neff = f", {n_eff_text(level)}" if n_eff_text(level) else ""
    ns = level.non_streamed
    if ns is not None:  # not streamed: no tokens out, no TTFT or ITL
        middle = (
            f"{fmt(thr.requests_per_s)} req/s, {fmt(ns.inputs_per_s)} inputs/s, "
            f"E2E p50 {_dist_cell(level.e2e_ms, 'p50')}, p99 {_dist_cell(level.e2e_ms, 'p99')}, "
        )
    else:
        middle = (
            f"{fmt(thr.requests_per_s)} req/s, {fmt(thr.output_tokens_per_s)} out tok/s, "
            f"TTFT p50 {_dist_cell(level.ttft_ms, 'p50')}, p99 {_dist_cell(level.ttft_ms, 'p99')}, "
            f"ITL p50 {_dist_cell(level.itl_ms, 'p50')}, "
        )
    if req.retried:  # the stale keep-alive race (docs/client.md): never hidden
        late += f", {req.retried} sent again on a new connection"
    return (
        f"level {level.load.label()}: "
        f"{req.ok} ok / {req.failed} failed, {middle}"
        f"attainment {fmt_share(att)}{neff}{late}"
        + ("" if not level.client.client_bound else f"; {client_line(level)}")
        + ("" if level.stopped is None else f"; stopped: {level.stopped}")
        + ("" if level.stationary else f"; {steady_line(level)}")
        + (f"\n  {mlperf_line(level)}" if mlperf_line(level) else "")
    )


def answer_lines(summary: RunSummary) -> list[str]:
    """The capacity and knee lines printed under the level table (and used in reports)."""
    out: list[str] = []
    cap, words = summary.capacity, capacity_words(summary)
    if cap is not None and words is not None:
        out.append(
            f"capacity at {', '.join(cap.slos)} ({fmt_share(cap.target)} attainment): {words.value} — {words.verdict}"
        )
        out.extend(f"  {note}" for note in words.notes)
        if cap.interval is not None:
            out.append(capacity_interval_line(cap, attainment_confidence(summary.levels)))
    sat = summary.saturation
    if sat is not None:
        if sat.found:
            out.append(
                f"saturation (knee) at {fmt(sat.load)} {unit_label(sat.mode)}: throughput "
                f"{fmt_rel(sat.throughput_gain or 0, signed=True)} while {sat.metric} "
                f"{fmt_rel(sat.latency_growth or 0, signed=True)}"
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
                f"{fmt(r.reasoning_tokens.p50)} reasoning, {fmt(r.answer_tokens.p50)} answer"
            )
        if lv.images is not None:
            im = lv.images
            counted = "not reported" if im.prompt_tokens_reported is None else fmt(im.prompt_tokens_reported)
            lines.append(
                f"{where}images: {fmt(im.images_per_request)} a request ({fmt(im.bytes_per_request / 1e3)} kB); "
                f"prompt tokens mean {counted} as the server counted them (images included), "
                f"{fmt(im.prompt_tokens_text)} text tokens sent"
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
        table = level_table(levels, title="Results per load level", api=api, verdicts=level_verdict_cells(summary))
        console.print(table)
        for line in level_notes(levels):
            console.print(line, style="yellow", highlight=False, markup=False, soft_wrap=True)
        for line in answer_lines(summary):  # one line each, as the notes: never cut inside a verdict
            console.print(line, soft_wrap=True)
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
