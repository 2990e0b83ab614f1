"""The sim engine: a roofline model of a GPU runs the shared scheduler in (scaled) real time.

- :mod:`.gpus` — GPU presets; :mod:`.roofline` — step costs and the sim runner.
- :mod:`.disagg` — prefill/decode disaggregation; :mod:`.engine` — ``SimEngine``.
- :mod:`.build` — ``from_preset``, ``build_engine``.
"""

from loadgen.server.sim.build import build_engine, from_preset
from loadgen.server.sim.disagg import DisaggCore
from loadgen.server.sim.engine import SimEngine
from loadgen.server.sim.gpus import get_gpu
from loadgen.server.sim.roofline import RooflineModel, SimRunner

__all__ = ["build_engine", "from_preset", "DisaggCore", "SimEngine", "get_gpu",
           "RooflineModel", "SimRunner"]
