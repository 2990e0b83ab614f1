"""ServeConfig: one configuration of the server, checked once, naming the flag."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from loadgen.errors import ConfigError
from loadgen.server.config import Network, SchedulerLimits, ServeConfig, SimOptions, TorchOptions, batch_defaults
from loadgen.server.sim.gpus import GPUS


def test_defaults_follow_the_engine() -> None:
    sim, torch = ServeConfig(), ServeConfig(engine="torch")
    assert (sim.model, torch.model) == ("llama-3.1-8b", "tiny")
    assert sim.shape.vocab_size == 128256 and torch.shape.vocab_size == 8192
    assert ServeConfig(model=" Llama-3.1-8B-Shape ").model == "llama-3.1-8b-shape"
    assert ServeConfig(model="tiny").shape.eos_token_id is None  # the sim prices any preset


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
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
    ],
)
def test_sim_flags_are_checked_naming_the_flag(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        ServeConfig(**kwargs)
    assert exc.value.key == key and str(exc.value).startswith(key)


@pytest.mark.parametrize(
    ("gpu", "tokens", "seqs"),
    [
        ("h100", 8192, 1024),
        ("h200", 8192, 1024),
        ("b200", 16384, 1024),  # 180 GB = 168 GiB: vLLM v0.28's >= 160 GiB class
        ("mi300x", 16384, 1024),  # 192 GB = 179 GiB
        ("a100", 2048, 256),  # 80 GB, but vLLM excludes the A100 by name
        ("a100-40gb", 2048, 256),
        ("l40s", 2048, 256),  # 48 GB = 45 GiB
    ],
)
def test_unset_limits_take_vllm_serves_defaults_for_the_gpu(gpu: str, tokens: int, seqs: int) -> None:
    assert batch_defaults(GPUS.lookup(gpu)) == (tokens, seqs)
    limits = ServeConfig(sim=SimOptions(gpu=gpu)).limits
    assert (limits.max_num_batched_tokens, limits.max_num_seqs) == (tokens, seqs)
    assert limits.enable_chunked_prefill and limits.enable_prefix_caching  # vLLM V1's defaults
    explicit = ServeConfig(
        sim=SimOptions(gpu=gpu), scheduler=SchedulerLimits(max_num_batched_tokens=512, max_num_seqs=8)
    )
    assert (explicit.limits.max_num_batched_tokens, explicit.limits.max_num_seqs) == (512, 8)
    small = ServeConfig(sim=SimOptions(gpu=gpu), scheduler=SchedulerLimits(max_num_batched_tokens=64))
    assert small.limits.max_num_seqs == 64  # as vLLM: at most the token budget
    assert ServeConfig(engine="torch").limits.token_budget == 2048  # device unknown: small


def test_without_chunking_the_budget_is_max_model_len_and_a_smaller_one_is_refused() -> None:
    off = SchedulerLimits(enable_chunked_prefill=False)
    assert ServeConfig(scheduler=off).limits.token_budget == 131072  # Llama-3.1-8B's context
    short = SchedulerLimits(enable_chunked_prefill=False, max_model_len=8192)
    assert ServeConfig(scheduler=short).limits.token_budget == 8192
    with pytest.raises(ConfigError) as exc:
        ServeConfig(
            scheduler=SchedulerLimits(enable_chunked_prefill=False, max_num_batched_tokens=4096, max_model_len=8192)
        )
    assert exc.value.key == "--max-num-batched-tokens" and "max_model_len (8192)" in str(exc.value)
    assert "\n" not in str(exc.value)
    big = SchedulerLimits(enable_chunked_prefill=False, max_num_batched_tokens=9000, max_model_len=8192)
    assert ServeConfig(scheduler=big).limits.token_budget == 9000


@pytest.mark.parametrize(
    ("gpu", "chunked", "max_model_len", "max_num_seqs", "budget"),
    [
        ("h100", False, 1024, None, 8192),  # unchunked: max(max_model_len, default), not 1024
        ("a100", False, 1024, None, 2048),
        ("b200", False, 4096, None, 16384),
        ("h100", False, 32768, None, 32768),
        ("h100", True, 1024, 2, 2048),  # capped at max_num_seqs * max_model_len
        ("a100", True, 512, 2, 1024),
        ("h100", False, 1024, 4, 4096),
        ("h100", True, 1024, None, 8192),
    ],
)
def test_unset_budget_follows_vllms_rule(
    gpu: str, chunked: bool, max_model_len: int, max_num_seqs: int | None, budget: int
) -> None:
    limits = SchedulerLimits(enable_chunked_prefill=chunked, max_model_len=max_model_len, max_num_seqs=max_num_seqs)
    assert ServeConfig(sim=SimOptions(gpu=gpu), scheduler=limits).limits.token_budget == budget


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"model": "gpt"}, "--model"),
        ({"model": "mixtral-8x7b"}, "--model"),  # the torch decoder has no experts
        ({"tp": 2}, "--tp"),
        ({"torch": TorchOptions(device="tpu")}, "--device"),
        ({"torch": TorchOptions(threads=0)}, "--threads"),
        ({"torch": TorchOptions(dtype="int8")}, "--dtype"),
        ({"torch": TorchOptions(kv_cache_gb=0)}, "--kv-cache-gb"),
        ({"torch": TorchOptions(engine_mode="fork")}, "engine_mode"),
        ({"scheduler": SchedulerLimits(max_num_seqs=0)}, "--max-num-seqs"),
    ],
)
def test_torch_flags_are_checked_naming_the_flag(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        ServeConfig(engine="torch", **kwargs)
    assert str(exc.value).startswith(key), str(exc.value)


def test_a_failed_model_lookup_lists_the_engines_models() -> None:
    with pytest.raises(ConfigError, match=r"tiny, small, llama-3.2-1b") as exc:
        ServeConfig(engine="torch", model="gpt")
    assert "qwen2.5-7b" not in str(exc.value)
    with pytest.raises(ConfigError, match=r"valid: .*qwen2.5-7b"):
        ServeConfig(model="gpt")


def test_the_other_engines_options_are_not_read() -> None:
    ServeConfig(engine="torch", sim=SimOptions(gpu="tpu", mfu=5.0))
    ServeConfig(engine="sim", torch=TorchOptions(device="tpu", threads=0))


def test_unknown_options_are_type_errors_and_configs_pickle() -> None:
    with pytest.raises(TypeError):
        SimOptions(bogus=1)  # type: ignore[call-arg]
    config = ServeConfig(engine="torch", scheduler=SchedulerLimits(max_num_seqs=8), torch=TorchOptions(threads=1))
    assert pickle.loads(pickle.dumps(config)) == config  # the torch engine process gets it
