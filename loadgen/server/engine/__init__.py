"""The reference server's engine: scheduler, paged KV cache, runners and the async engine.

Layers, bottom up (the server never imports the client side):

- :mod:`.interface` — the contract with the HTTP API (``AsyncEngine``, ``TokenOutput``...).
- :mod:`.kv_cache` — paged KV block manager with prefix caching.
- :mod:`.scheduler` — pure continuous-batching scheduler (``EngineConfig``, ``ScheduledBatch``).
- :mod:`.runner` — the ``ModelRunner`` seam; :mod:`.sim` + :mod:`.presets` — the roofline runner.
- :mod:`.core` / :mod:`.disagg` — discrete-event engine cores (one pool, or prefill + decode).
- :mod:`.engine` — ``SimEngine``, the asyncio driver; :mod:`.build` — ``from_preset``, ``build_engine``.
"""

from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq
from loadgen.server.engine.build import build_engine, from_preset
from loadgen.server.engine.core import EngineCore, ManualClock
from loadgen.server.engine.disagg import DisaggCore
from loadgen.server.engine.engine import SimEngine
from loadgen.server.engine.kv_cache import KVCacheManager
from loadgen.server.engine.presets import get_gpu, get_model
from loadgen.server.engine.runner import ModelRunner, StepResult
from loadgen.server.engine.scheduler import EngineConfig, Scheduler
from loadgen.server.engine.sim import RooflineModel, SimRunner

__all__ = [
    "build_engine", "from_preset", "EngineCore", "ManualClock", "DisaggCore", "SimEngine",
    "KVCacheManager", "get_gpu", "get_model", "ModelRunner", "StepResult", "EngineConfig",
    "ScheduledBatch", "ScheduledSeq", "Scheduler", "RooflineModel", "SimRunner",
]
