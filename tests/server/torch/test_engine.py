"""The torch engine behind the real HTTP API: thread mode, process mode, parent death."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import torch

from loadgen.errors import ConfigError, EngineError, PromptTooLong, QueueFull
from loadgen.server.build import build_engine
from loadgen.server.config import SchedulerLimits, ServeConfig, TorchOptions
from loadgen.server.engine.interface import EngineRequest, SamplingParams
from loadgen.server.torch.engine import TorchEngine, torch_engine
from tests.server.helpers import MODEL, read_sse, sample, scrape, serve

PROMPT = "the quick brown fox jumps over the lazy dog"  # 9 words: 9 tokens


def make_engine(*, engine_mode: str = "thread", device: str = "auto", **limits: Any) -> TorchEngine:
    scheduler = SchedulerLimits(**{"num_gpu_blocks": 256, "max_model_len": 2048, **limits})
    return torch_engine(
        ServeConfig(
            engine="torch",
            model="tiny",
            scheduler=scheduler,
            torch=TorchOptions(engine_mode=engine_mode, device=device, threads=1),
        )
    )


@pytest.fixture
async def server() -> AsyncIterator[tuple[TorchEngine, str]]:
    engine = make_engine()
    async with serve(engine) as url:
        yield engine, url


async def _stream(session: aiohttp.ClientSession, url: str, **body: Any) -> list[Any]:
    payload = {
        "model": MODEL,
        "prompt": PROMPT,
        "max_tokens": 6,
        "stream": True,
        "stream_options": {"include_usage": True},
        **body,
    }
    async with session.post(url + "/v1/completions", json=payload) as resp:
        assert resp.status == 200
        return await read_sse(resp)


async def test_streams_tokens_usage_and_server_timings(server: tuple[TorchEngine, str]) -> None:
    engine, url = server
    async with aiohttp.ClientSession() as session:
        events = await _stream(session, url, max_tokens=6, temperature=0)
        again = await _stream(session, url, max_tokens=6, temperature=0)
        samples = await scrape(session, url)
    assert events[-1] == "[DONE]"
    texts = [e["choices"][0]["text"] for e in events[:-2]]
    assert len(texts) == 6 and all(texts)  # one event per token
    assert events[-2]["usage"] == {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15}
    final = events[-3]
    assert final["choices"][0]["finish_reason"] == "length"
    timings = final["loadgen"]
    assert timings["decode_steps"] == 5 and timings["preemptions"] == 0
    assert timings["queue_s"] >= 0.0 and timings["prefill_s"] > 0.0 and timings["decode_s"] > 0.0
    assert timings["ttft_s"] == pytest.approx(timings["queue_s"] + timings["prefill_s"])
    assert "".join(texts) == "".join(e["choices"][0]["text"] for e in again[:-2])  # greedy
    assert sample(samples, "vllm:prompt_tokens_total") == 18
    assert sample(samples, "vllm:generation_tokens_total") == 12
    assert sample(samples, "vllm:request_queue_time_seconds_count") == 2  # engine timings
    assert sample(samples, "vllm:request_prefill_time_seconds_count") == 2
    assert engine.info["device"] == "cpu" and engine.info["dtype"] == "float32"
    assert engine.info["threads"] == 1 and engine.info["num_gpu_blocks"] == 256


async def test_seeded_sampling_through_the_api(server: tuple[TorchEngine, str]) -> None:
    _, url = server
    async with aiohttp.ClientSession() as session:
        a = await _stream(session, url, temperature=1.0, seed=7, max_tokens=8)
        b = await _stream(session, url, temperature=1.0, seed=7, max_tokens=8)
        c = await _stream(session, url, temperature=1.0, seed=8, max_tokens=8)

    def text(events: list[Any]) -> str:
        return "".join(e["choices"][0]["text"] for e in events[:-2])

    assert text(a) == text(b) != text(c)


async def test_disconnect_aborts_and_frees_the_kv_blocks(server: tuple[TorchEngine, str]) -> None:
    engine, url = server
    payload = {"model": MODEL, "prompt": PROMPT, "max_tokens": 1500, "stream": True}
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/completions", json=payload) as resp:
            await resp.content.readuntil(b"\n\n")
            assert engine.stats().running == 1 and engine.stats().kv_usage > 0.0
        # the connection is closed: the API aborts, the engine frees the blocks
        for _ in range(200):
            if engine.stats().running == 0:
                break
            await asyncio.sleep(0.02)
    stats = engine.stats()
    assert stats.running == 0 and stats.waiting == 0 and stats.kv_usage == 0.0
    assert stats.generation_tokens < 1500


async def test_rejections_raise_before_the_first_output() -> None:
    engine = make_engine(max_waiting=1)
    await engine.start()
    try:
        too_long = EngineRequest("long", [5] * 2000, SamplingParams(max_tokens=100))
        with pytest.raises(PromptTooLong):
            await engine.generate(too_long).__anext__()

        async def first(i: int) -> Any:
            gen = engine.generate(EngineRequest(f"q{i}", [5, 6, 7], SamplingParams(max_tokens=2)))
            try:
                return [out async for out in gen]
            except QueueFull as exc:
                return exc

        # added in one message: the first waits, the queue (max 1) is full for the others
        results = await asyncio.gather(*(first(i) for i in range(3)))
        assert isinstance(results[1], QueueFull) and isinstance(results[2], QueueFull)
        assert results[0][-1].finish_reason == "length"
        assert sum(len(o.token_ids) for o in results[0]) == 2
    finally:
        await engine.stop()
    with pytest.raises(EngineError):
        await engine.generate(EngineRequest("late", [5], SamplingParams())).__anext__()


async def test_process_mode_serves_and_stops_cleanly() -> None:
    engine = make_engine(engine_mode="process")
    async with serve(engine) as url:
        assert engine.process is not None and engine.process.is_alive()
        async with aiohttp.ClientSession() as session:
            events = await _stream(session, url, max_tokens=4)
    assert events[-2]["usage"]["completion_tokens"] == 4
    assert events[-3]["loadgen"]["decode_steps"] == 3
    assert not engine.process.is_alive() and engine.process.exitcode == 0


_SERVER = """
import asyncio, sys
from loadgen.server.api import create_app
from loadgen.server.app import start_server
from loadgen.server.config import SchedulerLimits, ServeConfig, TorchOptions
from loadgen.server.torch.engine import torch_engine

async def main():
    engine = torch_engine(ServeConfig(
        engine="torch", model="tiny", torch=TorchOptions(engine_mode="process", threads=1),
        scheduler=SchedulerLimits(num_gpu_blocks=64, max_model_len=512)))
    runner, url = await start_server(create_app(engine))
    print("READY", engine.process.pid, url, flush=True)
    await asyncio.sleep(120)  # bounded: the test kills us long before

asyncio.run(main())
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"  # exited; its new parent has not reaped it yet


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc (Linux)")
def test_engine_process_exits_when_the_server_is_killed() -> None:
    root = Path(__file__).resolve().parents[3]
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=root
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY"), line + proc.stdout.read()
        _, pid_text, _url = line.split()
        engine_pid = int(pid_text)
        assert not _gone(engine_pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10.0
        while not _gone(engine_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(engine_pid), "the engine outlived its server"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


async def test_startup_failure_is_reported() -> None:
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    engine = make_engine(device="cuda")
    with pytest.raises(EngineError, match="CUDA is not available"):
        await engine.start()


def test_build_engine_follows_the_config() -> None:
    # without chunking the budget must cover max_model_len (vLLM refuses less)
    limits = SchedulerLimits(
        enable_chunked_prefill=False,
        max_num_batched_tokens=512,
        max_num_seqs=8,
        enable_prefix_caching=False,
        max_model_len=512,
    )
    engine = build_engine(
        ServeConfig(engine="torch", scheduler=limits, torch=TorchOptions(threads=1, engine_mode="thread"))
    )
    assert isinstance(engine, TorchEngine)
    assert engine.model_name == "tiny" and engine.vocab_size == 8192 and engine.tokenizer is None
    assert engine.config.scheduler == limits  # what the engine process receives
    shape = ServeConfig(engine="torch", model="llama-3.1-8b-shape")
    assert shape.model == "llama-3.1-8b-shape" and shape.shape.name == "llama-3.1-8b"
    with pytest.raises(ConfigError, match=r"tiny, small, llama-3.2-1b"):
        ServeConfig(engine="torch", model="gpt")
