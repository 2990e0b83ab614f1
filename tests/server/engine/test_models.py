"""Model presets: derived parameter counts, the shapes both engines read, lookups."""

from __future__ import annotations

import pytest

from loadgen.errors import ConfigError
from loadgen.server.engine.models import MODELS, get_model


@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [
        ("llama-3.1-8b", 8.03, 8.03),
        ("llama-3.1-70b", 70.6, 70.6),
        ("qwen2.5-7b", 7.61, 7.61),
        ("mixtral-8x7b", 46.7, 12.9),
        ("llama-3.2-1b", 1.24, 1.24),
    ],
)
def test_parameter_counts_match_the_published_totals(name: str, total_b: float, active_b: float) -> None:
    model = get_model(name)
    assert model.num_params / 1e9 == pytest.approx(total_b, rel=0.01)
    assert model.num_active_params / 1e9 == pytest.approx(active_b, rel=0.01)


def test_kv_bytes_per_token() -> None:
    assert get_model("llama-3.1-8b").kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert get_model("qwen2.5-7b").kv_bytes_per_token == 2 * 28 * 4 * 128 * 2
    assert get_model("llama-3.1-70b").kv_bytes_per_token == 2 * 80 * 8 * 128 * 2
    assert get_model("tiny").kv_values_per_token == 2 * 4 * 4 * 32


def test_one_shape_per_model_under_its_aliases() -> None:
    assert get_model("llama-3.1-8b-shape") is get_model("llama-3.1-8b")
    assert get_model("llama-3.2-1b-shape") is get_model("llama-3.2-1b")
    tiny = get_model("tiny")
    assert (tiny.head_dim, tiny.q_size, tiny.kv_size) == (32, 256, 128)
    assert tiny.eos_token_id is None and tiny.weights == "random"
    assert get_model("smollm2-135m").weights == "smollm2"
    dense = {name for name, shape in MODELS.items() if shape.dense_llama}
    assert "qwen2.5-7b" not in dense and "mixtral-8x7b" not in dense and "tiny" in dense


def test_lookup_is_case_insensitive_and_failures_list_valid_names() -> None:
    assert get_model(" Llama-3.1-8B ") is MODELS["llama-3.1-8b"]
    with pytest.raises(ConfigError, match=r"valid: .*qwen2.5-7b") as exc:
        get_model("gpt-5")
    assert exc.value.key == "--model"
