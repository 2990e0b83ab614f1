"""Task metrics of agentic levels (loadgen.metrics.tasks): hand-built tasks with known intervals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loadgen.errors import ConfigError
from loadgen.metrics.results import RunSummary
from loadgen.metrics.run import summarize_run
from loadgen.metrics.slo import parse_slo
from loadgen.metrics.summary import summarize_level
from loadgen.metrics.tasks import union_ns
from loadgen.report.files import RunWriter, read_records, read_records_columnar
from tests.metrics.helpers import agent_level, call, rec

LOAD = {"mode": "concurrency", "value": 4}


def test_union_of_spans_per_group() -> None:
    spans = [(1, 30, 40), (0, 5, 20), (1, 40, 45), (0, 0, 10), (0, 7, 8), (0, 50, 50), (2, 9, 3), (0, 30, 31)]
    g, lo, hi = (np.array(c, dtype=np.int64) for c in zip(*spans, strict=True))
    assert union_ns(g, lo, hi, 4).tolist() == [21, 15, 0, 0]  # group 0: [0, 20] and [30, 31]
    assert union_ns(g[:0], lo[:0], hi[:0], 2).tolist() == [0, 0]


def test_task_outcomes_completion_times_and_rates() -> None:
    level = summarize_level(agent_level(), load=LOAD, slos=[parse_slo("task=150ms"), parse_slo("task:max=250ms")])
    t = level.tasks
    assert t is not None
    assert (t.tasks, t.completed, t.failed, t.incomplete) == (6, 2, 1, 3)
    assert t.failed_by_error == {"http_error": 1}
    assert (t.completion_ms.count, t.completion_ms.min, t.completion_ms.max) == (2, 140.0, 200.0)
    assert t.tasks_per_s == pytest.approx(2 / 0.4)  # the level's window: 0 to 400 ms
    assert t.slo_attainment == pytest.approx(1 / 3)  # task 0 of the 2 completed and 1 failed
    assert t.goodput_tasks_per_s == pytest.approx(1 / 0.4)
    assert t.slos == ["task=150ms"]
    assert [(c.slo, c.value_ms, c.passed) for c in t.checks] == [("task:max=250ms", 200.0, True)]
    # a task SLO is no request's: the requests' attainment is their ok share
    assert level.goodput.slos == [] and level.goodput.slo_attainment == pytest.approx(12 / 14)


def test_llm_tool_and_waiting_shares_on_an_overlapping_fan_out() -> None:
    t = summarize_level(agent_level(), load=LOAD).tasks
    assert t is not None
    assert t.llm_share == pytest.approx((100 / 140 + 185 / 200) / 2)
    assert t.tool_share == pytest.approx((30 / 140 + 10 / 200) / 2)
    assert t.wait_share == pytest.approx((10 / 140 + 5 / 200) / 2)


def test_ttft_and_itl_by_step_and_by_context() -> None:
    t = summarize_level(agent_level(), load=LOAD).tasks
    assert t is not None
    assert list(t.by_step) == ["1", "2", "3"]
    assert [s.calls for s in t.by_step.values()] == [6, 6, 1]
    for step, s in t.by_step.items():  # every ok call's first token came 5 ms per step after its send
        assert s.ttft_ms.min == s.ttft_ms.max == 5.0 * int(step)
    assert t.by_step["1"].ttft_ms.count == 6 and t.by_step["2"].ttft_ms.count == 4
    itl2 = t.by_step["2"].itl_ms  # the gaps of task 0's branches, task 1 and task 3
    assert (itl2.count, itl2.min, itl2.max) == (4, 10.0, 135.0)
    assert list(t.by_context) == ["<2k", "2k-8k", "8k-32k"]  # 1000, 4000 and 9000 tokens; the 50k call is no agent's
    assert [c.calls for c in t.by_context.values()] == [6, 6, 1]
    assert t.by_context["2k-8k"].ttft_ms == t.by_step["2"].ttft_ms


def test_long_tasks_share_the_last_step_bucket() -> None:
    recs = [call(0, s, 14, 100.0 * s, 100.0 * s + 80) for s in range(1, 15)]
    t = summarize_level(recs, load=LOAD).tasks
    assert t is not None and t.completed == 1
    assert list(t.by_step) == [*map(str, range(1, 11)), "11+"]
    assert t.by_step["11+"].calls == 4


def test_levels_without_agents_have_no_tasks_entry() -> None:
    level = summarize_level([rec(0, [(10, 1), (20, 1)])], load=LOAD)
    assert level.tasks is None and "tasks" not in level.to_json()


def test_task_slo_syntax() -> None:
    s = parse_slo("task=60s")
    assert (s.metric, s.limit_ms, s.per_request) == ("task", 60_000.0, False)
    with pytest.raises(ConfigError, match="task"):
        parse_slo("taks=60s")


def test_tasks_survive_the_run_folder_and_summary_json(tmp_path: Path) -> None:
    records = agent_level()
    with RunWriter(tmp_path) as writer:
        for r in records:
            writer.append(r)
    back = list(read_records(tmp_path))
    assert [(r.task, r.step, r.branch, r.steps, r.tool_ms) for r in back] == [
        (r.task, r.step, r.branch, r.steps, r.tool_ms) for r in records
    ]
    slos = [parse_slo("task=150ms")]
    level = summarize_level(back, load=LOAD, slos=slos)
    assert level.tasks == summarize_level(records, load=LOAD, slos=slos).tasks
    cols = read_records_columnar(tmp_path)  # the records' events apart, as a columnar reader gives them
    columnar = summarize_level(cols.records, load=LOAD, slos=slos, events=(cols.n_events, cols.t_ns, cols.n_tokens))
    assert columnar.tasks == level.tasks
    run = summarize_run([level], mode="concurrency")
    again = RunSummary.from_json(run.to_json())
    assert again.levels[0].tasks == level.tasks


def test_a_task_slo_beside_request_slos_leaves_them_as_they_were() -> None:
    records = agent_level()
    plain = summarize_level(records, load=LOAD, slos=[parse_slo("ttft=7ms")])
    both = summarize_level(records, load=LOAD, slos=[parse_slo("ttft=7ms"), parse_slo("task=150ms")])
    assert both.goodput.slos == ["ttft=7ms"]
    assert both.goodput == plain.goodput and both.mlperf == plain.mlperf
    assert both.goodput.slo_attainment == pytest.approx(6 / 14)  # the six step-1 calls (TTFT 5 ms)
    assert both.tasks is not None and both.tasks.slos == ["task=150ms"]
