"""The run's wiring: the one package that joins the layers into a benchmark run.

Everything below it (``workload/``, ``client/``, ``load/``, ``metrics/``, ``report/``,
``dashboard/``) knows nothing of the others' wiring; the command line (``cli/``) and the
Python API (``loadgen.api``) only parse and call in here. Its modules, in the order a run
meets them (docs/architecture.md, "Layers", lists the same):

- ``config``: :class:`RunConfig`, the one client configuration, which checks itself;
  :class:`Origin` (whose spelling an error names); ``Resume`` (a run continued).
- ``flags``: :class:`RunFlags`, ``loadgen run``'s options as given.
- ``from_flags``: the flags turned into one ``RunConfig`` (``--resume`` too).
- ``agent_replay``: ``--trace`` of an agent trace: its workload and profile.
- ``execution``: :func:`execute`, one run wired end to end (target, calibration, levels,
  files, summary).
- ``calibration``: the prompt calibration and the dialect's options for a run.
- ``sweep_driver``: the sweep's levels driven, summarised and merged across trials.
- ``run_json``: what ``run.json`` says, from the config.
- ``live_dashboard``: the live page wired to a run and to ``loadgen watch``.
- ``recover``: a crashed run's summary rebuilt, its sweep resumed.
- ``matrix``: server configurations started, measured and compared.
- ``demo``: ``loadgen demo``.

Other layers import the names below from here, never from the modules (one spelling for
each: ``tests/test_layers.py`` checks it; no name is also a module's); the modules import
each other directly. Names are imported on first use, so importing the config does not
import the run's machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadgen.orchestrate.config import DashboardAt, Origin, RunConfig, check_dashboard
    from loadgen.orchestrate.demo import run_demo
    from loadgen.orchestrate.execution import WRITE_FAILED, RunOutcome, execute, finish_unwritable
    from loadgen.orchestrate.flags import RunFlags
    from loadgen.orchestrate.from_flags import build_run_config, dashboard_at, resume_run_config
    from loadgen.orchestrate.live_dashboard import watch_folder
    from loadgen.orchestrate.matrix import load_matrix, run_matrix
    from loadgen.orchestrate.recover import needs_rebuild, rebuild_summary, resume_config

# name -> the module (of this package) that defines it
EXPORTS = {
    "RunConfig": "config",
    "Origin": "config",
    "DashboardAt": "config",
    "check_dashboard": "config",
    "RunFlags": "flags",
    "build_run_config": "from_flags",
    "resume_run_config": "from_flags",
    "dashboard_at": "from_flags",
    "execute": "execution",
    "RunOutcome": "execution",
    "WRITE_FAILED": "execution",
    "finish_unwritable": "execution",
    "rebuild_summary": "recover",
    "needs_rebuild": "recover",
    "resume_config": "recover",
    "load_matrix": "matrix",
    "run_matrix": "matrix",
    "run_demo": "demo",
    "watch_folder": "live_dashboard",
}
__all__ = [
    "WRITE_FAILED",
    "DashboardAt",
    "Origin",
    "RunConfig",
    "RunFlags",
    "RunOutcome",
    "build_run_config",
    "check_dashboard",
    "dashboard_at",
    "execute",
    "finish_unwritable",
    "load_matrix",
    "needs_rebuild",
    "rebuild_summary",
    "resume_config",
    "resume_run_config",
    "run_demo",
    "run_matrix",
    "watch_folder",
]


def __getattr__(name: str) -> Any:
    """The exported names, imported when first used (PEP 562)."""
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loadgen.orchestrate' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
