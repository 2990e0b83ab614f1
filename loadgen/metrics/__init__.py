"""Records -> numbers: per-request metrics, level summaries, SLOs, goodput, capacity.

Pure (numpy/pandas): no I/O, no printing, no network. Definitions are those of
docs/metrics.md exactly; see each module's docstring.

- :mod:`~loadgen.metrics.catalog` — every metric declared once (names, unit, direction, source);
  ``register`` adds one
- :mod:`~loadgen.metrics.results` — the typed results (``LevelSummary``, ``RunSummary``,
  ``Distribution``, …) that ``summary.json`` serialises
- :mod:`~loadgen.metrics.stats` — ``describe`` (count, mean, std, min, p50…p99.9, max)
- :mod:`~loadgen.metrics.per_request` — one row per request, ITL / inter-chunk samples
- :mod:`~loadgen.metrics.slo` — ``--slo`` parsing, attainment, level-wide checks
- :mod:`~loadgen.metrics.summary` — ``summarize_level``: one ``summary.json`` level entry
- :mod:`~loadgen.metrics.verdicts` — its ``steady_state`` (MSER-5 cut, trend test), ``mlperf``
  (early stopping per SLO) entries
- :mod:`~loadgen.metrics.turns` — its multi-turn (``by_turn``, ``sessions``) and ``reasoning`` entries
- :mod:`~loadgen.metrics.tasks` — its agentic ``tasks`` entry (completion, task SLOs, time shares, by step)
- :mod:`~loadgen.metrics.capacity` — capacity, saturation knee, time windows
- :mod:`~loadgen.metrics.run` — ``summarize_run``: the levels, capacity and knee of a run
- :mod:`~loadgen.metrics.client` — client health: loop lag over time, late sends
- :mod:`~loadgen.metrics.bootstrap` — bootstrap intervals of a difference (on n_eff, time blocks), verdicts
- :mod:`~loadgen.metrics.compare` — two runs' levels metric by metric (bootstrap, or Welch over trials)
"""

from loadgen.metrics.capacity import capacity, knee, windows
from loadgen.metrics.catalog import Metric
from loadgen.metrics.per_request import (
    EventArrays,
    event_arrays,
    frame_and_events,
    inter_chunk_samples,
    itl_samples,
    per_request_frame,
)
from loadgen.metrics.results import (
    SCHEMA_VERSION,
    Capacity,
    ClientHealth,
    Distribution,
    LevelSummary,
    Load,
    RunSummary,
    Saturation,
    unit_label,
)
from loadgen.metrics.run import summarize_run
from loadgen.metrics.slo import SLO, level_checks, level_slos, parse_slo, request_meets, slo_attainment
from loadgen.metrics.stats import PERCENTILES, describe, distribution, stat_value
from loadgen.metrics.summary import summarize_level

__all__ = [
    "PERCENTILES",
    "SCHEMA_VERSION",
    "SLO",
    "Capacity",
    "ClientHealth",
    "Distribution",
    "EventArrays",
    "LevelSummary",
    "Load",
    "Metric",
    "RunSummary",
    "Saturation",
    "capacity",
    "describe",
    "distribution",
    "event_arrays",
    "frame_and_events",
    "inter_chunk_samples",
    "itl_samples",
    "knee",
    "level_checks",
    "level_slos",
    "parse_slo",
    "per_request_frame",
    "request_meets",
    "slo_attainment",
    "stat_value",
    "summarize_level",
    "summarize_run",
    "unit_label",
    "windows",
]
