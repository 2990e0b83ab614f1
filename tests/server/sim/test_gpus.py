"""GPU presets: datasheet numbers and lookups."""

from __future__ import annotations

import dataclasses

import pytest

from loadgen.errors import ConfigError
from loadgen.server.sim.gpus import BATCH_TIERS, GPUS, GpuSpec, get_gpu

# datasheet maximum board power (TDP), W: A100 SXM4 (40 and 80 GB) 400, H100 SXM5 700,
# H200 SXM 700, HGX B200 1,000 per GPU, L40S 350, MI300X OAM 750
BOARD_POWER_W = {"a100-80gb": 400, "a100-40gb": 400, "h100": 700, "h200": 700, "b200": 1000, "l40s": 350, "mi300x": 750}


@pytest.mark.parametrize(
    ("name", "tflops", "fp8", "tb_s", "gb"),
    [
        ("a100-80gb", 312, None, 2.039, 80),
        ("a100-40gb", 312, None, 1.555, 40),
        ("h100", 989, 1979, 3.35, 80),
        ("h100-sxm", 989, 1979, 3.35, 80),
        ("h200", 989, 1979, 4.8, 141),
        ("b200", 2250, 4500, 8.0, 180),
        ("l40s", 362, 733, 0.864, 48),
        ("mi300x", 1307.4, 2614.9, 5.3, 192),
    ],
)
def test_gpu_datasheet_numbers(name: str, tflops: float, fp8: float | None, tb_s: float, gb: float) -> None:
    gpu = get_gpu(name)
    assert gpu.peak_flops == pytest.approx(tflops * 1e12)
    assert gpu.fp8_flops == (None if fp8 is None else pytest.approx(fp8 * 1e12))
    assert gpu.mem_bandwidth == pytest.approx(tb_s * 1e12)
    assert gpu.memory_bytes == pytest.approx(gb * 1e9)
    assert gpu.link_bandwidth > 0


def test_lookup_is_case_insensitive_and_failures_list_valid_names() -> None:
    assert get_gpu("H100-SXM") is get_gpu("h100")
    with pytest.raises(ConfigError) as exc:
        get_gpu("tpu-v5")
    assert exc.value.key == "--gpu" and "a100-80gb" in str(exc.value) and "mi300x" in str(exc.value)
    assert {"a100-80gb", "h100", "h100-sxm", "h200", "b200", "l40s", "mi300x"} <= set(GPUS)


def test_every_field_of_a_preset_is_required_and_every_preset_fills_it() -> None:
    """No field has a default a preset could fall back on, and each preset's board power
    and batch tier are the datasheet's and vLLM's."""
    for f in dataclasses.fields(GpuSpec):
        assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, f.name
    assert {gpu.name for gpu in GPUS.values()} == set(BOARD_POWER_W)
    for gpu in GPUS.values():
        assert gpu.board_power_w == BOARD_POWER_W[gpu.name]
        assert gpu.batch_tier in BATCH_TIERS
        # vLLM's rule, from the device it finds: at least 70 GiB and not an A100
        vllm_high = gpu.memory_bytes >= 70 * 2**30 and "a100" not in gpu.name
        assert gpu.batch_tier == ("high" if vllm_high else "low"), gpu.name
