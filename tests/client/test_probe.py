"""The non-streamed probe that reads usage.prompt_tokens: its body, its answers, its failures."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.probe import ProbeResult, probe_prompt_tokens
from loadgen.records import RequestSpec
from tests.client.redirecting import RedirectingServers
from tests.scripted_server import Script, ScriptedServer

SECRET = "Bearer sk-very-secret"
SPEC = RequestSpec(index=-1, prompt="one two three four five", prompt_tokens=5, max_tokens=1)


async def _probe(url: str, api: str = "chat", script: dict[str, Any] | None = None, **kw: Any) -> ProbeResult:
    opts = DialectOptions(model="scripted-model", extra_body={"script": script} if script else None)
    return await probe_prompt_tokens(url, get_dialect(api), opts, SPEC, {"Authorization": SECRET}, **kw)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_body_is_the_runs_asked_for_one_answer_of_one_token(api: str, strict: bool) -> None:
    opts = DialectOptions(model="m", strict=strict, continuous_usage=True)
    spec = RequestSpec(index=0, prompt="hello there", prompt_tokens=2, max_tokens=64)
    streamed = get_dialect(api).build_body(spec, opts)
    body = get_dialect(api).non_stream_body(spec, opts)
    assert body["stream"] is False and "stream_options" not in body and body["max_tokens"] == 1
    assert body.get("min_tokens", 1) == 1
    assert {k: v for k, v in body.items() if k not in ("stream", "stream_options", "max_tokens", "min_tokens")} == {
        k: v for k, v in streamed.items() if k not in ("stream", "stream_options", "max_tokens", "min_tokens")
    }


@pytest.mark.parametrize("api, expected", [("chat", 5 + 3), ("completions", 5)])
async def test_reads_usage_of_a_non_streamed_answer(api: str, expected: int) -> None:
    async with ScriptedServer(Script(include_usage=False)) as srv:
        res = await _probe(srv.url, api)
    assert res == ProbeResult(expected)
    assert srv.requests[0]["stream"] is False and srv.requests[0]["max_tokens"] == 1
    assert srv.headers[0]["Authorization"] == SECRET  # the run's headers go with it


@pytest.mark.parametrize(
    "script, part",
    [
        ({"answer_usage": False}, "has no usage.prompt_tokens either"),
        ({"status": 500}, "answered HTTP 500: "),
        ({"raw_body": "<html>not json</html>"}, "is not JSON"),
    ],
)
async def test_an_answer_without_a_count_is_a_reason(script: dict[str, Any], part: str) -> None:
    async with ScriptedServer(Script()) as srv:
        res = await _probe(srv.url, script=script)
    assert res.prompt_tokens is None and res.error is not None and part in res.error
    assert "\n" not in res.error and SECRET not in res.error


async def test_unreachable_or_silent_server_is_a_reason() -> None:
    res = await _probe("http://127.0.0.1:9")
    assert res.prompt_tokens is None and res.error is not None
    assert res.error.startswith("the non-streamed request failed: ConnectError") and SECRET not in res.error
    async with ScriptedServer(Script(ttft_s=1.0)) as srv:  # answers only after the 0.2 s limit
        res = await _probe(srv.url, timeout_s=0.2)
    assert res == ProbeResult(None, "the non-streamed request got no answer within 0.2 s")


async def test_a_redirect_is_a_reason_naming_its_location() -> None:
    async with RedirectingServers() as srv:
        got = await _probe(srv.url)
    assert srv.reached == []
    assert got.prompt_tokens is None
    assert (
        got.error
        == f"the non-streamed request answered HTTP 302: redirect to '{srv.target}/v1/chat/completions' not followed"
    )
