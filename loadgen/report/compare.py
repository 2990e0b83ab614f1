"""The comparison page: two or more runs side by side, with a verdict per metric.

:func:`render_comparison` overlays the runs' curves (one colour per run, legend = the
run's label), tabulates each metric at each load level the runs share — the first run is
the baseline, every other run gets its difference, a 95% bootstrap confidence interval
of that difference and a verdict (:mod:`loadgen.metrics.compare`) — and puts the
capacities side by side. Runs of different workloads are refused unless ``force``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


from loadgen.errors import ConfigError
from loadgen.metrics import compare as C
from loadgen.metrics.compare import MIN_EFFECT, Row, common_levels, compare_level
from loadgen.metrics.results import Load
from loadgen.report import compare_figures as CF
from loadgen.report.html import answer_cards
from loadgen.report.page import Page, esc, fmt, write_page
from loadgen.report.rundata import RunData, load_run

__all__ = ["render_comparison", "workload_differences"]

def workload_differences(runs: Sequence[dict[str, Any]], labels: Sequence[str]) -> list[str]:
    """Human-readable differences between the runs' ``run.json["workload"]`` (the file
    path it was read from is ignored); empty when they match."""
    def norm(run: dict[str, Any]) -> dict[str, Any] | None:
        wl = run.get("workload")
        return {k: v for k, v in wl.items() if k != "source"} if isinstance(wl, dict) else None

    base = norm(runs[0])
    out = []
    for run, label in zip(runs[1:], labels[1:]):
        other = norm(run)
        if base is None or other is None:
            missing = labels[0] if base is None else label
            out.append(f"{missing!r} has no workload in run.json")
            continue
        keys = sorted(k for k in set(base) | set(other) if base.get(k) != other.get(k))
        if keys:
            out.append(f"{labels[0]!r} ({base.get('name')}) and {label!r} ({other.get('name')}) differ in "
                       + ", ".join(keys))  # fmt: skip
    return out


def _labels(folders: Sequence[Path], labels: Sequence[str] | None) -> list[str]:
    if labels is not None:
        if len(labels) != len(folders):
            raise ConfigError(f"{len(labels)} labels for {len(folders)} runs: give one label per run", key="--label")
        out = [str(x) for x in labels]
    else:
        out = [Path(f).resolve().name or str(f) for f in folders]
    seen: dict[str, int] = {}
    unique = []
    for name in out:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return unique


def _verdict_cell(d: C.Difference) -> str:
    cls = {C.BETTER: "better", C.WORSE: "worse"}.get(d.verdict, "same")
    note = f'<br><small title="{esc(d.note)}">{esc(d.note)}</small>' if d.note else ""
    return f'<td class="l {cls}">{esc(d.verdict)}{note}</td>'


def _diff_cells(d: C.Difference, unit: str) -> str:
    if d.diff is None or d.ci is None:
        return f"<td>{fmt(d.b)}</td><td>–</td><td>–</td>" + _verdict_cell(d)
    rel = "" if d.rel is None else f" ({100 * d.rel:+.1f}%)"
    sign = "+" if d.diff > 0 else ""
    ci = f"[{fmt(d.ci[0])}, {fmt(d.ci[1])}]"
    return f"<td>{fmt(d.b)}</td><td>{sign}{fmt(d.diff)}{rel}</td><td>{ci}</td>" + _verdict_cell(d)


def _table(levels: Sequence[tuple[str, float, list[int]]], runs: Sequence[RunData], labels: Sequence[str],
           rows_by_run: Sequence[list[Row]]) -> str:  # fmt: skip
    head = '<tr><th class="l">level</th><th class="l">metric</th><th class="l">stat</th>'
    head += f"<th>{esc(labels[0])}<br>(baseline)</th>"
    for label in labels[1:]:
        head += f"<th>{esc(label)}</th><th>Δ vs baseline</th><th>95% CI of Δ</th><th class=\"l\">verdict</th>"
    head += "</tr>"
    body = []
    n_rows = len(rows_by_run[0]) if rows_by_run else 0
    for r in range(n_rows):
        first = rows_by_run[0][r]
        pos = first.level
        lv = runs[0].levels[levels[pos][2][0]]
        unit = "" if first.unit in ("%",) else f" ({first.unit})"
        cells = (f'<td class="l">{esc(lv.load.label())}</td><td class="l">{esc(first.label)}{esc(unit)}</td>'
                 f'<td class="l">{esc(first.stat)}</td><td>{fmt(first.diff.a)}</td>')  # fmt: skip
        for rows in rows_by_run:
            cells += _diff_cells(rows[r].diff, rows[r].unit)
        body.append(f'<tr data-level="{pos}" data-metric="{esc(first.metric)}" data-stat="{esc(first.stat)}">{cells}</tr>')
    return (f'<div class="scroll"><table id="comparison-table"><thead>{head}</thead><tbody>{"".join(body)}'
            "</tbody></table></div>")  # fmt: skip


def _headline(rows: Sequence[Row], levels: Sequence[tuple[str, float, list[int]]], base: RunData,
              label: str, base_label: str) -> str:
    """What changed where it matters, first: the largest significant change of each
    headline statistic, with its level, before and after."""
    picked, unchanged = C.headline(rows)
    items = []
    for r in picked:
        d = r.diff
        lv = base.levels[levels[r.level][2][0]].load.label()
        stat = "" if r.stat in ("rate", "value") else f" {r.stat}"
        cls = "better" if d.verdict == C.BETTER else "worse"
        rel = "" if d.rel is None else f" ({100 * d.rel:+.0f}%)"
        items.append(f'<li data-metric="{esc(r.metric)}"><b>{esc(r.label)}{esc(stat)}</b> at {esc(lv)}: '
                     f"{fmt(d.a)} → {fmt(d.b)} {esc(r.unit)}{rel}, "
                     f'<span class="{cls}">{esc(d.verdict)}</span></li>')
    if unchanged:
        items.append(f'<li class="same">no significant change in {esc(", ".join(unchanged))}</li>')
    return (f'<p><b>{esc(label)}</b> vs <b>{esc(base_label)}</b>, where it matters:</p>'
            f'<ul class="headline">{"".join(items)}</ul>')


def _tally(rows: Sequence[Row]) -> str:
    counts = {v: sum(1 for r in rows if r.diff.verdict == v) for v in (C.BETTER, C.WORSE, C.NO_CHANGE)}
    return (f'<span class="better">{counts[C.BETTER]} better</span>, <span class="worse">{counts[C.WORSE]} worse'
            f'</span>, <span class="same">{counts[C.NO_CHANGE]} no significant change</span>')  # fmt: skip


def _capacity_table(runs: Sequence[RunData], labels: Sequence[str]) -> str:
    parts = []
    for data, label in zip(runs, labels):
        target = (data.run.get("target") or {})
        wl = (data.run.get("workload") or {}).get("name")
        bound = sum(1 for lv in data.levels if lv.client.client_bound)
        head = (f"<h3>{esc(label)}</h3><p class=\"note\">{esc(target.get('model'))} at {esc(target.get('url'))}"
                f" · workload {esc(wl)} · {len(data.levels)} levels · started {esc(data.run.get('started_at'))}"
                + (f' · <span class="bad">{bound} client-bound level(s)</span>' if bound else "") + "</p>")  # fmt: skip
        parts.append(f'<div class="capacity-run">{head}{answer_cards(data.summary)}</div>')
    return "".join(parts)


def render_comparison(
    folders: Sequence[Path], out: Path, *, labels: Sequence[str] | None = None, force: bool = False,
    resamples: int = 2000, min_effect: float = MIN_EFFECT,
) -> Path:  # fmt: skip
    """Write the comparison page of run folders ``folders`` (the first is the baseline)
    to ``out`` and return its path.

    Differences smaller than ``min_effect`` of the baseline are "no significant change"
    (``resamples`` bootstrap draws per cell). Raises
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
        raise ConfigError("the runs used different workloads, so their numbers are not comparable: "
                          + "; ".join(diffs) + " (pass --force to compare anyway)")  # fmt: skip
    levels = common_levels([r.summary for r in runs])
    rows_by_run = [
        [row for pos, (_, _, idx) in enumerate(levels)
         for row in compare_level(runs[0].level_samples(idx[0]), other.level_samples(idx[k]), pos,
                                  resamples=resamples, min_effect=min_effect)]
        for k, other in enumerate(runs[1:], start=1)
    ]  # fmt: skip
    page = Page(title="loadgen comparison — " + " vs ".join(names),
                subtitle=esc(" · ".join(f"{n}: {r.folder}" for n, r in zip(names, runs))))  # fmt: skip
    head = ""
    if diffs:
        head += ('<div class="banner warn" id="workload-warning">⚠ Compared with --force although the workloads '
                 f"differ: {esc('; '.join(diffs))}</div>")  # fmt: skip
    for rows, label in zip(rows_by_run, names[1:]):
        head += _headline(rows, levels, runs[0], label, names[0])
        head += f"<p><b>{esc(label)}</b> vs <b>{esc(names[0])}</b>: {_tally(rows)} across {len(levels)} common level(s).</p>"
    trials = [max((lv.trials.n for lv in r.levels if lv.trials is not None), default=1) for r in runs]
    if min(trials) > 1:
        method = (f'<p class="note" id="method">Verdicts use between-trial variation ({" vs ".join(map(str, trials))} '
                  "trials per level): the difference of the trials' means with its 95% Welch t-interval, which sees "
                  "run-to-run noise that resampling one run cannot. ")
    else:
        method = ('<p class="note" id="method">Verdicts come from 95% bootstrap confidence intervals of the difference '
                  "(latency percentiles: resampled requests or tokens; throughput: resampled time blocks of the "
                  "level; attainment: resampled requests): the noise inside one run, not between runs "
                  "(--trials N measures that). ")
    page.section("summary", "Verdict", head + method + "Lower latency is better, higher throughput is better; an "
                 f"interval that contains 0, or a difference under {100 * min_effect:g}% of the baseline, is no "
                 "significant change.</p>")  # fmt: skip
    page.section("capacity", "Capacity side by side", _capacity_table(runs, names))
    fig = CF.latency_overlay(runs, names)
    page.section("latency", "Latency vs load", '<p class="note">p50 solid (circles), p99 dotted (diamonds); one colour per run.</p>'
                 + (page.figure("cmp-latency", fig, 640) if fig else '<p class="note">No level to plot.</p>'))  # fmt: skip
    fig = CF.throughput_overlay(runs, names)
    page.section("throughput", "Throughput, goodput and SLO attainment vs load",
                 page.figure("cmp-throughput", fig, 420) if fig else '<p class="note">No level to plot.</p>')  # fmt: skip
    if levels:
        mode, value, idx = levels[-1]
        fig = CF.cdf_overlay(runs, names, idx)
        page.section("distributions", f"Distributions at {Load(mode, value).label()}",
                     page.figure("cmp-cdf", fig, 420) if fig else "")  # fmt: skip
        table = _table(levels, runs, names, rows_by_run)
    else:
        table = '<p class="note">The runs share no load level, so no metric can be compared level by level.</p>'
    page.section("table", "Metrics at each common load level", table)
    return write_page(Path(out), page.render())
