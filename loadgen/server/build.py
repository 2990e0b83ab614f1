"""``build_engine(config)``: the engine a :class:`~loadgen.server.config.ServeConfig` asks for."""

from __future__ import annotations

import dataclasses

from loadgen.server.config import ServeConfig
from loadgen.server.replicas import ReplicatedEngine, Router
from loadgen.server.sim.build import kv_blocks, sim_engine
from loadgen.server.sim.engine import SimEngine
from loadgen.server.torch.engine import TorchEngine, torch_engine

__all__ = ["build_engine"]


def build_engine(config: ServeConfig) -> SimEngine | TorchEngine | ReplicatedEngine:
    """The sim or torch engine of ``config``, not started (the app starts it); with
    ``replicas`` > 1, that many sim engines behind the chosen router."""
    if config.engine == "torch":
        return torch_engine(config)
    if config.replicas == 1:
        return sim_engine(config)
    engines = [sim_engine(dataclasses.replace(config, seed=config.seed + 1000 * i)) for i in range(config.replicas)]
    router = Router(config.router, config.replicas, block_size=config.limits.block_size, cache_blocks=kv_blocks(config))
    return ReplicatedEngine(engines, router)
