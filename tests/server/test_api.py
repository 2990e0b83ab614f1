"""The OpenAI-compatible API against a real engine on a loopback server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from loadgen.server.tokenizer import WordTokenizer, count_words
from tests.server.helpers import MODEL, make_engine, read_sse, sample, scrape, serve

PROMPT = "the quick brown fox jumps over the lazy dog"  # 9 words


@pytest.fixture
async def server() -> AsyncIterator[tuple[Any, str]]:
    engine = make_engine()
    async with serve(engine) as url:
        yield engine, url


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def _client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


async def test_openai_client_streams_chat_with_usage(server: tuple[Any, str]) -> None:
    _, url = server
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": PROMPT}]
    async with _client(url) as client:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        chunks = [chunk async for chunk in stream]
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len(content) == 12  # one event per token
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert count_words(text) == 12 and not text.startswith(" ")
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    # 2 words + 9 words of content, plus 2 tokens per message (role, end of turn)
    assert usage.prompt_tokens == 2 + 9 + 2 * 2
    assert usage.completion_tokens == 12 and usage.total_tokens == 27


async def test_openai_client_streams_completions(server: tuple[Any, str]) -> None:
    _, url = server
    async with _client(url) as client:
        stream = await client.completions.create(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=7,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        chunks = [chunk async for chunk in stream]
    with_text = [c for c in chunks if c.choices and c.choices[0].text]
    assert len(with_text) == 7
    assert all(c.object == "text_completion" for c in chunks)
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (9, 7)


async def test_openai_client_non_streaming(server: tuple[Any, str]) -> None:
    _, url = server
    async with _client(url) as client:
        chat = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=5, extra_body={"ignore_eos": True}
        )
        comp = await client.completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=4, extra_body={"ignore_eos": True}
        )
        newer = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": PROMPT}],
            max_tokens=5,
            max_completion_tokens=2,
            extra_body={"ignore_eos": True},
        )
        models = await client.models.list()
    assert chat.object == "chat.completion" and chat.choices[0].finish_reason == "length"
    assert chat.choices[0].message.role == "assistant"
    assert count_words(chat.choices[0].message.content or "") == 5
    assert chat.usage is not None
    assert (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (11, 5)
    assert count_words(comp.choices[0].text) == 4
    assert comp.usage is not None and comp.usage.prompt_tokens == 9
    assert [m.id for m in models.data] == [MODEL]
    assert newer.usage is not None and newer.usage.completion_tokens == 2  # takes precedence


async def test_stream_event_shapes_and_vendor_field(server: tuple[Any, str], session: aiohttp.ClientSession) -> None:
    _, url = server
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "ignore_eos": True,
        "stream": True,
    }
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = await read_sse(resp)
    assert events[-1] == "[DONE]"
    role, *tokens, final = events[:-1]  # no usage event without include_usage
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(tokens) == 2 and all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    assert all("usage" not in e for e in events[:-1])
    assert final["choices"][0]["finish_reason"] == "length"
    vendor = final["loadgen"]
    assert set(vendor) >= {
        "queue_s",
        "prefill_s",
        "decode_s",
        "ttft_s",
        "e2e_s",
        "decode_steps",
        "preemptions",
        "cached_tokens",
    }
    assert 0 < vendor["ttft_s"] <= vendor["e2e_s"]
    assert (vendor["decode_steps"], vendor["preemptions"], vendor["cached_tokens"]) == (2, 0, 0)
    assert len({e["id"] for e in events[:-1]}) == 1


async def test_continuous_usage_is_cumulative(server: tuple[Any, str], session: aiohttp.ClientSession) -> None:
    _, url = server
    body = {
        "model": MODEL,
        "prompt": PROMPT,
        "max_tokens": 6,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    async with session.post(url + "/v1/completions", json=body) as resp:
        events = await read_sse(resp)
    data = events[:-1]
    assert [e["usage"]["completion_tokens"] for e in data] == [1, 2, 3, 4, 5, 6, 6]
    assert all(e["usage"]["prompt_tokens"] == 9 for e in data)
    assert all(e["usage"]["total_tokens"] == 9 + e["usage"]["completion_tokens"] for e in data)
    assert data[-1]["choices"] == []


async def test_stop_string_ends_generation_and_aborts_the_engine_request() -> None:
    engine = make_engine(time_scale=1.0)  # real-speed steps: the request would run for seconds
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 12, "ignore_eos": True, "seed": 7}
    async with serve(engine) as url, aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/completions", json=body) as resp:
            full = (await resp.json())["choices"][0]["text"].split()
        stop = " ".join(full[4:6])  # a two-word stop sequence
        assert full.index(full[4]) == 4  # no earlier occurrence (fixed by the seed)
        body.update(max_tokens=3000, stop=["never-generated", stop])
        async with session.post(url + "/v1/completions", json=body) as resp:
            out = await resp.json()
            assert engine.stats().running == 0  # aborted before the answer was sent
        async with session.post(url + "/v1/completions", json={**body, "stream": True}) as resp:
            events = (await read_sse(resp))[:-1]
        late = {**body, "min_tokens": 10, "max_tokens": 12}  # no stop before 10 tokens
        async with session.post(url + "/v1/completions", json=late) as resp:
            unstopped = (await resp.json())["choices"][0]
    assert (unstopped["finish_reason"], unstopped["text"].split()) == ("length", full)
    choice = out["choices"][0]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)
    assert choice["text"].split() == full[:4]
    assert out["usage"]["completion_tokens"] == 6  # the stop words count as generated
    streamed = "".join(e["choices"][0]["text"] for e in events)
    assert streamed.split() == full[:4] and not streamed.startswith(" ")
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
        ({"prompt": "x", "max_tokens": True}, "max_tokens"),
        ({"prompt": "x", "max_tokens": 2.5}, "max_tokens"),
        ({"max_tokens": 5}, "prompt"),
        ({"prompt": 42}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": [1, 99999999]}, "prompt"),
        ({"prompt": "x", "n": 2}, "n"),
        ({"prompt": "x", "model": "other"}, "model"),
        ({"prompt": "x", "stream": "yes"}, "stream"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
        ({"prompt": "x", "stream": True, "stream_options": {"include_usage": 1}}, "include_usage"),
        ({"prompt": "x", "temperature": -1}, "temperature"),
        ({"prompt": "x", "stop": 5}, "stop"),
        ({"prompt": "x", "min_tokens": 9, "max_tokens": 3}, "min_tokens"),
        ({"prompt": "x", "ignore_eos": "true"}, "ignore_eos"),
    ],
)
async def test_invalid_completion_bodies_get_400(
    server: tuple[Any, str], session: aiohttp.ClientSession, body: dict[str, Any], param: str
) -> None:
    _, url = server
    async with session.post(url + "/v1/completions", json={"model": MODEL, **body}) as resp:
        assert resp.status == 400
        err = (await resp.json())["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert err["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"model": MODEL},
        {"model": MODEL, "messages": []},
        {"model": MODEL, "messages": "hi"},
        {"model": MODEL, "messages": [{"content": "hi"}]},
        {"model": MODEL, "messages": [{"role": "user", "content": 3}]},
        {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0},
    ],
)
async def test_invalid_chat_bodies_get_400(
    server: tuple[Any, str], session: aiohttp.ClientSession, body: dict[str, Any]
) -> None:
    _, url = server
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"", b"\xff\xfe"])
async def test_malformed_json_gets_400(server: tuple[Any, str], session: aiohttp.ClientSession, raw: bytes) -> None:
    _, url = server
    async with session.post(url + "/v1/completions", data=raw, headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["type"] == "invalid_request_error"


async def test_over_context_length_gets_400(server: tuple[Any, str], session: aiohttp.ClientSession) -> None:
    engine, url = server
    words = engine.max_model_len - 10
    body = {"model": MODEL, "prompt": " ".join(["w"] * words), "max_tokens": 11}
    async with session.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == 400
        err = (await resp.json())["error"]
    assert err["code"] == "context_length_exceeded"
    assert f"{engine.max_model_len} tokens" in err["message"]
    assert f"{words + 11} tokens" in err["message"]
    body["max_tokens"] = 10  # exactly fits
    async with session.post(url + "/v1/completions", json={**body, "ignore_eos": True}) as resp:
        assert resp.status == 200
        assert (await resp.json())["usage"]["completion_tokens"] == 10


async def test_unknown_route_and_method_get_json_errors(
    server: tuple[Any, str], session: aiohttp.ClientSession
) -> None:
    _, url = server
    async with session.get(url + "/v2/nothing") as resp:
        assert resp.status == 404
        assert (await resp.json())["error"]["message"]
    async with session.get(url + "/v1/completions") as resp:
        assert resp.status == 405
        assert "error" in await resp.json()
    async with session.get(url + "/health") as resp:
        assert resp.status == 200 and await resp.text() == "ok"
    async with session.get(url + "/v1/models") as resp:
        card = (await resp.json())["data"][0]
    assert card["id"] == MODEL and card["max_model_len"] == server[0].max_model_len


async def test_prompt_as_token_ids(server: tuple[Any, str], session: aiohttp.ClientSession) -> None:
    _, url = server
    ids = WordTokenizer().encode(PROMPT)
    for prompt in (ids, [ids], [PROMPT]):
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 2, "ignore_eos": True}
        async with session.post(url + "/v1/completions", json=body) as resp:
            assert (await resp.json())["usage"]["prompt_tokens"] == 9


async def test_metrics_histograms_count_served_requests(
    server: tuple[Any, str], session: aiohttp.ClientSession
) -> None:
    _, url = server
    before = await scrape(session, url)
    n, max_tokens = 5, 4
    for i in range(n):
        body = {"model": MODEL, "prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": True, "stream": bool(i % 2)}
        async with session.post(url + "/v1/completions", json=body) as resp:
            await resp.read()
    after = await scrape(session, url)
    for name in (
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
    ):
        assert sample(after, name + "_count") == n
        assert sample(after, name + "_bucket", le="+Inf") == n
    # vLLM's ITL: one sample per engine output after the first, streamed or not
    assert sample(after, "vllm:inter_token_latency_seconds_count") == n * (max_tokens - 1)
    assert sample(after, "vllm:request_time_per_output_token_seconds_count") == n
    assert sample(after, "vllm:request_success_total", finished_reason="length") == n
    gen = "vllm:generation_tokens_total"
    assert sample(after, gen) - sample(before, gen) == n * max_tokens
    assert sample(after, "vllm:num_requests_running") == 0
    assert sample(after, "vllm:kv_cache_usage_perc") == 0


async def test_recent_requests_log(server: tuple[Any, str], session: aiohttp.ClientSession) -> None:
    _, url = server
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 5, "ignore_eos": True, "stream": True}
    async with session.post(url + "/v1/completions", json=body) as resp:
        events = await read_sse(resp)
    async with session.get(url + "/loadgen/requests?limit=1") as resp:
        (entry,) = (await resp.json())["data"]
    assert entry["id"] == events[0]["id"]
    assert (entry["prompt_tokens"], entry["output_tokens"], entry["events"]) == (9, 5, 5)
    assert len(entry["itl_s"]) == 4 and entry["finish_reason"] == "length"
    assert 0 < entry["ttft_s"] <= entry["e2e_s"]
    assert entry["engine"] is not None
    async with session.get(url + "/loadgen/requests?limit=x") as resp:
        assert resp.status == 400


async def test_queue_full_gets_429() -> None:
    engine = make_engine(max_num_seqs=1, max_waiting=1, time_scale=1.0)
    long_body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 3000, "ignore_eos": True, "stream": True}
    async with serve(engine) as url, aiohttp.ClientSession() as session:
        running = await session.post(url + "/v1/completions", json=long_body)
        await running.content.readuntil(b"\n\n")  # it is running now
        waiting = asyncio.create_task(
            session.post(
                url + "/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 2, "ignore_eos": True}
            )
        )
        for _ in range(500):  # until the second one waits in the engine queue
            if sample(await scrape(session, url), "vllm:num_requests_waiting") == 1:
                break
            await asyncio.sleep(0.01)
        async with session.post(url + "/v1/completions", json=long_body) as resp:
            assert resp.status == 429
            assert (await resp.json())["error"]["code"] == "queue_full"
        running.close()  # disconnect: the waiting request runs now
        resp = await waiting
        assert resp.status == 200 and (await resp.json())["usage"]["completion_tokens"] == 2
        after = await scrape(session, url)
        assert sample(after, "loadgen:requests_rejected_total", status="429") == 1


async def test_disconnect_while_waiting_leaves_the_queue() -> None:
    engine = make_engine(max_num_seqs=1, time_scale=1.0)
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 3000, "ignore_eos": True, "stream": True}
    async with serve(engine) as url, aiohttp.ClientSession() as session:
        running = await session.post(url + "/v1/completions", json=body)
        await running.content.readuntil(b"\n\n")
        waiting = asyncio.create_task(session.post(url + "/v1/completions", json=body))
        for _ in range(500):
            if engine.stats().waiting == 1:
                break
            await asyncio.sleep(0.01)
        assert engine.stats().waiting == 1
        waiting.cancel()  # closes its connection before any byte of the answer
        for _ in range(500):
            if engine.stats().waiting == 0:
                break
            await asyncio.sleep(0.01)
        assert (engine.stats().waiting, engine.stats().running) == (0, 1)
        running.close()


async def test_max_in_flight_gets_429() -> None:
    engine = make_engine(time_scale=1.0)
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 3000, "ignore_eos": True, "stream": True}
    async with serve(engine, max_in_flight=1) as url, aiohttp.ClientSession() as session:
        first = await session.post(url + "/v1/completions", json=body)
        await first.content.readuntil(b"\n\n")
        async with session.post(url + "/v1/completions", json=body) as resp:
            assert resp.status == 429
        first.close()


async def _disconnect_after(session: aiohttp.ClientSession, url: str, events: int) -> int:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 2000,
        "ignore_eos": True,
        "stream": True,
    }
    resp = await session.post(url + "/v1/chat/completions", json=body)
    for _ in range(events):
        await resp.content.readuntil(b"\n\n")
    resp.close()  # drops the connection mid-stream
    return resp.status


async def test_keeps_serving_after_100_disconnects() -> None:
    engine = make_engine(time_scale=0.1)  # 2000 tokens take seconds: all are cut mid-stream
    connector = aiohttp.TCPConnector(limit=0)
    async with serve(engine) as url, aiohttp.ClientSession(connector=connector) as session:
        statuses = await asyncio.gather(*(_disconnect_after(session, url, 1 + i % 4) for i in range(100)))
        assert statuses == [200] * 100
        for _ in range(500):  # the server notices each disconnect and aborts the request
            stats = engine.stats()
            if stats.running == 0 and stats.waiting == 0:
                break
            await asyncio.sleep(0.01)
        stats = engine.stats()
        assert (stats.running, stats.waiting, stats.kv_usage) == (0, 0, 0.0)
        after = await scrape(session, url)
        assert sample(after, "vllm:request_success_total", finished_reason="abort") == 100
        body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 3, "ignore_eos": True}
        async with session.post(url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            assert (await resp.json())["usage"]["completion_tokens"] == 3


async def test_non_ascii_and_json_line_separators_survive(
    server: tuple[Any, str], session: aiohttp.ClientSession
) -> None:
    _, url = server
    prompt = "naïve café\u2028zürich 東京"  # U+2028 is whitespace for str.split
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1}
    raw = json.dumps(body, ensure_ascii=False).encode()
    async with session.post(url + "/v1/completions", data=raw) as resp:
        assert (await resp.json())["usage"]["prompt_tokens"] == 4


async def test_metrics_count_prefix_hits_and_the_preempted_requests_lookups_apart(
    session: aiohttp.ClientSession,
) -> None:
    # 12 blocks of 16 tokens; two requests of 48 + 100 tokens need 10 blocks each: the
    # newer is preempted and looks the cache up again when it comes back
    engine = make_engine(num_gpu_blocks=12)
    prompt = list(range(100, 148))  # 3 blocks, the same for both
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 100, "ignore_eos": True}
    async with serve(engine) as url:

        async def one() -> None:
            async with session.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()

        await asyncio.wait_for(asyncio.gather(one(), one()), 30)
        after = await scrape(session, url)
    assert sample(after, "vllm:num_preemptions_total") >= 1
    # both first lookups: 48 tokens each; the second request, admitted in the same step as
    # the first, hits its two full blocks that are not the prompt's last (32 tokens)
    assert sample(after, "vllm:prefix_cache_queries_total") == 96
    assert sample(after, "vllm:prefix_cache_hits_total") == 32
    preempted = sample(after, "loadgen:prefix_cache_preempted_queries_total")
    assert preempted > 48  # its prompt and the tokens it had generated
    assert 0 <= sample(after, "loadgen:prefix_cache_preempted_hits_total") <= preempted
