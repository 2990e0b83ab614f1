"""Agentic tasks through the real runner in virtual time (tests/virtual_time.py).

A scripted transport answers each call after a service time chosen per call (task, step,
branch), streams tool calls with known ids, names and argument text through the real
dialect's collector, and keeps the body the real dialect builds for each call. The
virtual clock stands in for the runner's ``perf_counter_ns``, so every time below is
exact: the graph's shape, a fan-out's concurrent sends, the join after the slowest
branch's tool, the history each call resends, a task's accounting when a call fails or
the budget cuts it, and the closed and open loops.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import loadgen.load.agent as agent_module
import loadgen.load.conversations as conversations_module
import loadgen.load.runner as runner_module
from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.load.plan import level_schedule
from loadgen.load.runner import LevelPlan, LevelResult, Runner
from loadgen.metrics.results import Tasks
from loadgen.metrics.summary import summarize_level
from loadgen.records import ErrorKind, RequestRecord, RequestSpec, TaskBranch, TaskPlan
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.spec import load_workload
from loadgen.workload.tasks import AgentSource
from tests.virtual_time import VirtualClock, run_virtual

MS = 1_000_000  # ns per ms
LEAD_NS = 5 * MS  # an open loop's first arrival, after the level's start
Key = tuple[int, int, int]  # (task, step, branch)


@dataclass
class Answer:
    """One call's scripted answer: its service time, streamed text and tool calls
    (``(id, name, arguments)`` each), or a failure half-way through."""

    ms: int = 100
    text: str = ""
    calls: tuple[tuple[str, str, str], ...] = ()
    fail: bool = False


def _events(api: str, calls: tuple[tuple[str, str, str], ...]) -> list[dict[str, Any]]:
    """The stream objects of ``calls`` in ``api``'s format, the arguments in two deltas."""
    out: list[dict[str, Any]] = []
    for j, (i, name, args) in enumerate(calls):
        head, tail = args[:3], args[3:]
        if api == "chat":
            fn = {"index": j, "id": i, "type": "function", "function": {"name": name, "arguments": head}}
            out.append({"choices": [{"index": 0, "delta": {"tool_calls": [fn]}}]})
            out.append(
                {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": j, "function": {"arguments": tail}}]}}]}
            )
        elif api == "responses":
            item = {"type": "function_call", "call_id": i, "name": name, "arguments": ""}
            out.append({"type": "response.output_item.added", "output_index": j, "item": item})
            for part in (head, tail):
                out.append({"type": "response.function_call_arguments.delta", "output_index": j, "delta": part})
        else:
            block = {"type": "tool_use", "id": i, "name": name, "input": {}}
            out.append({"type": "content_block_start", "index": j, "content_block": block})
            for part in (head, tail):
                delta = {"type": "input_json_delta", "partial_json": part}
                out.append({"type": "content_block_delta", "index": j, "delta": delta})
    return out


class ScriptedTransport:
    """Answers every call as :func:`script` says, in virtual time; keeps each call's body
    (as the real dialect builds it), spec and record, and the order of sends."""

    def __init__(self, clock: VirtualClock, api: str = "chat", script: dict[Key, Answer] | None = None) -> None:
        self.clock, self.api, self.script = clock, api, script or {}
        self.dialect = get_dialect(api)
        self.options = DialectOptions(model="m")
        self.bodies: dict[Key, bytes] = {}
        self.calls: dict[Key, tuple[RequestSpec, RequestRecord]] = {}
        self.order: list[Key] = []

    def answer(self, key: Key) -> Answer:
        got = self.script.get(key)
        if got is not None:
            return got
        task, step, branch = key
        return Answer(calls=((f"id_{task}_{step}_{branch}", "search", json.dumps({"q": f"{task}.{step}.{branch}"})),))

    async def _until(self, t_ns: int) -> None:
        await asyncio.sleep(max(t_ns - self.clock.ns(), 0) / 1e9)  # virtual time: wakes at t_ns exactly

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        assert spec.task is not None and spec.answer is not None and spec.calls is not None
        key = (spec.task, spec.step, spec.branch)
        assert key not in self.calls, f"{key} sent twice"
        self.bodies[key] = json.dumps(self.dialect.build_body(spec, self.options)).encode()
        self.calls[key] = (spec, record)
        self.order.append(key)
        a = self.answer(key)
        record.sent_ns = t0 = self.clock.ns()
        try:
            await self._until(t0 + a.ms * MS // 2)
            if a.fail:
                record.fail(ErrorKind.HTTP_ERROR, "scripted failure", self.clock.ns(), 500)
                return
            if a.text:
                spec.answer.append(a.text)
            for obj in _events(self.api, a.calls):
                self.dialect.collect_calls(obj, spec.calls)
            record.events.append([self.clock.ns(), 2])
            await self._until(t0 + a.ms * MS)
            record.events.append([self.clock.ns(), 1])
            record.completion_tokens = 3
            record.done_ns = self.clock.ns()
        except asyncio.CancelledError:
            record.fail(ErrorKind.CANCELLED, "cancelled", self.clock.ns())
            raise

    async def aclose(self) -> None:
        return None


class Plans:
    """A task source of hand-built plans: per closed-loop user, and per open-loop arrival."""

    def __init__(self, users: dict[int, list[TaskPlan]] | None = None, arrivals: list[TaskPlan] | None = None) -> None:
        self.users, self.arrivals = users or {}, arrivals or []

    def user_tasks(self, level: int, user: int) -> Iterator[TaskPlan]:
        return iter(self.users.get(user, []))

    def task(self, level: int, position: int) -> TaskPlan:
        return self.arrivals[position]

    def tool_output(self, tokens: int, key: int) -> str:
        return f"result {key}:" + " x" * tokens


def plan(task: int, tool_ms: list[list[int]], system: str | None = "sys") -> TaskPlan:
    """A task of ``len(tool_ms)`` steps, step ``s`` of ``len(tool_ms[s])`` branches whose
    tools take those ms (the last step runs none); a fan-out's branch ``k`` says ``sub k``."""
    steps: list[list[TaskBranch]] = []
    index = task * 100
    for s, row in enumerate(tool_ms):
        branches = []
        for k, ms in enumerate(row):
            prompt = "the task" if s == 0 else f"sub {k}" if len(row) > 1 else ""
            spec = RequestSpec(index=index, prompt=prompt, prompt_tokens=5, max_tokens=3)
            last = s == len(tool_ms) - 1
            branches.append(TaskBranch(spec, "search", 0.0 if last else ms / 1e3, 0 if last else 4, index))
            index += 1
        steps.append(branches)
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    return TaskPlan(task=task, steps=steps, system=system, tools=tools, context_tokens=7)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    clock = VirtualClock()
    monkeypatch.setattr(runner_module, "_now", clock.ns)
    monkeypatch.setattr(agent_module, "_now", clock.ns)
    monkeypatch.setattr(conversations_module, "_now", clock.ns)
    return clock


def run(clock: VirtualClock, transport: ScriptedTransport, lp: LevelPlan, source: Any) -> LevelResult:
    got: list[RequestRecord] = []
    res = run_virtual(Runner(transport, on_record=got.append).run_level(lp, source), clock)
    assert got == res.records  # every finished call was handed on
    return res


def tasks_of(records: list[RequestRecord]) -> Tasks:
    t = summarize_level(records, load={"mode": "concurrency", "value": 1}).tasks
    assert t is not None
    return t


def sent(tr: ScriptedTransport, key: Key) -> int:
    return tr.calls[key][1].sent_ns


def done(tr: ScriptedTransport, key: Key) -> int:
    return tr.calls[key][1].done_ns


def messages(tr: ScriptedTransport, key: Key) -> Any:
    return json.loads(tr.bodies[key])


# a task of 3 steps, the second fanning out into 3 branches: tools of 20; 50, 10, 70 ms
FAN = [[20], [50, 10, 70], [0]]
FAN_SCRIPT = {  # step 1 thinks aloud and calls; branch 0 calls twice; branch 2 answers in text
    (0, 1, 0): Answer(100, "thinking", (("srv_a", "search", '{"q": "alpha"}'),)),
    (0, 2, 0): Answer(100, "", (("srv_b", "search", '{"q": "b"}'), ("srv_c", "fetch", '{"url": "u"}'))),
    (0, 2, 1): Answer(300, "", (("srv_d", "search", '{"q": "d"}'),)),
    (0, 2, 2): Answer(200, "plain answer"),
    (0, 3, 0): Answer(100, "the end"),
}


def test_fan_out_branches_go_together_and_the_next_step_waits_for_the_slowest_tool(clock: VirtualClock) -> None:
    tr = ScriptedTransport(clock, script=FAN_SCRIPT)
    res = run(clock, tr, LevelPlan(0, "rate", 1.0, requests=1, arrival="constant"), Plans(arrivals=[plan(0, FAN)]))
    assert tr.order == [(0, 1, 0), (0, 2, 0), (0, 2, 1), (0, 2, 2), (0, 3, 0)]
    assert [(r.step, r.branch, r.steps, r.tool_ms) for r in sorted(res.records, key=lambda r: r.index)] == [
        (1, 0, 3, 20.0),
        (2, 0, 3, 50.0),
        (2, 1, 3, 10.0),
        (2, 2, 3, 70.0),
        (3, 0, 3, 0.0),
    ]
    t0 = res.start_ns + LEAD_NS
    assert sent(tr, (0, 1, 0)) == t0 and done(tr, (0, 1, 0)) == t0 + 100 * MS
    step2 = t0 + 100 * MS + 20 * MS  # after step 1's tool, all three branches at once
    assert [sent(tr, (0, 2, k)) for k in range(3)] == [step2] * 3
    assert [done(tr, (0, 2, k)) - step2 for k in range(3)] == [100 * MS, 300 * MS, 200 * MS]
    # the join: the latest of (done + tool) over the branches: 100+50, 300+10, 200+70 ms
    assert sent(tr, (0, 3, 0)) == step2 + max(150, 310, 270) * MS
    assert [tr.calls[(0, s, 0)][1].scheduled_ns for s in (1, 2, 3)] == [t0, step2, step2 + 310 * MS]
    t = tasks_of(res.records)
    assert (t.tasks, t.completed, t.failed, t.incomplete) == (1, 1, 0, 0)
    assert t.completion_ms.max == (step2 + 310 * MS + 100 * MS - t0) / MS == 530.0


def test_each_call_resends_the_history_byte_for_byte_with_the_streamed_calls_and_the_plans_results(
    clock: VirtualClock,
) -> None:
    tr = ScriptedTransport(clock, script=FAN_SCRIPT)
    source = Plans(arrivals=[plan(0, FAN)])
    run(clock, tr, LevelPlan(0, "rate", 1.0, requests=1, arrival="constant"), source)
    out = [[source.tool_output(4, j) for j in range(k, k + n)] for k, n in ((0, 1), (1, 3))]
    system = {"role": "system", "content": "sys"}
    step1 = [system, {"role": "user", "content": "the task"}]
    ctx2 = [
        *step1,
        {
            "role": "assistant",
            "content": "thinking",
            "tool_calls": [
                {"id": "srv_a", "type": "function", "function": {"name": "search", "arguments": '{"q": "alpha"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "srv_a", "content": out[0][0]},
    ]

    def fn(i: str, name: str, args: str) -> dict[str, Any]:
        return {"id": i, "type": "function", "function": {"name": name, "arguments": args}}

    turns = [  # per branch of step 2: its message, its answer as streamed, the tools' results
        [
            {"role": "user", "content": "sub 0"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [fn("srv_b", "search", '{"q": "b"}'), fn("srv_c", "fetch", '{"url": "u"}')],
            },
            {"role": "tool", "tool_call_id": "srv_b", "content": out[1][0]},
            {"role": "tool", "tool_call_id": "srv_c", "content": ""},  # a second call of one answer: empty
        ],
        [
            {"role": "user", "content": "sub 1"},
            {"role": "assistant", "content": None, "tool_calls": [fn("srv_d", "search", '{"q": "d"}')]},
            {"role": "tool", "tool_call_id": "srv_d", "content": out[1][1]},
        ],
        [  # a plain-text answer: a synthetic call of the plan's tool
            {"role": "user", "content": "sub 2"},
            {"role": "assistant", "content": "plain answer", "tool_calls": [fn("call_0_2_2", "search", "{}")]},
            {"role": "tool", "tool_call_id": "call_0_2_2", "content": out[1][2]},
        ],
    ]
    want = {(0, 1, 0): step1, **{(0, 2, k): [*ctx2, turns[k][0]] for k in range(3)}}
    want[(0, 3, 0)] = ctx2 + turns[0] + turns[1] + turns[2]
    for key, history in want.items():
        body = messages(tr, key)
        assert json.dumps(body["messages"]) == json.dumps(history), key  # the same bytes, keys in order
        assert body["tools"] == source.arrivals[0].tools and body["max_tokens"] == 3


def test_responses_and_messages_render_the_same_history_in_their_shapes(clock: VirtualClock) -> None:
    source = Plans(arrivals=[plan(0, FAN)])
    out = [source.tool_output(4, j) for j in range(4)]
    lp = LevelPlan(0, "rate", 1.0, requests=1, arrival="constant")
    tr = ScriptedTransport(clock, "responses", FAN_SCRIPT)
    run(clock, tr, lp, source)
    head = [{"role": "system", "content": "sys"}, {"role": "user", "content": "the task"}]
    call_a = [
        {"role": "assistant", "content": "thinking"},
        {"type": "function_call", "call_id": "srv_a", "name": "search", "arguments": '{"q": "alpha"}'},
        {"type": "function_call_output", "call_id": "srv_a", "output": out[0]},
    ]
    assert messages(tr, (0, 2, 1))["input"] == [*head, *call_a, {"role": "user", "content": "sub 1"}]
    last = messages(tr, (0, 3, 0))["input"]
    assert last[: len(head) + 3] == head + call_a
    calls = [(i["call_id"], i["name"], i["arguments"]) for i in last if i.get("type") == "function_call"]
    assert calls == [
        ("srv_a", "search", '{"q": "alpha"}'),
        ("srv_b", "search", '{"q": "b"}'),
        ("srv_c", "fetch", '{"url": "u"}'),
        ("srv_d", "search", '{"q": "d"}'),
        ("call_0_2_2", "search", "{}"),
    ]
    outputs = [(i["call_id"], i["output"]) for i in last if i.get("type") == "function_call_output"]
    assert outputs == [("srv_a", out[0]), ("srv_b", out[1]), ("srv_c", ""), ("srv_d", out[2]), ("call_0_2_2", out[3])]

    tr = ScriptedTransport(clock, "messages", FAN_SCRIPT)  # a second level on the same clock
    run(clock, tr, lp, source)
    body = messages(tr, (0, 2, 1))
    assert body["system"] == "sys"
    assert body["messages"] == [
        {"role": "user", "content": "the task"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "thinking"},
                {"type": "tool_use", "id": "srv_a", "name": "search", "input": {"q": "alpha"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "srv_a", "content": out[0]}]},
        {"role": "user", "content": "sub 1"},
    ]
    last = messages(tr, (0, 3, 0))["messages"]
    results = [b for m in last if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_result"]
    assert [(b["tool_use_id"], b["content"]) for b in results] == [
        ("srv_a", out[0]),
        ("srv_b", out[1]),
        ("srv_c", ""),
        ("srv_d", out[2]),
        ("call_0_2_2", out[3]),
    ]


def test_a_failed_call_ends_its_task_its_siblings_finish_and_the_task_counts_failed(clock: VirtualClock) -> None:
    # task 0: step 2's branch 1 fails half-way (50 ms in) while branches 0 and 2 run on; task 1 runs clean
    script = {(0, 2, 0): Answer(300), (0, 2, 1): Answer(100, fail=True), (0, 2, 2): Answer(200)}
    tr = ScriptedTransport(clock, script=script)
    source = Plans(arrivals=[plan(0, FAN), plan(1, FAN)])
    res = run(clock, tr, LevelPlan(0, "rate", 1.0, requests=2, arrival="constant"), source)
    assert sorted(k for k in tr.calls if k[0] == 0) == [(0, 1, 0), (0, 2, 0), (0, 2, 1), (0, 2, 2)]  # no step 3
    assert sorted(k for k in tr.calls if k[0] == 1) == [(1, 1, 0), (1, 2, 0), (1, 2, 1), (1, 2, 2), (1, 3, 0)]
    step2 = sent(tr, (0, 2, 0))
    bad = tr.calls[(0, 2, 1)][1]
    assert (bad.status, bad.http_status, bad.done_ns - step2) == (ErrorKind.HTTP_ERROR, 500, 50 * MS)
    for k, ms in ((0, 300), (2, 200)):  # the siblings in flight finished: ok, not cancelled
        rec = tr.calls[(0, 2, k)][1]
        assert rec.ok and rec.done_ns - step2 == ms * MS
    assert res.end_ns >= done(tr, (0, 2, 0)) + 50 * MS  # ... and ran their tools before the level ended
    t = tasks_of(res.records)
    assert (t.tasks, t.completed, t.failed, t.incomplete) == (2, 1, 1, 0)
    assert t.failed_by_error == {"http_error": 1}


def test_a_failed_first_step_sends_nothing_more_and_a_closed_user_moves_on(clock: VirtualClock) -> None:
    tr = ScriptedTransport(clock, script={(0, 1, 0): Answer(100, fail=True)})
    source = Plans(users={0: [plan(0, FAN), plan(1, [[30], [0]])]})
    res = run(clock, tr, LevelPlan(0, "concurrency", 1, requests=100), source)
    assert tr.order == [(0, 1, 0), (1, 1, 0), (1, 2, 0)]
    assert sent(tr, (1, 1, 0)) == done(tr, (0, 1, 0))  # the user's next task, at once
    assert sent(tr, (1, 2, 0)) == done(tr, (1, 1, 0)) + 30 * MS
    t = tasks_of(res.records)
    assert (t.tasks, t.completed, t.failed, t.incomplete) == (2, 1, 1, 0)


@pytest.mark.parametrize(("budget", "cut"), [(12, [(1, 0)]), (14, [(1, 0), (2, 0)])])
def test_closed_loop_users_run_one_task_at_a_time_and_send_exactly_the_budget(
    clock: VirtualClock, budget: int, cut: list[tuple[int, int]]
) -> None:
    # 2 users, tasks of 5 calls: each user's share (6 or 7) ends mid-task: the 2nd task's step 1
    # (and, with 7, one branch of its fan-out: the budget allows no more)
    users = {u: [plan(10 * u + k, FAN) for k in range(3)] for u in range(2)}
    tr = ScriptedTransport(clock)
    res = run(clock, tr, LevelPlan(0, "concurrency", 2, requests=budget), Plans(users=users))
    assert len(res.records) == len(tr.calls) == budget
    for u in range(2):
        first, second = 10 * u, 10 * u + 1
        full = [(first, s, b) for s, row in enumerate(FAN, 1) for b in range(len(row))]
        assert sorted(k for k in tr.calls if k[0] == first) == full
        assert sorted(k for k in tr.calls if k[0] == second) == [(second, s, b) for s, b in cut]
        assert not any(k[0] == 10 * u + 2 for k in tr.calls)
        # one task at a time: the next starts when the last step's answer ends (it runs no tool)
        assert sent(tr, (second, 1, 0)) == done(tr, (first, 3, 0))
        assert all(r.worker == u for r in res.records if r.task in (first, second))
    t = tasks_of(res.records)
    assert (t.tasks, t.completed, t.failed, t.incomplete) == (4, 2, 0, 2)  # a budget-cut task is incomplete


def test_open_loop_tasks_start_at_their_arrivals_exactly(clock: VirtualClock) -> None:
    lp = LevelPlan(0, "rate", 4.0, requests=5, arrival="poisson", seed=3)
    tr = ScriptedTransport(clock)
    source = Plans(arrivals=[plan(p, [[10], [20, 30], [0]]) for p in range(5)])
    res = run(clock, tr, lp, source)
    base = res.start_ns + LEAD_NS
    due = [base + round(o * 1e9) for o in level_schedule(lp)]
    assert len(set(due)) == 5
    assert [sent(tr, (p, 1, 0)) for p in range(5)] == due
    assert [tr.calls[(p, 1, 0)][1].scheduled_ns for p in range(5)] == due
    for p in range(5):  # 100 ms a call: step 2 at +110 ms, step 3 at +110 + 100 + max(20, 30) ms
        assert [sent(tr, (p, 2, k)) - due[p] for k in range(2)] == [110 * MS] * 2
        assert sent(tr, (p, 3, 0)) - due[p] == 240 * MS
    assert len(res.records) == 20 and res.scheduled == 5
    assert tasks_of(res.records).completed == 5


LONG = 60_000  # ms: a tool that outlasts the level (once, a level of --duration 5 ran 60 s)


def test_duration_cuts_a_tool_that_would_outlast_the_level_in_open_loop(clock: VirtualClock) -> None:
    # task 0: step 1's tool runs 60 s; task 1 fans out at step 2: branch 0's tool runs 60 s,
    # branch 1's 10 ms, and branch 2's call is still streaming at the level's end
    tr = ScriptedTransport(clock, script={(1, 2, 2): Answer(2500)})
    source = Plans(arrivals=[plan(0, [[LONG], [0]]), plan(1, [[10], [LONG, 10, 10], [0]])])
    res = run(clock, tr, LevelPlan(0, "rate", 2.0, requests=2, duration_s=2.0, arrival="constant"), source)
    assert tr.order == [(0, 1, 0), (1, 1, 0), (1, 2, 0), (1, 2, 1), (1, 2, 2)]  # no step after a cut tool
    assert len(res.records) == 5 and all(r.ok for r in res.records)  # what finished is kept
    late = tr.calls[(1, 2, 2)][1]  # in flight at the level's end: it finished, as at any level's end
    assert late.done_ns - late.sent_ns == 2500 * MS and late.done_ns > res.start_ns + LEAD_NS + 2000 * MS
    assert res.end_ns == late.done_ns  # the level ended with its last request, not with a tool
    t = tasks_of(res.records)
    assert (t.tasks, t.completed, t.failed, t.incomplete) == (2, 0, 0, 2)  # cut, not failed


def test_duration_cuts_a_tool_and_its_closed_loop_user_stops(clock: VirtualClock) -> None:
    # user 0's first task calls a 60 s tool: the user stops there; user 1 runs its short tasks
    users = {0: [plan(0, [[LONG], [0]]), plan(1, [[0]])], 1: [plan(10, [[10], [10], [0]]), plan(11, [[10], [0]])]}
    tr = ScriptedTransport(clock)
    res = run(clock, tr, LevelPlan(0, "concurrency", 2, duration_s=2.0), Plans(users=users))
    assert sorted(tr.calls) == [(0, 1, 0), (10, 1, 0), (10, 2, 0), (10, 3, 0), (11, 1, 0), (11, 2, 0)]
    assert res.end_ns == done(tr, (11, 2, 0)) == res.start_ns + 530 * MS  # not 60 s: nothing waited for the tool
    t = tasks_of(res.records)
    assert (t.tasks, t.completed, t.incomplete) == (3, 2, 1)


AGENT = """\
prompt_tokens = "uniform:min=4,max=12"
output_tokens = "uniform:min=2,max=5"
[agent]
steps = "uniform:min=2,max=4"
tool_latency_ms = "uniform:min=1,max=40"
tool_output_tokens = "uniform:min=5,max=20"
fan_out = "uniform:min=2,max=3"
fan_out_probability = 0.5
system_prompt_tokens = 30
"""


def _seeded(clock: VirtualClock, tmp_path: Path, seed: int) -> tuple[ScriptedTransport, LevelResult, AgentSource]:
    path = tmp_path / "agent.toml"
    path.write_text(AGENT, encoding="utf-8")
    source = AgentSource(load_workload(str(path), []), seed, PromptSynthesizer(seed=seed))
    tr = ScriptedTransport(clock)
    return tr, run(clock, tr, LevelPlan(0, "concurrency", 3, requests=40), source), source


def test_a_seeded_workload_runs_the_same_calls_at_the_same_times(clock: VirtualClock, tmp_path: Path) -> None:
    runs = []
    for seed in (5, 5, 6):
        tr, res, source = _seeded(clock, tmp_path, seed)
        start = res.start_ns
        runs.append(
            (
                [(k, sent(tr, k) - start, done(tr, k) - start, tr.calls[k][1].tool_ms) for k in tr.order],
                [tr.bodies[k] for k in tr.order],
            )
        )
        assert len(tr.calls) == 40 and any(branch for _, _, branch in tr.order)  # some step fanned out
        # every step's branches go together, after the previous step's slowest tool (the plans' own)
        plans = {p.task: p for u in range(3) for p in itertools.islice(source.user_tasks(0, u), 10)}
        for (task, step, branch), (_spec, rec) in tr.calls.items():
            if step > 1:
                before = plans[task].steps[step - 2]
                assert rec.sent_ns == max(
                    done(tr, (task, step - 1, k)) + int(b.tool_s * 1e9) for k, b in enumerate(before)
                )
                assert rec.tool_ms == plans[task].steps[step - 1][branch].tool_s * 1e3
    assert runs[0] == runs[1]  # the same seed: the same graph, times and bytes
    assert runs[0][1] != runs[2][1]  # another seed: other tasks
