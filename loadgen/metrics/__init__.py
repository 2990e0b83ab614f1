"""Records -> numbers: per-request metrics, level summaries, SLOs, goodput, capacity.

Pure (numpy/pandas): no I/O, no printing, no network. Definitions are those of
docs/metrics.md exactly; see each module's docstring.

- ``catalog``: every metric declared once (name, unit, direction, source); ``register`` adds one
- ``results``: the typed results (``LevelSummary``, ``RunSummary``, ``Distribution``, …)
- ``stats`` (``describe``), ``per_request`` (one row per request, ITL / inter-chunk samples)
- ``slo`` (``--slo`` parsing, attainment, checks), ``summary`` (``summarize_level``: one level)
- the level's parts: ``verdicts`` (``steady_state``, ``mlperf``), ``turns`` (``by_turn``,
  ``sessions``, ``reasoning``), ``tasks`` (agentic ``tasks``)
- ``capacity`` (capacity, knee, windows), ``run`` (``summarize_run``), ``client`` (client health)
- ``bootstrap`` (intervals of a difference, verdicts), ``compare`` (two runs' levels)
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
