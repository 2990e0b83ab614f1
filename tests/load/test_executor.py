"""The executor seam: the sweep drives any :class:`LevelExecutor`, here one of the test's own
that wraps the in-process kind, through a real short run against a scripted aiohttp
server on loopback; and mypy holds every kind (and a broken one) to the Protocol."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.load.executor import InProcess, LevelExecutor
from loadgen.load.plan import LevelPlan, LevelResult
from loadgen.load.profiles import Profile
from loadgen.load.runner import Runner
from loadgen.orchestrate import RunConfig
from loadgen.orchestrate.sweep_driver import sweep_levels
from loadgen.records import ErrorKind, RequestRecord
from loadgen.report.files import RunWriter
from loadgen.report.live import LiveStats
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.source import WorkloadSource
from loadgen.workload.spec import workload_from_flags
from tests.scripted_server import Script, ScriptedServer

ROOT = Path(__file__).resolve().parents[2]


class Recording:
    """A LevelExecutor of the test's own: the in-process kind, with every plan it ran,
    each level's result, and whether it was entered and left, kept."""

    def __init__(self, inner: InProcess) -> None:
        self.inner = inner
        self.plans: list[LevelPlan] = []
        self.results: list[LevelResult] = []
        self.entered = self.exited = 0

    @property
    def in_flight(self) -> int:
        return self.inner.in_flight

    @property
    def interrupted(self) -> bool:
        return self.inner.interrupted

    def interrupt(self) -> None:
        self.inner.interrupt()

    async def run_level(self, plan: LevelPlan) -> LevelResult:
        self.plans.append(plan)
        res = await self.inner.run_level(plan)
        self.results.append(res)
        return res

    async def __aenter__(self) -> Recording:
        self.entered += 1
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.exited += 1
        await self.inner.__aexit__(*exc)

    def clock_report(self) -> list[dict[str, Any]] | None:
        return [{"worker": 0, "levels_run": len(self.plans)}]


def test_the_sweep_drives_a_custom_executor_through_a_real_run(tmp_path: Path) -> None:
    workload = workload_from_flags("8", "4")
    cfg = RunConfig(
        url="http://127.0.0.1:9",
        api="completions",
        workload=workload,
        live=False,
        out=tmp_path / "run",
        profile=Profile(levels=[1, 3], requests=6, warmup_requests=2, trim=(0.0, 0.0)),
    )
    reports: list[Any] = []

    async def main() -> Any:
        async with ScriptedServer(Script(ttft_s=0.005, itl_s=0.002)) as srv:
            tcfg = TransportConfig(
                base_url=srv.url,
                dialect=get_dialect("completions"),
                options=DialectOptions(model="scripted-model"),
                read_timeout_s=5.0,
            )
            transport = make_transport("aiohttp", tcfg)
            with RunWriter(cfg.out) as writer:
                seen: list[RequestRecord] = []

                def on_record(rec: RequestRecord) -> None:
                    writer.append(rec)
                    seen.append(rec)

                source = WorkloadSource(workload, cfg.seed, PromptSynthesizer(seed=cfg.seed))
                executor = Recording(InProcess(Runner(transport, on_record, keep="compact"), source))
                held: LevelExecutor = executor  # the sweep takes it as the Protocol says
                try:
                    async with held:
                        summary = await sweep_levels(
                            cfg,
                            held,
                            writer,
                            LiveStats(lambda: held.in_flight),
                            Console(file=io.StringIO()),
                            0,
                            lambda: reports.append(held.clock_report()),
                        )
                finally:
                    await transport.aclose()
            return executor, summary, seen, len(srv.requests)

    executor, summary, seen, served = asyncio.run(main())
    assert (executor.entered, executor.exited) == (1, 1)
    assert [(p.index, p.value) for p in executor.plans] == [(0, 1), (1, 3)]
    assert reports == [[{"worker": 0, "levels_run": 1}], [{"worker": 0, "levels_run": 2}]]  # after each level
    assert served == len(seen) == 16  # 2 levels x (6 + 2 warm-up), every one reached the server
    assert all(r.status is ErrorKind.OK for r in seen)
    assert sorted({r.worker for r in seen if r.level == 1}) == [0, 1, 2]  # three users
    assert [lv.requests.total for lv in summary.levels] == [6, 6] and not summary.interrupted
    for res in executor.results:  # the in-process kind measured its own health
        assert [ws.worker for ws in res.worker_stats] == [0]
    written = json.loads((cfg.out / "summary.json").read_text())
    assert [lv["load"]["value"] for lv in written["levels"]] == [1, 3]


PROBE = """\
from typing import Any
from loadgen.load.executor import InProcess, LevelExecutor
from loadgen.load.plan import LevelPlan, LevelResult
from loadgen.load.ray_pool import RayPool
from loadgen.load.workers import WorkerPool


class NoClock:
    in_flight = 0
    interrupted = False

    def interrupt(self) -> None: ...
    async def run_level(self, plan: LevelPlan) -> LevelResult:
        raise NotImplementedError

    async def __aenter__(self) -> "NoClock":
        return self

    async def __aexit__(self, *exc: object) -> None: ...


def kinds(a: InProcess, b: WorkerPool, c: RayPool, d: NoClock) -> list[LevelExecutor]:
    return [a, b, c, d]
"""


def test_mypy_holds_each_kind_to_the_protocol(tmp_path: Path) -> None:
    """The three kinds pass; an executor without ``clock_report`` is a type error."""
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--follow-imports",
            "silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(probe),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in res.stdout.splitlines() if ": error:" in line]
    assert res.returncode == 1 and len(errors) == 1, res.stdout
    assert '"NoClock"' in errors[0] and "LevelExecutor" in errors[0] and "clock_report" in res.stdout, res.stdout
