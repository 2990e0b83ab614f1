"""GPU presets: datasheet numbers and lookups."""

from __future__ import annotations

import pytest

from loadgen.errors import ConfigError
from loadgen.server.sim.gpus import GPUS, get_gpu


@pytest.mark.parametrize(("name", "tflops", "fp8", "tb_s", "gb"), [
    ("a100-80gb", 312, None, 2.039, 80), ("a100-40gb", 312, None, 1.555, 40),
    ("h100", 989, 1979, 3.35, 80), ("h100-sxm", 989, 1979, 3.35, 80),
    ("h200", 989, 1979, 4.8, 141), ("b200", 2250, 4500, 8.0, 180), ("l40s", 362, 733, 0.864, 48),
    ("mi300x", 1307.4, 2614.9, 5.3, 192),
])
def test_gpu_datasheet_numbers(name: str, tflops: float, fp8: float | None, tb_s: float,
                               gb: float) -> None:
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
