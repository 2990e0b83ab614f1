"""Seeded fault injection: configuration, reproducible plans, and faults over HTTP."""

from __future__ import annotations

import aiohttp
import pytest

from loadgen.errors import ConfigError
from loadgen.server.faults import FaultConfig, FaultInjector
from tests.server.helpers import MODEL, make_engine, sample, scrape, serve

BODY = {"model": MODEL, "prompt": "a b c", "max_tokens": 8, "ignore_eos": True}


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"fail_rate": 1.5}, "fail_rate"),
        ({"stall_rate": -0.1}, "stall_rate"),
        ({"disconnect_rate": 2}, "disconnect_rate"),
        ({"stall_ms": -1}, "stall_ms"),
        ({"stall_ms": float("nan")}, "stall_ms"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, float], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        FaultConfig(**kwargs)


def _signature(config: FaultConfig, n: int = 300) -> list[tuple[bool, int | None, list[bool]]]:
    injector = FaultInjector(config)
    plans = [injector.plan(max_tokens=20) for _ in range(n)]
    return [(p.fail, p.disconnect_after, [p.stall() for _ in range(5)]) for p in plans]


def test_plans_are_reproducible_and_seed_dependent() -> None:
    cfg = FaultConfig(fail_rate=0.3, stall_ms=5, stall_rate=0.2, disconnect_rate=0.4, seed=11)
    a, b = _signature(cfg), _signature(cfg)
    assert a == b
    assert a != _signature(FaultConfig(fail_rate=0.3, stall_ms=5, stall_rate=0.2, disconnect_rate=0.4, seed=12))
    fails = sum(f for f, _, _ in a)
    cuts = [d for _, d, _ in a if d is not None]
    stalls = sum(sum(s) for _, _, s in a)
    assert 60 <= fails <= 120  # 300 draws at 0.3 (fixed by the seed)
    assert 80 <= len(cuts) <= 160 and all(1 <= d <= 20 for d in cuts)
    assert 200 <= stalls <= 400  # 1500 draws at 0.2


def test_zero_and_certain_rates() -> None:
    none = _signature(FaultConfig(seed=3), 50)
    assert all(not f and d is None and not any(s) for f, d, s in none)
    assert not FaultConfig(stall_rate=1.0).active  # no stall_ms: nothing to inject
    all_ = _signature(FaultConfig(fail_rate=1, disconnect_rate=1, stall_rate=1, stall_ms=1), 50)
    assert all(f and d is not None and all(s) for f, d, s in all_)


async def _statuses(seed: int, n: int) -> list[int]:
    async with serve(make_engine(), faults=FaultConfig(fail_rate=0.5, seed=seed)) as url:
        async with aiohttp.ClientSession() as session:
            out = []
            for _ in range(n):
                async with session.post(url + "/v1/completions", json=BODY) as resp:
                    if resp.status == 500:
                        err = (await resp.json())["error"]
                        assert (err["type"], err["code"]) == ("server_error", "injected_fault")
                    out.append(resp.status)
            samples = await scrape(session, url)
            assert sample(samples, "loadgen:faults_injected_total", kind="fail") == out.count(500)
            return out


async def test_fail_rate_is_reproducible_over_http() -> None:
    first = await _statuses(5, 24)
    assert first == await _statuses(5, 24)
    assert set(first) == {200, 500}
    injector = FaultInjector(FaultConfig(fail_rate=0.5, seed=5))
    assert first == [500 if injector.plan(8).fail else 200 for _ in range(24)]


async def test_disconnect_cuts_stream_without_done() -> None:
    faults = FaultConfig(disconnect_rate=1.0, seed=1)
    cut = FaultInjector(faults).plan(8).disconnect_after
    assert cut is not None and cut < 8
    async with serve(make_engine(), faults=faults) as url, aiohttp.ClientSession() as session:
        resp = await session.post(url + "/v1/completions", json={**BODY, "stream": True})
        assert resp.status == 200
        chunks = []
        with pytest.raises(aiohttp.ClientPayloadError):
            async for chunk in resp.content:
                chunks.append(chunk)
        body = b"".join(chunks)
        assert b"[DONE]" not in body
        assert body.count(b"data: ") == cut
        resp.close()
        with pytest.raises(aiohttp.ServerDisconnectedError):  # non-streaming: no answer
            await session.post(url + "/v1/completions", json=BODY)
        samples = await scrape(session, url)
        assert sample(samples, "loadgen:faults_injected_total", kind="disconnect") == 2
        assert sample(samples, "vllm:request_success_total", finished_reason="abort") == 2


async def test_stall_before_every_event() -> None:
    faults = FaultConfig(stall_ms=1, stall_rate=1.0)
    async with serve(make_engine(), faults=faults) as url, aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/completions", json={**BODY, "stream": True}) as resp:
            body = await resp.read()
        assert body.count(b"data: ") == 8 + 1
        samples = await scrape(session, url)
        assert sample(samples, "loadgen:faults_injected_total", kind="stall") == 8
