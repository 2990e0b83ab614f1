"""The comparison page: two or more runs side by side, with a verdict per metric.

Each verdict cell carries its interval's method (``data-method``) and the verdict section
names the methods (bootstrap on n_eff / block bootstrap over time, or Welch over trials).

:func:`render_comparison` overlays the runs' curves (one colour per run, legend = the
run's label), tabulates each metric at each load level the runs share — the first run is
the baseline, every other run gets its difference, a 95% bootstrap confidence interval
of that difference and a verdict (:mod:`loadgen.metrics.compare`) — and puts the
capacities side by side. When a common level has more than one request class, a section
"By request class" (and :func:`class_lines` on the console) judges each class both runs ran
on its own (:func:`loadgen.metrics.compare.compare_classes`). Runs of different workloads
are refused unless ``force``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

from loadgen.errors import ConfigError
from loadgen.metrics import compare as C
from loadgen.metrics.compare import MIN_EFFECT, Row, common_levels, compare_level
from loadgen.metrics.results import Load
from loadgen.numfmt import fmt_rel
from loadgen.report import compare_figures as CF
from loadgen.report.html import answer_cards
from loadgen.report.page import Page, esc, fmt, write_page
from loadgen.report.rundata import RunData, load_run
from loadgen.runinfo import RunInfo, WorkloadInfo

__all__ = [
    "Comparison",
    "class_lines",
    "compare_runs",
    "fmt_change",
    "fmt_pct",
    "render_comparison",
    "verdict_lines",
    "workload_differences",
]


def workload_differences(runs: Sequence[RunInfo | None], labels: Sequence[str]) -> list[str]:
    """Human-readable differences between the runs' ``run.json`` workloads (the file path
    it was read from is ignored); empty when they match. None: a run without ``run.json``."""

    def workload(run: RunInfo | None) -> WorkloadInfo | None:
        return None if run is None else run.workload

    base = workload(runs[0])
    out = []
    for run, label in zip(runs[1:], labels[1:]):
        other = workload(run)
        if base is None or other is None:
            missing = labels[0] if base is None else label
            out.append(f"{missing!r} has no workload in run.json")
            continue
        keys = [
            f.name
            for f in dataclasses.fields(WorkloadInfo)
            if f.name != "source" and getattr(base, f.name) != getattr(other, f.name)
        ]
        if keys:
            out.append(f"{labels[0]!r} ({base.name}) and {label!r} ({other.name}) differ in " + ", ".join(sorted(keys)))
    return out


def _labels(folders: Sequence[Path], labels: Sequence[str] | None) -> list[str]:
    if labels is not None:
        if len(labels) != len(folders):
            raise ConfigError(f"{len(labels)} labels for {len(folders)} runs: give one label per run", field="label")
        out = [str(x) for x in labels]
    else:
        out = [Path(f).resolve().name or str(f) for f in folders]
    seen: dict[str, int] = {}
    unique = []
    for name in out:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return unique


def _decimals(*values: float | None) -> int:
    """Decimals that show the larger of ``values`` to 3 significant digits (as the page
    shows the values themselves), 0 from 100 up."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    if not finite:
        return 0
    return max(0, 2 - math.floor(math.log10(max(finite))))


def fmt_change(diff: float, *values: float | None) -> str:
    """A difference with a sign, to the precision the compared ``values`` are shown at:
    ``+0.000172`` next to values of 7.65 is ``+0.00`` — shown as ``±0``."""
    dec = _decimals(*values)
    text = f"{diff:+,.{dec}f}"
    return "±0" if float(text.replace(",", "")) == 0 else text


def fmt_pct(rel: float) -> str:
    """A relative change by the one rule (:func:`loadgen.numfmt.fmt_rel`): whole percents from
    10% up, two significant digits below, "±0%" when it rounds to nothing at 0.01%."""
    return fmt_rel(rel, signed=True)


def _verdict_cell(d: C.Difference) -> str:
    cls = {C.BETTER: "better", C.WORSE: "worse", C.INCONCLUSIVE: "unsure"}.get(d.verdict, "same")
    note = f'<br><small title="{esc(d.note)}">{esc(d.note)}</small>' if d.note else ""
    return f'<td class="l {cls}" data-method="{esc(d.method)}">{esc(d.verdict)}{note}</td>'


def _diff_cells(d: C.Difference, unit: str) -> str:
    if d.diff is None or d.ci is None:
        return f"<td>{fmt(d.b)}</td><td>–</td><td>–</td>" + _verdict_cell(d)
    rel = "" if d.rel is None else f" ({fmt_pct(d.rel)})"
    ci = f"[{fmt_change(d.ci[0], d.a, d.b)}, {fmt_change(d.ci[1], d.a, d.b)}]"
    return f"<td>{fmt(d.b)}</td><td>{fmt_change(d.diff, d.a, d.b)}{rel}</td><td>{ci}</td>" + _verdict_cell(d)


def _table(
    levels: Sequence[tuple[str, float, list[int]]],
    runs: Sequence[RunData],
    labels: Sequence[str],
    rows_by_run: Sequence[list[Row]],
) -> str:
    head = '<tr><th class="l k k0">level</th><th class="l k k1">metric</th><th class="l k k2">stat</th>'
    head += f"<th>{esc(labels[0])}<br>(baseline)</th>"
    for label in labels[1:]:
        head += f'<th>{esc(label)}</th><th>Δ vs baseline</th><th>95% CI of Δ</th><th class="l">verdict</th>'
    head += "</tr>"
    body = []
    n_rows = len(rows_by_run[0]) if rows_by_run else 0
    for r in range(n_rows):
        first = rows_by_run[0][r]
        pos = first.level
        lv = runs[0].levels[levels[pos][2][0]]
        unit = "" if first.unit in ("%",) else f" ({first.unit})"
        cells = (
            f'<td class="l k k0">{esc(lv.load.label())}</td><td class="l k k1">{esc(first.label)}{esc(unit)}</td>'
            f'<td class="l k k2">{esc(first.stat)}</td><td>{fmt(first.diff.a)}</td>'
        )
        for rows in rows_by_run:
            cells += _diff_cells(rows[r].diff, rows[r].unit)
        body.append(
            f'<tr data-level="{pos}" data-metric="{esc(first.metric)}" data-stat="{esc(first.stat)}">{cells}</tr>'
        )
    # its own scroll box (both ways, the header and the level/metric/stat columns sticky):
    # with many configurations the page stays put and every row keeps its name
    return (
        f'<div class="scroll table-box"><table id="comparison-table"><thead>{head}</thead><tbody>{"".join(body)}'
        "</tbody></table></div>"
    )


_GROUPS = (
    (C.WORSE, "worse", "worse"),
    (C.BETTER, "better", "better"),
    (C.INCONCLUSIVE, "inconclusive (the interval contains 0 and allows a large change either way)", "unsure"),
)
HEADLINE_ITEMS = 5  # bullets per verdict; the table has the rest
_CLS = {C.WORSE: "worse", C.BETTER: "better"}


def _where(r: Row, levels: Sequence[tuple[str, float, list[int]]], base: RunData) -> tuple[str, str]:
    """The row's name (label and statistic) and its level's label."""
    stat = "" if r.stat in ("rate", "value") else f" {r.stat}"
    return f"{r.label}{stat}", base.levels[levels[r.level][2][0]].load.label()


def _item(r: Row, levels: Sequence[tuple[str, float, list[int]]], base: RunData) -> str:
    d = r.diff
    name, lv = _where(r, levels, base)
    rel = "" if d.rel is None else f" ({fmt_pct(d.rel)})"
    note = f' <small class="note">{esc(d.note)}</small>' if d.verdict == C.INCONCLUSIVE and d.note else ""
    return (
        f'<li data-metric="{esc(r.metric)}" data-verdict="{esc(d.verdict)}"><b>{esc(name)}</b> '
        f"at {esc(lv)}: {fmt(d.a)} → {fmt(d.b)} {esc(r.unit)}{rel}{note}</li>"
    )


def _tally(groups: dict[str, list[Row]]) -> list[tuple[str, int, str]]:
    """``(verdict, count, css class)`` of the tally, in the page's order; n/a only when any."""
    out = [(v, len(groups[v]), cls) for v, _, cls in _GROUPS]
    out.append((C.NO_CHANGE, len(groups[C.NO_CHANGE]), "same"))
    if groups[C.NOT_AVAILABLE]:
        out.append(("n/a", len(groups[C.NOT_AVAILABLE]), "same"))
    return out


def verdict_lines(
    rows: Sequence[Row], levels: Sequence[tuple[str, float, list[int]]], base: RunData, label: str, base_label: str
) -> list[str]:
    """The verdict as plain text, for the console: the largest significant changes (at most
    :data:`HEADLINE_ITEMS`, each with its interval), then the tally of every cell."""
    groups = C.by_verdict(rows)
    tally = ", ".join(f"{n} {v}" for v, n, _ in _tally(groups))
    changes = C.largest_changes(rows)
    head = f"{base_label} (baseline) → {label}: "
    if not changes:
        head += "no significant change (no interval excludes 0)"
    else:
        head += f"{len(changes)} significant change(s), the largest first"
    out = [head]
    for r in changes[:HEADLINE_ITEMS]:
        d = r.diff
        name, lv = _where(r, levels, base)
        rel = "" if d.rel is None else f" ({fmt_pct(d.rel)})"
        ci = "" if d.ci is None else f", 95% CI of Δ [{fmt_change(d.ci[0], d.a, d.b)}, {fmt_change(d.ci[1], d.a, d.b)}]"
        out.append(f"  {d.verdict}: {name} at {lv}: {fmt(d.a)} → {fmt(d.b)} {r.unit}{rel}{ci}")
    if len(changes) > HEADLINE_ITEMS:
        out.append(f"  … and {len(changes) - HEADLINE_ITEMS} more in the table")
    out.append(f"  all {len(rows)} cells across {len(levels)} common level(s): {tally}")
    return out


def _headline(
    rows: Sequence[Row], levels: Sequence[tuple[str, float, list[int]]], base: RunData, label: str, base_label: str
) -> str:
    """The largest significant changes first (either direction), then the verdicts of every
    cell of the table, counted (the tally) and listed under their count, the largest relative
    changes first: the numbers and the bullets are one list."""
    groups = C.by_verdict(rows)
    names = f"<b>{esc(base_label)}</b> (baseline) → <b>{esc(label)}</b>"
    changes = C.largest_changes(rows)
    if changes:
        lead = "".join(
            _item(r, levels, base).replace("<li ", f'<li class="{_CLS[r.diff.verdict]}" ', 1)
            for r in changes[:HEADLINE_ITEMS]
        )
        out = [
            f'<p class="lead">{names}: the largest significant changes (the interval excludes 0):</p>'
            f'<ul class="lead">{lead}</ul>'
        ]
    else:
        out = [f'<p class="lead">{names}: no significant change (no interval excludes 0).</p>']
    counts = [f'<span class="{cls}">{n} {esc(v)}</span>' for v, n, cls in _tally(groups)]
    out.append(
        f'<p class="tally">{names}: {", ".join(counts)} across {len(levels)} common level(s), '
        f"{len(rows)} cells (metric, statistic and level).</p>"
    )
    for verdict, title, cls in _GROUPS:
        these = groups[verdict]
        if not these:
            continue
        items = "".join(_item(r, levels, base) for r in these[:HEADLINE_ITEMS])
        more = len(these) - HEADLINE_ITEMS
        if more > 0:
            items += f'<li class="same more">… and {more} more in the table below</li>'
        out.append(
            f'<p><span class="{cls}">{len(these)} {esc(title)}</span>:</p>'
            f'<ul class="headline" data-verdict="{esc(verdict)}">{items}</ul>'
        )
    return "".join(out)


def _capacity_table(runs: Sequence[RunData], labels: Sequence[str]) -> str:
    parts = []
    for data, label in zip(runs, labels):
        run = data.run or RunInfo()
        target, wl = run.target, run.workload
        bound = sum(1 for lv in data.levels if lv.client.client_bound)
        head = (
            f'<h3>{esc(label)}</h3><p class="note">{esc(target and target.model)} at '
            f"{esc(target and target.url)} · workload {esc(wl and wl.name)} · {len(data.levels)} levels · "
            f"started {esc(run.started_at)}"
            + (f' · <span class="bad">{bound} client-bound level(s)</span>' if bound else "")
            + "</p>"
        )
        parts.append(f'<div class="capacity-run">{head}{answer_cards(data.summary)}</div>')
    return "".join(parts)


_CLASS_STATS = [stat for _, stat in C.CLASS_QUANTILES]


def _class_key(r: C.ClassRow) -> tuple[int, str, int, int]:
    """Level, class, metric and statistic: the per-class table's order."""
    return (r.row.level, r.request_class, C.CLASS_METRICS.index(r.row.metric), _CLASS_STATS.index(r.row.stat))


def _only(found: Sequence[C.ClassComparison], side: str) -> list[str]:
    """The classes of one side only (``"a"``: the baseline) at any common level, in name order."""
    return sorted({n for c in found for n in (c.only_a if side == "a" else c.only_b)})


def class_lines(
    found: Sequence[C.ClassComparison],
    levels: Sequence[tuple[str, float, list[int]]],
    base: RunData,
    label: str,
    base_label: str,
) -> list[str]:
    """The per-class verdict as plain text, for the console: per class both runs ran, its
    largest significant changes (at most :data:`HEADLINE_ITEMS`) and the tally of its cells;
    then the classes of one run only."""
    rows = [r for c in found for r in c.rows]
    names = sorted({r.request_class for r in rows})
    out = [f"by class, {base_label} (baseline) against {label}: " + (", ".join(names) or "no class") + " in both"]
    for name in names:
        mine = [r.row for r in rows if r.request_class == name]
        changes = C.largest_changes(mine)
        tally = ", ".join(f"{n} {v}" for v, n, _ in _tally(C.by_verdict(mine)))
        lead = f"{len(changes)} significant change(s), the largest first" if changes else "no significant change"
        out.append(f"  {name}: {lead}; all {len(mine)} cells across {len(levels)} common level(s): {tally}")
        for r in changes[:HEADLINE_ITEMS]:
            d = r.diff
            what, lv = _where(r, levels, base)
            rel = "" if d.rel is None else f" ({fmt_pct(d.rel)})"
            ci = (
                ""
                if d.ci is None
                else f", 95% CI of Δ [{fmt_change(d.ci[0], d.a, d.b)}, {fmt_change(d.ci[1], d.a, d.b)}]"
            )
            out.append(f"    {d.verdict}: {what} at {lv}: {fmt(d.a)} → {fmt(d.b)} {r.unit}{rel}{ci}")
        if len(changes) > HEADLINE_ITEMS:
            out.append(f"    … and {len(changes) - HEADLINE_ITEMS} more in the table")
    for side, who in (("a", base_label), ("b", label)):
        if _only(found, side):
            out.append(f"  only in {who} (not compared): " + ", ".join(_only(found, side)))
    return out


def _class_table(
    levels: Sequence[tuple[str, float, list[int]]],
    runs: Sequence[RunData],
    labels: Sequence[str],
    found_by_run: Sequence[Sequence[C.ClassComparison]],
) -> str:
    """The per-class rows, one row per level, class, metric and statistic that any run
    shares with the baseline; a run without that class shows dashes."""
    keyed = [{_class_key(r): r for c in found for r in c.rows} for found in found_by_run]
    head = (
        '<tr><th class="l k k0">level</th><th class="l k k1">class</th><th class="l">metric</th>'
        f'<th class="l">stat</th><th>{esc(labels[0])}<br>(baseline)</th>'
    )
    for label in labels[1:]:
        head += f'<th>{esc(label)}</th><th>Δ vs baseline</th><th>95% CI of Δ</th><th class="l">verdict</th>'
    body = []
    for key in sorted({k for m in keyed for k in m}):
        first = next(m[key] for m in keyed if key in m)
        row = first.row
        lv = runs[0].levels[levels[row.level][2][0]]
        cells = (
            f'<td class="l k k0">{esc(lv.load.label())}</td><td class="l k k1">{esc(first.request_class)}</td>'
            f'<td class="l">{esc(row.label)} ({esc(row.unit)})</td><td class="l">{esc(row.stat)}</td>'
            f"<td>{fmt(row.diff.a)}</td>"
        )
        for m in keyed:
            r = m.get(key)
            cells += (
                _diff_cells(r.row.diff, r.row.unit)
                if r is not None
                else '<td>–</td><td>–</td><td>–</td><td class="l same">not in this run</td>'
            )
        body.append(
            f'<tr data-level="{row.level}" data-class="{esc(first.request_class)}" data-metric="{esc(row.metric)}" '
            f'data-stat="{esc(row.stat)}">{cells}</tr>'
        )
    return (
        f'<div class="scroll table-box"><table id="class-comparison-table"><thead>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _class_section(
    levels: Sequence[tuple[str, float, list[int]]],
    runs: Sequence[RunData],
    labels: Sequence[str],
    found_by_run: Sequence[Sequence[C.ClassComparison]],
) -> str:
    """The per-class section: each run's per-class tally, the classes of one run only,
    the method and the table."""
    out = []
    for found, label in zip(found_by_run, labels[1:]):
        rows = [r for c in found for r in c.rows]
        parts = []
        for name in sorted({r.request_class for r in rows}):
            groups = C.by_verdict([r.row for r in rows if r.request_class == name])
            counts = ", ".join(f'<span class="{cls}">{n} {esc(v)}</span>' for v, n, cls in _tally(groups))
            parts.append(f"<b>{esc(name)}</b>: {counts}")
        out.append(
            f'<p class="class-tally"><b>{esc(labels[0])}</b> (baseline) → <b>{esc(label)}</b>: '
            + ("; ".join(parts) or "no class in both runs")
            + ".</p>"
        )
        for side, who in (("a", labels[0]), ("b", label)):
            if _only(found, side):
                out.append(
                    f'<p class="note class-only">Only in {esc(who)} (not compared): '
                    f"{esc(', '.join(_only(found, side)))}.</p>"
                )
    stats = " and ".join(_CLASS_STATS)
    out.append(
        '<p class="note" id="class-method">Each request class (the workload\'s <code>[[classes]]</code>, '
        "<code>by_class</code> in summary.json) on its own: its requests' TTFT, ITL and E2E latency at "
        f"{esc(stats)}, each run resampled on the class's own n_eff (<b>{esc(C.METHOD_NEFF)}</b>, as the level "
        "rows), also when the runs ran trials (the trials keep no per-class means). The verdicts follow the "
        "same rules as the level rows.</p>"
    )
    return "".join(out) + _class_table(levels, runs, labels, found_by_run)


@dataclasses.dataclass(frozen=True, slots=True)
class Comparison:
    """A written comparison page: its ``path`` and the verdict as plain text ``lines``
    (:func:`verdict_lines` for each run against the baseline, then its :func:`class_lines`
    when the runs have several request classes)."""

    path: Path
    lines: list[str]


def render_comparison(
    folders: Sequence[Path],
    out: Path,
    *,
    labels: Sequence[str] | None = None,
    force: bool = False,
    resamples: int = 2000,
    min_effect: float = MIN_EFFECT,
) -> Path:
    """Write the comparison page of run folders ``folders`` (the first is the baseline)
    to ``out`` and return its path (:func:`compare_runs`, without the verdict lines)."""
    return compare_runs(folders, out, labels=labels, force=force, resamples=resamples, min_effect=min_effect).path


def compare_runs(
    folders: Sequence[Path],
    out: Path,
    *,
    labels: Sequence[str] | None = None,
    force: bool = False,
    resamples: int = 2000,
    min_effect: float = MIN_EFFECT,
) -> Comparison:
    """Write the comparison page of run folders ``folders`` (the first is the baseline)
    to ``out``; return its path and the verdict lines.

    A resolved difference whose whole interval lies within ``min_effect`` of the baseline
    is "no significant change" (``resamples`` bootstrap draws per cell). Raises
    :class:`~loadgen.errors.ConfigError` with fewer than two runs, when a folder
    is not a run folder, when ``labels`` does not give one label per run, or when the
    runs' workloads differ (unless ``force``, which shows the differences on the page).
    """
    folders = [Path(f) for f in folders]
    if len(folders) < 2:
        raise ConfigError("compare needs at least two run folders")
    names = _labels(folders, labels)
    runs = [load_run(f) for f in folders]
    diffs = workload_differences([r.run for r in runs], names)
    if diffs and not force:
        raise ConfigError(
            "the runs used different workloads, so their numbers are not comparable: "
            + "; ".join(diffs)
            + " (pass --force to compare anyway)"
        )
    levels = common_levels([r.summary for r in runs])
    rows_by_run = [
        [
            row
            for pos, (_, _, idx) in enumerate(levels)
            for row in compare_level(
                runs[0].level_samples(idx[0]),
                other.level_samples(idx[k]),
                pos,
                resamples=resamples,
                min_effect=min_effect,
            )
        ]
        for k, other in enumerate(runs[1:], start=1)
    ]
    pairs = [
        [(runs[0].level_samples(idx[0]), other.level_samples(idx[k])) for _, _, idx in levels]
        for k, other in enumerate(runs[1:], start=1)
    ]
    by_class = any(C.several_classes(a, b) for pair in pairs for a, b in pair)
    found_by_run = [
        [C.compare_classes(a, b, pos, resamples=resamples, min_effect=min_effect) for pos, (a, b) in enumerate(pair)]
        if by_class
        else []
        for pair in pairs
    ]
    page = Page(
        title="loadgen comparison — " + f"{names[0]} (baseline) vs " + " vs ".join(names[1:]),
        subtitle=esc(" · ".join(f"{n}: {r.folder}" for n, r in zip(names, runs))),
    )
    head = ""
    if diffs:
        head += (
            '<div class="banner warn" id="workload-warning">⚠ Compared with --force although the workloads '
            f"differ: {esc('; '.join(diffs))}</div>"
        )
    for rows, label in zip(rows_by_run, names[1:]):
        head += _headline(rows, levels, runs[0], label, names[0])
    trials = [max((lv.trials.n for lv in r.levels if lv.trials is not None), default=1) for r in runs]
    if min(trials) > 1:
        method = (
            f'<p class="note" id="method">Verdicts use between-trial variation ({" vs ".join(map(str, trials))} '
            "trials per level): the difference of the trials' means with its 95% Welch t-interval "
            f"(<b>{esc(C.METHOD_WELCH)}</b>), which sees run-to-run noise that resampling one run cannot. "
        )
    else:
        method = (
            '<p class="note" id="method">Verdicts come from 95% bootstrap confidence intervals of the difference '
            f"that see the correlation between neighbouring requests (<b>{esc(C.METHOD_NEFF)}</b> for latency "
            "percentiles and attainment: each run resampled on its effective sample size n_eff, from its "
            "requests in send order or tokens in arrival order; "
            f"<b>{esc(C.METHOD_BLOCKS)}</b> for throughput and goodput: resampled time blocks of the level): "
            "the noise inside one run, not between runs (--trials N measures that). An interval that contains 0 "
            "is never better or worse. "
        )
    page.section(
        "summary",
        "Verdict",
        head + method + "Each verdict follows from the interval alone. One that excludes 0 is better or worse "
        "(lower latency is better, higher throughput is better), unless all of it lies within "
        f"{100 * min_effect:g}% of the baseline (no significant change: too small to matter). One that "
        f"contains 0 and stays within {100 * C.EQUIVALENCE:g}% of the baseline either side (the equivalence "
        "margin) is no significant change; one that contains 0 but reaches further is inconclusive: this run "
        "cannot tell, and so is a percentile with fewer than 5 samples beyond it; for a tail "
        "statistic the note says what the requests themselves show (how many of one run's requests exceed "
        "every request of the other, and the chance of that if the runs were alike).</p>",
    )
    page.section("capacity", "Capacity side by side", _capacity_table(runs, names))
    fig = CF.latency_overlay(runs, names)
    page.section(
        "latency",
        "Latency vs load",
        '<p class="note">p50 solid (circles), p99 dotted (diamonds); one colour per run.</p>'
        + (page.figure("cmp-latency", fig, 640) if fig else '<p class="note">No level to plot.</p>'),
    )
    fig = CF.throughput_overlay(runs, names)
    page.section(
        "throughput",
        "Throughput, goodput and SLO attainment vs load",
        page.figure("cmp-throughput", fig, 420) if fig else '<p class="note">No level to plot.</p>',
    )
    if levels:
        mode, value, idx = levels[-1]
        fig = CF.cdf_overlay(runs, names, idx)
        page.section(
            "distributions",
            f"Distributions at {Load(mode, value).label()}",
            page.figure("cmp-cdf", fig, 420) if fig else "",
        )
        table = _table(levels, runs, names, rows_by_run)
    else:
        table = '<p class="note">The runs share no load level, so no metric can be compared level by level.</p>'
    page.section("table", "Metrics at each common load level", table)
    if by_class:
        page.section("classes", "By request class", _class_section(levels, runs, names, found_by_run))
    lines = [
        line
        for rows, found, label in zip(rows_by_run, found_by_run, names[1:])
        for line in verdict_lines(rows, levels, runs[0], label, names[0])
        + (class_lines(found, levels, runs[0], label, names[0]) if by_class else [])
    ]
    return Comparison(write_page(Path(out), page.render()), lines)
