"""GPU telemetry of the simulated GPUs, under the names NVIDIA's DCGM exporter uses.

``/metrics`` of the sim engine carries, per simulated GPU (label ``gpu="i"``):

- ``DCGM_FI_DEV_GPU_UTIL`` (%): the share of wall time since the previous scrape during
  which the GPU's pool was running a step — what DCGM reports (time a kernel was
  executing), not how busy the tensor cores were.
- ``DCGM_FI_DEV_POWER_USAGE`` (W): a linear power model between idle and board power,
  ``idle + (tdp - idle) * busy``; the board power is the preset's datasheet figure
  (:attr:`~loadgen.server.sim.gpus.GpuSpec.board_power_w`), idle is taken as 10% of it. It is a model for trying the report out, not a measurement.
- ``DCGM_FI_DEV_FB_USED`` (MiB): the weights' share of the GPU plus the KV cache in use.

A disaggregated engine reports its prefill GPUs first, then its decode GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from loadgen.server.sim.gpus import GpuSpec

__all__ = ["IDLE_SHARE", "GpuSample", "GpuTelemetry", "Pool"]

IDLE_SHARE = 0.10


@dataclass(frozen=True, slots=True)
class GpuSample:
    util: float  # 0..1 over the last interval
    power_w: float
    fb_used_mib: float


@dataclass(slots=True)
class Pool:
    """One GPU group (``tp`` GPUs of type ``gpu`` running one core's steps)."""

    gpu: GpuSpec
    tp: int
    weight_bytes_per_gpu: float
    kv_bytes_per_gpu: float  # the KV pool's size on one GPU
    last_busy_s: float = 0.0
    last_t: float | None = None


@dataclass(slots=True)
class GpuTelemetry:
    """Turns each pool's busy seconds and KV usage into DCGM-style samples."""

    pools: list[Pool] = field(default_factory=list)

    def sample(self, now: float, busy_s: Sequence[float], kv_usage: Sequence[float]) -> list[GpuSample]:
        """Samples for every GPU; ``busy_s`` and ``kv_usage`` are per pool, in pool order."""
        out: list[GpuSample] = []
        for pool, busy, kv in zip(self.pools, busy_s, kv_usage):
            tdp = pool.gpu.board_power_w
            idle = IDLE_SHARE * tdp
            if pool.last_t is None or now <= pool.last_t:
                util = 0.0
            else:
                util = min(1.0, max(0.0, (busy - pool.last_busy_s) / (now - pool.last_t)))
            pool.last_t, pool.last_busy_s = now, busy
            fb = (pool.weight_bytes_per_gpu + kv * pool.kv_bytes_per_gpu) / 2**20
            out.extend(GpuSample(util, idle + (tdp - idle) * util, fb) for _ in range(pool.tp))
        return out
