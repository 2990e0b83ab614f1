"""GPU presets of the roofline simulator, with their sources.

Numbers are the vendors' datasheet peaks: *dense* BF16 and FP8 tensor FLOP/s (datasheets
often print the 2:4-sparsity figure, twice as large, next to it), HBM bandwidth and
capacity, and GPU-to-GPU bandwidth in *one direction* (datasheets quote NVLink as the
bidirectional total) used for tensor-parallel all-reduces. ``fp8_flops`` is None for a
GPU without FP8 tensor cores (the A100): FP8 weights are then computed at the BF16 peak.
``board_power_w`` is the datasheet's maximum board power (TDP), which the simulated
telemetry's power model reaches at full use (:mod:`loadgen.server.sim.telemetry`).
``batch_tier`` says whether the GPU is at least 70 GiB and not an A100 (``"high"``) or not
(``"low"``); ``vllm serve``'s default batch limits are chosen from ``memory_bytes`` and the
name directly (:func:`loadgen.server.config.batch_defaults`, which adds vLLM's 160 GiB
class). Every field is required: a preset cannot leave one to a default.

:data:`GPUS` is filled by the :func:`gpu_preset` decorator (aliases allowed); a failed
lookup raises :class:`~loadgen.errors.ConfigError` listing the valid names. The model
presets are shared with the torch engine: :mod:`loadgen.server.engine.models`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loadgen.server.engine.registry import Registry

__all__ = ["BATCH_TIERS", "GPUS", "BatchTier", "GpuSpec", "get_gpu", "gpu_preset"]

TERA = 1e12
GB = 1e9

BatchTier = Literal["high", "low"]
BATCH_TIERS: tuple[BatchTier, ...] = ("high", "low")


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator: ``peak_flops`` dense BF16, bytes/s, bytes; ``link_bandwidth`` is
    the per-GPU, one-direction bandwidth to its tensor-parallel peers; ``fp8_flops``
    dense FP8 (None: no FP8 tensor cores); ``board_power_w`` the maximum board power (W);
    ``batch_tier`` which ``vllm serve`` default batch limits apply (module docstring)."""

    name: str
    peak_flops: float
    mem_bandwidth: float
    memory_bytes: float
    link_bandwidth: float
    fp8_flops: float | None
    board_power_w: float
    batch_tier: BatchTier


GPUS: Registry[GpuSpec] = Registry("GPU", "--gpu")
gpu_preset = GPUS.preset


def get_gpu(name: str) -> GpuSpec:
    """The GPU preset called ``name`` (case-insensitive)."""
    return GPUS.lookup(name)


@gpu_preset("a100-80gb", "a100")
def _a100() -> GpuSpec:
    # NVIDIA A100 datasheet (SXM 80GB): BF16 tensor 312 TFLOPS dense (624 sparse),
    # HBM2e 2,039 GB/s, 80 GB; NVLink 3 600 GB/s bidirectional -> 300 GB/s one way.
    # No FP8 tensor cores. Max TDP 400 W (SXM4). vLLM's low tier: it excludes the A100 by name.
    return GpuSpec("a100-80gb", 312 * TERA, 2039 * GB, 80 * GB, 300 * GB, None, board_power_w=400.0, batch_tier="low")


@gpu_preset("a100-40gb")
def _a100_40() -> GpuSpec:
    # NVIDIA A100 datasheet (SXM 40GB): BF16 tensor 312 TFLOPS dense, HBM2 1,555 GB/s,
    # 40 GB; NVLink 3 600 GB/s bidirectional -> 300 GB/s one way. No FP8 tensor cores.
    # Max TDP 400 W (SXM4, the same datasheet). vLLM's low tier (under 70 GiB, and an A100).
    return GpuSpec("a100-40gb", 312 * TERA, 1555 * GB, 40 * GB, 300 * GB, None, board_power_w=400.0, batch_tier="low")


@gpu_preset("h100", "h100-sxm")
def _h100() -> GpuSpec:
    # NVIDIA H100 SXM5 datasheet: BF16 tensor 989 TFLOPS dense (1,979 sparse),
    # HBM3 3.35 TB/s, 80 GB; NVLink 4 900 GB/s bidirectional -> 450 GB/s one way;
    # FP8 tensor 1,979 TFLOPS dense (3,958 sparse). Max TDP up to 700 W (configurable).
    return GpuSpec(
        "h100", 989 * TERA, 3350 * GB, 80 * GB, 450 * GB, 1979 * TERA, board_power_w=700.0, batch_tier="high"
    )


@gpu_preset("h200")
def _h200() -> GpuSpec:
    # NVIDIA H200 SXM datasheet: BF16 tensor 989 TFLOPS dense (1,979 sparse),
    # HBM3e 4.8 TB/s, 141 GB; NVLink 4 900 GB/s bidirectional -> 450 GB/s one way;
    # FP8 tensor 1,979 TFLOPS dense (3,958 sparse). Max TDP up to 700 W (configurable).
    return GpuSpec(
        "h200", 989 * TERA, 4800 * GB, 141 * GB, 450 * GB, 1979 * TERA, board_power_w=700.0, batch_tier="high"
    )


@gpu_preset("b200")
def _b200() -> GpuSpec:
    # NVIDIA HGX/DGX B200 (1,000 W): FP16/BF16 tensor 2.25 PFLOPS dense per GPU, the
    # commonly published figure (4.5 sparse; the HGX "36 PFLOPS" is 8 GPUs with sparsity;
    # the B200 inside a GB200 at 1,200 W: 2.5 dense), HBM3e 8 TB/s, 180 GB usable of
    # 192 GB (1,440 GB per 8-GPU system); NVLink 5 1.8 TB/s bidirectional; FP8 tensor
    # 4.5 PFLOPS dense (9 sparse; HGX B200: 72 PFLOPS FP8 for 8 GPUs with sparsity).
    # Board power 1,000 W per GPU (HGX B200).
    return GpuSpec(
        "b200", 2250 * TERA, 8000 * GB, 180 * GB, 900 * GB, 4500 * TERA, board_power_w=1000.0, batch_tier="high"
    )


@gpu_preset("l40s")
def _l40s() -> GpuSpec:
    # NVIDIA L40S datasheet: BF16 tensor "362.05 | 733*" TFLOPS, * = with sparsity, so
    # 362 dense; GDDR6 864 GB/s, 48 GB; no NVLink: PCIe Gen4 x16 64 GB/s bidirectional;
    # FP8 tensor "733 | 1,466*" TFLOPS, so 733 dense. Max power consumption 350 W.
    # vLLM's low tier (under 70 GiB).
    return GpuSpec("l40s", 362 * TERA, 864 * GB, 48 * GB, 32 * GB, 733 * TERA, board_power_w=350.0, batch_tier="low")


@gpu_preset("mi300x")
def _mi300x() -> GpuSpec:
    # AMD Instinct MI300X datasheet: BF16 matrix 1,307.4 TFLOPS dense (2,614.9 sparse),
    # HBM3 5.3 TB/s, 192 GB; 7 Infinity Fabric links, 896 GB/s aggregate bidirectional;
    # FP8 2,614.9 TFLOPS dense (5,229.8 sparse). Total board power 750 W peak (OAM).
    return GpuSpec(
        "mi300x", 1307.4 * TERA, 5300 * GB, 192 * GB, 448 * GB, 2614.9 * TERA, board_power_w=750.0, batch_tier="high"
    )
