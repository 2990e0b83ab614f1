"""SimEngine end to end in the event loop (steps scaled down 1000x, bounded by timeouts)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from loadgen.errors import EngineError, PromptTooLong, QueueFull
from loadgen.server.build import build_engine
from loadgen.server.config import SchedulerLimits, ServeConfig, SimOptions
from loadgen.server.engine.core import EngineCore
from loadgen.server.engine.interface import AsyncEngine, EngineRequest, SamplingParams, TokenOutput
from loadgen.server.engine.scheduler import EngineConfig
from loadgen.server.sim import SimEngine, sim_engine

FAST = 1e-3  # real seconds per modelled second
TIMING_KEYS = {"queue_s", "prefill_s", "decode_s", "decode_steps", "preemptions", "ttft_s", "e2e_s"}


def h100_8b(time_scale: float = FAST, **limits: Any) -> SimEngine:
    """Llama-3.1-8B on a simulated H100 with these scheduler limits."""
    return sim_engine(ServeConfig(scheduler=SchedulerLimits(**limits), sim=SimOptions(time_scale=time_scale)))


@pytest.fixture
async def engine() -> AsyncIterator[SimEngine]:
    eng = h100_8b()
    await eng.start()
    yield eng
    await eng.stop()


def req(rid: str, n: int, max_tokens: int, **params: object) -> EngineRequest:
    return EngineRequest(rid, list(range(10, 10 + n)), SamplingParams(max_tokens=max_tokens, **params))  # type: ignore[arg-type]


async def collect(eng: AsyncEngine, request: EngineRequest) -> list[TokenOutput]:
    return [out async for out in eng.generate(request)]


def used_blocks(eng: SimEngine) -> int:
    core = eng.core
    assert isinstance(core, EngineCore)
    return core.scheduler.kv.num_used_blocks


async def test_generate_yields_exactly_max_tokens(engine: SimEngine) -> None:
    assert engine.model_name == "llama-3.1-8b" and engine.vocab_size == 128256
    assert engine.max_model_len == 131072
    lengths = [(50 + 97 * i, 1 + 7 * i) for i in range(12)]
    results = await asyncio.wait_for(
        asyncio.gather(*(collect(engine, req(f"r{i}", n, m)) for i, (n, m) in enumerate(lengths))), 30
    )
    for (_, max_tokens), outs in zip(lengths, results):
        tokens = [t for o in outs for t in o.token_ids]
        assert len(tokens) == max_tokens and all(len(o.token_ids) == 1 for o in outs)
        assert [o.finish_reason for o in outs] == [None] * (max_tokens - 1) + ["length"]
        assert all(4 <= t < 128256 and t != 128009 for t in tokens)
        assert outs[-1].timings is not None and set(outs[-1].timings) >= TIMING_KEYS
        assert outs[-1].timings["decode_steps"] == max_tokens - 1
    st = engine.stats()
    assert (st.running, st.waiting, st.kv_usage) == (0, 0, 0.0)
    assert st.generation_tokens == sum(m for _, m in lengths)
    assert st.prompt_tokens == sum(n for n, _ in lengths)


async def test_same_seed_same_tokens(engine: SimEngine) -> None:
    a = await asyncio.wait_for(collect(engine, req("a", 20, 8, seed=7)), 10)
    b = await asyncio.wait_for(collect(engine, req("b", 20, 8, seed=7)), 10)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]


async def test_prompt_too_long_is_raised_before_any_output() -> None:
    eng = h100_8b(max_model_len=64)
    assert eng.max_model_len == 64
    gen = eng.generate(req("a", 60, 10))
    with pytest.raises(PromptTooLong):
        await gen.__anext__()
    await eng.stop()
    assert eng.stats().waiting == 0


async def test_queue_full_is_raised_when_the_waiting_queue_is_full() -> None:
    eng = h100_8b(max_num_seqs=1, max_waiting=1)
    await eng.start()
    first = eng.generate(req("a", 10, 100_000 - 10))
    await asyncio.wait_for(first.__anext__(), 10)  # running now
    second = eng.generate(req("b", 10, 5))
    pending = asyncio.ensure_future(second.__anext__())
    await asyncio.sleep(0)  # "b" is added and waits: one running sequence at most
    assert eng.stats().waiting == 1
    with pytest.raises(QueueFull):
        await eng.generate(req("c", 10, 5)).__anext__()
    await first.aclose()  # frees the slot: "b" runs to the end
    assert (await asyncio.wait_for(pending, 10)).token_ids
    rest = [o async for o in second]
    assert rest[-1].finish_reason == "length" and len(rest) == 4
    await eng.stop()


async def test_aclose_mid_stream_aborts_and_frees_blocks() -> None:
    engine = h100_8b(time_scale=0.1)
    gens = [engine.generate(req(f"r{i}", 300 + i, 100_000)) for i in range(100)]
    await asyncio.wait_for(asyncio.gather(*(gen.__anext__() for gen in gens)), 20)
    assert used_blocks(engine) > 0 and engine.stats().running == 100
    for gen in gens:
        await gen.aclose()
    st = engine.stats()
    assert (st.running, st.waiting, st.kv_usage) == (0, 0, 0.0) and used_blocks(engine) == 0
    # and the engine keeps serving
    outs = await asyncio.wait_for(collect(engine, req("after", 10, 3)), 10)
    assert outs[-1].finish_reason == "length"
    await engine.stop()


async def test_cancelling_the_consumer_aborts_the_request(engine: SimEngine) -> None:
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in engine.generate(req("a", 100, 100_000)):
            started.set()

    task = asyncio.ensure_future(consume())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.stats().running == 0 and used_blocks(engine) == 0


async def test_idle_engine_does_not_step() -> None:
    polls = 0
    eng = h100_8b()
    inner = eng.core.poll

    def counting_poll(now: float | None = None) -> list[TokenOutput]:
        nonlocal polls
        polls += 1
        return inner(now)

    eng.core.poll = counting_poll  # type: ignore[method-assign]
    await eng.start()
    await asyncio.wait_for(collect(eng, req("a", 10, 3)), 10)
    await asyncio.sleep(0.01)
    before = polls
    await asyncio.sleep(0.05)
    assert polls == before  # waiting on the event, not spinning
    await eng.stop()


async def test_stop_ends_open_requests_and_refuses_new_ones() -> None:
    eng = h100_8b()
    await eng.start()
    gen = eng.generate(req("a", 10, 100_000))
    await asyncio.wait_for(gen.__anext__(), 10)
    await eng.stop()
    rest = [o async for o in gen]
    assert rest[-1].finish_reason == "abort"
    with pytest.raises(EngineError, match="stopped"):
        await eng.generate(req("b", 10, 3)).__anext__()
    assert eng.stats().running == 0


async def test_disaggregated_engine_end_to_end() -> None:
    eng = build_engine(
        ServeConfig(
            model="llama-3.1-8b", sim=SimOptions(gpu="h100", disaggregate=True, kv_link_gbps=400, time_scale=FAST)
        )
    )
    await eng.start()
    outs = await asyncio.wait_for(collect(eng, req("a", 1000, 5)), 10)
    assert len(outs) == 5 and outs[-1].finish_reason == "length"
    assert outs[-1].timings is not None
    assert outs[-1].timings["kv_transfer_s"] == pytest.approx(1000 * 131072 / 50e9 * FAST)
    await eng.stop()


def test_build_engine_follows_the_config() -> None:
    limits = SchedulerLimits(
        enable_chunked_prefill=False, max_num_batched_tokens=40000, max_num_seqs=64, enable_prefix_caching=False
    )
    eng = build_engine(
        ServeConfig(
            model="qwen2.5-7b",
            tp=2,
            seed=3,
            scheduler=limits,
            sim=SimOptions(gpu="h200", mfu=0.5, mbu=0.7, overhead_ms=1.0, jitter=0.1),
        )
    )
    assert isinstance(eng, SimEngine)
    assert eng.model_name == "qwen2.5-7b" and eng.max_model_len == 32768
    core = eng.core
    assert isinstance(core, EngineCore)
    config = core.scheduler.config
    assert (
        config.enable_chunked_prefill,
        config.max_num_batched_tokens,
        config.max_num_seqs,
        config.enable_prefix_caching,
    ) == (False, 40000, 64, False)
    with pytest.raises(EngineError, match="--tp"):
        sim_engine(ServeConfig(model="llama-3.1-70b"))


class BrokenRunner:
    def execute(self, batch: object) -> object:
        raise RuntimeError("kernel exploded")


async def test_a_failing_step_loop_fails_requests_instead_of_hanging_them() -> None:
    core = EngineCore(EngineConfig(num_gpu_blocks=64), BrokenRunner(), asyncio.get_running_loop().time)  # type: ignore[arg-type]
    eng = SimEngine(core, model_name="broken", vocab_size=100, max_model_len=1024)
    await eng.start()
    with pytest.raises(EngineError, match="kernel exploded"):
        await asyncio.wait_for(collect(eng, req("a", 10, 3)), 10)
    with pytest.raises(EngineError, match="step loop failed"):
        await eng.generate(req("b", 10, 3)).__anext__()
    await eng.stop()
