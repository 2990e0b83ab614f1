"""What both engines share: the scheduler, the paged KV cache, sequences, batches, model
shapes and the step loop. Nothing here knows the sim, torch or HTTP.

- :mod:`.interface` — the contract with the HTTP API (``AsyncEngine``, ``TokenOutput``...).
- :mod:`.scheduler` — the pure continuous-batching scheduler (``EngineConfig``);
  :mod:`.sequence` — one request's state; :mod:`.batch` — one step's work
  (``ScheduledBatch``); :mod:`.kv_cache` — paged KV blocks with prefix caching.
- :mod:`.runner` — the ``ModelRunner`` seam a sim or torch runner implements.
- :mod:`.core` — the step loop: ``EngineCore`` advances scheduler + runner as discrete
  events, on modelled deadlines (the sim) or in real time (the torch engine's process).
- :mod:`.streams` — ``OutputStreams``: the per-request queues and the one ``generate``
  both engines serve the API with.
- :mod:`.models` — ``ModelShape`` and the model presets (``MODELS``) both engines read;
  :mod:`.registry` — the preset registry (a dict and a decorator).
"""

from loadgen.server.engine.batch import ScheduledBatch, ScheduledSeq
from loadgen.server.engine.core import Core, EngineCore, ManualClock
from loadgen.server.engine.interface import AsyncEngine, EngineRequest, EngineStats, SamplingParams, TokenOutput
from loadgen.server.engine.kv_cache import KVCacheManager
from loadgen.server.engine.models import MODELS, ModelShape, get_model
from loadgen.server.engine.runner import ModelRunner, StepResult
from loadgen.server.engine.scheduler import EngineConfig, Scheduler
from loadgen.server.engine.streams import OutputStreams

__all__ = [
    "MODELS",
    "AsyncEngine",
    "Core",
    "EngineConfig",
    "EngineCore",
    "EngineRequest",
    "EngineStats",
    "KVCacheManager",
    "ManualClock",
    "ModelRunner",
    "ModelShape",
    "OutputStreams",
    "SamplingParams",
    "ScheduledBatch",
    "ScheduledSeq",
    "Scheduler",
    "StepResult",
    "TokenOutput",
    "get_model",
]
