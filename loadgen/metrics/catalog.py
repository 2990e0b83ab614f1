"""The metric catalogue: every metric loadgen reports, declared once.

A :class:`Metric` says what the metric is called where (its ``summary.json`` key, its
``--slo`` and ``--precision`` spellings, its labels on the console and the comparison
page), its unit and direction, and where its per-request values come from (a column of
:func:`~loadgen.metrics.per_request.per_request_frame`, or a function of that frame).
The SLO parser, the precision targets, ``loadgen compare``, repeated trials and the
console's level table select the metrics they show from :data:`METRICS`, in the order
the metrics were registered (``--slo`` lists its metrics by ``slo_rank``: TPOT before ITL,
as its help and error messages always have). Adding a per-request metric is one :func:`register` call
with its computation (docs/metrics.md, "Adding a metric").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.errors import ConfigError

__all__ = [
    "METRICS",
    "Kind",
    "Metric",
    "by_precision",
    "by_slo",
    "metrics",
    "per_request",
    "register",
    "slo_names",
    "trial_paths",
    "unregister",
]

Kind = Literal["latency", "rate", "proportion"]
"""``latency``: a distribution over requests (or tokens), compared by its quantiles;
``rate``: a level-wide rate, compared on time blocks; ``proportion``: a share of requests."""


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric: its names, unit, direction and per-request source.

    ``name`` is the registry key, the level's ``summary.json`` key (unless ``json_key``
    gives a dotted path, as for ``throughput.requests_per_s``) and the comparison's row key.
    A ``None`` spelling or label leaves the metric out of that table."""

    name: str
    label: str  # on the comparison page and in trials: "TTFT", "E2E latency"
    unit: str  # "ms", "tok/s", "req/s", "%"
    lower_is_better: bool = True
    kind: Kind = "latency"
    column: str | None = None  # the per-request frame column it comes from ("ttft_ms")
    compute: Callable[[pd.DataFrame], npt.ArrayLike] | None = None  # or its values from the per-request frame
    json_key: str | None = None  # a dotted path in the level's JSON, when not ``name``
    slo: str | None = None  # --slo spelling: ttft=500ms
    slo_rank: int = 100  # its place in --slo's list of metrics (the built-in order predates the catalogue)
    precision: str | None = None  # --precision spelling: ttft.p99=5%
    console: str | None = None  # its row in the console's level table: "TTFT (queued)"
    compared: bool = False  # a metric of `loadgen compare`
    trials: tuple[str, ...] = ()  # statistics kept between --trials ("p50", "p99"; "rate", "value")
    headline: int | None = None  # what a reader of a comparison looks at first (0 first)
    vacuous: bool = False  # a request with too few tokens has no value and meets its SLO
    queued: str | None = None  # the same metric measured from the scheduled time (its name)
    streamed_only: bool = False  # needs streamed tokens: not shown for a non-streamed API
    per_token: bool = False  # the level's samples are per token (ITL), the per-request value their max
    per_task: bool = False  # judged per agentic task, not per request
    scale: float = 1.0  # trials keep the value times this (100: a share in %)

    @property
    def path(self) -> str:
        """The metric's dotted path in a level of ``summary.json`` (``"ttft_ms"``)."""
        return self.json_key or self.name

    @property
    def higher_is_better(self) -> bool:
        return not self.lower_is_better


_REGISTRY: dict[str, Metric] = {}
METRICS: Mapping[str, Metric] = MappingProxyType(_REGISTRY)  # a live, read-only view, in registration order


def register(metric: Metric) -> Metric:
    """Add ``metric`` under its ``name`` (a ConfigError when the name or one of its
    spellings is taken by another metric); returns it."""
    if _REGISTRY.get(metric.name) is metric:
        return metric
    for other in _REGISTRY.values():
        for what, mine, theirs in (
            ("name", metric.name, other.name),
            ("--slo spelling", metric.slo, other.slo),
            ("--precision spelling", metric.precision, other.precision),
        ):
            if mine is not None and mine == theirs:
                raise ConfigError(f"metric {metric.name!r}: its {what} {mine!r} is registered already")
    if metric.kind == "latency" and not metric.per_task and metric.column is None and metric.compute is None:
        if metric.slo is not None or metric.precision is not None:
            raise ConfigError(f"metric {metric.name!r} has an SLO or precision spelling but no per-request source")
    _REGISTRY[metric.name] = metric
    return metric


def unregister(name: str) -> None:
    """Remove the metric called ``name`` (nothing if there is none)."""
    _REGISTRY.pop(name, None)


def metrics() -> Iterator[Metric]:
    """The registered metrics, in registration order."""
    return iter(tuple(_REGISTRY.values()))


def slo_names() -> list[str]:
    """The ``--slo`` spellings, in ``--slo``'s order."""
    with_slo = [m for m in _REGISTRY.values() if m.slo is not None]
    return [m.slo for m in sorted(with_slo, key=lambda m: m.slo_rank) if m.slo is not None]


def by_slo(spelling: str) -> Metric | None:
    """The metric an SLO names (``"ttft"``), None for no such metric."""
    return next((m for m in _REGISTRY.values() if m.slo == spelling), None)


def by_precision(spelling: str) -> Metric | None:
    """The metric a precision target names (``"ttft"``), None for no such metric."""
    return next((m for m in _REGISTRY.values() if m.precision == spelling), None)


def trial_paths() -> list[tuple[str, Metric, str]]:
    """``(dotted path, metric, statistic)`` of every number kept between trials, in
    order: ``("ttft_ms.p50", TTFT, "p50")``; a rate or share is its own path."""
    out = []
    for m in _REGISTRY.values():
        for stat in m.trials:
            out.append((m.path if stat in ("rate", "value") else f"{m.path}.{stat}", m, stat))
    return out


def per_request(metric: Metric, frame: pd.DataFrame) -> npt.NDArray[np.float64]:
    """``metric``'s value for each row of a per-request frame, in ms (NaN: none)."""
    if metric.compute is not None:
        return np.asarray(metric.compute(frame), dtype=np.float64)
    if metric.column is None:
        raise ValueError(f"metric {metric.name!r} has no per-request values")
    return frame[metric.column].to_numpy(dtype=np.float64)


register(
    Metric(
        "ttft_ms",
        "TTFT",
        "ms",
        column="ttft_ms",
        slo="ttft",
        slo_rank=0,
        precision="ttft",
        console="TTFT",
        compared=True,
        trials=("p50", "p99"),
        headline=1,
        queued="ttft_queued_ms",
        streamed_only=True,
    )
)
register(
    Metric(
        "ttft_queued_ms",
        "TTFT from scheduled",
        "ms",
        column="ttft_queued_ms",
        slo="ttft_queued",
        slo_rank=1,
        precision="ttft_queued",
        console="TTFT (queued)",
        compared=True,
        streamed_only=True,
    )
)
register(
    Metric(
        "itl_ms",
        "ITL",
        "ms",
        column="itl_max_ms",
        slo="itl",
        slo_rank=3,
        console="ITL",
        compared=True,
        trials=("p50", "p99"),
        headline=0,
        vacuous=True,
        streamed_only=True,
        per_token=True,
    )
)
register(
    Metric(
        "tpot_ms",
        "TPOT",
        "ms",
        column="tpot_ms",
        slo="tpot",
        slo_rank=2,
        precision="tpot",
        console="TPOT",
        compared=True,
        trials=("p50",),
        headline=5,
        vacuous=True,
        streamed_only=True,
    )
)
register(
    Metric(
        "e2e_ms",
        "E2E latency",
        "ms",
        column="e2e_ms",
        slo="e2e",
        slo_rank=4,
        precision="e2e",
        console="E2E",
        compared=True,
        trials=("p99",),
        headline=6,
        queued="e2e_queued_ms",
    )
)
register(
    Metric(
        "e2e_queued_ms",
        "E2E latency from scheduled",
        "ms",
        column="e2e_queued_ms",
        slo="e2e_queued",
        slo_rank=5,
        precision="e2e_queued",
    )
)
register(Metric("inter_chunk_ms", "inter-chunk gap", "ms", console="Inter-chunk", streamed_only=True))
register(
    Metric(
        "ttfa_ms",
        "time to first answer token",
        "ms",
        column="ttfa_ms",
        json_key="reasoning.time_to_first_answer_ms",
        precision="ttfa",
        streamed_only=True,
    )
)
register(
    Metric(
        "output_tokens_per_s",
        "output tokens/s",
        "tok/s",
        lower_is_better=False,
        kind="rate",
        json_key="throughput.output_tokens_per_s",
        compared=True,
        trials=("rate",),
        headline=2,
        streamed_only=True,
    )
)
register(
    Metric(
        "requests_per_s",
        "requests/s",
        "req/s",
        lower_is_better=False,
        kind="rate",
        json_key="throughput.requests_per_s",
        compared=True,
    )
)
register(
    Metric(
        "goodput",
        "goodput",
        "req/s",
        lower_is_better=False,
        kind="rate",
        json_key="goodput.requests_per_s",
        compared=True,
        trials=("rate",),
        headline=3,
    )
)
register(
    Metric(
        "slo_attainment",
        "SLO attainment",
        "%",
        lower_is_better=False,
        kind="proportion",
        json_key="goodput.slo_attainment",
        compared=True,
        trials=("value",),
        headline=4,
        scale=100.0,
    )
)
register(
    Metric(
        "task_completion_ms",
        "task completion time",
        "ms",
        json_key="tasks.completion_ms",
        slo="task",
        slo_rank=6,
        per_task=True,
    )
)
