"""Figures of a run's requests, level by level (records.jsonl): latency CDFs, the request
timeline, tokens per SSE event and output lengths.

Each keeps the page small: CDFs carry a few hundred exact ECDF points, scatters keep
evenly spaced points, the timeline shows at most ``TIMELINE_MAX`` requests per level.
Times are seconds since the run started. Figures over the run's time are in
:mod:`loadgen.report.time_figures`, those of the server's metrics in
:mod:`loadgen.report.server_figures`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.report.figures import base_layout, grid
from loadgen.report.page import esc
from loadgen.report.plotdata import F64, ecdf_points, log_ticks, palette, rounded, spread
from loadgen.report.rundata import RunData

__all__ = [
    "SCATTER_MAX",
    "TIMELINE_MAX",
    "TIMELINE_TOTAL",
    "cdfs",
    "default_timeline_level",
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


def cdfs(data: RunData) -> dict[str, Any] | None:
    """Per level, the empirical CDFs of TTFT, ITL and TPOT (log-x), successful requests; of
    E2E for a non-streamed API's levels (they have no TTFT, ITL or TPOT)."""
    if not data.levels or data.frame.empty:
        return None
    answered = all(lv.non_streamed is not None for lv in data.levels)
    keys = ("e2e_ms",) if answered else ("ttft_ms", "itl_ms", "tpot_ms")
    titles = ["E2E latency (ms)"] if answered else ["TTFT (ms)", "ITL (ms)", "TPOT (ms)"]
    layout, refs = grid(1, len(keys), titles, hgap=0.06)
    ok = data.frame["ok"].to_numpy(dtype=bool)
    traces: list[dict[str, Any]] = []
    colours = palette(len(data.levels))
    for i, name in enumerate(_names(data)):
        rows = data.level_rows(i) & ok
        if not rows.any():
            continue
        samples = (
            (data.frame["e2e_ms"].to_numpy()[rows],)
            if answered
            else (
                data.frame["ttft_ms"].to_numpy()[rows],
                data.ev.itl_ms(rows),
                data.frame["tpot_ms"].to_numpy()[rows],
            )
        )
        for k, (values, (xr, yr), key) in enumerate(zip(samples, refs, keys)):
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
    legend = list(_PHASES)
    if all(lv.non_streamed is not None for lv in data.levels):  # one answer, no first token
        legend[1] = ("answer: sent → its last byte", legend[1][1])
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
        for (label, colour), (a, b) in zip(legend, phases):
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


_EVENT_BLOCK = 1 << 22  # events sorted into size classes at a time


def _event_sizes(data: RunData, ok: np.ndarray, bounds: np.ndarray, n_cats: int) -> np.ndarray:
    """Per level (rows) and size class (columns, ``searchsorted(bounds, tokens)``): how
    many events of the level's successful requests carry that many tokens. One pass over
    the events, a block of records at a time (temporaries of a few MB)."""
    ev, n_levels = data.ev, len(data.levels)
    level = data.frame["level"].to_numpy()
    mine = ok & (level >= 0) & (level < n_levels)
    key = np.where(mine, level, n_levels).astype(np.int64) * n_cats  # n_levels: no level's
    top = int(bounds[-1]) + 1
    cat_of = np.searchsorted(bounds, np.arange(top + 1), side="left")  # tokens 0..top -> class
    ends = np.cumsum(ev.ev_count)
    out = np.zeros((n_levels + 1) * n_cats, dtype=np.int64)
    lo = 0
    while lo < key.size:
        hi = max(int(np.searchsorted(ends, ends[lo] + _EVENT_BLOCK, side="right")), lo + 1)
        e0, e1 = int(ends[lo] - ev.ev_count[lo]), int(ends[hi - 1])
        cls = cat_of[np.clip(ev.ev_n[e0:e1], 0, top)]
        out += np.bincount(np.repeat(key[lo:hi], ev.ev_count[lo:hi]) + cls, minlength=out.size)
        lo = hi
    return out.reshape(n_levels + 1, n_cats)[:n_levels]


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
    sizes = _event_sizes(data, ok, bounds, len(cats))
    for i, name in enumerate(names):
        counts = sizes[i]
        if counts.sum() == 0:
            continue
        traces.append(
            {
                "type": "bar",
                "x": cats,
                "y": rounded(counts / counts.sum(), 4),
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
