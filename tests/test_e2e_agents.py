"""End to end: agentic tasks through the real runner and transport against ``loadgen serve
--engine sim`` in its own process, on loopback, for chat, the Responses API and Messages.

Every call must be ok (the resent tool histories parse: no 400s), the server must have
really answered with tool calls (its own ids, not the runner's synthetic ones), the task
metrics must hold together (a completed task takes at least its critical path: per step
the slowest branch's call and tool), and later steps must hit the prefix cache: the
server reports cached prompt tokens per call (the vendor field of the last event) and in
its /metrics counters, with many more hits with prefix caching on than off.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.load.runner import LevelPlan, Runner
from loadgen.metrics.summary import summarize_level
from loadgen.records import RequestRecord, RequestSpec
from loadgen.server.process import ServerProcess
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.spec import load_workload
from loadgen.workload.tasks import AgentSource

# every answer a tool call (at most 3 steps x 3 branches of results: under the cap)
SIM = [
    "--engine",
    "sim",
    "--gpu",
    "h100",
    "--model",
    "llama-3.1-8b",
    "--tool-call-share",
    "1",
    "--max-tool-results",
    "50",
]
AGENT = """\
prompt_tokens = "uniform:min=16,max=48"
output_tokens = "uniform:min=4,max=12"
[agent]
steps = "uniform:min=3,max=4"
tool_latency_ms = 5
tool_output_tokens = "uniform:min=40,max=120"
fan_out = "uniform:min=2,max=3"
fan_out_probability = 0.5
system_prompt_tokens = 300
tools_tokens = 400
tools_count = 4
groups = 2
"""
TASKS = 6


class _Keep:
    """The real aiohttp transport; keeps each call's spec (with the tool calls streamed back)."""

    def __init__(self, url: str, api: str) -> None:
        opts = DialectOptions(model="llama-3.1-8b")
        self.inner = make_transport("aiohttp", TransportConfig(url, get_dialect(api), opts))
        self.specs: dict[tuple[int, int, int], RequestSpec] = {}

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        await self.inner.send(spec, record)
        assert spec.task is not None
        self.specs[(spec.task, spec.step, spec.branch)] = spec

    async def aclose(self) -> None:
        await self.inner.aclose()


def _hits(url: str) -> tuple[float, float]:
    """The server's prefix cache counters (queries, hits) in tokens, from /metrics."""
    text = httpx.get(url + "/metrics").text

    def value(name: str) -> float:
        found = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        assert found, name
        return sum(map(float, found))

    return value("vllm:prefix_cache_queries_total"), value("vllm:prefix_cache_hits_total")


def _source(folder: Path) -> AgentSource:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "agent.toml"
    path.write_text(AGENT, encoding="utf-8")
    return AgentSource(load_workload(str(path), []), 3, PromptSynthesizer(seed=3))


async def _tasks(url: str, api: str, tmp_path: Path) -> tuple[_Keep, list[RequestRecord]]:
    source = _source(tmp_path)
    tr = _Keep(url, api)
    try:
        res = await Runner(tr).run_level(LevelPlan(0, "rate", 20.0, requests=TASKS, arrival="constant"), source)
    finally:
        await tr.aclose()
    return tr, res.records


@pytest.fixture(scope="module")
def server() -> str:
    with ServerProcess(SIM) as url:
        yield url


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_agent_tasks_against_the_reference_server(server: str, tmp_path: Path, api: str) -> None:
    q0, h0 = _hits(server)
    tr, records = await _tasks(server, api, tmp_path)
    q1, h1 = _hits(server)
    assert len({r.task for r in records}) == TASKS
    assert all(r.ok and r.http_status is None for r in records), [(r.http_status, r.error) for r in records if not r.ok]
    assert len(tr.specs) == len(records) and any(r.branch > 0 for r in records)  # some step fanned out
    # the server answered each call with a tool call of its own (not the runner's synthetic one)
    prefix = "toolu_" if api == "messages" else "call_"
    for (task, step, branch), spec in tr.specs.items():
        assert spec.calls, (task, step, branch)
        ids = [c[1] for c in spec.calls]
        assert all(i.startswith(prefix) and i != f"call_{task}_{step}_{branch}" for i in ids), ids
        assert spec.tools and spec.calls[0][2] == spec.tools[0]["function"]["name"]  # auto: the first tool
    # task metrics
    level = summarize_level(records, load={"mode": "rate", "value": 20.0})
    t = level.tasks
    assert t is not None and t.tasks == t.completed == TASKS and t.failed == t.incomplete == 0
    completion, floor = [], []
    for task in range(TASKS):
        recs = [r for r in records if r.task == task]
        assert max(r.step for r in recs) == recs[0].steps
        completion.append((max(r.done_ns for r in recs) - min(r.sent_ns for r in recs)) / 1e6)
        path = sum(
            max((r.done_ns - r.sent_ns) / 1e6 + r.tool_ms for r in recs if r.step == s) for s in {r.step for r in recs}
        )
        floor.append(path)
        assert completion[-1] >= path  # no step started before the slowest branch of the last and its tool
    assert t.completion_ms.count == TASKS
    assert t.completion_ms.max == pytest.approx(max(completion)) and t.completion_ms.min == pytest.approx(
        min(completion)
    )
    assert t.llm_share is not None and t.tool_share is not None and t.wait_share is not None
    assert t.llm_share + t.tool_share + t.wait_share == pytest.approx(1.0) and t.tool_share > 0
    assert t.tasks_per_s is not None and t.tasks_per_s > 0
    assert sum(v.calls for v in t.by_step.values()) == len(records)
    # the prefix cache: a later step resends the whole history (step 1 shares its group's
    # system prompt and tools, and on this module's server the other APIs' same tasks)
    cached = {r.step: 0 for r in records}
    prompt = dict(cached)
    for r in records:
        assert r.server is not None and "cached_tokens" in r.server
        cached[r.step] += int(r.server["cached_tokens"])
        prompt[r.step] += int(r.prompt_tokens or 0)
    later = sum(cached[s] for s in cached if s > 1) / sum(prompt[s] for s in prompt if s > 1)
    assert later > 0.7, cached  # a later step prefills only what is new
    # the server's counters agree: it counted at least the hits the calls reported
    assert h1 - h0 >= sum(cached.values()) and q1 - q0 >= sum(prompt.values())


async def test_prefix_caching_off_hits_nothing(server: str, tmp_path: Path) -> None:
    ratio: dict[bool, float] = {}
    q0, h0 = _hits(server)
    await _tasks(server, "chat", tmp_path / "on")
    q1, h1 = _hits(server)
    ratio[True] = (h1 - h0) / (q1 - q0)
    with ServerProcess([*SIM, "--no-prefix-caching"]) as url:
        _, records = await _tasks(url, "chat", tmp_path / "off")
        assert all(r.ok for r in records)
        assert all(r.server is not None and r.server["cached_tokens"] == 0 for r in records)
        q, h = _hits(url)
        ratio[False] = h / q if q else 0.0
    assert ratio[True] > 0.5 and ratio[False] < 0.1 * ratio[True], ratio
