"""Energy from scraped power samples: joules over a window, joules per output token.

Power comes from the server's telemetry (``DCGM_FI_DEV_POWER_USAGE``, summed over GPUs),
sampled about once a second. Energy over a window is the trapezoid integral of the
samples, clipped to the window (the power at the window's edges interpolated); a window
without two samples inside or around it has no energy. Energy per output token divides
that by the output tokens whose events arrived inside the window.

:func:`level_energy` gives a level's :class:`LevelEnergy` (mean power and energy per output
token over the part of the level's window the samples cover): the value ``summary.json``
carries as the level's ``energy`` and every surface prints (docs/metrics.md, "Energy").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.metrics._json import JSONRecord

__all__ = ["LevelEnergy", "energy_j", "energy_per_token", "level_energy"]

F64 = npt.NDArray[np.float64]


def energy_j(t_ns: npt.ArrayLike, power_w: npt.ArrayLike, start_ns: int, end_ns: int) -> float | None:
    """Joules drawn between ``start_ns`` and ``end_ns`` (the samples' own clock)."""
    t = np.asarray(t_ns, dtype=np.float64)
    p = np.asarray(power_w, dtype=np.float64)
    keep = np.isfinite(p)
    t, p = t[keep], p[keep]
    if t.size < 2 or end_ns <= start_ns or t[0] > start_ns or t[-1] < end_ns:
        return None  # the samples must cover the window
    order = np.argsort(t, kind="stable")
    t, p = t[order], p[order]
    inner = (t > start_ns) & (t < end_ns)
    xs = np.concatenate(([start_ns], t[inner], [end_ns]))
    ys = np.concatenate(([np.interp(start_ns, t, p)], p[inner], [np.interp(end_ns, t, p)]))
    return float(np.sum((ys[1:] + ys[:-1]) / 2 * np.diff(xs)) / 1e9)


def energy_per_token(
    t_ns: npt.ArrayLike, power_w: npt.ArrayLike, start_ns: int, end_ns: int, tokens: float
) -> float | None:
    """Joules per output token over the window, or None (no energy, or no token)."""
    joules = energy_j(t_ns, power_w, start_ns, end_ns)
    return None if joules is None or tokens <= 0 else joules / tokens


@dataclass(frozen=True, slots=True)
class LevelEnergy(JSONRecord):
    """A level's energy, over ``window_s`` seconds of its window covered by power samples:
    the mean power (W, all GPUs) and the energy per output token streamed in that part (J;
    None without a token)."""

    window_s: float
    mean_power_w: float
    joules_per_output_token: float | None


def level_energy(
    t_ns: npt.ArrayLike,
    power_w: npt.ArrayLike,
    window_ns: tuple[int, int],
    chunk_t_ns: npt.ArrayLike,
    chunk_tokens: npt.ArrayLike,
) -> LevelEnergy | None:
    """The level's energy over the part of ``window_ns`` (its first send to its last
    answer) inside the samples' span; the tokens counted are the chunks' (``chunk_t_ns``,
    ``chunk_tokens``) that arrived in that part. None when the samples cover none of it."""
    t = np.asarray(t_ns, dtype=np.int64)
    if t.size < 2:
        return None
    lo, hi = max(window_ns[0], int(t.min())), min(window_ns[1], int(t.max()))
    joules = energy_j(t, power_w, lo, hi) if hi > lo else None
    if joules is None:
        return None
    ct = np.asarray(chunk_t_ns, dtype=np.int64)
    tokens = float(np.asarray(chunk_tokens, dtype=np.float64)[(ct >= lo) & (ct <= hi)].sum())
    span = (hi - lo) / 1e9
    return LevelEnergy(
        window_s=span, mean_power_w=joules / span, joules_per_output_token=joules / tokens if tokens > 0 else None
    )
