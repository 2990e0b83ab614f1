"""GPU and model presets: datasheet numbers, derived parameter counts, lookups."""

from __future__ import annotations

import pytest

from loadgen.errors import ConfigError
from loadgen.server.sim.gpus import GPUS, MODELS, get_gpu, get_model


@pytest.mark.parametrize(("name", "total_b", "active_b"), [
    ("llama-3.1-8b", 8.03, 8.03),
    ("llama-3.1-70b", 70.6, 70.6),
    ("qwen2.5-7b", 7.61, 7.61),
    ("mixtral-8x7b", 46.7, 12.9),
])
def test_parameter_counts_match_the_published_totals(name: str, total_b: float, active_b: float) -> None:
    model = get_model(name)
    assert model.num_params / 1e9 == pytest.approx(total_b, rel=0.01)
    assert model.num_active_params / 1e9 == pytest.approx(active_b, rel=0.01)


def test_kv_bytes_per_token() -> None:
    assert get_model("llama-3.1-8b").kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert get_model("qwen2.5-7b").kv_bytes_per_token == 2 * 28 * 4 * 128 * 2
    assert get_model("llama-3.1-70b").kv_bytes_per_token == 2 * 80 * 8 * 128 * 2


@pytest.mark.parametrize(("name", "tflops", "tb_s", "gb"), [
    ("a100-80gb", 312, 2.039, 80), ("h100", 989, 3.35, 80), ("h100-sxm", 989, 3.35, 80),
    ("h200", 989, 4.8, 141), ("b200", 2250, 8.0, 180), ("l40s", 362, 0.864, 48),
    ("mi300x", 1307.4, 5.3, 192),
])
def test_gpu_datasheet_numbers(name: str, tflops: float, tb_s: float, gb: float) -> None:
    gpu = get_gpu(name)
    assert gpu.peak_flops == pytest.approx(tflops * 1e12)
    assert gpu.mem_bandwidth == pytest.approx(tb_s * 1e12)
    assert gpu.memory_bytes == pytest.approx(gb * 1e9)
    assert gpu.link_bandwidth > 0


def test_lookup_is_case_insensitive_and_failures_list_valid_names() -> None:
    assert get_gpu("H100-SXM") is get_gpu("h100")
    assert get_model(" Llama-3.1-8B ") is MODELS["llama-3.1-8b"]
    with pytest.raises(ConfigError) as exc:
        get_gpu("tpu-v5")
    assert exc.value.key == "--gpu" and "a100-80gb" in str(exc.value) and "mi300x" in str(exc.value)
    with pytest.raises(ConfigError, match="valid: .*qwen2.5-7b") as exc2:
        get_model("gpt-5")
    assert exc2.value.key == "--model"
    assert {"a100-80gb", "h100", "h100-sxm", "h200", "b200", "l40s", "mi300x"} <= set(GPUS)
