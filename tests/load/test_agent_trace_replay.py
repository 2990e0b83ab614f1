"""A recorded agent trace replayed through the real runner and transport against the
scripted server on loopback: every recorded call is sent once, in its step's order, after
its parents and their tools; the tools' results are the recorded lengths; open loop
starts each task at its recorded time (exactly, in virtual time), closed loop users take the tasks in order."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.load import agent as agent_module
from loadgen.load import runner as runner_module
from loadgen.load.runner import LevelPlan, Runner
from loadgen.records import RequestRecord, RequestSpec
from loadgen.workload.agent_trace import AgentTraceSource, load_agent_trace
from loadgen.workload.prompts import PromptSynthesizer
from tests.scripted_server import Script, ScriptedServer
from tests.virtual_time import VirtualClock, run_virtual

SAMPLE = Path(__file__).resolve().parents[2] / "workloads" / "samples" / "agent_trace.jsonl"


class _Keep:
    """The real transport; keeps each call's spec and record as it finishes."""

    def __init__(self, url: str) -> None:
        self.inner = make_transport("aiohttp", TransportConfig(url, get_dialect("chat"), DialectOptions(model="m")))
        self.calls: dict[tuple[int, int, int], tuple[RequestSpec, RequestRecord]] = {}

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        await self.inner.send(spec, record)
        assert spec.task is not None
        self.calls[(spec.task, spec.step, spec.branch)] = (spec, record)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _replay(plan: LevelPlan) -> tuple[_Keep, AgentTraceSource]:
    source = AgentTraceSource(load_agent_trace(str(SAMPLE)), 3, PromptSynthesizer(seed=3))
    async with ScriptedServer(Script(ttft_s=0.001, itl_s=0.0005, tool_calls=True)) as srv:
        tr = _Keep(srv.url)
        try:
            await Runner(tr).run_level(plan, source)
        finally:
            await tr.aclose()
    return tr, source


def _check_calls(tr: _Keep, source: AgentTraceSource) -> None:
    """Every recorded call once, with its lengths, after its parents' answers and tools."""
    trace = source.trace
    want = {(p, c.step, c.branch): c for p, t in enumerate(trace.tasks) for st in t.steps for c in st}
    assert set(tr.calls) == set(want)
    for (p, step, branch), (spec, rec) in tr.calls.items():
        c = want[(p, step, branch)]
        assert rec.ok, rec.error
        assert spec.max_tokens == c.output_tokens and rec.steps == len(trace.tasks[p].steps)
        assert rec.tool_ms == (0.0 if step == rec.steps else c.tool_latency_ms)
        for parent in c.parents:
            for k in range(len(trace.tasks[p].steps[parent - 1])):
                _, before = tr.calls[(p, parent, k)]
                assert rec.sent_ns >= before.done_ns + int(before.tool_ms * 1e6)  # waited for the parent's tool
        if step > 1:  # the history carries each branch of the previous step's tool result, as recorded
            prev = trace.tasks[p].steps[step - 2]
            results = [m["content"] for m in spec.prompt if isinstance(m, dict) and m.get("role") == "tool"]
            plan = source.task(0, p)
            for k, pc in enumerate(prev):
                b = plan.steps[step - 2][k]
                assert b.output_tokens == pc.tool_tokens
                assert source.tool_output(pc.tool_tokens, b.output_key) in results
        own = spec.prompt[-1]
        if c.prompt_tokens and isinstance(own, dict) and own.get("role") == "user":
            assert own["content"] == source.synth.text(c.prompt_tokens, spec.index)


async def test_open_loop_replays_tasks_at_their_recorded_starts() -> None:
    trace = load_agent_trace(str(SAMPLE))
    offsets = trace.offsets
    assert offsets is not None
    tr, source = await _replay(LevelPlan(0, "rate", 1.0, offsets=offsets))
    _check_calls(tr, source)
    firsts = [tr.calls[(p, 1, 0)][1].scheduled_ns for p in range(len(trace.tasks))]
    got = [f - firsts[0] for f in firsts]
    assert got == [round(o * 1e9) for o in offsets]  # each task starts at its first step's t_s
    assert all(tr.calls[(p, 1, 0)][1].sent_ns >= firsts[p] for p in range(len(firsts)))
    fan = [k for k in tr.calls if k[0] == 1 and k[1] == 2]
    assert len(fan) == 3  # task t2's step 2 fanned out into its three recorded branches


async def test_closed_loop_users_take_the_recorded_tasks_in_order() -> None:
    tr, source = await _replay(LevelPlan(0, "concurrency", 2))
    _check_calls(tr, source)
    n = len(source.trace.tasks)
    start = {p: min(r.sent_ns for (q, _, _), (_, r) in tr.calls.items() if q == p) for p in range(n)}
    end = {p: max(r.done_ns for (q, _, _), (_, r) in tr.calls.items() if q == p) for p in range(n)}
    for p in range(2, n):  # task p waits for a free user: p - 1 earlier tasks have ended
        assert sum(end[q] <= start[p] for q in range(p)) >= p - 1
    for p in range(n):  # never more than two tasks at once
        assert sum(start[q] <= start[p] < end[q] for q in range(n) if q != p) <= 1


class _Timed:
    """A transport on the virtual clock: each call answers after 50 ms + 1 ms per output token."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.calls: dict[tuple[int, int, int], RequestRecord] = {}

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        record.sent_ns = self.clock.ns()
        await asyncio.sleep(0.05 + spec.max_tokens / 1e3)
        record.events.append([self.clock.ns(), spec.max_tokens])
        record.done_ns = self.clock.ns()
        assert spec.task is not None
        self.calls[(spec.task, spec.step, spec.branch)] = record

    async def aclose(self) -> None:
        return None


def test_recorded_starts_and_tool_latencies_in_virtual_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each task's first call goes at its recorded start; each later step exactly when the
    slowest branch of the step before it has answered and run its recorded tool."""
    clock = VirtualClock()
    monkeypatch.setattr(runner_module, "_now", clock.ns)
    monkeypatch.setattr(agent_module, "_now", clock.ns)
    trace = load_agent_trace(str(SAMPLE))
    source = AgentTraceSource(trace, 3, PromptSynthesizer(seed=3))
    fake = _Timed(clock)
    assert trace.offsets is not None
    res = run_virtual(Runner(fake).run_level(LevelPlan(0, "rate", 1.0, offsets=trace.offsets), source), clock)
    assert len(fake.calls) == sum(t.calls for t in trace.tasks) == 20
    base = fake.calls[(0, 1, 0)].sent_ns
    assert base >= res.start_ns
    for p, task in enumerate(trace.tasks):
        assert abs(fake.calls[(p, 1, 0)].sent_ns - base - round(trace.offsets[p] * 1e9)) <= 2
        for s in range(2, len(task.steps) + 1):
            prev = task.steps[s - 2]
            ready = max(fake.calls[(p, s - 1, k)].done_ns + round(c.tool_latency_ms * 1e6) for k, c in enumerate(prev))
            for k in range(len(task.steps[s - 1])):
                assert abs(fake.calls[(p, s, k)].sent_ns - ready) <= 2  # not before, and not later
