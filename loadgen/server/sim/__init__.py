"""The sim engine: a roofline model of a GPU runs the shared scheduler in (scaled) real time.

- :mod:`.gpus` — GPU presets (datasheet peaks) and their registry.
- :mod:`.roofline` — the cost of one step on ``tp`` GPUs: FLOPs, bytes, all-reduce, overhead.
- :mod:`.runner` — ``SimRunner``: modelled step times, seeded made-up tokens.
- :mod:`.disagg` — ``DisaggCore``: prefill and decode pools joined by a KV-transfer link.
- :mod:`.engine` — ``SimEngine``: drives a core from the server's event loop.
- :mod:`.build` — ``sim_engine(config)``: all of the above from a ``ServeConfig``.

The model shapes it prices are shared with the torch engine
(:mod:`loadgen.server.engine.models`).
"""

from loadgen.server.sim.build import sim_engine
from loadgen.server.sim.disagg import DisaggCore
from loadgen.server.sim.engine import SimEngine
from loadgen.server.sim.gpus import GPUS, GpuSpec, get_gpu
from loadgen.server.sim.roofline import RooflineModel, StepCost
from loadgen.server.sim.runner import SimRunner, sim_token

__all__ = [
    "GPUS",
    "DisaggCore",
    "GpuSpec",
    "RooflineModel",
    "SimEngine",
    "SimRunner",
    "StepCost",
    "get_gpu",
    "sim_engine",
    "sim_token",
]
