"""Every read from the network is bounded: SSE lines, error bodies, discovery and probe
answers (after decompression), discovery's deadline, parsing in slices. Each against a
hostile server on loopback (tests/hostile_server.py)."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import time
import tracemalloc
from typing import Any

import pytest

from loadgen.client.bounded import MAX_ANSWER, MAX_ERROR, MAX_LINE, Inflater
from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.discovery import discover
from loadgen.client.probe import probe_prompt_tokens
from loadgen.client.sse import SSEDecoder
from loadgen.client.stream import SLICE, StreamState, output_cap
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.errors import InvalidResponse, TargetError
from loadgen.records import ErrorKind, RequestRecord, RequestSpec
from tests.hostile_server import HostileServer, gzip_bytes

MIB = 1 << 20
TRANSPORTS = ["aiohttp", "httpx", "fast"]


def _transport(url: str, kind: str) -> Any:
    cfg = TransportConfig(
        base_url=url,
        dialect=get_dialect("completions"),
        options=DialectOptions(model="hostile"),
        read_timeout_s=30,
        request_timeout_s=60,
    )
    return make_transport(kind, cfg)


async def _send(url: str, kind: str) -> RequestRecord:
    transport = _transport(url, kind)
    rec = RequestRecord(index=0)
    try:
        await transport.send(RequestSpec(index=0, prompt="hi", prompt_tokens=1, max_tokens=4), rec)
    finally:
        await transport.aclose()
    return rec


def test_a_line_up_to_the_cap_is_kept_one_byte_more_is_an_invalid_response() -> None:
    dec = SSEDecoder(max_line=64)
    line = b"data: " + b"x" * 58  # 64 bytes
    assert [e.data for e in dec.feed(line[:10]) + dec.feed(line[10:] + b"\n\n")] == ["x" * 58]
    with pytest.raises(InvalidResponse, match="an SSE line is longer than"):
        SSEDecoder(max_line=64).feed(line + b"y")  # no line end yet: the partial line is over already
    with pytest.raises(InvalidResponse, match="an SSE line is longer than"):
        SSEDecoder(max_line=64).feed(line + b"y\n")
    many = SSEDecoder(max_line=64)  # short data lines of one event add up
    with pytest.raises(InvalidResponse, match="event's data is longer than"):
        many.feed(b"data: 0123456789\n" * 8)


def _feed_time(n: int) -> float:
    best = float("inf")
    for _ in range(3):
        dec = SSEDecoder(max_line=64 * MIB)
        piece = b"x" * (64 << 10)
        t0 = time.perf_counter()
        dec.feed(b"data: ")
        for _ in range(n // len(piece)):
            dec.feed(piece)
        assert dec.feed(b"\n\n")[0].data.__len__() == n
        best = min(best, time.perf_counter() - t0)
    return best


def test_a_long_line_costs_linear_time() -> None:
    """8x the bytes costs about 8x the time (the quadratic concatenation cost 64x)."""
    ratio = _feed_time(32 * MIB) / _feed_time(4 * MIB)
    assert ratio < 24, ratio


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_gzip_stream_with_one_huge_line_is_an_invalid_response(kind: str) -> None:
    with HostileServer(streams=["longline"], size=16 * MIB) as srv:
        rec = await _send(srv.url, kind)
    assert rec.status is ErrorKind.INVALID_RESPONSE, (rec.status, rec.error)
    assert rec.error == f"an SSE line is longer than {MAX_LINE >> 20} MiB (the client's limit)"


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_gzip_error_body_is_read_to_its_cap_only(kind: str) -> None:
    with HostileServer(streams=["error_bomb"], size=64 * MIB) as srv:
        tracemalloc.start()
        try:
            rec = await _send(srv.url, kind)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert rec.status is ErrorKind.HTTP_ERROR and rec.http_status == 500
    assert rec.error == "HTTP 500: bad request: " + "a" * (300 - len("bad request: "))
    assert peak < 16 * MIB, peak  # the body inflates to 64 MiB


async def test_a_model_list_that_inflates_past_the_cap_is_one_line() -> None:
    with HostileServer(models="bomb", size=64 * MIB) as srv:
        tracemalloc.start()
        try:
            with pytest.raises(TargetError, match=f"larger than {MAX_ANSWER >> 20} MiB \\(after decompression\\)"):
                await discover(srv.url, {})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < MAX_ANSWER + 16 * MIB, peak


async def test_a_trickled_model_list_meets_discoverys_deadline() -> None:
    """One byte every 0.3 s never trips the 10 s read timeout; the deadline ends it."""
    with HostileServer(models="trickle", trickle_s=0.3) as srv:
        with pytest.raises(TargetError, match="did not finish answering within 1 s \\(discovery's deadline\\)"):
            await discover(srv.url, {}, deadline_s=1.0)
        assert (await discover(srv.url, {}, deadline_s=120)).model == "hostile"  # a patient deadline: the list


async def test_the_probe_reads_an_error_body_to_its_cap() -> None:
    with HostileServer(streams=["error_bomb"], size=64 * MIB) as srv:
        spec = RequestSpec(index=0, prompt="hi", prompt_tokens=1, max_tokens=1)
        res = await probe_prompt_tokens(srv.url, get_dialect("completions"), DialectOptions(model="hostile"), spec)
    assert res.prompt_tokens is None
    assert res.error == "the non-streamed request answered HTTP 500: bad request: " + "a" * (200 - 13)


def test_the_inflater_limits_the_ratio_and_decodes_in_steps() -> None:
    bomb = gzip_bytes(iter([b"a" * (32 * MIB)]))
    inf = Inflater("gzip")  # no cap: the ratio still stops a bomb
    with pytest.raises(InvalidResponse, match="inflates more than"):
        for i in range(0, len(bomb), 4096):
            assert all(len(p) <= 64 << 10 for p in inf.feed(bomb[i : i + 4096]))
    text = b"".join(Inflater("gzip", cap=MAX_ERROR).feed(gzip_bytes(iter([b"short body"]))))
    assert text == b"short body"
    with pytest.raises(InvalidResponse, match="unsupported Content-Encoding 'br'"):
        Inflater("br")


async def test_a_flood_in_one_read_is_parsed_in_slices_that_let_the_loop_run() -> None:
    """One 32 MiB read of tiny events: a ticker on the same loop gets many turns while it
    is parsed (parsed in one go, it got none), and every event is counted."""
    ev = b'data: {"choices": [{"index": 0, "text": "w", "finish_reason": null}]}\n\n'
    n = (32 * MIB) // len(ev)
    done = b'data: {"choices": [{"index": 0, "text": "w", "finish_reason": "length"}]}\n\ndata: [DONE]\n\n'
    state = StreamState(RequestRecord(index=0), get_dialect("completions"))
    ticks = 0
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            await asyncio.sleep(0)
            ticks += 1

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    state.feed(ev * n + done, 1)
    before = ticks
    await state.drain(0)
    during = ticks - before
    stop = True
    await task
    state.close(2)
    assert len(state.record.events) == n + 1
    assert during >= 20, during


def _one_request(url: str, out: Any) -> subprocess.Popen[bytes]:
    """``loadgen run`` of one request against ``url``, its output piped."""
    argv = ["run", "--url", url, "--api", "completions", "--requests", "1", "--out", str(out), "--quiet"]
    return subprocess.Popen(
        [sys.executable, "-m", "loadgen.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated"), (signal.SIGHUP, 129, "terminated")],
)
def test_a_signal_during_a_trickled_discovery_ends_loadgen_at_once(
    tmp_path: Any, sig: int, code: int, line: str
) -> None:
    """The model list trickles (a byte every 3 s, some 200 s in all); the signal, sent once
    the GET is in, ends loadgen with its one line and exit code (before: only when the
    thread running discovery returned)."""
    with HostileServer(models="trickle", trickle_s=3.0) as srv:
        proc = _one_request(srv.url, tmp_path / "r")
        try:
            for _ in range(600):  # up to 60 s for the interpreter to start and send its GET
                if srv.model_requests or proc.poll() is not None:
                    break
                time.sleep(0.1)
            assert srv.model_requests == 1
            proc.send_signal(sig)
            _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == code, err.decode(errors="replace")[-1000:]
    assert err.decode().strip() == line and not (tmp_path / "r" / "records.jsonl").exists()


def test_a_signal_that_lands_while_the_model_list_streams_in_is_an_interrupt(tmp_path: Any) -> None:
    """A byte every 0.5 ms: the signal often arrives while the client is inside a read
    callback. Python's own handler raised there, and the interrupt came out as the
    connection's error ("cannot reach …: ReadError", exit 2) in about one start in six;
    the loop now takes the signal between callbacks. Eight starts, SIGINT and SIGTERM."""
    rng = random.Random(7)
    seen = []
    for i, (sig, code) in enumerate([(signal.SIGINT, 130), (signal.SIGTERM, 143)] * 4):
        with HostileServer(models="trickle", trickle_s=0.0005, pad=400_000) as srv:
            proc = _one_request(srv.url, tmp_path / f"r{i}")
            try:
                for _ in range(600):
                    if srv.model_requests or proc.poll() is not None:
                        break
                    time.sleep(0.1)
                time.sleep(0.2 + rng.random() * 0.6)  # some hundreds of reads in
                proc.send_signal(sig)
                _out, err = proc.communicate(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        seen.append((proc.returncode, err.decode(errors="replace").strip()[-300:]))
        assert proc.returncode == code, seen


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_flood_of_output_past_what_was_asked_is_an_invalid_response(kind: str) -> None:
    """An endless stream of tiny valid output events for a request of ``max_tokens`` 4:
    cut at output_cap (4 per token asked for, plus 64), not held until a timeout; the
    server had written a small part of its 256 MiB when the client went."""
    with HostileServer(streams=["stream_flood"], size=256 * MIB) as srv:
        rec = await asyncio.wait_for(_send(srv.url, kind), 120)
    cap = output_cap({"max_tokens": 4})
    assert cap == 4 * 4 + 64
    assert rec.status is ErrorKind.INVALID_RESPONSE and "more output than asked for" in (rec.error or ""), (
        rec.status,
        rec.error,
    )
    assert cap < len(rec.events) <= cap + SLICE // 60  # checked per piece of a read: an event is over 60 bytes


def test_the_output_cap_reads_the_body_sent() -> None:
    assert output_cap({"max_tokens": 10}) == 104
    assert output_cap({"max_completion_tokens": 10, "n": 3}) == 4 * 30 + 64
    assert output_cap({"max_output_tokens": 2, "max_tokens": 5}) == 84  # the largest asked for
    assert output_cap({"max_tokens": True}) is None and output_cap({}) is None  # no length asked: no cap
