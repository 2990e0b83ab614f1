"""Service-level objectives: parsing ``--slo`` strings, attainment and level checks.

Syntax: ``METRIC[:STAT]=LIMIT[UNIT]`` (``ttft=500ms``, ``ttft:p90=300ms``, ``task=60s``);
units ``ms``, ``s``, ``us`` (a bare number is ms). Without a stat an SLO is a
**per-request limit**, part of attainment (a failed request misses every one); with a stat
it is a **level-wide check** that passes or fails and is not part of attainment. ``task``
limits are the agentic ``tasks`` entry's (:mod:`loadgen.metrics.tasks`), not the requests'.

The metrics, the edge cases (no token, fewer than two tokens, no samples) and attainment:
docs/metrics.md, "Per level" (SLOs).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.errors import ConfigError
from loadgen.metrics.catalog import METRICS, Metric, by_slo, per_request, slo_names
from loadgen.metrics.results import Check, LoadMode
from loadgen.metrics.stats import stat_value

__all__ = [
    "SLO",
    "STATS",
    "UNITS",
    "level_checks",
    "level_slos",
    "mlperf_bounds",
    "parse_slo",
    "request_meets",
    "slo_attainment",
    "slo_scores",
]

STATS: tuple[str, ...] = ("p50", "p90", "p95", "p99", "p99.9", "mean", "max")
UNITS: dict[str, float] = {"ms": 1.0, "s": 1000.0, "us": 0.001}

_NUMBER = re.compile(r"^((?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*([a-z]*)$")


def _help() -> str:
    """The syntax, with the metrics registered now (:mod:`loadgen.metrics.catalog`)."""
    return (
        f"expected METRIC[:STAT]=LIMIT with METRIC one of {', '.join(slo_names())}; STAT one of "
        f"{', '.join(STATS)}; LIMIT a positive number with unit ms, s or us (bare number = ms)"
        " — e.g. ttft=500ms, e2e=10s, ttft:p90=300ms"
    )


@dataclass(frozen=True, slots=True)
class SLO:
    """One objective: ``metric`` (a metric's ``--slo`` spelling in the catalogue), ``limit_ms``,
    and ``stat`` (``None`` for a per-request limit, else a level-wide statistic from :data:`STATS`)."""

    metric: str
    limit_ms: float
    stat: str | None = None

    @property
    def per_request(self) -> bool:
        """A limit each request must meet (task SLOs are judged per task)."""
        return self.stat is None and not self.per_task

    @property
    def per_task(self) -> bool:
        """Judged on agentic tasks, not requests (``task=60s``)."""
        return self.entry.per_task

    @property
    def entry(self) -> Metric:
        entry = by_slo(self.metric)
        if entry is None:
            raise ValueError(f"no metric is spelt {self.metric!r} in an SLO")
        return entry

    def __str__(self) -> str:
        """Canonical text, in ms: ``ttft=500ms``, ``ttft:p90=300ms``."""
        head = self.metric if self.stat is None else f"{self.metric}:{self.stat}"
        return f"{head}={self.limit_ms:g}ms"


def parse_slo(text: str) -> SLO:
    """Parse one ``--slo`` value (see the module docstring for the syntax).

    Raises :class:`~loadgen.errors.ConfigError` naming ``--slo``, the text, what was
    wrong and the allowed metrics, stats and units.
    """

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{text!r}: {why}; {_help()}", source="--slo")

    if not isinstance(text, str):
        raise bad("not a string")
    lhs, eq, rhs = text.strip().lower().partition("=")
    if not eq:
        raise bad("missing '='")
    metric, colon, stat = (p.strip() for p in lhs.partition(":"))
    if by_slo(metric) is None:
        raise bad(f"unknown metric {metric!r}")
    if colon and stat not in STATS:
        raise bad(f"unknown statistic {stat!r}")
    m = _NUMBER.match(rhs.strip())
    if m is None:
        raise bad(f"limit {rhs.strip()!r} is not a positive number with a unit")
    number, unit = m.group(1), m.group(2) or "ms"
    if unit not in UNITS:
        raise bad(f"unknown unit {unit!r}")
    limit = float(number) * UNITS[unit]
    if not (math.isfinite(limit) and limit > 0):
        raise bad("the limit must be a positive, finite number")
    return SLO(metric=metric, limit_ms=limit, stat=stat if colon else None)


def request_meets(frame: pd.DataFrame, slo: SLO) -> npt.NDArray[np.bool_]:
    """Boolean mask over ``frame`` rows (a per-request frame): which requests meet the
    per-request ``slo``. Failed requests never do."""
    if not slo.per_request:
        kind = "a level-wide check" if slo.stat is not None else "judged per task"
        raise ValueError(f"{slo} is {kind}, not a per-request limit")
    values = per_request(slo.entry, frame)
    with np.errstate(invalid="ignore"):
        meets = values <= slo.limit_ms
    if slo.entry.vacuous:
        meets |= np.isnan(values)
    return np.asarray(meets & frame["ok"].to_numpy(dtype=bool))


def slo_attainment(frame: pd.DataFrame, slos: Sequence[SLO]) -> tuple[npt.NDArray[np.bool_], float | None]:
    """``(mask, attainment)``: which requests meet every per-request SLO (level-wide
    checks in ``slos`` are ignored here) and the fraction that do; with no per-request
    SLO, the successful ones. ``attainment`` is ``None`` for an empty frame."""
    mask = frame["ok"].to_numpy(dtype=bool).copy()
    for slo in slos:
        if slo.per_request:
            mask &= request_meets(frame, slo)
    return mask, (float(mask.mean()) if mask.size else None)


def slo_scores(frame: pd.DataFrame, slos: Sequence[SLO]) -> npt.NDArray[np.float64]:
    """Per request, its largest ``value / limit`` over the per-request SLOs (a request meets
    them all when its score is at most 1; a vacuous check, such as TPOT of one token, counts
    0); ``inf`` for a failed request, 0 for the rest when no SLO is per-request. The
    continuous measure behind :func:`slo_attainment`'s mask, which gives the attainment
    interval its ``n_eff`` when SLO misses are few (docs/metrics.md, "Uncertainty")."""
    score = np.zeros(len(frame), dtype=np.float64)
    for slo in slos:
        if slo.per_request:
            values = per_request(slo.entry, frame) / slo.limit_ms
            if not slo.entry.vacuous:
                values = np.where(np.isnan(values), np.inf, values)  # as request_meets: no value, no pass
            score = np.fmax(score, values)  # fmax: a vacuous NaN leaves the score as it is
    score[~frame["ok"].to_numpy(dtype=bool)] = np.inf
    return score


def level_checks(samples: Mapping[str, Any], slos: Sequence[SLO]) -> list[Check]:
    """Evaluate the level-wide SLOs (those with a stat) of ``slos``.

    ``samples`` maps each metric name to its samples in ms (successful requests only;
    per-token samples for ``itl``). Returns one :class:`Check` per such SLO, in order.
    """
    out: list[Check] = []
    for slo in slos:
        if slo.stat is None or slo.per_task:
            continue
        value = stat_value(samples.get(slo.metric, ()), slo.stat)
        out.append(Check(slo=str(slo), value_ms=value, passed=value is not None and value <= slo.limit_ms))
    return out


def level_slos(slos: Sequence[SLO], mode: LoadMode, slo_latency: str = "queued") -> list[SLO]:
    """The SLOs a level is judged on. Open-loop (``mode == "rate"``) levels judge TTFT and
    E2E from the scheduled time unless ``slo_latency`` is ``"sent"``: a client that sent
    late must not make the server look faster than it was."""
    if mode != "rate" or slo_latency != "queued":
        return list(slos)
    return [SLO(_queued(s), s.limit_ms, s.stat) for s in slos]


def _queued(slo: SLO) -> str:
    """The SLO's metric measured from the scheduled time, when the catalogue has one."""
    queued = METRICS.get(slo.entry.queued or "")
    return slo.metric if queued is None or queued.slo is None else queued.slo


def mlperf_bounds(slos: Sequence[SLO]) -> list[tuple[str, Metric, float]]:
    """``(slo text, metric, bound in ms)`` of each per-request SLO, for the MLPerf verdicts
    (:func:`~loadgen.metrics.verdicts.mlperf_of`)."""
    return [(str(s), s.entry, s.limit_ms) for s in slos if s.per_request]
