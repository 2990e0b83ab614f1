"""Ray actors over a local two-node Ray cluster on loopback: the same requests as worker
processes, clock offsets in run.json, a node killed mid-level. A real scripted server.

Each node has one CPU and each actor takes one, so the two actors land on the two nodes.
The node-killing test runs last: it leaves the cluster with its head node only.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from loadgen.load.profiles import Profile
from loadgen.load.ray_pool import RayPool, connect
from loadgen.orchestrate import RunConfig, execute
from loadgen.records import ErrorKind
from loadgen.workload.spec import workload_from_flags
from tests.load.level_hooks import beside_first_level
from tests.scripted_server import Script, ScriptedServerProcess


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'loadgen[distributed]')")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})  # on loopback: see tests/conftest.py
    try:
        c.add_node(num_cpus=1)
        with connect(c.address) as info:
            assert info.nodes == 2 and info.cpus == 2 and info.addresses == ["127.0.0.1"]
        yield c
    finally:
        c.shutdown()


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServerProcess]:
    with ScriptedServerProcess(Script(ttft_s=0.01, itl_s=0.003)) as srv:
        yield srv


def _cfg(url: str, out: Path, **kw: Any) -> RunConfig:
    return RunConfig(
        url=url,
        api="completions",
        workload=workload_from_flags("uniform:min=8,max=32", "uniform:min=2,max=6"),
        profile=Profile(mode="rate", levels=[60.0], requests=30, warmup_requests=3),
        out=out,
        live=False,
        seed=11,
        **kw,
    )


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def test_same_requests_and_schedule_as_worker_processes_and_offsets_in_run_json(
    cluster: Any,
    server: ScriptedServerProcess,
    tmp_path: Path,
) -> None:
    console = io.StringIO()
    local = execute(_cfg(server.url, tmp_path / "proc", workers=2), Console(file=io.StringIO()))
    remote = execute(_cfg(server.url, tmp_path / "ray", workers=2, ray=cluster.address), Console(file=console))
    assert "2 Ray actors over the cluster's 2 nodes" in console.getvalue()
    procs, actors = _records(tmp_path / "proc"), _records(tmp_path / "ray")
    assert len(actors) == 33 and all(r["status"] == "ok" for r in actors)

    def requests(recs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((r["index"], r["warmup"], r["target_prompt_tokens"], r["target_output_tokens"]) for r in recs)

    assert requests(actors) == requests(procs)
    run = json.loads((tmp_path / "ray" / "run.json").read_text())
    workers = run["workers"]
    assert [w["worker"] for w in workers] == [0, 1] and len({w["node"] for w in workers}) == 2
    assert {w["address"] for w in workers} == {"127.0.0.1"}
    for w in workers:  # one machine: the true offset is 0, so each estimate is within its uncertainty
        assert [e["level"] for e in w["estimates"]] == [None, 0]
        assert all(abs(e["offset_ns"]) <= e["uncertainty_ns"] for e in w["estimates"])
    # the schedule, moved by at most the offset errors (both actors share the kernel's clock)
    slack = 2 * max(w["uncertainty_ns"] for w in workers)

    def schedule(recs: list[dict[str, Any]]) -> dict[int, int]:
        t0 = min(r["scheduled_ns"] for r in recs)
        return {r["index"]: r["scheduled_ns"] - t0 for r in recs}

    by_proc, by_actor = schedule(procs), schedule(actors)
    assert all(abs(by_actor[i] - by_proc[i]) <= 2 * slack for i in by_proc)
    level = remote.summary.levels[0]
    assert [w.worker for w in level.client.workers or []] == [0, 1]
    assert level.client.clock_uncertainty_ms == max(w["uncertainty_ns"] for w in workers) / 1e6
    assert level.client.lost_workers is None
    assert local.summary.levels[0].client.clock_uncertainty_ms is None


def test_interrupt_cancels_every_actors_requests_and_keeps_them(cluster: Any, tmp_path: Path) -> None:
    async def interrupt(pool: RayPool) -> None:
        while pool.in_flight < 4:  # noqa: ASYNC110 - polls a count; every user's first request reported in flight
            await asyncio.sleep(0.05)
        pool.interrupt()

    with ScriptedServerProcess(Script(ttft_s=0.02, itl_s=0.2)) as srv, beside_first_level(RayPool, interrupt):
        cfg = RunConfig(
            url=srv.url,
            api="completions",
            workload=workload_from_flags("16", "50"),
            profile=Profile(mode="concurrency", levels=[4], requests=40),
            out=tmp_path / "int",
            live=False,
            workers=2,
            seed=1,
            ray=cluster.address,
        )
        outcome = execute(cfg, Console(file=io.StringIO()))
    assert outcome.interrupted
    recs = _records(tmp_path / "int")
    cancelled = [r for r in recs if r["status"] == ErrorKind.CANCELLED.value]
    assert sorted(r["worker"] for r in cancelled) == [0, 1, 2, 3]  # each user's request in flight
    assert all(r["sent_ns"] for r in cancelled)
    assert outcome.summary.levels[0].requests.total == len(recs)
    assert outcome.summary.levels[0].client.lost_workers is None


def test_a_node_killed_mid_level_turns_its_in_flight_requests_into_worker_lost(cluster: Any, tmp_path: Path) -> None:
    """Remove the second node once both actors report their requests in flight: the
    level ends, names the lost worker, its in-flight requests are worker_lost records;
    the next level runs on the actor that is left."""
    lost: list[int] = []

    async def kill_second_node(pool: RayPool) -> None:
        while pool.in_flight < 4:  # noqa: ASYNC110 - polls a count; two users per actor, each with a request in flight
            await asyncio.sleep(0.05)
        node = cluster.list_all_nodes()[1]  # not the head node
        lost.append(pool.nodes.index(node.node_id))
        cluster.remove_node(node)

    out = tmp_path / "lost"
    with ScriptedServerProcess(Script(ttft_s=0.05, itl_s=0.05)) as srv, beside_first_level(RayPool, kill_second_node):
        cfg = RunConfig(
            url=srv.url,
            api="completions",
            workload=workload_from_flags("16", "10"),
            profile=Profile(mode="concurrency", levels=[4, 4], requests=16),
            out=out,
            live=False,
            workers=2,
            seed=1,
            ray=cluster.address,
        )
        outcome = execute(cfg, Console(file=io.StringIO()))
    assert len(lost) == 1
    gone = lost[0]
    first, second = outcome.summary.levels
    assert first.client.lost_workers == [gone] and any("partial" in r for r in first.client.reasons)
    recs = _records(out)
    assert len({r["index"] for r in recs}) == len(recs)  # no request twice: nothing re-run
    level0 = [r for r in recs if r["level"] == 0]
    dead = [r for r in level0 if r["status"] == ErrorKind.WORKER_LOST.value]
    # its two users (gone, gone + 2) each had a request in flight at its last report
    assert len(dead) == 2 and {r["worker"] % 2 for r in dead} == {gone}
    assert all(f"worker {gone} was lost" in r["error"] and r["sent_ns"] for r in dead)
    assert first.requests.by_error == {"worker_lost": 2}
    survivor = [r for r in level0 if r["worker"] % 2 != gone]
    assert len(survivor) == 8 and all(r["status"] == "ok" for r in survivor)
    level1 = [r for r in recs if r["level"] == 1]
    assert len(level1) == 16 and all(r["status"] == "ok" for r in level1)
    assert second.client.lost_workers is None and [w.worker for w in second.client.workers or []] == [1 - gone]
    run = json.loads((out / "run.json").read_text())
    assert run["workers"][gone]["lost"] and not run["workers"][1 - gone]["lost"]


def test_without_ray_the_cli_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from loadgen.cli import app

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    res = CliRunner().invoke(app, ["run", "--url", "http://127.0.0.1:9", "--ray", "auto"])
    assert res.exit_code == 2
    assert "pip install 'loadgen[distributed]'" in res.output and len(res.output.strip().splitlines()) == 1


class _Remote:
    """``method.remote(*args)`` of an actor stand-in: a coroutine instead of an ObjectRef."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def remote(self, *args: Any) -> Any:
        async def call() -> Any:
            return self.fn(*args)

        return call()


async def test_a_clock_offset_is_estimated_within_its_uncertainty_and_taken_off_every_time() -> None:
    """No Ray needed: an actor stand-in whose clock runs 5 s ahead of this one."""
    import time

    from loadgen.load.ray_pool import _Member
    from loadgen.load.share import WorkerSetup
    from loadgen.records import RequestRecord
    from loadgen.report.recordio import decode_batch as _decode_batch
    from loadgen.report.recordio import encode_batch as _encode_batch

    skew = 5_000_000_000
    actor = type("Skewed", (), {"now_ns": _Remote(lambda: time.perf_counter_ns() + skew)})()
    pool = RayPool(WorkerSetup(list, list, _encode_batch, _decode_batch), 1)  # type: ignore[arg-type]
    member = _Member(0, actor)
    await pool._estimate_clocks([member], 3)
    clock = member.clock
    assert clock.level == 3 and member.clocks == [clock] and abs(clock.offset_ns - skew) <= clock.uncertainty_ns
    there = RequestRecord(
        index=7,
        scheduled_ns=skew + 100,
        sent_ns=skew + 150,
        done_ns=skew + 900,
        events=[[skew + 400, 1], [skew + 500, 2]],
    )
    (here,) = pool._decode(member, _encode_batch([there]))
    d = clock.offset_ns - skew  # the estimate's error
    assert (here.scheduled_ns, here.sent_ns, here.done_ns) == (100 - d, 150 - d, 900 - d)
    assert here.events == [[400 - d, 1], [500 - d, 2]]
