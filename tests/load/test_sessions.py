"""Multi-turn sessions through the real runner and transport against the reference server
(sim engine, in this process) on loopback: what the server received is checked against
what it streamed back — each turn's prompt starts with the previous turn's prompt and the
answer text, byte for byte — in closed and open loop, for both APIs; think times hold."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.load.runner import LevelPlan, Runner
from loadgen.records import RequestRecord, RequestSpec
from loadgen.server.api import create_app
from loadgen.server.app import start_server
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.sessions import SessionSource
from loadgen.workload.spec import load_workload
from tests.server.helpers import MODEL, make_engine

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def _server(bodies: list[dict[str, Any]]) -> AsyncIterator[str]:
    """The reference server; every request body it receives is appended to ``bodies``."""

    @web.middleware
    async def keep_body(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "POST":
            bodies.append(json.loads(await request.read()))
        return await handler(request)

    app = create_app(make_engine(), model_name=MODEL)
    app.middlewares.append(keep_body)
    runner, url = await start_server(app)
    try:
        yield url
    finally:
        await runner.cleanup()


class _Answers:
    """The real transport; keeps each session turn's spec and record as it finishes."""

    def __init__(self, url: str, api: str) -> None:
        self.inner = make_transport("aiohttp", TransportConfig(url, get_dialect(api), DialectOptions(model=MODEL)))
        self.turns: dict[tuple[int, int], tuple[RequestSpec, RequestRecord]] = {}

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        await self.inner.send(spec, record)
        assert spec.session is not None
        self.turns[(spec.session, spec.turn)] = (spec, record)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _workload(tmp_path: Path, think_ms: int, system: str = "") -> SessionSource:
    path = tmp_path / "s.toml"
    path.write_text(
        'prompt_tokens = "uniform:min=5,max=30"\noutput_tokens = "uniform:min=3,max=9"\n'
        f'[sessions]\nturns = "uniform:min=2,max=4"\nthink_time_ms = {think_ms}\n{system}',
        encoding="utf-8",
    )
    return SessionSource(load_workload(str(path), []), 3, PromptSynthesizer(seed=3))


async def _run(
    tmp_path: Path, api: str, plan: LevelPlan, think_ms: int = 0, system: str = ""
) -> tuple[_Answers, list[dict[str, Any]], list[RequestRecord]]:
    bodies: list[dict[str, Any]] = []
    async with _server(bodies) as url:
        tr = _Answers(url, api)
        try:
            res = await Runner(tr).run_level(plan, _workload(tmp_path, think_ms, system))
        finally:
            await tr.aclose()
    return tr, bodies, res.records


def _check_histories(tr: _Answers, bodies: list[dict[str, Any]], api: str) -> int:
    """Every later turn's body starts with the previous turn's body and its streamed answer."""
    key = "messages" if api == "chat" else "prompt"
    sent = [b[key] for b in bodies]
    checked = 0
    for (session, turn), (spec, rec) in tr.turns.items():
        assert rec.ok, rec.error
        assert spec.prompt in sent or "\n".join(m["content"] for m in spec.prompt) in sent  # type: ignore[union-attr]
        nxt = tr.turns.get((session, turn + 1))
        if nxt is None:  # the session's last turn, or the level's budget ran out (closed loop)
            continue
        answer = "".join(spec.answer or [])
        assert len(answer.split()) == rec.completion_tokens  # the sim's text: one word per token
        prev_body = next(
            b[key]
            for b in bodies
            if b[key] == (spec.prompt if api == "chat" else "\n".join(m["content"] for m in spec.prompt))
        )  # type: ignore[union-attr]
        nxt_prompt = nxt[0].prompt
        nxt_body = nxt_prompt if api == "chat" else "\n".join(m["content"] for m in nxt_prompt)  # type: ignore[union-attr]
        assert nxt_body in sent
        if api == "chat":
            assert nxt_body[: len(prev_body)] == prev_body
            assert nxt_body[len(prev_body)] == {"role": "assistant", "content": answer}
            assert nxt_body[len(prev_body) + 1]["role"] == "user" and len(nxt_body) == len(prev_body) + 2
        else:
            assert nxt_body.startswith(prev_body + "\n" + answer + "\n")
        checked += 1
    return checked


@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_closed_loop_turns_resend_the_history_and_the_real_answer(tmp_path: Path, api: str) -> None:
    plan = LevelPlan(0, "concurrency", 3, requests=18)
    tr, bodies, records = await _run(tmp_path, api, plan, system="system_prompt_tokens = 20\ngroups = 2\n")
    assert len(records) == 18 and all(r.ok for r in records)
    assert _check_histories(tr, bodies, api) >= 6
    if api == "chat":  # the shared system prompt leads every session's history
        assert all(b["messages"][0]["role"] == "system" for b in bodies)
    # a user is a session at a time: its turns in order, its next session after the last turn
    by_user: dict[int, list[RequestRecord]] = {}
    for r in sorted(records, key=lambda r: r.sent_ns):
        by_user.setdefault(r.worker, []).append(r)
    for recs in by_user.values():
        for a, b in itertools.pairwise(recs):
            assert b.sent_ns >= a.done_ns
            assert (b.session, b.turn) == (a.session, a.turn + 1) or (b.turn == 1 and a.turn == a.turns)


async def test_open_loop_sessions_arrive_at_the_rate_and_think_between_turns(tmp_path: Path) -> None:
    plan = LevelPlan(0, "rate", 40.0, requests=6, arrival="constant")
    tr, bodies, records = await _run(tmp_path, "chat", plan, think_ms=30)
    assert len({r.session for r in records}) == 6 and all(r.ok for r in records)
    assert sum(r.turn == 1 for r in records) == 6 and len(records) == sum(r.turns for r in records if r.turn == 1)
    assert _check_histories(tr, bodies, "chat") == len(records) - 6
    firsts = sorted(r.scheduled_ns for r in records if r.turn == 1)
    assert all(abs(b - a - 25_000_000) <= 1 for a, b in itertools.pairwise(firsts))  # 40 sessions/s, constant
    turns = {(r.session, r.turn): r for r in records}
    for (s, t), r in turns.items():
        if t > 1:
            prev = turns[(s, t - 1)]
            assert r.scheduled_ns == prev.done_ns + 30_000_000  # due: the answer's end + the think time
            assert r.sent_ns >= r.scheduled_ns


async def test_a_failed_turn_ends_its_session(tmp_path: Path) -> None:
    # max_tokens beyond the context: the server rejects turn 1 (400), so no turn 2 follows
    path = tmp_path / "s.toml"
    path.write_text("prompt_tokens = 10\noutput_tokens = 5000\n[sessions]\nturns = 3\n", encoding="utf-8")
    source = SessionSource(load_workload(str(path), []), 0, PromptSynthesizer(seed=0))
    bodies: list[dict[str, Any]] = []
    async with _server(bodies) as url:
        tr = _Answers(url, "chat")
        try:
            res = await Runner(tr).run_level(LevelPlan(0, "concurrency", 1, requests=3), source)
        finally:
            await tr.aclose()
    assert [r.turn for r in res.records] == [1, 1, 1]  # each session ends at its failed first turn
    assert all(r.http_status == 400 for r in res.records)


async def test_a_duration_bound_level_starts_no_turn_after_its_end(tmp_path: Path) -> None:
    bodies: list[dict[str, Any]] = []
    async with _server(bodies) as url:
        tr = _Answers(url, "chat")
        try:
            res = await Runner(tr).run_level(
                LevelPlan(0, "concurrency", 2, duration_s=0.5), _workload(tmp_path, think_ms=120)
            )
        finally:
            await tr.aclose()
    end = res.start_ns + 500_000_000
    assert res.records and all(r.ok for r in res.records)
    assert all(r.scheduled_ns < end for r in res.records)
    assert any(r.turn > 1 for r in res.records)  # the think times did run inside the level


@pytest.mark.parametrize("mode", ["rate", "concurrency"])
async def test_duration_cuts_a_think_time_that_would_outlast_the_level(tmp_path: Path, mode: str) -> None:
    # think times of 60 s and a level of 0.5 s: every session sends its first turn only, and the
    # level ends when those answers are in (open loop: it once waited the 60 s out)
    plan = LevelPlan(0, mode, 8.0 if mode == "rate" else 2, duration_s=0.5, arrival="constant")
    t0 = time.perf_counter()
    _, _, records = await _run(tmp_path, "chat", plan, think_ms=60_000)
    took = time.perf_counter() - t0
    assert records and all(r.ok and r.turn == 1 and r.turns > 1 for r in records)  # kept, and cut short
    assert len({r.session for r in records}) == len(records)
    if mode == "rate":
        assert len(records) == 4  # 8 sessions/s for 0.5 s
    assert took < 30  # generous: only a wait for the think time reaches it
