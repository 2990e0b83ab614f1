"""``--replicas N --router POLICY``: N sim engines behind one API, over real HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from loadgen.errors import ConfigError
from loadgen.server.build import build_engine
from loadgen.server.config import SchedulerLimits, ServeConfig, SimOptions
from loadgen.server.replicas import ReplicatedEngine, Router, block_hashes
from tests.server.helpers import MODEL, sample, scrape, serve

PREFIX = 128  # tokens shared by a group: 8 blocks of 16


def replicated(n: int, router: str, *, time_scale: float = 0.01, **limits: Any) -> ReplicatedEngine:
    scheduler = SchedulerLimits(**{"max_model_len": 4096, **limits})
    engine = build_engine(
        ServeConfig(replicas=n, router=router, scheduler=scheduler, sim=SimOptions(time_scale=time_scale))
    )
    assert isinstance(engine, ReplicatedEngine)
    return engine


async def complete(session: aiohttp.ClientSession, url: str, prompt: list[int], max_tokens: int = 4) -> dict[str, Any]:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
    async with session.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        out: dict[str, Any] = await resp.json()
        return out


def per_engine(samples: Any, name: str, n: int) -> list[float]:
    return [sample(samples, name, engine=str(i)) for i in range(n)]


def group_prompt(group: int, k: int) -> list[int]:
    """A shared 128-token prefix per group, then a 16-token suffix of its own."""
    return [100 + group * 7 + (j % 5) for j in range(PREFIX)] + [2000 + k * 16 + j for j in range(16)]


async def test_round_robin_spreads_requests_and_metrics_are_per_replica() -> None:
    engine = replicated(3, "round-robin")
    async with serve(engine) as url, aiohttp.ClientSession() as session:
        for k in range(6):
            await complete(session, url, [10 + k] * 20)
        samples = await scrape(session, url)
    assert engine.router.routed == [2, 2, 2]
    assert per_engine(samples, "vllm:prompt_tokens_total", 3) == [40.0, 40.0, 40.0]
    assert per_engine(samples, "vllm:generation_tokens_total", 3) == [8.0, 8.0, 8.0]
    assert sum(per_engine(samples, "vllm:num_requests_running", 3)) == 0
    # each request's histograms and finish count under the replica that served it
    assert [
        sample(samples, "vllm:request_success_total", engine=str(i), finished_reason="length") for i in range(3)
    ] == [
        2.0,
        2.0,
        2.0,
    ]
    assert per_engine(samples, "vllm:e2e_request_latency_seconds_count", 3) == [2.0, 2.0, 2.0]


async def test_least_loaded_avoids_the_busy_replica() -> None:
    engine = replicated(2, "least-loaded", time_scale=1.0)  # real-speed steps: the long one stays
    body = {"model": MODEL, "prompt": [5] * 20, "max_tokens": 3000, "ignore_eos": True, "stream": True}
    async with serve(engine) as url, aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/completions", json=body) as long_resp:
            await long_resp.content.readline()  # the first event: it is running
            busy = engine.router.outstanding.index(1)
            for k in range(4):
                await complete(session, url, [30 + k] * 20, max_tokens=2)
            assert engine.router.outstanding[busy] == 1
            samples = await scrape(session, url)
            long_resp.close()  # a disconnect aborts its replica's request
        for _ in range(200):
            if engine.router.outstanding == [0, 0] and engine.stats().running == 0:
                break
            await asyncio.sleep(0.01)
    idle = 1 - busy
    assert engine.router.routed[idle] == 4 and engine.router.routed[busy] == 1
    assert per_engine(samples, "vllm:prompt_tokens_total", 2)[idle] == 80.0
    assert engine.router.outstanding == [0, 0] and engine.stats().running == 0


async def _prefix_hits(router: str) -> tuple[float, list[int]]:
    engine = replicated(4, router, enable_prefix_caching=True)
    async with serve(engine) as url, aiohttp.ClientSession() as session:
        for group in range(4):  # group-major: A A A A B B B B ...
            for k in range(4):
                await complete(session, url, group_prompt(group, k))
        samples = await scrape(session, url)
    return sample(samples, "vllm:prefix_cache_hits_total", engine="0") + sum(
        sample(samples, "vllm:prefix_cache_hits_total", engine=str(i)) for i in (1, 2, 3)
    ), engine.router.routed


async def test_prefix_aware_routing_keeps_a_group_on_one_replica() -> None:
    aware, aware_routed = await _prefix_hits("prefix-aware")
    spread, spread_routed = await _prefix_hits("round-robin")
    # prefix-aware: each group's first request misses, the next three hit its 128 tokens
    assert aware == 4 * 3 * PREFIX
    assert sorted(aware_routed) == [4, 4, 4, 4]  # the four groups on four replicas
    # round-robin sends each group's four requests to four replicas: every one misses
    assert spread == 0 and spread_routed == [4, 4, 4, 4]


def test_router_prefix_match_and_balance_fallback() -> None:
    router = Router("prefix-aware", 2, block_size=4)
    shared = list(range(16))
    assert router.choose([*shared, 90]) == 0  # nothing cached: least loaded, first
    router.outstanding[0] += 1
    assert router.choose([*shared, 91]) == 0  # 4 of 4 blocks on replica 0, though it is busier
    assert router.choose([7] * 16) == 1  # no match anywhere: the least loaded
    router.outstanding[0] = 100  # far out of balance: load wins over the cached prefix
    assert router.choose([*shared, 92]) == 1
    # a short prompt (no whole block) is routed by load alone
    assert block_hashes([1, 2, 3], 4) == [] and router.choose([1, 2, 3]) == 1


def test_block_hashes_are_prefix_chained() -> None:
    a = block_hashes([1, 2, 3, 4, 5, 6, 7, 8], 4)
    b = block_hashes([9, 2, 3, 4, 5, 6, 7, 8], 4)
    assert len(a) == 2 and a[1] != b[1]  # same second block, different prefix


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"replicas": 0}, "--replicas"),
        ({"replicas": 65}, "--replicas"),
        ({"replicas": 2, "router": "random"}, "--router"),
        ({"replicas": 2, "engine": "torch"}, "--replicas"),
    ],
)
def test_bad_replica_settings_name_the_flag(kwargs: dict[str, Any], flag: str) -> None:
    with pytest.raises(ConfigError) as info:
        ServeConfig(**kwargs)
    assert flag in str(info.value)


def test_summed_stats_add_up_every_counter_of_the_replicas() -> None:
    """``ReplicatedEngine.stats()`` sums every counter (it once left out the preempted
    requests' prefix-cache counters, so code reading the sum saw 0 for them)."""
    engine = replicated(3, "round-robin")
    for i, replica in enumerate(engine.engines):
        kv = replica.core.scheduler.kv  # type: ignore[attr-defined]
        kv.prefix_cache_preempted_queries, kv.prefix_cache_preempted_hits = 100 * (i + 1), 10 * (i + 1)
        kv.prefix_cache_queries, kv.prefix_cache_hits = 1000 * (i + 1), 500 * (i + 1)
    parts, total = engine.replica_stats(), engine.stats()
    assert (total.prefix_cache_preempted_queries, total.prefix_cache_preempted_hits) == (600, 60)
    for name in ("prefix_cache_queries", "prefix_cache_hits", "preemptions", "prompt_tokens", "steps", "running"):
        assert getattr(total, name) == sum(getattr(p, name) for p in parts), name
    assert total.kv_usage == sum(p.kv_usage for p in parts) / 3
