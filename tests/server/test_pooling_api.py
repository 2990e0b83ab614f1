"""The pooling routes against the real reference server (sim engine) on loopback."""

from __future__ import annotations

import asyncio
import base64
import struct
from typing import Any

import aiohttp
import pytest

from loadgen.server.config import ServeConfig, SimOptions
from loadgen.server.sim.build import sim_engine
from loadgen.server.tokenizer import WordTokenizer
from tests.server.helpers import MODEL, make_engine, sample, scrape, serve


async def post(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    async with session.post(url, json=body) as resp:
        return resp.status, await resp.json()


async def test_embeddings_shape_usage_and_determinism() -> None:
    async with serve(make_engine()) as url, aiohttp.ClientSession() as session:
        body = {"model": MODEL, "input": ["the cat sat", "a b c d e", "the cat sat"], "unknown_field": 1}
        status, got = await post(session, url + "/v1/embeddings", body)
        assert status == 200, got
        assert got["object"] == "list" and got["model"] == MODEL
        assert got["usage"] == {"prompt_tokens": 3 + 5 + 3, "total_tokens": 11}
        data = got["data"]
        assert [d["index"] for d in data] == [0, 1, 2] and {d["object"] for d in data} == {"embedding"}
        assert len(data[0]["embedding"]) == 256
        assert data[0]["embedding"] == data[2]["embedding"] != data[1]["embedding"]
        assert sum(x * x for x in data[0]["embedding"]) == pytest.approx(1.0)
        status, one = await post(session, url + "/v1/embeddings", {"input": "the cat sat", "dimensions": 8})
        assert status == 200 and len(one["data"][0]["embedding"]) == 8
        assert one["usage"]["prompt_tokens"] == 3
        ids = WordTokenizer(128256).encode("the cat sat")
        status, by_ids = await post(session, url + "/v1/embeddings", {"input": [ids], "encoding_format": "base64"})
        assert status == 200 and by_ids["usage"]["prompt_tokens"] == 3
        raw = base64.b64decode(by_ids["data"][0]["embedding"])
        floats = struct.unpack(f"<{len(raw) // 4}f", raw)
        assert floats == pytest.approx(data[0]["embedding"], abs=1e-6)
        async with session.get(url + "/loadgen/requests") as resp:
            log = (await resp.json())["data"]
        assert [r["endpoint"] for r in log] == ["embd", "embd", "embd"]
        assert [r["prompt_tokens"] for r in log] == [11, 3, 3]


async def test_concurrent_embeddings_share_steps() -> None:
    engine = make_engine(time_scale=1.0)  # real-speed steps: requests sent together meet in the queue
    n = 16
    async with serve(engine) as url, aiohttp.ClientSession() as session:
        before = engine.stats().steps
        bodies = [{"input": " ".join(["word"] * 200 + [str(i)])} for i in range(n)]
        results = await asyncio.gather(*(post(session, url + "/v1/embeddings", b) for b in bodies))
        assert all(status == 200 for status, _ in results)
        steps = engine.stats().steps - before
        metrics = await scrape(session, url)
        assert sample(metrics, "vllm:prompt_tokens_total") == n * 201
        assert sample(metrics, "vllm:generation_tokens_total") == 0  # pooling: no decode
    assert 1 <= steps < n  # several requests per prefill step


async def test_one_request_of_many_inputs_is_batched() -> None:
    engine = make_engine(time_scale=1.0)
    async with serve(engine) as url, aiohttp.ClientSession() as session:
        status, got = await post(session, url + "/v1/embeddings", {"input": [f"x y z {i}" for i in range(32)]})
        assert status == 200 and len(got["data"]) == 32
    assert engine.stats().steps == 1  # 32 inputs of 4 tokens: one step's budget


async def test_rerank_orders_by_relevance_and_honours_top_n() -> None:
    docs = ["completely unrelated words here", "the quick brown fox", "quick brown", {"text": "fox"}]
    async with serve(make_engine()) as url, aiohttp.ClientSession() as session:
        body = {"model": MODEL, "query": "the quick brown fox", "documents": docs}
        status, got = await post(session, url + "/v1/rerank", body)
        assert status == 200, got
        results = got["results"]
        scores = [r["relevance_score"] for r in results]
        assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
        assert results[0]["index"] == 1 and results[0]["document"] == {"text": "the quick brown fox"}
        assert results[-1]["index"] == 0
        assert got["usage"] == {"total_tokens": 4 * 4 + 4 + 4 + 2 + 1}
        assert got["id"].startswith("rerank-") and got["model"] == MODEL
        status, top = await post(session, url + "/v2/rerank", {**body, "top_n": 2, "return_documents": False})
        assert status == 200 and [r["index"] for r in top["results"]] == [r["index"] for r in results[:2]]
        assert "document" not in top["results"][0]


async def test_score_pairs_and_broadcast() -> None:
    async with serve(make_engine()) as url, aiohttp.ClientSession() as session:
        status, got = await post(session, url + "/v1/score", {"text_1": "a b c", "text_2": ["a b c", "x y"]})
        assert status == 200, got
        assert [d["index"] for d in got["data"]] == [0, 1] and got["data"][0]["object"] == "score"
        assert got["data"][0]["score"] > got["data"][1]["score"]
        assert got["usage"]["prompt_tokens"] == (3 + 3) + (3 + 2) == got["usage"]["total_tokens"]
        status, pairs = await post(session, url + "/v1/score", {"text_1": ["a", "x y"], "text_2": ["x y", "a"]})
        assert status == 200 and pairs["data"][0]["score"] == pytest.approx(pairs["data"][1]["score"])


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/embeddings", [], None),
        ("/v1/embeddings", {}, "input"),
        ("/v1/embeddings", {"input": []}, "input"),
        ("/v1/embeddings", {"input": ""}, "input"),
        ("/v1/embeddings", {"input": [1, "a"]}, "input[0]"),
        ("/v1/embeddings", {"input": [[10**9]]}, "input[0]"),
        ("/v1/embeddings", {"input": "a", "dimensions": 0}, "dimensions"),
        ("/v1/embeddings", {"input": "a", "dimensions": True}, "dimensions"),
        ("/v1/embeddings", {"input": "a", "encoding_format": "hex"}, "encoding_format"),
        ("/v1/embeddings", {"input": "a", "model": "other"}, "model"),
        ("/v1/embeddings", {"input": " ".join(["w"] * 5000)}, "input[0]"),
        ("/v1/rerank", {"query": "q"}, "documents"),
        ("/v1/rerank", {"query": 3, "documents": ["d"]}, "query"),
        ("/v1/rerank", {"query": "q", "documents": [1]}, "documents[0]"),
        ("/v1/rerank", {"query": "q", "documents": ["d"], "top_n": "2"}, "top_n"),
        ("/v1/rerank", {"query": "", "documents": [""]}, "documents[0]"),
        ("/v1/score", {"text_1": "a"}, "text_2"),
        ("/v1/score", {"text_1": ["a", "b"], "text_2": ["a", "b", "c"]}, "text_2"),
        ("/v1/score", {"text_1": [], "text_2": "a"}, "text_1"),
    ],
)
async def test_malformed_bodies_get_400(path: str, body: Any, param: str | None) -> None:
    async with serve(make_engine()) as url, aiohttp.ClientSession() as session:
        status, got = await post(session, url + path, body)
        assert status == 400, got
        assert set(got["error"]) == {"message", "type", "param", "code"}
        assert got["error"]["param"] == param and got["error"]["type"] == "invalid_request_error"
        async with session.post(url + path, data=b"{not json") as resp:
            assert resp.status == 400


async def test_engine_without_pooling_gets_501() -> None:
    engine = sim_engine(ServeConfig(sim=SimOptions(disaggregate=True, time_scale=0.01)))  # type: ignore[arg-type]
    async with serve(engine) as url, aiohttp.ClientSession() as session:
        status, got = await post(session, url + "/v1/embeddings", {"input": "a"})
        assert status == 501 and got["error"]["code"] == "not_supported"
