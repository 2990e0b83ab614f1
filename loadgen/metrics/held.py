"""The window a level's headline rates are measured over: where the load was held.

A level's whole window (first send to last completion) holds a ramp and a drain tail in
which fewer requests are in flight than the load asked for, so a rate over it depends on
the run's length. The headline rates count what the server delivered while the load was
held:

- a closed loop of ``N`` users: from the ``N``-th send (every user busy), or the last
  warm-up completion if later (every request in flight a measured one), to the first
  user out of work: the earliest of the users' last completions (each user has its own
  quota of requests), and of the first completion after the level's last send;
- an open loop: its arrival window, from one fill time after the first arrival (the
  90th percentile of the ok requests' E2E, at most half the window: a steady server has
  reached its steady in-flight count by then) to the last arrival.

Completions (``done_ns``) and streamed chunks inside ``(start, end]`` count; when no load
was held (fewer requests than users, nothing completed inside) the whole window stands,
with a note. The rules and how other tools define theirs: docs/metrics.md, "Throughput
windows".
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.metrics.results import LoadMode

__all__ = ["FILL_QUANTILE", "HeldWindow", "Rule", "held_window"]

Rule = Literal["held", "arrivals", "whole"]

FILL_QUANTILE = 0.9
"""An open loop's fill time: this quantile of the ok requests' E2E after the first arrival."""

HeldWindow = tuple[int, int, Rule, str | None]
"""``(start_ns, end_ns, rule, note)``: rule ``"held"``, ``"arrivals"`` or ``"whole"``."""


def held_window(
    frame: pd.DataFrame,
    mode: LoadMode,
    users: float,
    whole: tuple[int, int] | None,
    user_of: npt.NDArray[np.int64] | None = None,
    warm_done: int = 0,
) -> HeldWindow | None:
    """The headline window of a level's measured requests (``frame``); ``users`` is a
    closed loop's offered concurrency, ``user_of`` the user of each frame row (records'
    ``worker``), ``warm_done`` the last warm-up completion (0: none), ``whole`` the
    level's whole window. None without one."""
    if whole is None:
        return None
    sent = frame["sent_ns"].to_numpy()
    done = frame["done_ns"].to_numpy()
    ok = frame["ok"].to_numpy(dtype=bool) & (done != 0)
    sent = np.sort(sent[sent != 0])
    if mode == "concurrency":
        n = max(int(users), 1)
        if sent.size < n:
            return _whole(whole, f"{sent.size} request(s) for {n} users: the load was never held")
        start = max(int(sent[n - 1]), warm_done)
        after = done[done > sent[-1]]
        end = int(after.min()) if after.size else whole[1]
        if user_of is not None and user_of.size == done.size:
            last = np.full(int(user_of.max()) + 1, -1, dtype=np.int64)
            np.maximum.at(last, user_of, done)
            end = min(end, int(last[last > 0].min()))
        rule: Rule = "held"
    else:
        sched = frame["scheduled_ns"].to_numpy()
        arrivals = np.sort(np.where(sched != 0, sched, frame["sent_ns"].to_numpy()))
        arrivals = arrivals[arrivals != 0]
        if arrivals.size < 2:
            return _whole(whole, "fewer than two arrivals: no arrival window")
        first, end = int(arrivals[0]), int(arrivals[-1])
        e2e = done[ok] - frame["sent_ns"].to_numpy()[ok]
        fill = float(np.quantile(e2e, FILL_QUANTILE)) if e2e.size else 0.0
        start = first + int(min(fill, (end - first) / 2))
        rule = "arrivals"
    if rule == "held" and warm_done >= end:
        late = (warm_done - whole[0]) / 1e9
        why = (
            f"a warm-up request ended at {late:.2f} s, after the first user ran out of work: no measured load was held"
        )
        return _whole(whole, why)
    inside = ok & (done > start) & (done <= end)
    if end <= start or not inside.any():
        return _whole(whole, f"no request completed inside the {rule} window")
    return start, end, rule, None


def _whole(whole: tuple[int, int], why: str) -> HeldWindow:
    return whole[0], whole[1], "whole", f"{why}; the rates are over the whole window"
