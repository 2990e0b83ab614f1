"""The [sessions] table and tools of workload files, and the sessions a workload draws."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from loadgen.errors import WorkloadError
from loadgen.workload.distributions import Fixed
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.sessions import SessionSource, zipf_weights
from loadgen.workload.spec import load_workload

REPO_WORKLOADS = Path(__file__).resolve().parents[2] / "workloads"
BASE = 'prompt_tokens = "uniform:min=10,max=50"\noutput_tokens = 8\n'


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "wl.toml"
    path.write_text(BASE + text, encoding="utf-8")
    return path


def test_sessions_table_parses(tmp_path: Path) -> None:
    wl = load_workload(
        str(
            _write(
                tmp_path,
                '[sessions]\nturns = "uniform:min=2,max=5"\nthink_time_ms = 250\n'
                "system_prompt_tokens = 64\ngroups = 3\nzipf = 1.2\n",
            )
        ),
        [],
    )
    ss = wl.sessions
    assert ss is not None and ss.think_time_ms == Fixed(250)
    assert (ss.system_prompt_tokens, ss.groups, ss.zipf) == (64, 3, 1.2)
    assert wl.to_dict()["sessions"]["turns"] == "uniform:min=2,max=5"
    plain = load_workload(str(_write(tmp_path, "[sessions]\nturns = 3\nthink_time_ms = 0\n")), [])
    assert plain.sessions is not None and plain.sessions.think_time_ms is None
    assert plain.sessions.system_prompt_tokens == 0


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("[sessions]\nthink_time_ms = 5\n", "sessions.turns", "missing; it is required"),
        ("[sessions]\nturns = 2\nthinking = 5\n", "sessions.thinking", "unknown key 'thinking'"),
        ("[sessions]\nturns = 2\ngroups = 4\n", "sessions.groups", "need sessions.system_prompt_tokens"),
        ("[sessions]\nturns = 2\nzipf = -1\n", "sessions.zipf", "finite number >= 0"),
        ("[sessions]\nturns = 0\n", "sessions.turns", "must be >= 1"),
        ("sessions = 3\n", "sessions", "expected a table"),
        ('tool_choice = "auto"\n', "tool_choice", "needs tools"),
        ("tools = 3\n", "tools", "expected an array of tool tables"),
        ('tools = "missing.json"\n', "tools", "cannot read"),
    ],
)
def test_bad_sessions_and_tools_are_named(tmp_path: Path, text: str, key: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path), [])
    assert str(path) in str(info.value) and key in str(info.value) and message in str(info.value)


def test_tools_from_a_table_or_a_json_file(tmp_path: Path) -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    (tmp_path / "tools.json").write_text(json.dumps([tool]), encoding="utf-8")
    from_file = load_workload(str(_write(tmp_path, 'tools = "tools.json"\ntool_choice = "required"\n')), [])
    assert from_file.tools == [tool] and from_file.tool_choice == "required"
    inline = (
        'tool_choice = {type = "function", function = {name = "lookup"}}\n[[tools]]\ntype = "function"\n'
        '[tools.function]\nname = "lookup"\nparameters = {type = "object"}\n'
    )
    from_table = load_workload(str(_write(tmp_path, inline)), [])
    assert from_table.tools == [tool] and from_table.tool_choice == {"type": "function", "function": {"name": "lookup"}}


def test_the_shipped_multiturn_workload() -> None:
    wl = load_workload("multiturn", [REPO_WORKLOADS])
    assert wl.sessions is not None and wl.sessions.groups == 8 and wl.sessions.system_prompt_tokens == 512


def _source(tmp_path: Path, sessions: str) -> SessionSource:
    wl = load_workload(str(_write(tmp_path, "[sessions]\n" + sessions)), [])
    return SessionSource(wl, 7, PromptSynthesizer(seed=7))


def test_sessions_are_the_same_whatever_asks(tmp_path: Path) -> None:
    src = _source(tmp_path, 'turns = "uniform:min=1,max=6"\nthink_time_ms = "uniform:min=100,max=900"\n')
    it = src.user_sessions(0, 3)
    first = [next(it) for _ in range(4)]
    again = [next(src.user_sessions(0, 3)) for _ in range(1)]
    assert again[0] == first[0]
    # a user's requests take its indices in order, session after session
    indices = [s.index for plan in first for s in plan.turns]
    assert indices == list(range(indices[0], indices[0] + len(indices)))
    for plan in first:
        assert 1 <= len(plan.turns) <= 6 and len(plan.think_s) == len(plan.turns) - 1
        assert all(0.1 <= t <= 0.9 for t in plan.think_s)
    # open loop: a session is its position's, the same asked alone or in any order
    assert src.session(1, 5) == src.session(1, 5)
    assert src.session(1, 5).turns != src.session(1, 6).turns
    assert src.session(1, 5).turns[0].index != src.session(2, 5).turns[0].index


def test_system_prompts_follow_zipf_popularity(tmp_path: Path) -> None:
    src = _source(tmp_path, "turns = 1\nsystem_prompt_tokens = 40\ngroups = 4\nzipf = 1.0\n")
    plans = [src.session(0, p) for p in range(2000)]
    counts = Counter(p.group for p in plans)
    share = np.array([counts[g] for g in range(4)]) / len(plans)
    assert share == pytest.approx(zipf_weights(4, 1.0), abs=0.03)
    assert share[0] > share[1] > share[2] > share[3]
    by_group = {p.group: p.system for p in plans}
    assert len(set(by_group.values())) == 4  # one text per group, shared by its sessions
    assert all(p.system == by_group[p.group] and p.system_tokens == 40 for p in plans)
    assert all(len(str(p.system).split()) == 40 for p in plans)  # uncalibrated: one word a token
