"""Large non-streamed answers (over 1 MiB) are parsed without their arrays of numbers, in
slices: the event loop keeps running meanwhile, and every answer, valid or not, gives the
record (or the failure) that parsing it whole gives."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from loadgen.client import answer, skim
from loadgen.client.answer import AnswerState
from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TRANSPORTS, TransportConfig, make_transport
from loadgen.errors import TransportError
from loadgen.records import RequestRecord, RequestSpec
from tests.scripted_server import Script, ScriptedServer

READ = 64 << 10


def _vector(rng: random.Random, dim: int) -> list[float]:
    return [rng.uniform(-1, 1) for _ in range(dim)]


def _answer(n: int, dim: int, seed: int = 0, **extra: Any) -> bytes:
    rng = random.Random(seed)
    data = [{"object": "embedding", "index": i, "embedding": _vector(rng, dim)} for i in range(n)]
    return json.dumps({"object": "list", "data": data, "usage": {"prompt_tokens": 7}, **extra}).encode()


def _outcome(body: bytes, skimmed: bool, inputs: int) -> tuple[Any, ...]:
    """What the record says after ``body``, parsed whole (``skimmed`` False) or skimmed."""
    rec = RequestRecord(index=0, inputs=inputs)
    state = AnswerState(rec, get_dialect("embeddings"))
    for i in range(0, len(body), READ):
        state.feed(body[i : i + READ], 1 + i)
    try:
        if skimmed:
            asyncio.run(state.end(10**9))
        else:
            state.close(10**9)
    except TransportError as exc:
        return (type(exc).__name__, str(exc))
    return (rec.prompt_tokens, rec.token_source, rec.server, rec.done_ns)


@pytest.fixture
def skim_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every answer is skimmed, in slices of 4 KiB (many slice boundaries in a small answer)."""
    monkeypatch.setattr(answer, "LARGE", 0)
    monkeypatch.setattr(skim, "SLICE", 4096)


CASES = {
    "valid": _answer(6, 300),
    "vendor and error-free extras": _answer(6, 300, loadgen={"queue_s": 0.1, "v": [1, 2]}, model="m"),
    "an array of numbers in a string": _answer(6, 300, note="[" + ", ".join(["1.5"] * 200) + "]"),
    "an error object": _answer(6, 300, error={"message": "overloaded " + "[1, 2]" * 60}),
    "too many results": _answer(7, 300),
    "usage not a count": _answer(6, 300).replace(b'"prompt_tokens": 7', b'"prompt_tokens": -7'),
    "a number too large": _answer(6, 300).replace(b", ", b", 1e400, ", 1),
    "a leading zero": _answer(6, 300).replace(b", ", b", 01, ", 1),
    "two commas": _answer(6, 300).replace(b", ", b",, ", 1),
    "NaN": _answer(6, 300).replace(b", ", b", NaN, ", 1),
    "a bare minus": _answer(6, 300).replace(b", ", b", -, ", 1),
    "cut short": _answer(6, 300)[:-100],
    "not an object": b"[" + _answer(6, 300) + b"]",
    "a trailing comma in a vector": _answer(6, 300).replace(b"]", b", ]", 1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_skimmed_answer_gives_what_the_whole_parse_gives(case: str, skim_all: None) -> None:
    body = CASES[case]
    assert len(body) > 8 * 4096  # many slices
    assert _outcome(body, True, 6) == _outcome(body, False, 6)


def test_random_damage_gives_the_same_verdict(skim_all: None) -> None:
    """A valid answer with a few bytes changed (JSON's own characters, digits, blanks), at
    random places: skimmed or parsed whole, the same record or the same failure."""
    rng = random.Random(5)
    base = bytearray(_answer(3, 120, seed=1))
    alphabet = b'[]{},:"-+.eE0123456789 \\xN'
    kinds: set[str] = set()
    for _ in range(300):
        body = bytearray(base)
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(body))
            op = rng.randrange(3)
            if op == 0:
                body[at] = rng.choice(alphabet)
            elif op == 1:
                body.insert(at, rng.choice(alphabet))
            else:
                del body[at]
        whole = _outcome(bytes(body), False, 3)
        assert _outcome(bytes(body), True, 3) == whole, bytes(body)
        kinds.add(str(whole[0]))
    assert {"7", "InvalidResponse"} <= kinds  # both kinds were met


def test_the_loop_runs_while_a_large_answer_is_parsed() -> None:
    """A ticker task advances while a 4 MB answer is being parsed; before, the parse held
    the loop from start to end (the ticker could not run in between)."""
    body = _answer(200, 1000)
    assert len(body) > 3 * skim.LARGE
    ticks = 0
    rec = RequestRecord(index=0, inputs=200)

    async def main() -> int:
        nonlocal ticks
        state = AnswerState(rec, get_dialect("embeddings"))
        for i in range(0, len(body), READ):
            state.feed(body[i : i + READ], 1 + i)
        done = False

        async def ticker() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        await state.end(10**9)
        during = ticks - before
        done = True
        await tick
        return during

    during = asyncio.run(main())
    assert during >= len(body) // skim.SLICE // 2, during
    assert rec.prompt_tokens == 7 and rec.ok


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_large_answers_from_a_server_are_read_as_before(transport: str) -> None:
    """Over the loopback: a 2.5 MiB answer per request (3 at once) is ok with the usage it
    holds; one with an invalid number deep in a vector is invalid_response, as before."""
    dims = 180_000  # "0.5, " per number: about 2.5 MiB for 3 inputs
    flaw = {"flaw": [", ", ", 01, "], "flaw_at": 250_000}  # an invalid number deep in the second vector

    async def main() -> list[RequestRecord]:
        async with ScriptedServer(Script(ttft_s=0.0, dimensions=dims)) as srv:
            spec = RequestSpec(index=0, prompt=" ".join(["w"] * 30), prompt_tokens=30, max_tokens=1)
            recs = [RequestRecord(index=i) for i in range(4)]
            for script, some in ((None, recs[:3]), (flaw, recs[3:])):
                options = DialectOptions(model="m", inputs=(3,), extra_body=script and {"script": script})
                t = make_transport(transport, TransportConfig(srv.url, get_dialect("embeddings"), options))
                await asyncio.gather(*(t.send(spec, r) for r in some))
                await t.aclose()
            return recs

    recs = asyncio.run(main())
    assert [r.status.value for r in recs] == ["ok"] * 3 + ["invalid_response"], [r.error for r in recs]
    assert [r.prompt_tokens for r in recs[:3]] == [30] * 3 and all(r.inputs == 3 for r in recs)
    assert (recs[3].error or "").startswith("malformed JSON answer ("), recs[3].error
