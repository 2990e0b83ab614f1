"""Figures over the run's time from its requests (records.jsonl): ITL over time with
long-prompt arrivals marked, send lateness and event-loop lag, failures by kind.

Time series are binned and scatters keep each time bin's peak plus evenly spaced points
(at most :data:`~loadgen.report.request_figures.SCATTER_MAX`); times are seconds since the
run started, and each level's span is a light band behind the panel (:func:`level_bands`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.metrics.per_request import EventArrays
from loadgen.report.figures import base_layout
from loadgen.report.page import esc
from loadgen.report.plotdata import (
    F64,
    NO_BIN,
    bin_edges,
    bin_ids,
    keep_peaks,
    log_ticks,
    palette,
    quantiles_by_bin,
    rounded,
    spread,
)
from loadgen.report.request_figures import SCATTER_MAX
from loadgen.report.rundata import RunData

__all__ = ["failures_over_time", "itl_over_time", "lateness_over_time", "level_bands", "long_prompts"]


def level_bands(data: RunData, xref: str = "x", yref: str = "paper") -> list[dict[str, Any]]:
    """A light band behind each level's time span (first send to last completion)."""
    frame = data.frame
    shapes = []
    levels = frame["level"].to_numpy()
    sent = frame["sent_ns"].to_numpy()
    done = frame["done_ns"].to_numpy()
    for i in range(len(data.levels)):
        rows = (levels == i) & (sent != 0)
        if not rows.any():
            continue
        t0 = float(data.seconds(sent[rows].min()))
        t1 = float(data.seconds(np.maximum(done[rows], sent[rows]).max()))
        shapes.append(
            {
                "type": "rect",
                "xref": xref,
                "yref": yref,
                "x0": round(t0, 3),
                "x1": round(t1, 3),
                "y0": 0,
                "y1": 1,
                "fillcolor": "rgba(37,99,235,0.06)" if i % 2 == 0 else "rgba(0,0,0,0.03)",
                "line": {"width": 0},
                "layer": "below",
            }
        )
    return shapes


def long_prompts(prompt_tokens: F64, classes: npt.NDArray[np.str_]) -> tuple[npt.NDArray[np.bool_], str] | None:
    """Which requests have long prompts, and the rule in words (None when none are).

    With several request classes, the long ones are the requests of the class whose
    median prompt is the longest, when that median is at least twice every other class's
    (the workload's own long class); with one class, prompts at least twice the run's
    median length."""
    known = ~np.isnan(prompt_tokens)
    names = sorted(set(classes[known].tolist()))
    if len(names) > 1:
        medians = {n: float(np.median(prompt_tokens[known & (classes == n)])) for n in names}
        longest = max(names, key=lambda n: medians[n])
        others = max(v for n, v in medians.items() if n != longest)
        if medians[longest] < 2 * others:
            return None
        mask = classes == longest
        lo, hi = np.nanmin(prompt_tokens[mask]), np.nanmax(prompt_tokens[mask])
        return mask, f"class {longest!r}, prompts {lo:,.0f}–{hi:,.0f} tokens: the workload's long class"
    p = prompt_tokens[known]
    if p.size == 0:
        return None
    threshold = 2.0 * float(np.median(p))
    mask = known & (prompt_tokens >= threshold)
    if threshold <= 0 or not mask.any():
        return None
    return mask, f"prompts ≥ {threshold:,.0f} tokens, twice the median"


def itl_over_time(data: RunData) -> tuple[dict[str, Any] | None, str]:
    """ITL p50 / p99 / max per time bin over the whole run, long-prompt arrivals marked.
    Returns the figure and a sentence saying what counts as long."""
    frame = data.frame
    ok = frame["ok"].to_numpy(dtype=bool)
    ev = data.ev
    gaps = ev.gap_mask(ok)  # the chunks whose per-token ITL are the samples (ch_n of each)
    if not gaps.any():
        return None, "No inter-token gaps (no successful request had two tokens)."
    lo_ns = ev.ch_t.min(where=gaps, initial=np.iinfo(np.int64).max)
    hi_ns = ev.ch_t.max(where=gaps, initial=np.iinfo(np.int64).min)
    edges = bin_edges(float(data.seconds(lo_ns)), float(data.seconds(hi_ns)))
    # chunk by chunk rather than token by token, a block at a time: a run of 100M
    # tokens needs two bytes a chunk here, not a few float arrays of 100M
    ids = np.full(gaps.size, NO_BIN, dtype=np.uint16)
    for c0 in range(0, gaps.size, 1 << 22):
        block = slice(c0, c0 + (1 << 22))
        ids[block] = np.where(gaps[block], bin_ids(data.seconds(ev.ch_t[block]), edges), NO_BIN)
    del gaps
    centres = (edges[:-1] + edges[1:]) / 2
    qs, top = quantiles_by_bin(ids, edges.size - 1, lambda at: _itl_of(ev, at), (50, 99), counts=ev.ch_n)
    data_: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": rounded(centres, 3),
            "y": rounded(v, 3),
            "name": name,
            "line": {"color": colour, "width": w},
            "connectgaps": False,
            "meta": meta,
        }
        for name, v, colour, w, meta in (
            ("ITL max", top, "#d1d5db", 1, "itl_time.max"),
            ("ITL p99", qs[99], "#D55E00", 1.5, "itl_time.p99"),
            ("ITL p50", qs[50], "#0072B2", 2, "itl_time.p50"),
        )
    ]
    prompt = frame["prompt_tokens"].to_numpy(dtype=np.float64)
    prompt = np.where(np.isnan(prompt), frame["target_prompt_tokens"].to_numpy(dtype=np.float64), prompt)
    found = long_prompts(prompt, frame["request_class"].to_numpy(dtype=str))
    sent = frame["sent_ns"].to_numpy()
    if found is None:
        note = (
            "No class of the workload has prompts twice as long as the others' (nor does any prompt reach "
            "twice the median): no long-prompt arrivals to mark."
        )
    else:
        mask, rule = found
        longs = np.flatnonzero(mask & (sent != 0))
        pick = longs[spread(longs.size, SCATTER_MAX)]
        data_.append(
            {
                "type": "scatter",
                "mode": "markers",
                "x": rounded(data.seconds(sent[pick]), 3),
                "y": [1.0] * pick.size,
                "yaxis": "y2",
                "name": esc(f"long prompt sent ({rule.split(':')[0]})"),
                "text": [f"{v:,.0f} prompt tokens" for v in prompt[pick]],
                "hoverinfo": "x+text",
                "marker": {"symbol": "triangle-down", "size": 8, "color": "#6b21a8"},
                "meta": "itl_time.long",
            }
        )
        note = (
            f"{longs.size} long prompts ({rule}) marked where they were sent: a decode stall right after them "
            "is what chunked prefill removes."
        )
    itl_values = [v for t in data_ for v in t["y"] if v is not None]
    layout = {
        "xaxis": {"title": {"text": "seconds since the run started"}},
        "yaxis": {"title": {"text": "ITL (ms, log scale)"}, "type": "log", **log_ticks(itl_values)},
        "yaxis2": {"overlaying": "y", "range": [0, 1.05], "visible": False, "fixedrange": True},
        "shapes": level_bands(data),
    }
    return {"data": data_, "layout": base_layout(layout, height=420)}, note


def _itl_of(ev: EventArrays, at: npt.NDArray[np.int64]) -> F64:
    """The per-token ITL of chunks ``at`` (none a record's first), few temporaries."""
    itl = ev.gap_ms(at)
    itl /= ev.ch_n[at]
    return itl


def lateness_over_time(data: RunData) -> dict[str, Any] | None:
    """Send lateness (sent − scheduled) of each request over time, and the runner's
    event-loop lag when a level's summary carries it as a series
    (``level.client.loop_lag_over_time``: bin start in seconds since the run's clock
    anchor, largest lag in the bin)."""
    frame = data.frame
    sent = frame["sent_ns"].to_numpy()
    late = frame["send_lateness_ms"].to_numpy(dtype=np.float64)
    rows = np.flatnonzero((sent != 0) & ~np.isnan(late))
    traces: list[dict[str, Any]] = []
    if rows.size:
        t = data.seconds(sent[rows])
        pick = keep_peaks(t, late[rows], SCATTER_MAX)
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "x": rounded(t[pick], 3),
                "y": rounded(np.maximum(late[rows][pick], 1e-3), 3),
                "name": "send lateness (ms)",
                "marker": {"size": 4, "color": "#E69F00", "opacity": 0.7},
                "meta": "client.send_lateness",
            }
        )
    for i, lv in enumerate(data.levels):
        series = lv.client.loop_lag_over_time
        if series is not None and series.t_s:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": series.t_s,
                    "y": series.max_ms,
                    "name": "event-loop lag max (ms)",
                    "legendgroup": "lag",
                    "showlegend": i == 0,
                    "line": {"color": "#0072B2", "width": 1},
                    "meta": f"client.loop_lag.{i}",
                }
            )
        workers = lv.client.workers or []
        if len(workers) < 2:
            workers = []  # one sender: its line is the level's
        colours = palette(len(workers) + 1)[1:]
        for wh, colour in zip(workers, colours):  # worker processes: one line each
            ws = wh.loop_lag_over_time
            if ws is not None and ws.t_s:
                traces.append(
                    {
                        "type": "scatter",
                        "mode": "lines",
                        "x": ws.t_s,
                        "y": ws.max_ms,
                        "name": f"worker {wh.worker}: event-loop lag max (ms)",
                        "legendgroup": f"w{wh.worker}",
                        "showlegend": i == 0,
                        "line": {"color": colour, "width": 1},
                        "meta": f"client.workers.{wh.worker}.loop_lag.{i}",
                    }
                )
    if not traces:
        return None
    values = [v for t in traces for v in t["y"] if v is not None]
    layout = {
        "xaxis": {"title": {"text": "seconds since the run started"}},
        "yaxis": {"title": {"text": "ms (log scale)"}, "type": "log", **log_ticks(values)},
        "shapes": level_bands(data),
    }
    return {"data": traces, "layout": base_layout(layout, height=380)}


def failures_over_time(data: RunData) -> dict[str, Any] | None:
    """Failed requests per time bin (by completion time), stacked by kind."""
    frame = data.frame
    ok = frame["ok"].to_numpy(dtype=bool)
    if ok.all():
        return None
    done = frame["done_ns"].to_numpy()
    sent = frame["sent_ns"].to_numpy()
    end = np.where(done != 0, done, sent)
    t_all = data.seconds(end[end != 0])
    if t_all.size == 0:
        return None
    edges = bin_edges(0.0 if t_all.min() >= 0 else float(t_all.min()), float(t_all.max()), max_bins=150)
    centres = (edges[:-1] + edges[1:]) / 2
    status = frame["status"].to_numpy()
    traces = []
    colours = palette(8)[1:]
    for k, kind in enumerate(sorted(set(status[~ok].tolist()))):
        rows = (status == kind) & (end != 0)
        counts, _ = np.histogram(data.seconds(end[rows]), bins=edges)
        traces.append(
            {
                "type": "bar",
                "x": rounded(centres, 3),
                "y": counts.tolist(),
                "name": esc(kind),
                "marker": {"color": colours[k % len(colours)]},
                "meta": f"failures.{kind}",
            }
        )
    width = float(edges[1] - edges[0])
    layout = {
        "barmode": "stack",
        "bargap": 0.05,
        "xaxis": {"title": {"text": "seconds since the run started"}},
        "yaxis": {"title": {"text": f"failed requests per {width:g} s"}},
        "shapes": level_bands(data),
    }
    return {"data": traces, "layout": base_layout(layout, height=360)}
