"""Energy from scraped power samples: joules over a window, joules per output token.

Power comes from the server's telemetry (``DCGM_FI_DEV_POWER_USAGE``, summed over GPUs),
sampled about once a second. Energy over a window is the trapezoid integral of the
samples, clipped to the window (the power at the window's edges interpolated); a window
without two samples inside or around it has no energy. Energy per output token divides
that by the output tokens whose events arrived inside the window.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["energy_j", "energy_per_token"]

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
