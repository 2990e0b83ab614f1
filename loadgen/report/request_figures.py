"""Figures drawn from the per-request data of a run (records.jsonl) and server metrics.

Each keeps the page small: CDFs carry a few hundred exact ECDF points, time series are
binned, scatters keep each time bin's peak plus evenly spaced points, the timeline shows
at most ``TIMELINE_MAX`` requests per level. Times are seconds since the run started.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.metrics.energy import energy_j
from loadgen.metrics.per_request import EventArrays
from loadgen.metrics.summary import level_window_ns
from loadgen.report.figures import base_layout, grid
from loadgen.report.page import esc
from loadgen.report.plotdata import (
    F64,
    NO_BIN,
    bin_edges,
    bin_ids,
    ecdf_points,
    keep_peaks,
    log_ticks,
    palette,
    quantiles_by_bin,
    rounded,
    spread,
)
from loadgen.report.rundata import RunData

__all__ = [
    "SCATTER_MAX",
    "TIMELINE_MAX",
    "TIMELINE_TOTAL",
    "cdfs",
    "default_timeline_level",
    "failures_over_time",
    "itl_over_time",
    "lateness_over_time",
    "long_prompts",
    "server_metrics",
    "timeline",
    "tokens_and_lengths",
]

TIMELINE_MAX = 2000  # requests drawn per level
TIMELINE_TOTAL = 6000  # and over all levels (each level keeps at least 500)
SCATTER_MAX = 2500
_PHASES = (
    ("waiting to be sent", "#9ca3af"),
    ("prefill: sent → first token", "#D55E00"),
    ("decode: first → last token", "#0072B2"),
    ("failed: sent → end", "#b91c1c"),
)


def _names(data: RunData) -> list[str]:
    return [esc(f"{i + 1}: {lv.load.label()}") for i, lv in enumerate(data.levels)]


def _level_bands(data: RunData, xref: str = "x", yref: str = "paper") -> list[dict[str, Any]]:
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


def cdfs(data: RunData) -> dict[str, Any] | None:
    """Per level, the empirical CDFs of TTFT, ITL and TPOT (log-x), successful requests."""
    if not data.levels or data.frame.empty:
        return None
    layout, refs = grid(1, 3, ["TTFT (ms)", "ITL (ms)", "TPOT (ms)"], hgap=0.06)
    ok = data.frame["ok"].to_numpy(dtype=bool)
    traces: list[dict[str, Any]] = []
    colours = palette(len(data.levels))
    for i, name in enumerate(_names(data)):
        rows = data.level_rows(i) & ok
        if not rows.any():
            continue
        samples = (
            data.frame["ttft_ms"].to_numpy()[rows],
            data.ev.itl_ms(rows),
            data.frame["tpot_ms"].to_numpy()[rows],
        )
        for k, (values, (xr, yr), key) in enumerate(zip(samples, refs, ("ttft_ms", "itl_ms", "tpot_ms"))):
            x, y = ecdf_points(values)
            if x.size == 0:
                continue
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": rounded(x, 3),
                    "y": rounded(y, 5),
                    "xaxis": xr,
                    "yaxis": yr,
                    "name": name,
                    "legendgroup": f"l{i}",
                    "showlegend": k == 0,
                    "line": {"color": colours[i], "shape": "hv", "width": 1.6},
                    "meta": f"cdf.{i}.{key}",
                    "hovertemplate": "%{x:.4g} ms: %{y:.2%}<extra>level " + name + "</extra>",
                }
            )
    for k, (xr, _) in enumerate(refs, start=1):
        xs = [v for t in traces if t["xaxis"] == xr for v in t["x"] if v is not None]
        layout["xaxis" if k == 1 else f"xaxis{k}"].update(
            {"type": "log", "title": {"text": "ms (log scale)"}, **log_ticks(xs)}
        )
        layout["yaxis" if k == 1 else f"yaxis{k}"].update({"range": [0, 1.02], "tickformat": ".0%"})
    return {"data": traces, "layout": base_layout(layout, height=420)}


def default_timeline_level(data: RunData) -> int:
    """The level the timeline opens on: the knee if one was found, else the highest load."""
    sat = data.summary.saturation
    levels = data.levels
    if sat is not None and sat.found and sat.index is not None:
        for i, lv in enumerate(levels):
            if lv.load.mode == sat.mode and lv.load.value == sat.load:
                return i
    return max(range(len(levels)), key=lambda i: (float(levels[i].load.value), i), default=0)


def _segments(starts: F64, ends: F64, rows: F64) -> tuple[list[Any], list[Any]]:
    """Horizontal segments as one line trace: x = [s, e, null, ...], y = [r, r, null, ...]."""
    keep = ~(np.isnan(starts) | np.isnan(ends))
    s, e, r = starts[keep], ends[keep], rows[keep]
    x = np.column_stack([s, e, np.full(s.size, np.nan)]).ravel()
    y = np.column_stack([r, r, np.full(r.size, np.nan)]).ravel()
    return rounded(x, 4), rounded(y, 0)


def timeline(data: RunData, max_requests: int = TIMELINE_MAX) -> dict[str, Any] | None:
    """Each request a bar: scheduled → sent → first token → last token, coloured by
    phase; one level at a time (a menu switches), at most ``max_requests`` per level
    (fewer when many levels share :data:`TIMELINE_TOTAL`)."""
    frame = data.frame
    if frame.empty or not data.levels:
        return None
    max_requests = min(max_requests, max(500, TIMELINE_TOTAL // len(data.levels)))
    chosen = default_timeline_level(data)
    names = _names(data)
    traces: list[dict[str, Any]] = []
    owners: list[int] = []
    shown: dict[int, tuple[int, int]] = {}
    sched_all = frame["scheduled_ns"].to_numpy()
    for i in range(len(data.levels)):
        rows = np.flatnonzero(data.level_rows(i) & (frame["sent_ns"].to_numpy() != 0))
        if rows.size == 0:
            continue
        rows = rows[np.argsort(sched_all[rows], kind="stable")]
        pick = rows[spread(rows.size, max_requests)]
        shown[i] = (pick.size, rows.size)
        sub = frame.iloc[pick]
        t0 = float(sub["scheduled_ns"].min())

        def sec(col: str) -> F64:
            v = sub[col].to_numpy().astype(np.float64)  # noqa: B023 - used in this iteration only
            return np.where(v == 0, np.nan, (v - t0) / 1e9)  # noqa: B023

        sched, sent, first, last, done = (
            sec("scheduled_ns"),
            sec("sent_ns"),
            sec("first_token_ns"),
            sec("last_token_ns"),
            sec("done_ns"),
        )
        ok = sub["ok"].to_numpy(dtype=bool)
        ypos = np.arange(pick.size, dtype=np.float64)
        if pick.size < rows.size:  # y = the request's rank among all of the level's requests
            ypos = np.round(np.linspace(0, rows.size - 1, pick.size))
        no_first = np.isnan(first)
        phases = (
            (sched, sent),
            (np.where(ok, sent, np.nan), np.where(ok, np.where(no_first, done, first), np.nan)),
            (np.where(ok, first, np.nan), np.where(ok, last, np.nan)),
            (np.where(ok, np.nan, sent), np.where(ok, np.nan, done)),
        )
        for (label, colour), (a, b) in zip(_PHASES, phases):
            x, y = _segments(a, b, ypos)
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": x,
                    "y": y,
                    "name": label,
                    "legendgroup": label,
                    "line": {"color": colour, "width": 2},
                    "visible": i == chosen,
                    "meta": f"timeline.{i}.{label.split(':')[0]}",
                    "hoverinfo": "x+name",
                }
            )
            owners.append(i)
    if not traces:
        return None
    buttons = []
    for i in sorted(shown):
        n_shown, n_all = shown[i]
        note = f" ({n_shown} of {n_all} requests)" if n_shown < n_all else f" ({n_all} requests)"
        buttons.append(
            {
                "label": f"level {names[i]}",
                "method": "update",
                "args": [{"visible": [o == i for o in owners]}, {"title": {"text": f"Level {names[i]}{note}"}}],
            }
        )
    n_shown, n_all = shown.get(chosen, (0, 0))
    note = f" ({n_shown} of {n_all} requests)" if n_shown < n_all else f" ({n_all} requests)"
    layout = {
        "title": {"text": f"Level {names[chosen]}{note}", "x": 0.01, "xanchor": "left"},
        "xaxis": {"title": {"text": "seconds since the level's first scheduled request"}},
        "yaxis": {"title": {"text": "request (in scheduled order)"}, "autorange": "reversed"},
        "updatemenus": [
            {
                "buttons": buttons,
                "direction": "down",
                "x": 1.0,
                "xanchor": "right",
                "y": 1.12,
                "yanchor": "top",
                "active": sorted(shown).index(chosen) if chosen in shown else 0,
            }
        ],
        "margin": {"t": 70},
    }
    return {"data": traces, "layout": base_layout(layout, height=560)}


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
        "shapes": _level_bands(data),
    }
    return {"data": data_, "layout": base_layout(layout, height=420)}, note


def _itl_of(ev: EventArrays, at: npt.NDArray[np.int64]) -> F64:
    """The per-token ITL of chunks ``at`` (none a record's first), few temporaries."""
    itl = ev.gap_ms(at)
    itl /= ev.ch_n[at]
    return itl


def tokens_and_lengths(data: RunData) -> dict[str, Any] | None:
    """Tokens per SSE event (share of events by size) and coalesced reads per level,
    and output length achieved against requested (one point per request, sampled)."""
    levels = data.levels
    if not levels:
        return None
    layout, refs = grid(
        1,
        3,
        [
            "Tokens per SSE event (share of events)",
            "Coalesced events per level",
            "Output tokens: achieved vs requested",
        ],
        hgap=0.08,
    )
    names = _names(data)
    colours = palette(len(levels))
    ok = data.frame["ok"].to_numpy(dtype=bool)
    cats = ["1", "2", "3", "4", "5–8", "9–16", ">16"]
    bounds = np.array([1, 2, 3, 4, 8, 16])
    traces: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        rows = data.level_rows(i) & ok
        n = data.ev.ev_n[data.ev.event_mask(rows)]
        if n.size == 0:
            continue
        counts = np.bincount(np.searchsorted(bounds, n, side="left"), minlength=len(cats))
        traces.append(
            {
                "type": "bar",
                "x": cats,
                "y": rounded(counts / n.size, 4),
                "name": name,
                "legendgroup": f"l{i}",
                "marker": {"color": colours[i]},
                "xaxis": refs[0][0],
                "yaxis": refs[0][1],
                "meta": f"tokens_per_event.{i}",
            }
        )
    coalesced = [lv.events.coalesced_events for lv in levels]
    if any(coalesced):
        traces.append(
            {
                "type": "bar",
                "x": names,
                "y": coalesced,
                "marker": {"color": colours},
                "name": "coalesced events",
                "showlegend": False,
                "xaxis": refs[1][0],
                "yaxis": refs[1][1],
                "meta": "events.coalesced_events",
            }
        )
    else:  # an empty panel would show an axis from -1 to 1: say what it would have shown
        layout["xaxis2"]["visible"] = False
        layout["yaxis2"]["visible"] = False
        layout["annotations"].append(
            {
                "text": "no coalesced events<br>(every event arrived in a read of its own)",
                "xref": "x2 domain",
                "yref": "y2 domain",
                "x": 0.5,
                "y": 0.5,
                "showarrow": False,
                "font": {"size": 13, "color": "#6b7280"},
                "name": "no-coalesced",
            }
        )
    target = data.frame["target_output_tokens"].to_numpy(dtype=np.float64)
    got = data.frame["output_tokens"].to_numpy(dtype=np.float64)
    rows = np.flatnonzero(ok)
    pick = rows[spread(rows.size, SCATTER_MAX)]
    lv_of = data.frame["level"].to_numpy()[pick]
    if pick.size:
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "x": rounded(target[pick], 0),
                "y": rounded(got[pick], 0),
                "marker": {"color": [colours[int(v) % len(colours)] for v in lv_of], "size": 5, "opacity": 0.6},
                "name": "requests",
                "showlegend": False,
                "xaxis": refs[2][0],
                "yaxis": refs[2][1],
                "meta": "lengths.requests",
                "hovertemplate": "requested %{x}, got %{y}<extra></extra>",
            }
        )
        hi = float(max(np.nanmax(target[pick]), np.nanmax(got[pick]), 1.0))
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": [0, hi],
                "y": [0, hi],
                "name": "achieved = requested",
                "line": {"color": "#6b7280", "dash": "dash"},
                "xaxis": refs[2][0],
                "yaxis": refs[2][1],
                "showlegend": False,
                "hoverinfo": "skip",
            }
        )
    layout["xaxis"].update({"title": {"text": "tokens in one event"}, "type": "category"})
    layout["yaxis"].update({"tickformat": ".0%", "rangemode": "tozero"})
    layout["xaxis2"]["type"] = "category"
    layout["xaxis3"]["title"] = {"text": "requested (max_tokens)"}
    layout["yaxis3"]["title"] = {"text": "received"}
    layout["barmode"] = "group"
    return {"data": traces, "layout": base_layout(layout, height=420)}


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
        "shapes": _level_bands(data),
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
        "shapes": _level_bands(data),
    }
    return {"data": traces, "layout": base_layout(layout, height=360)}


def _series(lines: Sequence[dict[str, Any]], key: str) -> list[float | None]:
    out: list[float | None] = []
    for line in lines:
        v = line.get(key)
        out.append(float(v) if isinstance(v, (int, float)) else None)
    return out


def _timeline_axes(
    data: RunData, layout: dict[str, Any], refs: Sequence[tuple[str, str]], percent: Sequence[int] = ()
) -> None:
    """Panels over the run's time: seconds on every x axis, y from zero (0-105 for the
    ``percent`` panels, counted from 1), the levels as bands behind every panel."""
    for k in range(1, len(refs) + 1):
        layout["xaxis" if k == 1 else f"xaxis{k}"]["title"] = {"text": "seconds since the run started"}
        layout["yaxis" if k == 1 else f"yaxis{k}"]["rangemode"] = "tozero"
    for k in percent:
        layout["yaxis" if k == 1 else f"yaxis{k}"]["range"] = [0, 105]
    shapes = []
    for xr, yr in refs:
        shapes.extend(_level_bands(data, xr, f"{yr} domain"))
    layout["shapes"] = shapes


def level_energy(data: RunData) -> list[tuple[str, float | None, float | None]]:
    """Per level: its label, mean power (W) and energy per output token (J), over the part
    of its window that the power samples cover (None when they cover none of it)."""
    lines = [ln for ln in data.server if isinstance(ln.get("power_w"), (int, float))]
    if len(lines) < 2:
        return []
    t = np.array([ln["t_ns"] for ln in lines], dtype=np.int64)
    p = np.array([ln["power_w"] for ln in lines], dtype=np.float64)
    ev = data.ev
    out = []
    for i, level in enumerate(data.levels):
        rows = data.frame[data.level_rows(i)]
        window = level_window_ns(rows)
        watts = joules = None
        if window is not None:
            lo, hi = max(window[0], int(t.min())), min(window[1], int(t.max()))
            energy = energy_j(t, p, lo, hi) if hi > lo else None
            if energy is not None:
                watts = energy / ((hi - lo) / 1e9)
                tokens = float(ev.ch_n[(ev.ch_t >= lo) & (ev.ch_t <= hi)].sum())
                joules = energy / tokens if tokens > 0 else None
        out.append((level.load.label(), watts, joules))
    return out


def gpu_telemetry(data: RunData) -> dict[str, Any] | None:
    """GPU utilisation and power over time (DCGM names, scraped), with each level's
    energy per output token in the title; None when nothing was scraped."""
    lines = [ln for ln in data.server if "gpu_util" in ln or "power_w" in ln]
    if not lines:
        return None
    pick = spread(len(lines), 5000)
    lines = [lines[int(i)] for i in pick]
    t = rounded(data.seconds(np.array([ln["t_ns"] for ln in lines], dtype=np.int64)), 3)
    util = [None if v is None else round(100 * v, 2) for v in _series(lines, "gpu_util")]
    layout, refs = grid(1, 2, ["GPU utilisation (%, mean over GPUs)", "Power (W, all GPUs)"])
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": t,
            "y": util,
            "name": "GPU utilisation",
            "line": {"color": "#0072B2"},
            "xaxis": refs[0][0],
            "yaxis": refs[0][1],
            "meta": "gpu.util",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": t,
            "y": _series(lines, "power_w"),
            "name": "power",
            "line": {"color": "#D55E00"},
            "xaxis": refs[1][0],
            "yaxis": refs[1][1],
            "meta": "gpu.power_w",
        },
    ]
    _timeline_axes(data, layout, refs, percent=(1,))
    return {"data": traces, "layout": base_layout(layout, height=380)}


def server_metrics(data: RunData) -> dict[str, Any] | None:
    """Scraped server metrics over time: running and waiting requests, KV-cache usage,
    prefix-cache hit rate and generated tokens/s (from the counter, when exposed)."""
    lines = data.server
    if not lines:
        return None
    pick = spread(len(lines), 5000)
    lines = [lines[int(i)] for i in pick]
    t = rounded(data.seconds(np.array([ln["t_ns"] for ln in lines], dtype=np.int64)), 3)
    layout, refs = grid(
        2,
        2,
        [
            "Requests running / waiting",
            "KV-cache usage (%)",
            "Prefix-cache hit rate (%)",
            "Generated tokens/s (server counter)",
        ],
    )

    def pct(values: list[float | None]) -> list[float | None]:
        return [None if v is None else round(100 * v, 3) for v in values]

    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": t,
            "y": _series(lines, "running"),
            "name": "running",
            "line": {"color": "#0072B2"},
            "xaxis": refs[0][0],
            "yaxis": refs[0][1],
            "meta": "server.running",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": t,
            "y": _series(lines, "waiting"),
            "name": "waiting",
            "line": {"color": "#D55E00"},
            "xaxis": refs[0][0],
            "yaxis": refs[0][1],
            "meta": "server.waiting",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": t,
            "y": pct(_series(lines, "kv_usage")),
            "name": "KV-cache usage",
            "line": {"color": "#009E73"},
            "xaxis": refs[1][0],
            "yaxis": refs[1][1],
            "meta": "server.kv_usage",
        },
        {
            "type": "scatter",
            "mode": "lines+markers",
            "x": t,
            "y": pct(_series(lines, "prefix_hit_rate")),
            "name": "prefix-cache hit rate",
            "line": {"color": "#CC79A7"},
            "marker": {"size": 3},
            "xaxis": refs[2][0],
            "yaxis": refs[2][1],
            "meta": "server.prefix_hit_rate",
        },
    ]
    gen = [(ln["t_ns"], (ln.get("raw") or {}).get("vllm:generation_tokens_total")) for ln in lines]
    gen = [(tn, v) for tn, v in gen if isinstance(v, (int, float))]
    if len(gen) >= 2:
        g = np.array(gen, dtype=np.float64)
        rate = np.diff(g[:, 1]) / (np.diff(g[:, 0]) / 1e9)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": rounded(data.seconds(g[1:, 0]), 3),
                "y": rounded(np.maximum(rate, 0), 1),
                "name": "generated tokens/s",
                "line": {"color": "#1f2937"},
                "xaxis": refs[3][0],
                "yaxis": refs[3][1],
                "meta": "server.generation_tokens_per_s",
            }
        )
    _timeline_axes(data, layout, refs, percent=(2, 3))
    return {"data": traces, "layout": base_layout(layout, height=600)}
