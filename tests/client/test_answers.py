"""Non-streamed APIs (embeddings, rerank, score) over every transport against a scripted
aiohttp server on loopback: one record per request, its E2E latency at least the server's
delay, prompt tokens from the answer's usage, inputs as sent, and each kind of bad answer
a failed record of its kind."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loadgen.client import answer
from loadgen.client.answer import AnswerState
from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TRANSPORTS, TransportConfig, make_transport
from loadgen.errors import InvalidResponse
from loadgen.metrics.summary import summarize_level
from loadgen.records import ErrorKind, RequestRecord, RequestSpec
from tests.scripted_server import Script, ScriptedServer

APIS = ("embeddings", "rerank", "score")
WORDS = " ".join(f"w{i}" for i in range(40))


async def _send(
    url: str, api: str, transport: str, n: int, script: dict[str, Any] | None = None, **cfg: Any
) -> RequestRecord:
    extra = {"script": script} if script else None
    options = DialectOptions(model="m", inputs=(n,), extra_body=extra)
    t = make_transport(transport, TransportConfig(url, get_dialect(api), options, **cfg))
    try:
        rec = RequestRecord(index=0)
        await t.send(RequestSpec(index=0, prompt=WORDS, prompt_tokens=40, max_tokens=1), rec)
        return rec
    finally:
        await t.aclose()


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
@pytest.mark.parametrize("api", APIS)
def test_answer_is_one_ok_record_with_usage_and_inputs(api: str, transport: str) -> None:
    delay = 0.05

    async def main() -> tuple[RequestRecord, list[dict[str, Any]]]:
        async with ScriptedServer(Script(ttft_s=delay, tokens_per_word=2.0)) as srv:
            return await _send(srv.url, api, transport, 5), srv.requests

    rec, bodies = asyncio.run(main())
    assert rec.status is ErrorKind.OK, rec.error
    assert rec.done_ns - rec.sent_ns >= delay * 1e9  # the answer came after the server's delay
    assert rec.inputs == 5 and rec.events == []
    assert rec.prompt_tokens == 80  # the server's usage: 40 words at 2 tokens each
    body = bodies[0]
    sent = {"embeddings": body.get("input"), "rerank": body.get("documents"), "score": body.get("text_2")}[api]
    assert isinstance(sent, list) and len(sent) == 5 and all(sent)
    if api == "rerank":
        assert body["top_n"] == 5 and body["query"]
    if api == "embeddings":
        assert body["encoding_format"] == "float"


def test_one_input_is_sent_as_a_string() -> None:
    async def main() -> tuple[RequestRecord, list[dict[str, Any]]]:
        async with ScriptedServer(Script(ttft_s=0.0)) as srv:
            return await _send(srv.url, "embeddings", "fast", 1), srv.requests

    rec, bodies = asyncio.run(main())
    assert rec.ok and rec.inputs == 1 and bodies[0]["input"] == WORDS


BAD = [
    ({"raw_body": "{not json"}, ErrorKind.INVALID_RESPONSE, "malformed JSON"),
    ({"raw_body": "[1, 2]"}, ErrorKind.INVALID_RESPONSE, "not a JSON object"),
    ({"raw_body": '{"object": "list"}'}, ErrorKind.INVALID_RESPONSE, "no "),
    ({"raw_body": '{"error": {"message": "out of memory"}}'}, ErrorKind.ERROR_EVENT, "out of memory"),
    ({"results_delta": -1}, ErrorKind.INVALID_RESPONSE, "for 3 input(s) sent"),
    ({"results_delta": 2}, ErrorKind.INVALID_RESPONSE, "for 3 input(s) sent"),
    ({"status": 503}, ErrorKind.HTTP_ERROR, "503"),
    ({"disconnect_after": 10}, ErrorKind.DISCONNECTED, ""),
]


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
@pytest.mark.parametrize(("script", "kind", "needle"), BAD)
@pytest.mark.parametrize("api", APIS)
def test_bad_answers_are_failed_records(
    api: str, transport: str, script: dict[str, Any], kind: ErrorKind, needle: str
) -> None:
    async def main() -> RequestRecord:
        async with ScriptedServer(Script(ttft_s=0.0)) as srv:
            return await _send(srv.url, api, transport, 3, script)

    rec = asyncio.run(main())
    assert rec.status is kind, (rec.status, rec.error)
    assert needle in (rec.error or ""), rec.error
    assert rec.done_ns >= rec.sent_ns > 0


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_a_slow_answer_times_out(transport: str) -> None:
    async def main() -> RequestRecord:
        async with ScriptedServer(Script(ttft_s=2.0)) as srv:
            return await _send(srv.url, "embeddings", transport, 2, read_timeout_s=0.2, request_timeout_s=0.3)

    rec = asyncio.run(main())
    assert rec.status is ErrorKind.TIMEOUT, rec.error


def test_an_answer_over_the_cap_is_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answer, "MAX_BODY", 100)
    state = AnswerState(RequestRecord(index=0), get_dialect("embeddings"))
    state.feed(b"x" * 60, 1)
    with pytest.raises(InvalidResponse, match="longer than 100 bytes"):
        state.feed(b"x" * 60, 2)
    assert state.failed


def test_inputs_per_second_and_input_tokens_from_a_real_level() -> None:
    """A closed loop of 3 users, 24 requests of 1-6 inputs: inputs/s and input tokens/s are
    the ok requests' sums over the level's headline window (the held window, as its
    requests/s: docs/metrics.md, "Throughput windows"); no TTFT, ITL or output-token rate."""
    counts = (1, 2, 3, 4, 5, 6)

    async def main() -> list[RequestRecord]:
        async with ScriptedServer(Script(ttft_s=0.02)) as srv:
            options = DialectOptions(model="m", inputs=counts)
            t = make_transport("fast", TransportConfig(srv.url, get_dialect("embeddings"), options))
            records: list[RequestRecord] = []

            async def user(u: int) -> None:
                for k in range(8):
                    i = u * 8 + k
                    rec = RequestRecord(index=i, worker=u)
                    await t.send(RequestSpec(index=i, prompt=WORDS, prompt_tokens=40, max_tokens=1), rec)
                    records.append(rec)

            await asyncio.gather(*(user(u) for u in range(3)))
            await t.aclose()
            return records

    records = asyncio.run(main())
    assert all(r.ok for r in records) and len(records) == 24
    level = summarize_level(records, load={"mode": "concurrency", "value": 3})
    win, first = level.throughput.window, min(r.sent_ns for r in records)
    assert win is not None and win.rule == "held"
    inside = [r for r in records if first + round(win.start_s * 1e9) < r.done_ns <= first + round(win.end_s * 1e9)]
    ns = level.non_streamed
    assert ns is not None and inside
    assert ns.inputs_per_s == pytest.approx(sum(r.inputs for r in inside) / win.window_s)
    assert ns.input_tokens_per_s == pytest.approx(len(inside) * 40 / win.window_s)  # 40 words, one token each
    assert level.throughput.requests_per_s == pytest.approx(len(inside) / win.window_s)
    assert ns.inputs.mean == pytest.approx(3.5)
    assert level.e2e_ms.p50 is not None and level.e2e_ms.p50 >= 20.0
    assert level.ttft_ms.p50 is None and level.itl_ms.p50 is None and level.tpot_ms.p50 is None
    assert level.throughput.output_tokens_per_s is None
    assert level.throughput.whole is not None and level.throughput.whole.requests_per_s == pytest.approx(
        24 / level.duration_s
    )


def test_generation_levels_have_no_non_streamed_part() -> None:
    rec = RequestRecord(index=0, sent_ns=1, done_ns=10**6, events=[[5 * 10**5, 1]])
    level = summarize_level([rec], load={"mode": "concurrency", "value": 1})
    assert level.non_streamed is None and "non_streamed" not in level.to_json()


BAD_USAGE = [{"prompt_tokens": -1, "total_tokens": -1}, {"prompt_tokens": "12"}, {"total_tokens": 1.5}, "12", [12]]


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
@pytest.mark.parametrize("usage", BAD_USAGE, ids=str)
def test_a_bad_usage_count_is_noted_on_the_record_and_in_the_level(usage: Any, transport: str) -> None:
    """A usage count that is not a whole number >= 0 is dropped (the target counts instead),
    the record says so (token_source usage_rejected) and the level's notes count them."""

    async def main() -> list[RequestRecord]:
        async with ScriptedServer(Script(ttft_s=0.0)) as srv:
            good = [await _send(srv.url, "embeddings", transport, 2) for _ in range(2)]
            bad = [await _send(srv.url, "embeddings", transport, 2, {"usage_as": usage}) for _ in range(3)]
            return good + bad

    records = asyncio.run(main())
    for i, rec in enumerate(records):
        rec.index = i
    assert all(r.ok for r in records), [r.error for r in records]
    assert [r.prompt_tokens for r in records] == [40, 40, None, None, None]
    assert [r.token_source.value for r in records] == ["events"] * 2 + ["usage_rejected"] * 3
    level = summarize_level(records, load={"mode": "concurrency", "value": 1})
    notes = level.client.notes or []
    assert len(notes) == 1 and notes[0].startswith("3 of 5 ok answers had a usage count"), notes
    clean = summarize_level(records[:2], load={"mode": "concurrency", "value": 1})
    assert clean.client.notes is None
