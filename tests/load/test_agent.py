"""Agentic tasks through the real runner and transport against the scripted server on
loopback: each step resends the context with the answer and tool calls as streamed (ids,
names, argument text) and loadgen's tool results, byte for byte; fan-out branches join;
a failed step ends its task; closed and open loop; the tasks never depend on workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.load.runner import LevelPlan, Runner
from loadgen.records import RequestRecord, RequestSpec
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.spec import load_workload
from loadgen.workload.tasks import AgentSource
from tests.scripted_server import Script, ScriptedServer

AGENT = """\
prompt_tokens = "uniform:min=4,max=12"
output_tokens = "uniform:min=2,max=5"
[agent]
steps = "uniform:min=3,max=5"
tool_latency_ms = 2
tool_output_tokens = "uniform:min=5,max=20"
fan_out = "uniform:min=2,max=3"
fan_out_probability = 0.5
system_prompt_tokens = 30
tools_tokens = 40
tools_count = 3
groups = 2
"""


class _Failing(ScriptedServer):
    """Answers 500 to a chat request whose history holds more than ``limit`` messages."""

    limit = 1 << 30

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if len(body.get("messages", [])) > self.limit:
            self.requests.append(body)
            return web.json_response({"error": {"message": "too long"}}, status=500)
        return await super()._handle(request)


class _Keep:
    """The real transport; keeps each call's spec and record as it finishes."""

    def __init__(self, url: str, api: str) -> None:
        self.inner = make_transport("aiohttp", TransportConfig(url, get_dialect(api), DialectOptions(model="m")))
        self.calls: dict[tuple[int, int, int], tuple[RequestSpec, RequestRecord]] = {}

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        await self.inner.send(spec, record)
        assert spec.task is not None
        self.calls[(spec.task, spec.step, spec.branch)] = (spec, record)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _source(tmp_path: Path, text: str = AGENT) -> AgentSource:
    path = tmp_path / "agent.toml"
    path.write_text(text, encoding="utf-8")
    return AgentSource(load_workload(str(path), []), 5, PromptSynthesizer(seed=5))


async def _run(
    tmp_path: Path, plan: LevelPlan, api: str = "chat", tool_calls: bool = True, fail_over: int | None = None
) -> tuple[_Keep, ScriptedServer, list[RequestRecord], AgentSource]:
    source = _source(tmp_path)
    server = _Failing(Script(ttft_s=0.001, itl_s=0.0005, tool_calls=tool_calls))
    if fail_over is not None:
        server.limit = fail_over
    async with server as srv:
        tr = _Keep(srv.url, api)
        try:
            res = await Runner(tr).run_level(plan, source)
        finally:
            await tr.aclose()
    return tr, server, res.records, source


def _check_chat_histories(tr: _Keep, source: AgentSource, tool_calls: bool, closed: bool) -> int:
    """Step s+1's messages are step s's context, then per branch its own message, its
    assistant turn (the streamed text and tool call) and the tool's result."""
    checked = 0
    for (task, step, branch), (spec, rec) in tr.calls.items():
        assert rec.ok, rec.error
        nxt = tr.calls.get((task, step + 1, 0))
        if branch or nxt is None:
            continue
        plan = source.task(0, task) if not closed else None
        width = 1
        while (task, step, width) in tr.calls:
            width += 1
        prompt = spec.prompt
        assert isinstance(prompt, list)
        base = prompt[:-1] if (step == 1 or width > 1) else prompt  # the step's context before its own message
        want: list[Any] = list(base)
        for k in range(width):
            s_k, r_k = tr.calls[(task, step, k)]
            own = s_k.prompt[len(base) :]
            assert len(own) == (1 if step == 1 or width > 1 else 0)
            text = "".join(s_k.answer or [])
            if tool_calls:
                args = " tok" * (r_k.completion_tokens or 0)  # the streamed argument deltas, joined
                call: dict[str, Any] = {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": args},
                }
                content = None
            else:
                assert text == " tok" * (r_k.completion_tokens or 0)  # the streamed answer, as it came
                content = text
                tool = tr.calls[(task, step, k)][0].tools
                assert tool is not None
                names = [t["function"]["name"] for t in tool]
                got: Any = nxt[0].prompt[len(want) + len(own)]
                name = got["tool_calls"][0]["function"]["name"]
                assert name in names  # the plan's tool, one of its group's
                call = {
                    "id": f"call_{task}_{step}_{k}",
                    "type": "function",
                    "function": {"name": name, "arguments": "{}"},
                }
            want += own
            want.append({"role": "assistant", "content": content, "tool_calls": [call]})
            result = nxt[0].prompt[len(want)]
            if plan is not None:  # the tool's result is the plan's, its id the call's
                b = plan.steps[step - 1][k]
                assert result == {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": source.tool_output(b.output_tokens, b.output_key),
                }
                assert r_k.tool_ms == b.tool_s * 1e3 == 2.0
            want.append(result)
            assert nxt[1].sent_ns >= r_k.done_ns + int(r_k.tool_ms * 1e6)  # the next step waited for the tool
        assert nxt[0].prompt[: len(want)] == want
        checked += 1
    return checked


async def test_open_loop_tasks_resend_real_tool_calls_and_results(tmp_path: Path) -> None:
    tr, srv, records, source = await _run(tmp_path, LevelPlan(0, "rate", 200.0, requests=6, arrival="constant"))
    assert len({r.task for r in records}) == 6 and all(r.ok for r in records)
    plans = [source.task(0, p) for p in range(6)]
    assert len(records) == sum(len(b) for p in plans for b in p.steps)  # every call of every task
    assert any(len(b) > 1 for p in plans for b in p.steps)  # some step fanned out
    for r in records:
        p = plans[r.task]  # type: ignore[index]
        assert r.steps == len(p.steps) and r.branch < len(p.steps[r.step - 1])
        assert (r.tool_ms == 0) == (r.step == r.steps)  # the last step runs no tool
    assert _check_chat_histories(tr, source, True, closed=False) >= 12
    # the bodies the server got are the specs' messages, with the group's tools
    sent = {str(b["messages"]) for b in srv.requests}
    assert all(str(s.prompt) in sent for s, _ in tr.calls.values())
    assert all(len(b["tools"]) == 3 for b in srv.requests)


async def test_plain_text_answers_get_synthetic_calls_of_the_plan(tmp_path: Path) -> None:
    tr, _, records, source = await _run(
        tmp_path, LevelPlan(0, "rate", 200.0, requests=4, arrival="constant"), tool_calls=False
    )
    assert all(r.ok for r in records)
    assert _check_chat_histories(tr, source, False, closed=False) >= 8


async def test_closed_loop_users_run_one_task_at_a_time(tmp_path: Path) -> None:
    tr, _, records, source = await _run(tmp_path, LevelPlan(0, "concurrency", 2, requests=30))
    assert len(records) == 30 and all(r.ok for r in records)
    assert _check_chat_histories(tr, source, True, closed=True) >= 6
    by_user: dict[int, list[RequestRecord]] = {}
    for r in records:
        by_user.setdefault(r.worker, []).append(r)
    for recs in by_user.values():  # a user's tasks in order: a task's calls all before the next's
        order = sorted(recs, key=lambda r: r.sent_ns)
        tasks = [r.task or 0 for r in order]
        assert tasks == sorted(tasks)
        for a in order:
            later = [b for b in order if b.task == a.task and b.step > a.step]
            assert all(b.sent_ns >= a.done_ns for b in later)


async def test_a_failed_step_ends_its_task(tmp_path: Path) -> None:
    # a history of more than 3 messages is refused (system, task message, 2 per call): step 2 fails
    _, _, records, _ = await _run(tmp_path, LevelPlan(0, "rate", 200.0, requests=5, arrival="constant"), fail_over=3)
    for t in range(5):
        recs = [r for r in records if r.task == t]
        failed = [r for r in recs if not r.ok]
        assert failed and all(r.http_status == 500 and r.error for r in failed)
        first = min(r.step for r in failed)
        assert max(r.step for r in recs) == first < recs[0].steps  # no later step was sent: it ended early
        assert not any(r.step == r.steps for r in recs)


async def test_responses_and_messages_render_the_tool_history(tmp_path: Path) -> None:
    for api in ("responses", "messages"):
        _, srv, records, _ = await _run(tmp_path, LevelPlan(0, "rate", 200.0, requests=2, arrival="constant"), api)
        assert all(r.ok for r in records), api
        if api == "responses":
            items = [i for b in srv.requests if isinstance(b["input"], list) for i in b["input"]]
            calls = [i for i in items if i.get("type") == "function_call"]
            outs = [i for i in items if i.get("type") == "function_call_output"]
            assert calls and all(c["call_id"] == "call_r0" and c["name"] == "lookup" for c in calls)
            assert all(c["arguments"].startswith(" tok") for c in calls)
            assert {o["call_id"] for o in outs} == {"call_r0"}
        else:
            msgs = [m for b in srv.requests for m in b["messages"]]
            uses = [x for m in msgs if isinstance(m["content"], list) for x in m["content"] if x["type"] == "tool_use"]
            results = [
                x for m in msgs if isinstance(m["content"], list) for x in m["content"] if x["type"] == "tool_result"
            ]
            assert uses and all(u["id"] == "toolu_0" and u["input"]["arguments"].startswith(" tok") for u in uses)
            assert results and all(r["tool_use_id"] == "toolu_0" for r in results)
            assert all("system" in b for b in srv.requests)


def test_tasks_depend_on_seed_level_and_position_only(tmp_path: Path) -> None:
    a, b = _source(tmp_path), _source(tmp_path)
    assert [a.task(0, p) for p in (0, 3)] == [b.task(0, p) for p in (0, 3)]
    assert a.task(0, 1) != a.task(1, 1)
    ua, ub = a.user_tasks(0, 1), b.user_tasks(0, 1)
    assert [next(ua) for _ in range(3)] == [next(ub) for _ in range(3)]


async def test_two_workers_send_the_tasks_one_worker_sends(tmp_path: Path) -> None:
    one = await _run(tmp_path, LevelPlan(0, "rate", 200.0, requests=6, arrival="constant"))
    two: list[RequestRecord] = []
    for w in range(2):
        plan = LevelPlan(0, "rate", 200.0, requests=6, arrival="constant", worker=w, n_workers=2)
        two += (await _run(tmp_path, plan))[2]

    def key(recs: list[RequestRecord]) -> list[tuple[Any, ...]]:
        return sorted((r.index, r.task, r.step, r.branch, r.steps, r.tool_ms, r.target_prompt_tokens) for r in recs)

    assert key(one[2]) == key(two)
