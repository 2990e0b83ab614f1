"""What both engines share: scheduler, paged KV cache, sequences, batches, the step loop.

- :mod:`.interface` — the contract with the HTTP API (``AsyncEngine``, ``TokenOutput``...).
- :mod:`.kv_cache` — paged KV block manager with prefix caching.
- :mod:`.scheduler` — pure continuous-batching scheduler (``EngineConfig``, ``ScheduledBatch``).
- :mod:`.runner` — the ``ModelRunner`` seam between the scheduler and a runner.
- :mod:`.core` — the discrete-event engine core (scheduler + runner, driven by a clock).
"""

from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq
from loadgen.server.engine.core import EngineCore, ManualClock
from loadgen.server.engine.kv_cache import KVCacheManager
from loadgen.server.engine.runner import ModelRunner, StepResult
from loadgen.server.engine.scheduler import EngineConfig, Scheduler

__all__ = [
    "EngineCore", "ManualClock", "KVCacheManager", "ModelRunner", "StepResult", "EngineConfig",
    "ScheduledBatch", "ScheduledSeq", "Scheduler",
]
