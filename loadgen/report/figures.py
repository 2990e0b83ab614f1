"""Plotly figures (plain ``{"data", "layout"}`` dicts) drawn from ``summary.json`` levels.

Every number drawn here is read from the summary as it is (no rounding), so a figure's
data can be checked against the summary; each trace carries ``meta`` naming what it
shows (e.g. ``"ttft_ms.p50"``). User text placed in a figure is escaped by the caller's
helpers (:func:`loadgen.report.page.esc`) because plotly renders some HTML in strings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from loadgen.errors import ConfigError
from loadgen.metrics.catalog import by_slo, metrics
from loadgen.metrics.results import LOAD_MODES, Capacity, LevelSummary, LoadMode, Saturation
from loadgen.metrics.slo import parse_slo
from loadgen.numfmt import fmt
from loadgen.report.error_bars import add_error_bars
from loadgen.report.page import esc
from loadgen.report.plotdata import log_ticks, palette
from loadgen.report.verdict_lines import attainment_confidence, capacity_interval_range

__all__ = [
    "LATENCY_PANELS",
    "base_layout",
    "client_summary",
    "grid",
    "latency_vs_load",
    "load_axis",
    "plotted_levels",
    "throughput_vs_load",
    "windows_over_time",
]

LATENCY_PANELS: tuple[tuple[str, str, str], ...] = (
    ("ttft_ms", "TTFT (ms)", "#0072B2"),
    ("itl_ms", "ITL (ms)", "#D55E00"),
    ("tpot_ms", "TPOT (ms)", "#009E73"),
    ("e2e_ms", "E2E latency (ms)", "#CC79A7"),
)


def _slo_panel(spelling: str) -> str | None:
    """The latency panel an SLO's limit is drawn on (a limit from the scheduled time on its
    metric's panel: ``ttft_queued`` on TTFT's), None for a metric without a panel."""
    metric = by_slo(spelling)
    if metric is None:
        return None
    base = next((m for m in metrics() if m.queued == metric.name), metric)
    return base.name if base.name in {key for key, _, _ in LATENCY_PANELS} else None


def _axis_name(kind: str, k: int) -> str:
    return kind if k == 1 else f"{kind}{k}"


def grid(
    rows: int, cols: int, titles: Sequence[str] = (), *, hgap: float = 0.07, vgap: float = 0.2
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """A layout with ``rows x cols`` subplots (row-major) and a title over each; returns
    it and the ``(xref, yref)`` trace axes of each cell (``"x2"``, ``"y2"``, ...)."""
    layout: dict[str, Any] = {"annotations": []}
    refs: list[tuple[str, str]] = []
    w = (1.0 - hgap * (cols - 1)) / cols
    h = (1.0 - vgap * (rows - 1)) / rows
    for r in range(rows):
        for c in range(cols):
            k = r * cols + c + 1
            x0 = c * (w + hgap)
            y1 = 1.0 - r * (h + vgap)
            xs, ys = _axis_name("x", k), _axis_name("y", k)
            layout[_axis_name("xaxis", k)] = {"domain": [x0, x0 + w], "anchor": ys, "automargin": True}
            layout[_axis_name("yaxis", k)] = {"domain": [y1 - h, y1], "anchor": xs, "automargin": True}
            if k <= len(titles) and titles[k - 1]:
                layout["annotations"].append(
                    {
                        "text": f"<b>{titles[k - 1]}</b>",
                        "xref": "paper",
                        "yref": "paper",
                        "x": x0 + w / 2,
                        "y": y1,
                        "xanchor": "center",
                        "yanchor": "bottom",
                        "showarrow": False,
                        "font": {"size": 13},
                    }
                )
            refs.append((xs, ys))
    return layout, refs


def base_layout(layout: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """Common look: white background, light grid, legend on top, compact margins."""
    out: dict[str, Any] = {
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif", "size": 12},
        "margin": {"l": 60, "r": 20, "t": 50, "b": 100},
        "legend": {"orientation": "h", "yref": "container", "y": 0.005, "yanchor": "bottom", "x": 0},
        "hovermode": "closest",
    }
    out.update(layout or {})
    out.update(kw)
    for key, axis in out.items():
        if (key.startswith(("xaxis", "yaxis"))) and isinstance(axis, dict):
            axis.setdefault("gridcolor", "#eeeeee")
            axis.setdefault("zerolinecolor", "#cccccc")
    return out


def plotted_levels(levels: Sequence[LevelSummary], mode: LoadMode | None = None) -> tuple[LoadMode, list[int]]:
    """Which levels a load axis shows: those of ``mode`` (default: the mode most levels
    use, rate on a tie), sorted by load. Returns the mode and level indices."""
    modes = [lv.load.mode for lv in levels]
    shown = mode if mode is not None else max(LOAD_MODES, key=lambda m: (modes.count(m), m == "rate"))
    idx = [i for i, m in enumerate(modes) if m == shown]
    idx.sort(key=lambda i: float(levels[i].load.value))
    return shown, idx


def load_axis(mode: LoadMode, values: Sequence[float]) -> dict[str, Any]:
    """x axis of offered load; logarithmic when the loads span 8x or more."""
    title = "concurrency (users)" if mode == "concurrency" else "offered rate (req/s)"
    axis: dict[str, Any] = {"title": {"text": title}}
    pos = [v for v in values if v > 0]
    if len(pos) == len(values) and len(pos) >= 3 and max(pos) / min(pos) >= 8:
        axis["type"] = "log"
    if 0 < len(values) <= 12:  # ticks at the levels themselves
        axis["tickvals"] = list(values)
        axis["ticktext"] = [f"{v:.4g}" for v in values]
    elif axis.get("type") == "log":
        axis.update(log_ticks(values))
    return axis


def _stat(level: LevelSummary, key: str, stat: str) -> float | None:
    return level.dist(key).stat(stat)


def _slo_limits(levels: Sequence[LevelSummary]) -> dict[str, list[tuple[str, float]]]:
    """Per latency panel: the SLO texts and limits (ms) the levels were judged by."""
    out: dict[str, list[tuple[str, float]]] = {}
    seen: set[str] = set()
    for lv in levels:
        texts = [*lv.goodput.slos, *(c.slo for c in lv.goodput.checks)]
        for text in texts:
            if text in seen:
                continue
            seen.add(text)
            try:
                slo = parse_slo(text)
            except ConfigError:
                continue
            panel = _slo_panel(slo.metric)
            if panel is not None:
                out.setdefault(panel, []).append((text, slo.limit_ms))
    return out


def _hline(xref: str, yref: str, y: float, colour: str, dash: str = "dash") -> dict[str, Any]:
    return {
        "type": "line",
        "xref": f"{xref} domain",
        "yref": yref,
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"color": colour, "width": 1.5, "dash": dash},
    }


def _vline(xref: str, yref: str, x: float, colour: str, dash: str = "dot") -> dict[str, Any]:
    return {
        "type": "line",
        "xref": xref,
        "yref": f"{yref} domain",
        "x0": x,
        "x1": x,
        "y0": 0,
        "y1": 1,
        "line": {"color": colour, "width": 1.5, "dash": dash},
    }


def _rgba(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


# (stat, band opacity, line width, dash, marker): p90 and p99 differ in dash and marker,
# not only in the band under them
_PERCENTILE_STYLES = (
    ("p50", 0.0, 2.5, "solid", "circle"),
    ("p90", 0.18, 1.5, "dash", "square"),
    ("p99", 0.10, 1.2, "dot", "diamond"),
)


def latency_vs_load(levels: Sequence[LevelSummary]) -> dict[str, Any] | None:
    """TTFT, ITL, TPOT and E2E against load: p50, p90 and p99 with shaded bands, the
    queue-inclusive TTFT p50 for rate levels, and each SLO limit as a dashed line. Levels of
    a non-streamed API (no TTFT, ITL or TPOT) get the E2E panel only."""
    mode, idx = plotted_levels(levels)
    if not idx:
        return None
    x = [levels[i].load.value for i in idx]
    answered = all(levels[i].non_streamed is not None for i in idx)
    panels = LATENCY_PANELS[3:] if answered else LATENCY_PANELS
    layout, refs = grid(1, 1, [panels[0][1]]) if answered else grid(2, 2, [title for _, title, _ in panels])
    data: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    limits = _slo_limits([levels[i] for i in idx])
    for k, ((key, title, colour), (xr, yr)) in enumerate(zip(panels, refs), start=1):
        for stat, alpha, width, dash, symbol in _PERCENTILE_STYLES:
            y = [_stat(levels[i], key, stat) for i in idx]
            ivs = [(levels[i].dist(key).intervals or {}).get(stat) for i in idx]
            curve = add_error_bars(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "x": x,
                    "y": y,
                    "xaxis": xr,
                    "yaxis": yr,
                    "name": stat,
                    "legendgroup": stat,
                    "showlegend": k == 1,
                    "line": {"color": colour, "width": width, "dash": dash},
                    "marker": {"size": 6 if stat == "p50" else 5, "symbol": symbol},
                    "fill": "none" if stat == "p50" else "tonexty",
                    "fillcolor": _rgba(colour, alpha),
                    "meta": f"{key}.{stat}",
                    "hovertemplate": f"{stat} %{{y:.4g}} ms at %{{x}}<extra>{title}</extra>",
                },
                y,
                ivs,
                unit=" ms",
            )
            data.append(curve)
        if key == "ttft_ms" and mode == "rate":
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": x,
                    "y": [_stat(levels[i], "ttft_queued_ms", "p50") for i in idx],
                    "xaxis": xr,
                    "yaxis": yr,
                    "name": "TTFT p50 from scheduled",
                    "line": {"color": "#555", "dash": "dash"},
                    "meta": "ttft_queued_ms.p50",
                }
            )
        for text, limit in limits.get(key, []):
            shapes.append(_hline(xr, yr, limit, "#b91c1c"))
            layout["annotations"].append(
                {
                    "text": f"SLO {esc(text)}",
                    "xref": f"{xr} domain",
                    "yref": yr,
                    "x": 0.01,
                    "y": limit,
                    "yanchor": "bottom",
                    "xanchor": "left",
                    "showarrow": False,
                    "font": {"size": 10, "color": "#b91c1c"},
                }
            )
        layout[_axis_name("xaxis", k)].update(load_axis(mode, x))
        layout[_axis_name("yaxis", k)].update({"title": {"text": "ms"}, "rangemode": "tozero"})
    layout["shapes"] = shapes
    return {"data": data, "layout": base_layout(layout, height=420 if answered else 640)}


def throughput_vs_load(
    levels: Sequence[LevelSummary],
    capacity: Capacity | None,
    saturation: Saturation | None,
    noun: str = "inputs",
) -> dict[str, Any] | None:
    """Output tokens/s, requests/s and goodput, and SLO attainment against load, with the
    attainment target, the capacity (where the attainment crosses it), its interval (a
    shaded band) and the knee. ``noun``: what a non-streamed API's inputs are called
    (``documents`` for rerank and score)."""
    cap_mode = capacity.mode if capacity is not None else None
    mode, idx = plotted_levels(levels, cap_mode)
    if not idx:
        return None
    x = [levels[i].load.value for i in idx]
    answered = all(levels[i].non_streamed is not None for i in idx)  # embeddings, rerank: inputs, no output tokens
    first = f"{noun.capitalize()}/s and input tokens/s (right)" if answered else "Output tokens/s"
    layout, refs = grid(1, 3, [first, "Requests/s and goodput", "SLO attainment (%)"], hgap=0.08)

    def tr(ref: int, y: list[Any], name: str, colour: str, meta: str, dash: str = "solid") -> dict[str, Any]:
        xr, yr = refs[ref]
        # the interval of the value at meta ("throughput.requests_per_s"), where the summary has one
        where, _, what = meta.partition(".")
        ivs = [
            None
            if where not in ("throughput", "goodput")
            else ((levels[i].throughput if where == "throughput" else levels[i].goodput).intervals or {}).get(what)
            for i in idx
        ]
        scale = 100.0 if what == "slo_attainment" else 1.0
        return add_error_bars(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "x": x,
                "y": y,
                "xaxis": xr,
                "yaxis": yr,
                "name": name,
                "line": {"color": colour, "dash": dash},
                "meta": meta,
            },
            [levels[i].metric(meta) for i in idx],
            ivs,
            scale,
            "%" if scale == 100.0 else "",
        )

    thr = [levels[i].throughput for i in idx]
    good = [levels[i].goodput for i in idx]
    att = [g.slo_attainment for g in good]
    data = (
        _answer_rates(levels, idx, tr, noun)
        if answered
        else [
            tr(0, [t.output_tokens_per_s for t in thr], "output tokens/s", "#0072B2", "throughput.output_tokens_per_s"),
            tr(
                0,
                [t.steady.output_tokens_per_s for t in thr],
                "output tokens/s (steady window)",
                "#56B4E9",
                "throughput.steady.output_tokens_per_s",
                "dot",
            ),
        ]
    )
    data += [
        tr(1, [t.requests_per_s for t in thr], "requests/s (ok)", "#009E73", "throughput.requests_per_s"),
        tr(
            1, [g.requests_per_s for g in good], "goodput (req/s meeting the SLOs)", "#E69F00", "goodput.requests_per_s"
        ),
        tr(2, [None if a is None else 100 * a for a in att], "SLO attainment", "#CC79A7", "goodput.slo_attainment"),
    ]
    shapes: list[dict[str, Any]] = []
    target = capacity.target if capacity is not None else None
    if target is not None:
        shapes.append(_hline(refs[2][0], refs[2][1], 100 * target, "#b91c1c"))
        layout["annotations"].append(
            {
                "text": f"target {100 * target:g}%",
                "xref": f"{refs[2][0]} domain",
                "yref": refs[2][1],
                "x": 0.01,
                "y": 100 * target,
                "yanchor": "top",
                "xanchor": "left",
                "showarrow": False,
                "font": {"size": 10, "color": "#b91c1c"},
            }
        )
    if capacity is not None and capacity.mode == mode:
        shapes += _interval_bands(capacity, levels, refs, x)
    marks = []
    if capacity is not None and capacity.status == "ok" and capacity.mode == mode and capacity.value is not None:
        marks.append(("capacity", float(capacity.value), "#b91c1c"))
    if saturation is not None and saturation.found and saturation.mode == mode and saturation.load is not None:
        marks.append(("knee", float(saturation.load), "#6b21a8"))
    log_x = load_axis(mode, x).get("type") == "log"
    for row, (name, value, colour) in enumerate(marks):
        for xr, yr in refs:
            shapes.append(_vline(xr, yr, value, colour))
        # annotations on a log axis take log10 of the position (shapes do not)
        pos = math.log10(value) if log_x and value > 0 else value
        right = value >= max(x)  # at the right edge: write the label to the left of the line
        # each mark's label on its own row (the lines may be close or equal), with a white
        # background so the curve under it stays readable
        layout["annotations"].append(
            {
                "text": f"{name} {fmt(value)}",
                "xref": refs[2][0],
                "yref": f"{refs[2][1]} domain",
                "x": pos,
                "y": 0.02 + 0.11 * row,
                "yanchor": "bottom",
                "xanchor": "right" if right else "left",
                "xshift": -3 if right else 3,
                "showarrow": False,
                "bgcolor": "rgba(255,255,255,0.85)",
                "font": {"size": 10, "color": colour},
            }
        )
    for k in range(1, 4):
        layout[_axis_name("xaxis", k)].update(load_axis(mode, x))
        layout[_axis_name("yaxis", k)].update({"rangemode": "tozero"})
    layout["yaxis3"]["range"] = [0, 105]
    if answered:  # input tokens/s on a second axis over the first panel
        layout["yaxis4"] = {"overlaying": "y", "side": "right", "rangemode": "tozero", "showgrid": False}
    layout["shapes"] = shapes
    return {"data": data, "layout": base_layout(layout, height=420)}


def _answer_rates(levels: Sequence[LevelSummary], idx: Sequence[int], tr: Any, noun: str) -> list[dict[str, Any]]:
    """A non-streamed API's first throughput panel: inputs/s (``noun``/s), and input tokens/s on a right axis."""
    ns = [levels[i].non_streamed for i in idx]
    inputs = tr(0, [n and n.inputs_per_s for n in ns], f"{noun}/s", "#0072B2", "non_streamed.inputs_per_s")
    tokens = tr(
        0,
        [n and n.input_tokens_per_s for n in ns],
        "input tokens/s",
        "#56B4E9",
        "non_streamed.input_tokens_per_s",
        "dot",
    )
    tokens["yaxis"] = "y4"
    return [inputs, tokens]


def _interval_bands(
    capacity: Capacity, levels: Sequence[LevelSummary], refs: Sequence[tuple[str, str]], x: Sequence[float]
) -> list[dict[str, Any]]:
    """The capacity interval as a shaded band in each panel, one legend entry for all
    (clicking it hides them together). An open side reaches the lowest or highest level
    plotted; no band when the summary has no interval or no level decided either side."""
    span = capacity_interval_range(capacity)
    if not span or capacity.interval is None:
        return []
    low, high = capacity.interval
    x0 = float(min(x)) if low is None else float(low)
    x1 = float(max(x)) if high is None else float(high)
    if x0 >= x1:  # an end outside the plotted levels (levels of another load mode)
        return []
    conf = attainment_confidence(levels)
    name = "capacity interval" + ("" if conf is None else f" ({100 * conf:g}%)") + f": {esc(span)}"
    return [
        {
            "type": "rect",
            "xref": xr,
            "yref": f"{yr} domain",
            "x0": x0,
            "x1": x1,
            "y0": 0,
            "y1": 1,
            "fillcolor": _rgba("#b91c1c", 0.12),
            "line": {"width": 0},
            "layer": "below",
            "name": name,
            "legendgroup": "capacity-interval",
            "showlegend": k == 0,
        }
        for k, (xr, yr) in enumerate(refs)
    ]


def windows_over_time(levels: Sequence[LevelSummary]) -> dict[str, Any] | None:
    """Soak and ramp levels: throughput, TTFT, ITL and requests in flight per window."""
    with_windows = [(i, lv.windows) for i, lv in enumerate(levels) if lv.windows]
    if not with_windows:
        return None
    layout, refs = grid(
        2, 2, ["Output tokens/s", "TTFT p50 / p99 (ms)", "ITL p50 / p99 (ms)", "Requests in flight (mean)"]
    )
    colours = palette(len(with_windows))
    data: list[dict[str, Any]] = []
    for colour, (i, w) in zip(colours, with_windows):
        x = [(win.t_start_s + win.t_end_s) / 2 for win in w]
        name = esc(f"level {i + 1}: {levels[i].load.label()}")
        series = [
            (0, "output_tokens_per_s", "solid"),
            (1, "ttft_ms_p50", "solid"),
            (1, "ttft_ms_p99", "dot"),
            (2, "itl_ms_p50", "solid"),
            (2, "itl_ms_p99", "dot"),
            (3, "in_flight_mean", "solid"),
        ]
        for n, (cell, key, dash) in enumerate(series):
            xr, yr = refs[cell]
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": x,
                    "y": [getattr(win, key) for win in w],
                    "xaxis": xr,
                    "yaxis": yr,
                    "name": name,
                    "legendgroup": f"l{i}",
                    "showlegend": n == 0,
                    "line": {"color": colour, "dash": dash},
                    "meta": f"windows.{i}.{key}",
                    "hovertemplate": f"{key} %{{y:.4g}} at %{{x:.1f}} s<extra></extra>",
                }
            )
    for k in range(1, 5):
        layout[_axis_name("xaxis", k)]["title"] = {"text": "seconds since the level started"}
        layout[_axis_name("yaxis", k)]["rangemode"] = "tozero"
    return {"data": data, "layout": base_layout(layout, height=600)}


def client_summary(levels: Sequence[LevelSummary]) -> dict[str, Any] | None:
    """Per level: event-loop lag p50 / p99 / max and send lateness p50 / p99 (log scale)."""
    if not levels:
        return None
    x = [esc(f"{i + 1}: {lv.load.label()}") for i, lv in enumerate(levels)]
    bars = [
        ("loop_lag_ms", "p50", "event-loop lag p50", "#56B4E9"),
        ("loop_lag_ms", "p99", "event-loop lag p99", "#0072B2"),
        ("loop_lag_ms", "max", "event-loop lag max", "#1f2937"),
        ("send_lateness_ms", "p50", "send lateness p50", "#F0E442"),
        ("send_lateness_ms", "p99", "send lateness p99", "#E69F00"),
    ]
    data = [
        {
            "type": "bar",
            "x": x,
            "y": [getattr(lv.client, key).stat(stat) for lv in levels],
            "name": name,
            "marker": {"color": colour},
            "meta": f"client.{key}.{stat}",
        }
        for key, stat, name, colour in bars
    ]
    values = [v for tr in data for v in tr["y"] if v is not None]
    layout = {
        "barmode": "group",
        "xaxis": {"title": {"text": "level"}, "type": "category"},
        "yaxis": {"title": {"text": "ms (log scale)"}, "type": "log", **log_ticks(values)},
    }
    return {"data": data, "layout": base_layout(layout, height=380)}
