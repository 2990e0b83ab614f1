"""Run until precise: a stopping rule that stays valid although it looks many times.

A level is checked at a fixed schedule of looks (``first``, then growing by ``growth``:
200, 300, 450, … requests). Look ``k`` (from 1) computes every target's interval at
confidence ``1 − α / (k (k + 1))``; these spend at most ``α`` in all, so the interval where
the level stops covers with probability ≥ ``1 − α`` however many looks it took (Bonferroni
alpha spending). Why not a confidence sequence, and the price in width: docs/metrics.md,
"Uncertainty" (Run until precise). :meth:`PrecisionRule.project` says, from one look, how many
values a target not yet met would need at the look's ``n_eff / n`` (so that a level whose
target is out of reach can stop early and say so).

Example::

    >>> import numpy as np
    >>> rule = PrecisionRule((Target("ttft", 0.99, 0.05),))
    >>> x = np.random.default_rng(0).lognormal(0, 0.3, 20000)
    >>> d = rule.run(lambda n: {"ttft": x[:n]}, max_n=20000)
    >>> d.stop, d.n <= 20000
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.metrics._dist import t_ppf
from loadgen.metrics.uncertainty import BATCHES, REFUSED, Interval, mean_interval, needed_n_eff, percentile_interval

__all__ = ["Decision", "PrecisionRule", "Projection", "Target"]


@dataclass(frozen=True, slots=True)
class Target:
    """``metric``'s quantile ``q`` (``None`` for the mean) within ``relative`` of its value
    (half-width / point, 0.05 for "within 5%")."""

    metric: str
    q: float | None
    relative: float

    @property
    def name(self) -> str:
        stat = "mean" if self.q is None else f"p{100 * self.q:.10g}"
        return f"{self.metric}.{stat} within {100 * self.relative:g}%"


@dataclass(frozen=True, slots=True)
class Decision:
    """One look: its index ``look`` (from 1), the requests ``n``, the confidence spent on it,
    each target's interval, and whether every target is precise (``stop``)."""

    look: int
    n: int
    confidence: float
    intervals: Mapping[str, Interval]
    stop: bool


@dataclass(frozen=True, slots=True)
class Projection:
    """What a target not met at a look would need: ``needed_n_eff`` effective values, which
    at the look's ratio ``n_eff / n`` is ``needed_n`` values. ``floor``: the interval was not
    bounded, so its width is unknown and ``needed_n`` is the least count that could bound
    it; ``refused``: the correlation check refused the interval (correlation spans the level)."""

    target: Target
    n: int
    n_eff: float
    needed_n_eff: float
    needed_n: float
    floor: bool
    refused: bool

    @property
    def ratio(self) -> float:
        """``n_eff / n`` at the look."""
        return self.n_eff / self.n


def _t(confidence: float) -> float:
    return t_ppf(1 - (1 - confidence) / 2, BATCHES - 1)


@dataclass(frozen=True, slots=True)
class PrecisionRule:
    """Stop a level when every target's interval is within its relative half-width."""

    targets: Sequence[Target]
    confidence: float = 0.95
    first: int = 200
    growth: float = 1.5

    def __post_init__(self) -> None:
        if not self.targets:
            raise ValueError("a precision rule needs at least one target")
        if not 0.0 < self.confidence < 1.0 or self.first < 2 or self.growth <= 1.0:
            raise ValueError("need 0 < confidence < 1, first >= 2 and growth > 1")

    def looks(self, max_n: int) -> Iterator[int]:
        """The request counts at which the rule looks, up to and including ``max_n``."""
        n = float(self.first)
        while int(n) < max_n:
            yield int(n)
            n *= self.growth
        yield max_n

    def spent(self, look: int) -> float:
        """``α_k = α / (k (k + 1))``: the error probability spent at look ``k``."""
        return (1 - self.confidence) / (look * (look + 1))

    def check(self, look: int, series: Mapping[str, npt.ArrayLike]) -> Decision:
        """Look ``look`` at each target's values (in time order) so far."""
        conf = 1 - self.spent(look)
        out: dict[str, Interval] = {}
        precise = True
        n = 0
        for target in self.targets:
            x = np.asarray(series[target.metric], dtype=np.float64)
            n = max(n, x.size)
            iv = mean_interval(x, conf) if target.q is None else percentile_interval(x, target.q, conf)
            out[target.name] = iv
            hw = iv.half_width
            precise = precise and hw is not None and iv.point > 0 and hw / iv.point <= target.relative
        return Decision(look, n, conf, out, precise)

    def look_at(self, n: float) -> int:
        """The index (from 1) of the first look at ``n`` values or more."""
        k, at = 1, float(self.first)
        while int(at) < n:
            k, at = k + 1, at * self.growth
        return k

    def project(self, decision: Decision) -> list[Projection]:
        """For each target ``decision`` did not find met, the values it would need at the
        same ``n_eff / n``: the half-width shrinks as ``1 / √n_eff``, widened by the later
        look's spent confidence (Student's ``t`` on the batches' degrees of freedom), and a
        quantile needs at least :func:`~loadgen.metrics.uncertainty.needed_n_eff` at that
        confidence to be bounded at all. Where the interval was not bounded only that floor
        is known (``floor``). Targets without values are left out."""
        out = []
        for target in self.targets:
            iv = decision.intervals[target.name]
            if iv.n == 0 or not iv.n_eff > 0:
                continue
            hw = iv.half_width
            rel = hw / iv.point if hw is not None and iv.point > 0 else None
            if rel is not None and rel <= target.relative:
                continue
            refused = iv.reason is not None and iv.reason.startswith(REFUSED)
            ratio = iv.n_eff / iv.n
            need, k = iv.n_eff, decision.look
            for _ in range(4):  # the look that reaches the count spends less: iterate to it
                conf = 1 - self.spent(k)
                floor = float(BATCHES if refused else 0)  # the check refuses under BATCHES effective values
                if target.q is not None:
                    floor = max(floor, float(needed_n_eff(target.q, conf)))
                wide = (
                    0.0
                    if rel is None
                    else iv.n_eff * (rel / target.relative) ** 2 * (_t(conf) / _t(decision.confidence)) ** 2
                )
                need = max(iv.n_eff, floor, wide)
                k = max(k, self.look_at(need / ratio))
            out.append(Projection(target, iv.n, iv.n_eff, need, need / ratio, rel is None, refused))
        return out

    def run(self, values_at: Callable[[int], Mapping[str, npt.ArrayLike]], max_n: int) -> Decision:
        """Look along the schedule until precise or ``max_n``; the last decision."""
        decision: Decision | None = None
        for k, n in enumerate(self.looks(max_n), start=1):
            decision = self.check(k, values_at(n))
            if decision.stop:
                break
        assert decision is not None  # looks() yields at least max_n
        return decision
