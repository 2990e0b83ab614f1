"""ServeConfig: one configuration of the server, checked once, naming the flag."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from loadgen.errors import ConfigError
from loadgen.server.config import (Network, SchedulerLimits, ServeConfig, SimOptions,
                                   TorchOptions)


def test_defaults_follow_the_engine() -> None:
    sim, torch = ServeConfig(), ServeConfig(engine="torch")
    assert (sim.model, torch.model) == ("llama-3.1-8b", "tiny")
    assert sim.shape.vocab_size == 128256 and torch.shape.vocab_size == 8192
    assert ServeConfig(model=" Llama-3.1-8B-Shape ").model == "llama-3.1-8b-shape"
    assert ServeConfig(model="tiny").shape.eos_token_id is None  # the sim prices any preset


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"engine": "tpu"}, "--engine"),
    ({"model": "gpt"}, "--model"),
    ({"tp": 0}, "--tp"),
    ({"tp": 65}, "--tp"),
    ({"scheduler": SchedulerLimits(max_num_seqs=0)}, "--max-num-seqs"),
    ({"scheduler": SchedulerLimits(max_num_batched_tokens=True)}, "--max-num-batched-tokens"),
    ({"scheduler": SchedulerLimits(max_model_len=0)}, "max_model_len"),
    ({"scheduler": SchedulerLimits(gpu_memory_utilization=1.5)}, "gpu_memory_utilization"),
    ({"sim": SimOptions(gpu="tpu")}, "--gpu"),
    ({"sim": SimOptions(mfu=0.0)}, "--mfu"),
    ({"sim": SimOptions(mbu=1.5)}, "--mbu"),
    ({"sim": SimOptions(overhead_ms=-1.0)}, "--overhead-ms"),
    ({"sim": SimOptions(jitter=2.0)}, "--jitter"),
    ({"sim": SimOptions(time_scale=0.0)}, "--time-scale"),
    ({"sim": SimOptions(kv_link_gbps=-1.0)}, "--kv-link-gbps"),
    ({"sim": SimOptions(eos_probability=1.5)}, "eos_probability"),
    ({"sim": SimOptions(min_token_id=128255)}, "min_token_id"),
    ({"sim": SimOptions(dtype="int4")}, "--dtype"),
    ({"sim": SimOptions(kv_cache_dtype="fp4")}, "--kv-cache-dtype"),
    ({"sim": SimOptions(speculative_tokens=17)}, "--speculative-tokens"),
    ({"sim": SimOptions(acceptance_rate=1.5)}, "--acceptance-rate"),
    ({"sim": SimOptions(speculative_tokens=3, draft_model="gpt-2")}, "--draft-model"),
    ({"sim": SimOptions(speculative_tokens=3, draft_model="smollm2-135m")}, "--draft-model"),
    ({"network": Network(port=70000)}, "--port"),
])
def test_sim_flags_are_checked_naming_the_flag(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        ServeConfig(**kwargs)
    assert exc.value.key == key and str(exc.value).startswith(key)


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"model": "gpt"}, "--model"),
    ({"model": "mixtral-8x7b"}, "--model"),  # the torch decoder has no experts
    ({"tp": 2}, "--tp"),
    ({"torch": TorchOptions(device="tpu")}, "--device"),
    ({"torch": TorchOptions(threads=0)}, "--threads"),
    ({"torch": TorchOptions(dtype="int8")}, "--dtype"),
    ({"torch": TorchOptions(kv_cache_gb=0)}, "--kv-cache-gb"),
    ({"torch": TorchOptions(engine_mode="fork")}, "engine_mode"),
    ({"scheduler": SchedulerLimits(max_num_seqs=0)}, "--max-num-seqs"),
])
def test_torch_flags_are_checked_naming_the_flag(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        ServeConfig(engine="torch", **kwargs)
    assert str(exc.value).startswith(key), str(exc.value)


def test_a_failed_model_lookup_lists_the_engines_models() -> None:
    with pytest.raises(ConfigError, match="tiny, small, llama-3.2-1b") as exc:
        ServeConfig(engine="torch", model="gpt")
    assert "qwen2.5-7b" not in str(exc.value)
    with pytest.raises(ConfigError, match="valid: .*qwen2.5-7b"):
        ServeConfig(model="gpt")


def test_the_other_engines_options_are_not_read() -> None:
    ServeConfig(engine="torch", sim=SimOptions(gpu="tpu", mfu=5.0))
    ServeConfig(engine="sim", torch=TorchOptions(device="tpu", threads=0))


def test_unknown_options_are_type_errors_and_configs_pickle() -> None:
    with pytest.raises(TypeError):
        SimOptions(bogus=1)  # type: ignore[call-arg]
    config = ServeConfig(engine="torch", scheduler=SchedulerLimits(max_num_seqs=8),
                         torch=TorchOptions(threads=1))
    assert pickle.loads(pickle.dumps(config)) == config  # the torch engine process gets it
