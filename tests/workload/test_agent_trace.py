"""Recorded agent traces: the loadgen JSONL parsed (good lines, and malformed ones refused
in one line naming the line and field), AIPerf session rows converted, and a fit that
recovers the [agent] parameters a synthetic trace was drawn with."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import WorkloadError
from loadgen.workload.agent_fit import AgentFit
from loadgen.workload.agent_trace import load_agent_trace, parse_agent_trace, parse_aiperf_sessions
from loadgen.workload.fit import fit_workload
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.spec import load_workload
from loadgen.workload.tasks import AgentSource

SAMPLE = Path(__file__).resolve().parents[2] / "workloads" / "samples" / "agent_trace.jsonl"


def _lines(*objs: object) -> list[bytes]:
    return [json.dumps(o).encode() + b"\n" for o in objs]


def test_the_sample_parses_into_tasks_steps_and_branches() -> None:
    tr = load_agent_trace(str(SAMPLE))
    assert [t.id for t in tr.tasks] == ["t1", "t2", "t3", "t4", "t5"]
    assert [len(t.steps) for t in tr.tasks] == [3, 4, 2, 5, 3]
    assert [len(s) for s in tr.tasks[1].steps] == [1, 3, 1, 1]  # t2's step 2 fans out
    assert tr.tasks[1].steps[2][0].parents == (2,)  # the join waits for the fan-out
    assert tr.tasks[4].steps[2][0].parents == (1, 2)
    assert tr.tasks[0].steps[1][0].parents == (1,)  # default: the previous step
    assert tr.offsets is not None and tr.offsets.tolist() == [0.0, 0.35, 0.8, 1.1, 1.6]
    c = tr.tasks[0].steps[0][0]
    assert (c.prompt_tokens, c.output_tokens, c.tool_tokens, c.tool_latency_ms) == (420, 48, 300, 120.0)


def test_tasks_are_ordered_by_start_and_step_one_has_a_message() -> None:
    tr = parse_agent_trace(
        _lines(
            {"task": "b", "step": 1, "output_tokens": 5, "t_s": 2.0},
            {"task": 7, "step": 1, "prompt_tokens": 9, "output_tokens": 4, "t_s": 0.5},
            {"task": 7, "step": 2, "output_tokens": 3},
        ),
        "x.jsonl",
    )
    assert [t.id for t in tr.tasks] == ["7", "b"]
    assert tr.offsets is not None and tr.offsets.tolist() == [0.0, 1.5]
    assert tr.tasks[1].steps[0][0].prompt_tokens == 1  # none given: at least one token
    without = parse_agent_trace(_lines({"task": "a", "step": 1, "output_tokens": 5}), "x.jsonl")
    assert without.offsets is None  # no recorded times: closed loop only


@pytest.mark.parametrize(
    ("lines", "where"),
    [
        ([b"{not json\n"], "x.jsonl: line 1: not valid JSON"),
        ([b"[1, 2]\n"], "x.jsonl: line 1: expected an object"),
        (_lines({"step": 1, "output_tokens": 3}), "x.jsonl: line 1: task: missing"),
        (_lines({"task": "a", "output_tokens": 3}), "x.jsonl: line 1: step: missing"),
        (_lines({"task": "a", "step": 0, "output_tokens": 3}), "x.jsonl: line 1: step: expected a whole number"),
        (_lines({"task": "a", "step": 1}), "x.jsonl: line 1: output_tokens: missing"),
        (_lines({"task": "a", "step": 1, "output_tokens": 2.5}), "x.jsonl: line 1: output_tokens: expected"),
        (
            _lines({"task": "a", "step": 1, "output_tokens": 3, "tool_latency_ms": -1}),
            "x.jsonl: line 1: tool_latency_ms: expected",
        ),
        (_lines({"task": "a", "step": 1, "output_tokens": 3, "t_s": "soon"}), "x.jsonl: line 1: t_s: expected"),
        (_lines({"task": "a", "step": 1, "output_tokens": 3, "colour": 1}), "x.jsonl: line 1: colour: unknown field"),
        (_lines({"task": True, "step": 1, "output_tokens": 3}), "x.jsonl: line 1: task: expected"),
        (
            _lines(
                {"task": "a", "step": 1, "output_tokens": 3},
                {"task": "a", "step": 2, "parents": [2], "output_tokens": 3},
            ),
            "x.jsonl: line 2: parents: expected an array of earlier steps (1..1)",
        ),
        (
            _lines({"task": "a", "step": 1, "output_tokens": 3}, {"task": "a", "step": 1, "output_tokens": 4}),
            "x.jsonl: line 2: branch: task 'a' step 1 branch 0 is already on line 1",
        ),
        (
            _lines({"task": "a", "step": 1, "output_tokens": 3}, {"task": "a", "step": 3, "output_tokens": 4}),
            "x.jsonl: line 2: step: task 'a' has no step 2",
        ),
        (
            _lines(
                {"task": "a", "step": 1, "output_tokens": 3}, {"task": "a", "step": 2, "branch": 1, "output_tokens": 4}
            ),
            "x.jsonl: line 2: branch: task 'a' step 2 has no branch 0",
        ),
        ([b"\n"], "x.jsonl: the trace holds no calls"),
    ],
)
def test_malformed_lines_get_one_line_errors_naming_the_line(lines: list[bytes], where: str) -> None:
    with pytest.raises(WorkloadError) as exc:
        parse_agent_trace(lines, "x.jsonl")
    assert str(exc.value).startswith(where) and "\n" not in str(exc.value)


_BAD_NUMBERS = [b"1e300", b"18446744073709551616", b"-1", b"-1e-9", b"true", b'"5"', b"null", b"[]"]
_GOOD = b'{"task": "a", "step": 1, "output_tokens": 3, "tool_latency_ms": 5, "t_s": 0}\n'
_NUMERIC = {  # every number of a line: (a valid line with FIELD standing for the value, the largest accepted)
    "step": (b'{"task": "b", "step": FIELD, "output_tokens": 3, "t_s": 1}', 256),
    "branch": (b'{"task": "a", "step": 2, "branch": FIELD, "output_tokens": 3}', 15),
    "prompt_tokens": (b'{"task": "b", "step": 1, "output_tokens": 3, "prompt_tokens": FIELD}', 1_000_000),
    "output_tokens": (b'{"task": "b", "step": 1, "output_tokens": FIELD}', 1_000_000),
    "tool_tokens": (b'{"task": "b", "step": 1, "output_tokens": 3, "tool_tokens": FIELD}', 1_000_000),
    "tool_latency_ms": (b'{"task": "b", "step": 1, "output_tokens": 3, "tool_latency_ms": FIELD}', 86_400_000),
    "t_s": (b'{"task": "b", "step": 1, "output_tokens": 3, "t_s": FIELD}', 2_592_000),
    "parents": (b'{"task": "a", "step": 2, "output_tokens": 3, "parents": [FIELD]}', 1),
}


@pytest.mark.parametrize("value", _BAD_NUMBERS, ids=lambda v: v.decode())
@pytest.mark.parametrize("field", list(_NUMERIC))
def test_every_number_of_a_line_is_bounded(field: str, value: bytes) -> None:
    """Huge, negative, boolean, text or missing-as-null values of every numeric field: one
    line naming the file, the line and the field (a tool of 1e300 ms once hung the run)."""
    line, top = _NUMERIC[field]
    if value == b"null" and field not in ("step", "output_tokens", "parents"):
        return  # (an optional field given as null is absent)
    with pytest.raises(WorkloadError) as exc:
        parse_agent_trace([_GOOD, line.replace(b"FIELD", value) + b"\n"], "x.jsonl")
    msg = str(exc.value)
    assert msg.startswith(f"x.jsonl: line 2: {field}: ") and "\n" not in msg, msg
    if value == b"1e300" and field not in ("parents",):
        assert "1e+300" in msg and f"{top:,}" in msg, msg  # the value as given, and the bound
    # the bound itself is accepted (step 256 or branch 15 alone would be a gap), one above it is not
    if field not in ("step", "branch"):
        ok = parse_agent_trace([_GOOD, line.replace(b"FIELD", str(top).encode()) + b"\n"], "x.jsonl")
        assert ok.calls == 2
    with pytest.raises(WorkloadError, match=f"line 2: {field}: "):
        parse_agent_trace([_GOOD, line.replace(b"FIELD", str(top + 1).encode()) + b"\n"], "x.jsonl")


@pytest.mark.parametrize("value", [b"1e300", b"-1", b"true", b'"5"', b"1e400", b"NaN", b"Infinity"])
@pytest.mark.parametrize("field", ["input_length", "output_length", "timestamp", "delay"])
def test_every_number_of_an_aiperf_row_is_bounded(field: str, value: bytes) -> None:
    row = {"session_id": "s", "timestamp": 0, "delay": 5, "input_length": 10, "output_length": 3}
    text = json.dumps({**row, field: "FIELD"}).encode().replace(b'"FIELD"', value)
    first = json.dumps({**row, "session_id": "r"}).encode()
    with pytest.raises(WorkloadError) as exc:
        parse_aiperf_sessions([first + b"\n", text + b"\n"], "a.jsonl")
    msg = str(exc.value)
    invalid_json = value in (b"1e400", b"NaN", b"Infinity")  # JSON has no such numbers
    assert msg.startswith("a.jsonl: line 2: " + ("not valid JSON" if invalid_json else f"{field}: ")), msg
    assert "\n" not in msg


def test_aiperf_session_starts_span_at_most_30_days() -> None:
    rows = _lines(
        {"session_id": "a", "timestamp": 5_000, "input_length": 10, "output_length": 3},
        {"session_id": "b", "timestamp": 5_000 + 2_592_000_001, "input_length": 10, "output_length": 3},
    )
    with pytest.raises(
        WorkloadError, match=r"^a\.jsonl: line 2: timestamp: the tasks' starts span 2,592,000.001 s, more than 30 days$"
    ):
        parse_aiperf_sessions(rows, "a.jsonl")
    rows[1] = rows[1].replace(b"2592005001", b"2592005000")
    assert parse_aiperf_sessions(rows, "a.jsonl").offsets is not None  # 30 days exactly: replayable


def test_aiperf_session_rows_become_chained_steps(tmp_path: Path) -> None:
    rows = _lines(
        {"session_id": "s1", "timestamp": 1000, "input_length": 500, "output_length": 40, "hash_ids": [1]},
        {"session_id": "s2", "timestamp": 1500, "input_length": 200, "output_length": 20},
        {"session_id": "s1", "delay": 250, "input_length": 840, "output_length": 30},
        {"session_id": "s1", "delay": 90.5, "input_length": 1000, "output_length": 60},
    )
    tr = parse_aiperf_sessions(rows, "a.jsonl")
    assert [t.id for t in tr.tasks] == ["s1", "s2"]
    assert tr.offsets is not None and tr.offsets.tolist() == [0.0, 0.5]
    s1 = [st[0] for st in tr.tasks[0].steps]
    assert [c.prompt_tokens for c in s1] == [500, 0, 0]  # the first turn is the task's message
    assert [c.output_tokens for c in s1] == [40, 30, 60]
    assert [c.tool_tokens for c in s1] == [840 - 500 - 40, 1000 - 840 - 30, 0]  # the prompt's growth: tool results
    assert [c.tool_latency_ms for c in s1] == [250.0, 90.5, 0.0]  # the delay before the next turn: the tool's run
    assert [c.parents for c in s1] == [(), (1,), (2,)]
    path = tmp_path / "aiperf.jsonl"
    path.write_bytes(b"".join(rows))
    fit = fit_workload(str(path), "sessions", kind="agent")  # the format told by its first line
    assert isinstance(fit, AgentFit) and fit.steps.tolist() == [3, 1] and fit.fan_widths.size == 0
    with pytest.raises(WorkloadError, match=r"^a\.jsonl: line 1: messages: .*tokenizer"):
        parse_aiperf_sessions(_lines({"session_id": "s", "messages": [], "output_length": 3}), "a.jsonl")
    with pytest.raises(WorkloadError, match=r"^a\.jsonl: line 2: input_length: missing"):
        parse_aiperf_sessions(_lines({"input_length": 3, "output_length": 3}, {"output_length": 3}), "a.jsonl")


def _synthetic(path: Path, n: int = 3000) -> None:
    """Tasks of uniform 3..8 steps; a step after the first fans out with p 0.3 into 2..4
    branches; tools lognormal(300 ms, 0.8) and lognormal(800 tokens, 0.6); tasks at 4/s."""
    rng = np.random.default_rng(7)
    rows = []
    t = 0.0
    for k in range(n):
        t += rng.exponential(0.25)
        steps = int(rng.integers(3, 9))
        for s in range(1, steps + 1):
            width = int(rng.integers(2, 5)) if s > 1 and rng.random() < 0.3 else 1
            for b in range(width):
                row: dict[str, object] = {"task": k, "step": s, "branch": b, "output_tokens": int(rng.integers(5, 50))}
                if s == 1 or width > 1:
                    row["prompt_tokens"] = int(rng.integers(10, 400))
                if s < steps:
                    row["tool_latency_ms"] = round(float(np.exp(np.log(300) + 0.8 * rng.standard_normal())), 3)
                    row["tool_tokens"] = int(np.exp(np.log(800) + 0.6 * rng.standard_normal()))
                if s == 1:
                    row["t_s"] = round(t, 6)
                rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_fit_recovers_the_parameters_of_a_synthetic_trace(tmp_path: Path) -> None:
    path = tmp_path / "agents.jsonl"
    _synthetic(path)
    fit = fit_workload(str(path), "agents")
    assert isinstance(fit, AgentFit)
    steps = np.bincount(fit.steps, minlength=9)[3:] / len(fit.steps)
    assert np.allclose(steps, 1 / 6, atol=0.03)  # uniform 3..8
    assert set(fit.steps.tolist()) == set(range(3, 9))
    assert abs(fit.fan_probability - 0.3) < 0.02
    assert np.allclose(np.bincount(fit.fan_widths, minlength=5)[2:] / fit.fan_widths.size, 1 / 3, atol=0.04)
    table = fit.agent_table()
    lat = dict(kv.split("=") for kv in str(table["tool_latency_ms"]).split(":", 1)[1].split(","))
    assert abs(float(lat["median"]) / 300 - 1) < 0.05 and abs(float(lat["sigma"]) - 0.8) < 0.04
    out = dict(kv.split("=") for kv in str(table["tool_output_tokens"]).split(":", 1)[1].split(","))
    assert abs(float(out["median"]) / 800 - 1) < 0.05 and abs(float(out["sigma"]) - 0.6) < 0.04
    assert fit.rate is not None and abs(fit.rate / 4 - 1) < 0.08
    assert fit.burstiness is not None and abs(fit.burstiness - 1) < 0.15  # Poisson starts
    # the file written loads as an agentic workload whose tasks look like the trace's
    toml = tmp_path / "agents.toml"
    toml.write_text(fit.to_toml(), encoding="utf-8")
    wl = load_workload(str(toml), [])
    assert wl.agent is not None and wl.arrivals is not None
    src = AgentSource(wl, 1, PromptSynthesizer(seed=1))
    plans = [src.task(0, p) for p in range(400)]
    drawn = np.asarray([len(p.steps) for p in plans])
    assert drawn.min() == 3 and drawn.max() == 8
    fanned = [len(b) for p in plans for b in p.steps[1:]]
    assert abs(sum(w > 1 for w in fanned) / len(fanned) - 0.3) < 0.06


def test_cli_fits_the_sample(tmp_path: Path) -> None:
    out = tmp_path / "fitted.toml"
    res = CliRunner().invoke(app, ["workload", "fit", str(SAMPLE), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "5 tasks, 20 calls" in res.output
    wl = load_workload(str(out), [])
    assert wl.agent is not None and wl.agent.fan_out is not None
    assert sorted(set(wl.agent.steps.sample(np.random.default_rng(0), 500).tolist())) == [2, 3, 4, 5]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "a", "step": 1, "output_tokens": 0}\n', encoding="utf-8")
    res = CliRunner().invoke(app, ["workload", "fit", str(bad), "-o", str(out)])
    assert res.exit_code != 0 and "line 1: output_tokens" in res.output and "Traceback" not in res.output
