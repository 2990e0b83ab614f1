"""A statistic's interval, the headline window of a level's rates and the whole window's
rates (``summary.json`` 3: the parts of a level's ``throughput`` that say over which time
its numbers count). Re-exported by :mod:`loadgen.metrics.results`, where readers import
them; the windows' rules: docs/metrics.md, "Throughput windows"."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from loadgen.metrics._json import JSONRecord, key

__all__ = ["RateWindow", "StatInterval", "WholeRates"]


@dataclass(frozen=True, slots=True)
class StatInterval(JSONRecord):
    """The ``confidence`` interval ``[low, high]`` of the point value beside it, computed on
    ``n_eff`` effective values (see :mod:`loadgen.metrics.uncertainty`). ``low``/``high``
    are ``None`` on a side the data cannot bound, and then ``reason`` says why (e.g.
    ``"p99.9 needs n_eff >= 4913 for a 95% interval from 10 batch means (n_eff = 265)"``, or
    ``"correlation spans the level: run longer, or use --trials (…)"``)."""

    low: float | None
    high: float | None
    n_eff: float
    confidence: float
    reason: str | None = field(default=None, metadata=key("reason", omit_none=True))
    trials: int | None = field(default=None, metadata=key("trials", omit_none=True))
    """Set when the interval is between ``--trials`` (their count): the pooled value ± Student's
    t on ``trials − 1`` degrees of freedom times the trials' standard error, with no
    within-level correlation model (:func:`loadgen.metrics.trials.between_trials`); ``n_eff``
    stays the pooled series' own."""

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    def relative_half_width(self, point: float | None) -> float | None:
        """The larger distance from ``point`` to a bound, over ``|point|`` (``0.06`` for
        ``412 ms ±6%``); ``None`` when not bounded or the point is 0 or unknown."""
        if point is None or not point or self.low is None or self.high is None:
            return None
        return max(point - self.low, self.high - point, 0.0) / abs(point)


@dataclass(frozen=True, slots=True)
class RateWindow(JSONRecord):
    """The window a level's headline rates are measured over, in seconds from the level's
    first send. ``rule``: ``"held"`` (a closed loop: from the moment every user was busy
    to the first completion after the last send), ``"arrivals"`` (an open loop: its
    arrival window, from one fill time after the first arrival to the last arrival) or
    ``"whole"`` (first send to last completion: no load was held, and ``note`` says why).
    The rules: docs/metrics.md, "Throughput windows"."""

    rule: Literal["held", "arrivals", "whole"]
    start_s: float
    end_s: float
    note: str | None = field(default=None, metadata=key("note", omit_none=True))

    @property
    def window_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class WholeRates(JSONRecord):
    """Successful requests and their tokens over the level's whole window (first send to
    last completion: the ramp and the drain tail included; what ``vllm bench serve``
    reports as ``completed / duration``), with the intervals of the request and
    output-token rates."""

    window_s: float = 0.0
    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None
    total_tokens_per_s: float | None = None
    intervals: dict[str, StatInterval] | None = field(default=None, metadata=key("intervals", omit_none=True))
