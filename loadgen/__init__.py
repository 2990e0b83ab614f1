"""loadgen — load testing and latency benchmarking for LLM inference servers.

The public Python API (docs/api.md)::

    import loadgen

    cfg = loadgen.RunConfig(url="http://127.0.0.1:8000", api="completions",
                            workload=loadgen.load_workload("chat"),
                            profile=loadgen.Profile(levels=[1, 4, 16], requests=50), out="reports/x")
    summary = loadgen.run(cfg)            # a RunSummary; the folder has run.json, records, report.html
    frame = loadgen.records_frame(cfg.out)  # one row per measured request (pandas)

Names are imported on first use, so ``import loadgen`` stays cheap for the CLI and the
server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from loadgen.api import load_profile, load_workload, read_summary, records_frame, run
    from loadgen.errors import ConfigError, LoadgenError
    from loadgen.load.profiles import Profile
    from loadgen.metrics.mlperf import early_stopping_min_queries, early_stopping_verdict
    from loadgen.metrics.results import LevelSummary, RunSummary
    from loadgen.metrics.slo import SLO, parse_slo
    from loadgen.metrics.steady import mser5_truncation, stationarity
    from loadgen.metrics.uncertainty import (
        Interval,
        effective_sample_size,
        mean_interval,
        percentile_interval,
        proportion_interval,
    )
    from loadgen.orchestrate import DashboardAt, RunConfig
    from loadgen.records import RequestRecord, RequestSpec
    from loadgen.report.files import read_run_info
    from loadgen.report.readers import read_records
    from loadgen.runinfo import RunInfo
    from loadgen.server.config import ServeConfig
    from loadgen.server.process import ServerProcess
    from loadgen.workload.spec import Workload, workload_from_flags

_EXPORTS = {
    "run": "loadgen.api",
    "read_summary": "loadgen.api",
    "records_frame": "loadgen.api",
    "RunConfig": "loadgen.orchestrate",
    "DashboardAt": "loadgen.orchestrate",
    "Profile": "loadgen.load.profiles",
    "load_profile": "loadgen.api",
    "Workload": "loadgen.workload.spec",
    "load_workload": "loadgen.api",
    "workload_from_flags": "loadgen.workload.spec",
    "SLO": "loadgen.metrics.slo",
    "parse_slo": "loadgen.metrics.slo",
    "RunSummary": "loadgen.metrics.results",
    "LevelSummary": "loadgen.metrics.results",
    "RequestSpec": "loadgen.records",
    "RequestRecord": "loadgen.records",
    "read_records": "loadgen.report.readers",
    "read_run_info": "loadgen.report.files",
    "RunInfo": "loadgen.runinfo",
    "ServeConfig": "loadgen.server.config",
    "ServerProcess": "loadgen.server.process",
    "percentile_interval": "loadgen.metrics.uncertainty",
    "mean_interval": "loadgen.metrics.uncertainty",
    "proportion_interval": "loadgen.metrics.uncertainty",
    "effective_sample_size": "loadgen.metrics.uncertainty",
    "Interval": "loadgen.metrics.uncertainty",
    "mser5_truncation": "loadgen.metrics.steady",
    "stationarity": "loadgen.metrics.steady",
    "early_stopping_min_queries": "loadgen.metrics.mlperf",
    "early_stopping_verdict": "loadgen.metrics.mlperf",
    "LoadgenError": "loadgen.errors",
    "ConfigError": "loadgen.errors",
}
__all__ = [
    "SLO",
    "ConfigError",
    "DashboardAt",
    "Interval",
    "LevelSummary",
    "LoadgenError",
    "Profile",
    "RequestRecord",
    "RequestSpec",
    "RunConfig",
    "RunInfo",
    "RunSummary",
    "ServeConfig",
    "ServerProcess",
    "Workload",
    "__version__",
    "early_stopping_min_queries",
    "early_stopping_verdict",
    "effective_sample_size",
    "load_profile",
    "load_workload",
    "mean_interval",
    "mser5_truncation",
    "parse_slo",
    "percentile_interval",
    "proportion_interval",
    "read_records",
    "read_run_info",
    "read_summary",
    "records_frame",
    "run",
    "stationarity",
    "workload_from_flags",
]


def __getattr__(name: str) -> Any:
    """The public names, imported when first used (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loadgen' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
