"""The server's guards against hostile clients, on a real server on 127.0.0.1: deep JSON,
bodies that never arrive, bodies over the size limit, and the API key."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from loadgen.errors import ConfigError
from loadgen.server.config import HttpLimits, ServeConfig
from loadgen.server.guard import context_body_limit
from loadgen.server.process import ServerProcess
from loadgen.server.tokenizer import WordTokenizer
from tests.server.helpers import MODEL, make_engine, parse_prometheus, sample, serve

KEY = "sk-canary-7f3a9b"
BODY = {"model": MODEL, "prompt": "hello there", "max_tokens": 2}


async def _raw(url: str, request: bytes, *, bound_s: float = 20.0) -> bytes:
    """Send ``request`` on a fresh socket and read until the server closes it.

    ``bound_s`` is only a safety net: a server that keeps the connection open fails
    the test with TimeoutError instead of hanging it."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), bound_s)
    finally:
        writer.close()


def _status_and_error(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)["error"]


def _is_openai_error(body: Any) -> bool:
    err = body.get("error") if isinstance(body, dict) else None
    return isinstance(err, dict) and set(err) == {"message", "type", "param", "code"}


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_deeply_nested_json_is_a_400_not_a_500(
    session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with serve(make_engine()) as url:
        for body in ("[" * 100_000, '{"a":' * 100_000):
            async with session.post(
                url + "/v1/completions", data=body.encode(), headers={"Content-Type": "application/json"}
            ) as resp:
                assert resp.status == 400
                err = await resp.json()
            assert _is_openai_error(err) and "nested too deeply" in err["error"]["message"]
        async with session.get(url + "/health") as resp:
            assert resp.status == 200
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_body_that_never_arrives_gets_408_and_the_connection_closed() -> None:
    timeout_s = 0.2
    async with serve(make_engine(), http=HttpLimits(body_timeout_s=timeout_s)) as url:
        head = (
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )
        t0 = time.perf_counter()
        raw = await _raw(url, head + b'{"model":')  # headers, part of the body, then nothing
        waited = time.perf_counter() - t0
        status, err = _status_and_error(raw)
        assert status == 408 and err["code"] == "request_timeout"
        assert waited >= timeout_s  # not cut early; closed (read() hit EOF) within the bound
        async with httpx.AsyncClient() as client:  # the server still serves
            assert (await client.post(url + "/v1/completions", json=BODY)).status_code == 200


async def test_a_declared_body_over_the_limit_is_413_at_once() -> None:
    # the default limit (64 MiB): refused from Content-Length, before any body byte is read
    async with serve(make_engine()) as url:
        raw = await _raw(url, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 70000000\r\n\r\n")
    status, err = _status_and_error(raw)
    assert status == 413 and err["code"] == "request_too_large" and "67108864" in err["message"]


async def test_bodies_over_the_limit_are_413_whether_declared_or_chunked(session: aiohttp.ClientSession) -> None:
    limit = 1000
    big = json.dumps({**BODY, "prompt": "word " * 400}).encode()
    assert len(big) > limit

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: found while reading
        for i in range(0, len(big), 300):
            yield big[i : i + 300]

    async with serve(make_engine(), http=HttpLimits(max_body_bytes=limit)) as url:
        for data in (big, chunked()):
            async with session.post(url + "/v1/completions", data=data) as resp:
                assert resp.status == 413
                body = await resp.json()
            assert _is_openai_error(body) and body["error"]["code"] == "request_too_large"
        small = json.dumps(BODY).encode()
        async with session.post(url + "/v1/completions", data=small) as resp:
            assert resp.status == 200


async def test_api_key_guards_v1_only_in_constant_time(
    session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    async with serve(make_engine(), http=HttpLimits(api_key=KEY)) as url:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": KEY},
            {"Authorization": f"Bearer {KEY}x"},
            {"Authorization": f"bearer {KEY}"},
        ):
            for method, path in (
                ("POST", "/v1/completions"),
                ("POST", "/v1/chat/completions"),
                ("GET", "/v1/models"),
                ("GET", "/v1/nope"),
            ):
                async with session.request(method, url + path, headers=headers, json=BODY) as resp:
                    text = await resp.text()
                    assert resp.status == 401, (headers, path)
                seen.append(text)
                assert _is_openai_error(json.loads(text))
                assert json.loads(text)["error"]["code"] == "invalid_api_key"
        for path in ("/health", "/metrics", "/loadgen/requests"):  # open, as in vLLM
            async with session.get(url + path) as resp:
                assert resp.status == 200
        auth = {"Authorization": f"Bearer {KEY}"}
        async with session.post(url + "/v1/completions", headers=auth, json=BODY) as resp:
            assert resp.status == 200
            seen.append(await resp.text())
        async with session.get(url + "/v1/models", headers=auth) as resp:
            assert resp.status == 200
        async with session.get(url + "/metrics") as resp:
            metrics = await resp.text()
            seen.append(metrics)
    assert sample(parse_prometheus(metrics)[0], "loadgen:requests_rejected_total", status="401") == 5 * 4
    assert not any(KEY in text for text in seen)
    assert KEY not in caplog.text


def test_api_key_from_the_environment_on_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADGEN_API_KEY", KEY)
    server = ServerProcess(["--model", "llama-3.1-8b", "--time-scale", "0.01"])
    with server as url:
        assert httpx.post(url + "/v1/completions", json={**BODY, "model": "llama-3.1-8b"}).status_code == 401
        ok = httpx.post(
            url + "/v1/completions", json={**BODY, "model": "llama-3.1-8b"}, headers={"Authorization": f"Bearer {KEY}"}
        )
        assert ok.status_code == 200
        assert httpx.get(url + "/health").status_code == 200
    assert any("API key required" in line for line in server.output)
    assert not any(KEY in line for line in server.output)


@pytest.mark.parametrize(
    ("limits", "needle"),
    [
        (HttpLimits(api_key=""), "--api-key"),
        (HttpLimits(api_key=f"{KEY} with space"), "--api-key"),
        (HttpLimits(body_timeout_s=0.0), "--body-timeout"),
        (HttpLimits(body_timeout_s=float("nan")), "--body-timeout"),
        (HttpLimits(max_body_bytes=0), "max_body_bytes"),
        (HttpLimits(header_timeout_s=0.0), "--header-timeout"),
        (HttpLimits(drain_timeout_s=-1.0), "--drain-timeout"),
    ],
)
def test_bad_http_limits_are_one_line_errors_without_the_key(limits: HttpLimits, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as info:
        ServeConfig(http=limits)
    assert "\n" not in str(info.value) and KEY not in str(info.value)


def test_the_key_is_not_in_the_configs_repr() -> None:
    config = ServeConfig(http=HttpLimits(api_key=KEY))
    assert config.http.api_key == KEY
    assert KEY not in repr(config) and KEY not in str(config)


# -- an oversized prompt: refused before it is read, parsed or tokenised (issue 21, #14) --


async def test_a_declared_body_over_the_context_bound_is_400_before_it_is_read() -> None:
    # 4096-token context: the bound is 4096 * 128 + 64 KiB bytes; the body is never sent, so
    # an answer (and not the 408 of a body that never arrives) shows nothing waited for it
    limit = context_body_limit(4096)
    async with serve(make_engine(), http=HttpLimits(body_timeout_s=5.0)) as url:
        raw = await _raw(url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (limit + 1))
    status, err = _status_and_error(raw)
    assert status == 400 and err["code"] == "context_length_exceeded"
    assert err["param"] == "prompt" and "4096 tokens" in err["message"]


async def test_a_chunked_body_over_the_context_bound_is_400_before_it_ends() -> None:
    limit = context_body_limit(4096)
    piece = b"a" * 65536
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(limit // len(piece) + 2))
    async with serve(make_engine(), http=HttpLimits(body_timeout_s=5.0)) as url:
        # more than the bound, then nothing (no last chunk): only a refusal ends it early
        raw = await _raw(
            url, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks
        )
    status, err = _status_and_error(raw)
    assert status == 400 and err["code"] == "context_length_exceeded"
    assert err["param"] == "messages"


async def test_a_prompt_over_the_context_is_refused_without_being_tokenised(session: aiohttp.ClientSession) -> None:
    engine = make_engine()
    tok = WordTokenizer(engine.vocab_size)
    words = " ".join(f"w{i}" for i in range(5000))  # distinct words, 5000 > 4096 tokens
    ids = [5] * 4999 + [10**9]  # too long, and the last id is outside the vocabulary
    async with serve(engine, tokenizer=tok) as url:
        for path, body in (
            ("/v1/completions", {"model": MODEL, "prompt": words}),
            ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": words}]}),
            ("/v1/completions", {"model": MODEL, "prompt": ids}),
        ):
            async with session.post(url + path, json=body) as resp:
                assert resp.status == 400
                err = (await resp.json())["error"]
            assert err["code"] == "context_length_exceeded", err
            assert "more than 4096 tokens" in err["message"]
        assert len(tok._ids) <= 1  # no word of the prompts was hashed (at most '<|user|>')
        async with session.post(url + "/v1/completions", json={**BODY, "prompt": " ".join(["w"] * 4000)}) as resp:
            assert resp.status == 200  # a long prompt within the context still passes


def _peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_a_60_mb_prompt_costs_the_server_no_memory_in_proportion_to_it() -> None:
    body = json.dumps({"model": "llama-3.1-8b", "prompt": "word " * 12_000_000}).encode()
    server = ServerProcess(["--model", "llama-3.1-8b", "--max-model-len", "8192", "--time-scale", "0.01"])
    with server as url:
        assert server.proc is not None
        Path(f"/proc/{server.proc.pid}/clear_refs").write_text("5")  # reset the peak
        before = _peak_rss_bytes(server.proc.pid)
        resp = httpx.post(
            url + "/v1/completions", content=body, timeout=60, headers={"Content-Type": "application/json"}
        )
        assert resp.status_code == 400
        assert resp.json()["error"]["code"] == "context_length_exceeded"
        grown = _peak_rss_bytes(server.proc.pid) - before
        # before the bound the body was read, parsed and split: about 1 GB (16x the body)
        assert grown < len(body) / 4, grown
        ok = httpx.post(url + "/v1/completions", json={**BODY, "model": "llama-3.1-8b"})
        assert ok.status_code == 200
