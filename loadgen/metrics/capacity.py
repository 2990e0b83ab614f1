"""Across levels and over time: capacity (DistServe), the saturation knee, time windows.

- :func:`level_verdict`: one level against the attainment target (pass, fail, undecided,
  and whether its attainment meets the target); :func:`capacity`,
  :func:`capacity_interval` and the reports' wording all judge levels by it.
- :func:`capacity`: the highest offered load whose SLO attainment stays >= the target,
  linearly interpolated between the level below the first one that misses it and that one.
- :func:`knee`: the first level where throughput stops growing while latency climbs, and
  stays stopped (no later level higher; confirmed by a later level or beyond the noise).
- :func:`windows`: metrics over consecutive time windows of one long level (soak, ramp).

Pure functions of numbers and records; results are typed (:mod:`loadgen.metrics.results`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.metrics.per_request import EventArrays, frame_and_events
from loadgen.metrics.results import Capacity, LevelSummary, LoadMode, Saturation, Window
from loadgen.metrics.stats import stat_value
from loadgen.records import RequestRecord

__all__ = [
    "LevelVerdict",
    "capacity",
    "capacity_interval",
    "judged_levels",
    "knee",
    "level_verdict",
    "slo_verdict",
    "windows",
    "windows_of",
]

F64 = npt.NDArray[np.float64]


def _num(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def capacity(
    levels: Sequence[tuple[float, float | None]],
    target: float = 0.9,
    *,
    mode: LoadMode | None = None,
    slos: Sequence[str] = (),
) -> Capacity:
    """Capacity from ``(offered load, attainment)`` pairs (sorted here by load; a tie keeps
    the given order).

    The capacity is where attainment first drops below ``target`` going up in load: it can
    never lie above a level that missed it, even when a higher level meets it again (a
    noisy or non-monotone sweep). Outcomes (``status``):

    - ``"ok"``: the first level that misses ``target`` follows one that meets it; ``value``
      is the load where the straight line between those two levels crosses ``target``,
      ``between`` their two loads.
    - ``"not_reached"``: every level meets ``target``; ``value`` is the highest load, so
      the true capacity is at least this (``between`` is None).
    - ``"never_met"``: the lowest level misses it (``value`` and ``between`` None).

    A level whose attainment is None or NaN (no requests) misses with attainment 0.
    ``mode`` and ``slos`` (the load's mode, the per-request SLOs) are carried into the
    result. Raises ``ValueError`` when ``levels`` is empty.
    """
    if not levels:
        raise ValueError("capacity() needs at least one level")
    pts = sorted(((float(load), _num(att)) for load, att in levels), key=lambda p: p[0])
    pts = [(load, att if math.isfinite(att) else 0.0) for load, att in pts]
    missed = next((i for i, (_, att) in enumerate(pts) if att < target), None)

    def result(status: str, value: float | None = None, between: list[float] | None = None) -> Capacity:
        return Capacity(status=status, value=value, between=between, target=target, mode=mode, slos=list(slos))

    if missed is None:
        return result("not_reached", pts[-1][0])
    if missed == 0:
        return result("never_met")
    (lo, a_lo), (hi, a_hi) = pts[missed - 1], pts[missed]
    return result("ok", lo + (a_lo - target) / (a_lo - a_hi) * (hi - lo), [lo, hi])


Verdict = Literal["pass", "fail", "undecided"]


@dataclass(frozen=True, slots=True)
class LevelVerdict:
    """One level judged against the attainment target by :func:`level_verdict`.

    ``verdict``: ``"pass"``/``"fail"`` when the level decides it, else ``"undecided"``;
    ``attainment``: the attainment the capacity interpolates on (0 for a non-stationary
    level or one without requests); ``meets``: ``attainment >= target`` (a pass always
    meets, a fail never does; an undecided level either); ``reason``: why it failed or is
    undecided (``"non-stationary"``, ``"no requests"``, ``"interval"``; ``""`` for a pass)."""

    load: float
    verdict: Verdict
    attainment: float
    meets: bool
    reason: str


def level_verdict(level: LevelSummary, target: float) -> LevelVerdict:
    """``level`` against the attainment ``target``.

    A non-stationary level fails (its attainment depends on how long it ran). A level
    without requests (no attainment) is undecided. With a bounded attainment interval the
    level passes when the interval and its attainment lie at or above the target, fails
    when both lie below, and is undecided otherwise; without one (a summary written before
    they existed, or an unbounded interval) its attainment decides."""
    load = float(level.load.value)
    att = _num(level.goodput.slo_attainment)
    if not level.stationary:
        return LevelVerdict(load, "fail", 0.0, False, "non-stationary")
    if not math.isfinite(att):
        return LevelVerdict(load, "undecided", 0.0, False, "no requests")
    meets = att >= target
    iv = level.attainment_interval
    if iv is None or iv.low is None or iv.high is None:
        return LevelVerdict(load, "pass" if meets else "fail", att, meets, "" if meets else "attainment")
    if meets and iv.low >= target:
        return LevelVerdict(load, "pass", att, True, "")
    if not meets and iv.high < target:
        return LevelVerdict(load, "fail", att, False, "interval")
    return LevelVerdict(load, "undecided", att, meets, "interval")


def slo_verdict(level: LevelSummary, target: float) -> Verdict:
    """``"pass"``, ``"fail"`` or ``"undecided"``: :func:`level_verdict`'s verdict."""
    return level_verdict(level, target).verdict


def judged_levels(levels: Sequence[LevelSummary], mode: LoadMode | None) -> list[LevelSummary]:
    """The levels a capacity over ``mode`` judges, in load order: those of that mode, the
    last run at each load (the capacity search runs an undecided rate again with more
    requests: the second run decides)."""
    last: dict[float, LevelSummary] = {}
    for lv in levels:
        if mode is None or lv.load.mode == mode:
            last[float(lv.load.value)] = lv
    return [last[v] for v in sorted(last)]


def capacity_interval(levels: Sequence[LevelSummary], target: float) -> list[float | None] | None:
    """``[highest load that passed below the first that failed, the lowest load that
    failed]`` by :func:`level_verdict` over ``levels`` (undecided levels lie between;
    ``None`` on a side nothing decided), or ``None`` when no level carries an attainment
    interval. A pass above a fail never raises the low end: the capacity cannot lie above a
    level shown to fail."""
    if not any(lv.attainment_interval is not None for lv in levels):
        return None
    verdicts = sorted(((float(lv.load.value), level_verdict(lv, target).verdict) for lv in levels), key=lambda p: p[0])
    high = next((v for v, k in verdicts if k == "fail"), None)
    passed = [v for v, k in verdicts if k == "pass" and (high is None or v < high)]
    return [max(passed) if passed else None, high]


def _growth(prev: float, cur: float) -> float | None:
    if not (math.isfinite(prev) and math.isfinite(cur)) or prev <= 0:
        return None
    return (cur - prev) / prev


def knee(
    levels: Sequence[tuple[float, float | None, float | None]],
    min_throughput_gain: float = 0.05,
    min_latency_growth: float = 0.20,
    *,
    noise: Sequence[float | None] | None = None,
    mode: LoadMode | None = None,
    metric: str | None = None,
) -> Saturation:
    """The saturation knee from ``(load, throughput, latency)`` per level, in load order.

    A level ``i > 0`` is a candidate when its throughput grew by less than
    ``min_throughput_gain`` (relative) over level ``i - 1`` while its latency grew by more
    than ``min_latency_growth``. The knee is the first candidate that also holds:

    - no later level has higher throughput: none reaches the highest throughput up to
      the candidate times ``1 + min_throughput_gain`` (the growth the first rule asks for);
    - the stall is not one noisy dip: a later level confirms it (by the rule above, its
      throughput did not grow past the plateau), or, at the last level, the gain stays
      under ``min_throughput_gain`` with twice the noise added (``noise[i]``: the standard
      error of each level's throughput; the two levels' combine in quadrature). Without
      a noise for both levels the last level cannot be confirmed.

    Levels whose predecessor has no positive throughput or latency cannot be judged and
    are skipped. ``mode`` and ``metric`` (the latency's name) are carried into the result.
    """
    thr = [_num(t) for _, t, _ in levels]
    for i in range(1, len(levels)):
        _, thr0, lat0 = levels[i - 1]
        load, thr1, lat1 = levels[i]
        gain = _growth(_num(thr0), _num(thr1))
        growth = _growth(_num(lat0), _num(lat1))
        if gain is None or growth is None:
            continue
        if not (gain < min_throughput_gain and growth > min_latency_growth):
            continue
        peak = max(t for t in thr[: i + 1] if math.isfinite(t))
        later = [t for t in thr[i + 1 :] if math.isfinite(t)]
        if any(t >= peak * (1 + min_throughput_gain) for t in later):
            continue  # throughput grew again: not saturated here
        if not later and not _stall_beyond_noise(thr[i - 1], gain, noise, i, min_throughput_gain):
            continue
        return Saturation(
            found=True, index=i, load=float(load), throughput_gain=gain, latency_growth=growth, mode=mode, metric=metric
        )
    return Saturation(
        found=False, index=None, load=None, throughput_gain=None, latency_growth=None, mode=mode, metric=metric
    )


def _stall_beyond_noise(base: float, gain: float, noise: Sequence[float | None] | None, i: int, limit: float) -> bool:
    """Whether level ``i``'s throughput gain over ``base`` (level ``i - 1``'s) stays under
    ``limit`` with twice the two levels' combined noise added."""
    if noise is None or i >= len(noise) or noise[i] is None or noise[i - 1] is None:
        return False
    se = math.hypot(_num(noise[i]), _num(noise[i - 1]))
    return math.isfinite(se) and gain + 2 * se / base < limit


def _in_flight_integral(sent_s: F64, done_s: F64, at: F64) -> F64:
    """For each time in ``at``: the integral of the in-flight count from -inf to it."""
    s, d = np.sort(sent_s), np.sort(done_s)
    cs, cd = np.r_[0.0, np.cumsum(s)], np.r_[0.0, np.cumsum(d)]
    ks, kd = np.searchsorted(s, at, side="right"), np.searchsorted(d, at, side="right")
    return np.asarray((ks * at - cs[ks]) - (kd * at - cd[kd]), dtype=np.float64)


def _split(values: F64, wids: npt.NDArray[Any], n_win: int) -> list[F64]:
    """``values`` grouped by window id (one array per window), without an O(n*w) scan."""
    order = np.argsort(wids, kind="stable")
    bounds = np.searchsorted(wids[order], np.arange(1, n_win))
    return np.split(values[order], bounds)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def windows(records: Iterable[RequestRecord], window_s: float) -> list[Window]:
    """Metrics over consecutive ``window_s``-second windows of the non-warm-up records.

    Time 0 is the first send; windows run to the last completion (the last one may be
    shorter). Per window: ``requests``/``ok`` completed in it; ``output_tokens_per_s``
    from ok requests' events that arrived in it; TTFT percentiles of ok requests whose
    first token arrived in it, ITL percentiles of the per-token samples whose chunk
    arrived in it; ``in_flight_mean`` the time-averaged number of requests between
    send and completion (failed ones included).
    """
    if not (window_s > 0 and math.isfinite(window_s)):
        raise ValueError(f"window_s must be a positive number, got {window_s!r}")
    return windows_of(*frame_and_events(records), window_s)


def windows_of(frame: pd.DataFrame, ev: EventArrays, window_s: float) -> list[Window]:
    """:func:`windows` of a per-request frame and its events (``frame_and_events``)."""
    if not (window_s > 0 and math.isfinite(window_s)):
        raise ValueError(f"window_s must be a positive number, got {window_s!r}")
    sent = frame["sent_ns"].to_numpy()
    done = frame["done_ns"].to_numpy()
    valid = sent != 0
    if not valid.any():
        return []
    t0 = int(sent[valid].min())
    done = np.where(done == 0, sent, done)
    end_s = max(float(done[valid].max() - t0) / 1e9, 0.0)
    n_win = max(1, math.ceil(end_s / window_s))
    edges = np.minimum(np.arange(n_win + 1) * window_s, end_s)
    edges[-1] = end_s
    ok = frame["ok"].to_numpy(dtype=bool)

    # window ids; a small int type lets the stable argsort in _split use a radix sort
    wtype = np.uint16 if n_win <= 1 << 16 else np.int64
    w_ns = max(1, round(window_s * 1e9))

    def bucket(t_ns: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        return np.clip((t_ns - t0) // w_ns, 0, n_win - 1).astype(wtype)

    done_w = bucket(done)
    n_req = np.bincount(done_w[valid], minlength=n_win)
    n_ok = np.bincount(done_w[valid & ok], minlength=n_win)
    ch_ok = ev.chunk_mask(ok)  # a chunk's events share its time: its tokens count at once
    tokens = np.bincount(bucket(ev.ch_t[ch_ok]), weights=ev.ch_n[ch_ok], minlength=n_win)
    first = frame["first_token_ns"].to_numpy()
    has_ttft = ok & (first != 0) & ~np.isnan(frame["ttft_ms"].to_numpy())
    ttft = _split(frame["ttft_ms"].to_numpy()[has_ttft], bucket(first[has_ttft]), n_win)
    itl = _split(ev.itl_ms(ok), ev.like_itl(bucket(ev.ch_t), ok), n_win)
    sent_s = (sent[valid] - t0) / 1e9
    done_s = (done[valid] - t0) / 1e9
    busy = np.diff(_in_flight_integral(sent_s, done_s, edges))

    out = []
    for w in range(n_win):
        span = float(edges[w + 1] - edges[w])
        w_ttft, w_itl = ttft[w], itl[w]
        out.append(
            Window(
                t_start_s=float(edges[w]),
                t_end_s=float(edges[w + 1]),
                requests=int(n_req[w]),
                ok=int(n_ok[w]),
                output_tokens_per_s=_finite(float(tokens[w]) / span) if span > 0 else None,
                ttft_ms_p50=stat_value(w_ttft, "p50"),
                ttft_ms_p99=stat_value(w_ttft, "p99"),
                itl_ms_p50=stat_value(w_itl, "p50"),
                itl_ms_p99=stat_value(w_itl, "p99"),
                in_flight_mean=_finite(float(busy[w]) / span) if span > 0 else None,
            )
        )
    return out
