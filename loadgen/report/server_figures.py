"""Figures of the server's metrics over the run's time (server_metrics.jsonl, scraped):
running and waiting requests, KV-cache usage, prefix-cache hit rate, generated tokens/s,
GPU utilisation and power, and each level's energy per output token.

At most 5000 scrapes are drawn, evenly spaced; times are seconds since the run started,
each level's span a band behind every panel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from loadgen.metrics.energy import LevelEnergy
from loadgen.metrics.energy import level_energy as energy_of_level
from loadgen.metrics.summary import level_window_ns
from loadgen.report.figures import base_layout, grid
from loadgen.report.plotdata import rounded, spread
from loadgen.report.rundata import RunData
from loadgen.report.time_figures import level_bands

__all__ = [
    "SERVER_LATENCIES",
    "gpu_telemetry",
    "has_power",
    "level_energy",
    "levels_energy",
    "power_samples",
    "server_latency_means",
    "server_metrics",
]

SERVER_LATENCIES = (
    ("time_to_first_token", "TTFT"),
    ("inter_token_latency", "ITL"),
    ("e2e_request_latency", "E2E"),
    ("request_queue_time", "queue"),
)
"""vLLM's latency histograms (``vllm:NAME_seconds_sum`` and ``_count``) whose per-level means
the report shows, with their short labels."""


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
        shapes.extend(level_bands(data, xr, f"{yr} domain"))
    layout["shapes"] = shapes


def power_samples(lines: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scraped ``server_metrics.jsonl`` lines that carry a power reading."""
    return [ln for ln in lines if isinstance(ln.get("power_w"), (int, float))]


def has_power(data: RunData) -> bool:
    """Whether the run's scraped server metrics hold power samples (two or more)."""
    return len(power_samples(data.server)) >= 2


def levels_energy(data: RunData) -> list[LevelEnergy | None]:
    """Each level's :class:`~loadgen.metrics.energy.LevelEnergy` from the power samples
    over its window (first send to last answer): what the run writes into summary.json."""
    lines = power_samples(data.server)
    if len(lines) < 2:
        return [None] * len(data.levels)
    t = np.array([ln["t_ns"] for ln in lines], dtype=np.int64)
    p = np.array([ln["power_w"] for ln in lines], dtype=np.float64)
    ev = data.ev
    out: list[LevelEnergy | None] = []
    for i in range(len(data.levels)):
        window = level_window_ns(data.frame[data.level_rows(i)])
        out.append(None if window is None else energy_of_level(t, p, window, ev.ch_t, ev.ch_n))
    return out


def level_energy(data: RunData) -> list[tuple[str, float | None, float | None]]:
    """Per level: its label, mean power (W) and energy per output token (J), as its summary
    holds them (``level.energy``; a folder written before summaries held it: computed here
    the same way). [] when no power was scraped."""
    if not has_power(data):
        return []
    held = [lv.energy for lv in data.levels]
    energies = held if any(e is not None for e in held) else levels_energy(data)
    return [
        (lv.load.label(), None if e is None else e.mean_power_w, None if e is None else e.joules_per_output_token)
        for lv, e in zip(data.levels, energies)
    ]


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


def server_latency_means(data: RunData) -> list[tuple[str, dict[str, float | None]]]:
    """Per level: its label and the server's own mean of each of :data:`SERVER_LATENCIES`
    (ms), from the scraped histogram sums and counts: (sum at the level's end - sum at its
    start) / (count at its end - count at its start), where the start is the last scrape at
    or before the level's first send and the end the first scrape at or after its last
    answer (the run scrapes once more when a level ends). None where the scrapes do not
    bracket the level or no request was counted in it; [] when no scrape holds a histogram."""
    keys = [f"vllm:{name}_seconds_{part}" for name, _ in SERVER_LATENCIES for part in ("sum", "count")]
    lines = [ln for ln in data.server if any(k in (ln.get("raw") or {}) for k in keys)]
    if not lines:
        return []
    t = np.array([ln["t_ns"] for ln in lines], dtype=np.int64)
    out: list[tuple[str, dict[str, float | None]]] = []
    for i, lv in enumerate(data.levels):
        means: dict[str, float | None] = dict.fromkeys((label for _, label in SERVER_LATENCIES), None)
        window = level_window_ns(data.frame[data.level_rows(i)])
        if window is not None:
            a = int(np.searchsorted(t, window[0], side="right")) - 1  # last scrape at or before the first send
            b = int(np.searchsorted(t, window[1], side="left"))  # first scrape at or after the last answer
            if a >= 0 and b < len(lines):
                ra, rb = lines[a]["raw"], lines[b]["raw"]
                for name, label in SERVER_LATENCIES:
                    s0, s1 = ra.get(f"vllm:{name}_seconds_sum"), rb.get(f"vllm:{name}_seconds_sum")
                    c0, c1 = ra.get(f"vllm:{name}_seconds_count"), rb.get(f"vllm:{name}_seconds_count")
                    if None not in (s0, s1, c0, c1) and c1 > c0:
                        means[label] = 1000.0 * (s1 - s0) / (c1 - c0)
        out.append((lv.load.label(), means))
    return out
