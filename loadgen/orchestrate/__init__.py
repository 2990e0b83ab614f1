"""The run's wiring: the one package that joins the layers into a benchmark run.

Everything below it (``workload/``, ``client/``, ``load/``, ``metrics/``, ``report/``,
``dashboard/``) knows nothing of the others' wiring; the command line (``cli/``) and the
Python API (``loadgen.api``) only parse and call in here. docs/architecture.md, "Layers"
(its ``orchestrate/`` row, which ``tests/test_layers.py`` checks against the modules),
lists the modules and what each does; "A run, from workload to summary" follows a run
through them, from ``config`` (:class:`RunConfig`, :class:`Origin`, ``Resume``) and
``flags``/``from_flags`` to ``execution``'s :func:`execute`.

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
