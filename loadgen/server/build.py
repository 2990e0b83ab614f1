"""``build_engine(config)``: the engine a :class:`~loadgen.server.config.ServeConfig` asks for."""

from __future__ import annotations

from typing import Union

from loadgen.server.config import ServeConfig
from loadgen.server.sim.build import sim_engine
from loadgen.server.sim.engine import SimEngine
from loadgen.server.torch.engine import TorchEngine, torch_engine

__all__ = ["build_engine"]


def build_engine(config: ServeConfig) -> Union[SimEngine, TorchEngine]:
    """The sim or torch engine of ``config``, not started (the app starts it)."""
    if config.engine == "torch":
        return torch_engine(config)
    return sim_engine(config)
