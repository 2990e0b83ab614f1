"""Figures of the comparison page: the runs' curves overlaid, one colour per run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadgen.metrics.results import LoadMode
from loadgen.report.figures import LATENCY_PANELS, base_layout, grid, load_axis, plotted_levels
from loadgen.report.page import esc
from loadgen.report.plotdata import ecdf_points, log_ticks, palette, rounded
from loadgen.report.rundata import RunData

__all__ = ["cdf_overlay", "latency_overlay", "shared_mode", "throughput_overlay"]


def _answered(runs: Sequence[RunData]) -> bool:
    """Every run is a non-streamed API's (embeddings, rerank): E2E only, inputs/s for tokens/s."""
    return all(lv.non_streamed is not None for run in runs for lv in run.levels)


def shared_mode(runs: Sequence[RunData]) -> LoadMode:
    """The load mode the overlays use: the first run's main mode."""
    return plotted_levels(runs[0].levels)[0]


def _axis(k: int, kind: str) -> str:
    return kind if k == 1 else f"{kind}{k}"


def latency_overlay(runs: Sequence[RunData], labels: Sequence[str]) -> dict[str, Any] | None:
    """TTFT, ITL, TPOT and E2E p50 (solid) and p99 (dashed) against load, per run."""
    mode = shared_mode(runs)
    answered = _answered(runs)
    panels = LATENCY_PANELS[3:] if answered else LATENCY_PANELS
    layout, refs = grid(1, 1, [panels[0][1]]) if answered else grid(2, 2, [title for _, title, _ in panels])
    colours = palette(len(runs))
    data: list[dict[str, Any]] = []
    all_x: set[float] = set()
    for r, (run, label) in enumerate(zip(runs, labels)):
        _, idx = plotted_levels(run.levels, mode)
        x = [run.levels[i].load.value for i in idx]
        all_x.update(x)
        for k, ((key, _title, _), (xr, yr)) in enumerate(zip(panels, refs)):
            for stat, dash, symbol in (("p50", "solid", "circle"), ("p99", "dot", "diamond")):
                data.append(
                    {
                        "type": "scatter",
                        "mode": "lines+markers",
                        "x": x,
                        "y": [run.levels[i].dist(key).stat(stat) for i in idx],
                        "xaxis": xr,
                        "yaxis": yr,
                        "name": esc(label),
                        "legendgroup": f"run{r}",
                        "showlegend": k == 0 and stat == "p50",
                        "line": {"color": colours[r], "dash": dash},
                        "marker": {"symbol": symbol},
                        "meta": f"{r}.{key}.{stat}",
                        "hovertemplate": f"{stat} %{{y:.4g}} ms at %{{x}}<extra>{esc(label)}</extra>",
                    }
                )
    if not all_x:
        return None
    for k in range(1, len(panels) + 1):
        layout[_axis(k, "xaxis")].update(load_axis(mode, sorted(all_x)))
        layout[_axis(k, "yaxis")].update({"title": {"text": "ms"}, "rangemode": "tozero"})
    return {"data": data, "layout": base_layout(layout, height=420 if answered else 640)}


def throughput_overlay(runs: Sequence[RunData], labels: Sequence[str]) -> dict[str, Any] | None:
    """Output tokens/s, goodput and SLO attainment against load per run, each run's
    capacity as a dotted line of its colour."""
    mode = shared_mode(runs)
    answered = _answered(runs)
    first = "Inputs/s" if answered else "Output tokens/s"
    layout, refs = grid(1, 3, [first, "Goodput (req/s meeting the SLOs)", "SLO attainment (%)"], hgap=0.08)
    colours = palette(len(runs))
    data: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    all_x: set[float] = set()
    for r, (run, label) in enumerate(zip(runs, labels)):
        _, idx = plotted_levels(run.levels, mode)
        lv = [run.levels[i] for i in idx]
        x = [v.load.value for v in lv]
        all_x.update(x)
        att = [v.goodput.slo_attainment for v in lv]
        series = (
            [v.non_streamed and v.non_streamed.inputs_per_s for v in lv]
            if answered
            else [v.throughput.output_tokens_per_s for v in lv],
            [v.goodput.requests_per_s for v in lv],
            [None if a is None else 100 * a for a in att],
        )
        for k, (y, (xr, yr), meta) in enumerate(zip(series, refs, ("output_tokens_per_s", "goodput", "attainment"))):
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "x": x,
                    "y": y,
                    "xaxis": xr,
                    "yaxis": yr,
                    "name": esc(label),
                    "legendgroup": f"run{r}",
                    "showlegend": k == 0,
                    "line": {"color": colours[r]},
                    "meta": f"{r}.{meta}",
                }
            )
        cap = run.summary.capacity
        if cap is not None and cap.status == "ok" and cap.mode == mode and cap.value is not None:
            for xr, yr in refs:
                shapes.append(
                    {
                        "type": "line",
                        "xref": xr,
                        "yref": f"{yr} domain",
                        "x0": cap.value,
                        "x1": cap.value,
                        "y0": 0,
                        "y1": 1,
                        "line": {"color": colours[r], "dash": "dot", "width": 1.5},
                    }
                )
    if not all_x:
        return None
    for k in range(1, 4):
        layout[_axis(k, "xaxis")].update(load_axis(mode, sorted(all_x)))
        layout[_axis(k, "yaxis")]["rangemode"] = "tozero"
    layout["yaxis3"]["range"] = [0, 105]
    layout["shapes"] = shapes
    return {"data": data, "layout": base_layout(layout, height=420)}


def cdf_overlay(runs: Sequence[RunData], labels: Sequence[str], level_idx: Sequence[int]) -> dict[str, Any] | None:
    """CDFs of TTFT, ITL and TPOT at one shared level (``level_idx[r]`` in run ``r``); of E2E
    when every run is a non-streamed API's."""
    answered = _answered(runs)
    titles = ["E2E latency (ms)"] if answered else ["TTFT (ms)", "ITL (ms)", "TPOT (ms)"]
    layout, refs = grid(1, len(titles), titles, hgap=0.06)
    colours = palette(len(runs))
    data: list[dict[str, Any]] = []
    for r, (run, label, i) in enumerate(zip(runs, labels, level_idx)):
        rows = run.level_rows(i) & run.frame["ok"].to_numpy(dtype=bool)
        samples = (
            (run.frame["e2e_ms"].to_numpy()[rows],)
            if answered
            else (run.frame["ttft_ms"].to_numpy()[rows], run.ev.itl_ms(rows), run.frame["tpot_ms"].to_numpy()[rows])
        )
        for k, (values, (xr, yr)) in enumerate(zip(samples, refs)):
            x, y = ecdf_points(values)
            if x.size == 0:
                continue
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": rounded(x, 3),
                    "y": rounded(y, 5),
                    "xaxis": xr,
                    "yaxis": yr,
                    "name": esc(label),
                    "legendgroup": f"run{r}",
                    "showlegend": k == 0,
                    "line": {"color": colours[r], "shape": "hv"},
                    "meta": f"{r}.cdf.{k}",
                }
            )
    if not data:
        return None
    for k, (xr, _) in enumerate(refs, start=1):
        xs = [v for tr in data if tr["xaxis"] == xr for v in tr["x"] if v is not None]
        layout[_axis(k, "xaxis")].update({"type": "log", "title": {"text": "ms (log scale)"}, **log_ticks(xs)})
        layout[_axis(k, "yaxis")].update({"range": [0, 1.02], "tickformat": ".0%"})
    return {"data": data, "layout": base_layout(layout, height=420)}
