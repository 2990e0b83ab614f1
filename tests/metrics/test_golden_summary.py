"""``summary.json`` is a contract: the typed summaries serialise to the keys and values the
untyped code wrote.

The two golden files were written by the code before the results became dataclasses
(commit f190b40, as ``orchestrate`` patched them: schedule, loop lag over time, windows,
interrupted), from the seeded synthetic records of ``tests/report/synth.py``; the one
change since is ``schedule.late``, which now counts measured requests only (warm-up
excluded), like ``requests.total``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.load.profiles import Profile
from loadgen.metrics import RunSummary, level_slos, parse_slo, summarize_level, summarize_run
from loadgen.records import RequestRecord
from tests.report.synth import ANCHOR, MS, Spec, _level_records

GOLDEN = Path(__file__).parent / "golden"


def _build(spec: Spec, interrupted: bool, window_s: float | None = None, mixed: bool = False) -> RunSummary:
    rng = np.random.default_rng(spec.seed)
    slos = [parse_slo(s) for s in spec.slos]
    levels = []
    t = ANCHOR + 100 * MS
    for li, value in enumerate(spec.loads):
        recs, t_end = _level_records(spec, li, t, rng)
        if mixed:
            for r in recs:
                r.request_class = "short" if r.index % 3 else "long"
        lag = rng.exponential(0.3, 400)
        lag_t = (t + np.arange(400) * 10 * MS).tolist()
        if spec.client_bound_level == li:
            lag[::20] = 30.0
        rate = spec.mode == "rate"
        load = {"mode": spec.mode, "value": float(value) if rate else int(value)}
        levels.append(
            summarize_level(
                recs,
                load=load,
                slos=level_slos(slos, spec.mode, "queued"),
                loop_lag_ms=lag.tolist(),
                loop_lag_t_ns=lag_t,
                anchor_ns=ANCHOR,
                scheduled=len(recs) + 5 if rate else None,
                dropped=5,
                interrupted=interrupted and li == len(spec.loads) - 1,
                window_s=window_s,
                trim=(0.1, 0.1),
            )
        )
        t = t_end + 50 * MS
    prof = Profile(mode=spec.mode, levels=[float(v) for v in spec.loads], slos=list(spec.slos))
    return summarize_run(
        levels,
        mode=prof.mode,
        attainment_target=prof.attainment_target,
        knee_metric=prof.knee_metric,
        stopped="a reason" if interrupted else None,
        interrupted=interrupted,
    )


CASES = {
    "concurrency": lambda: _build(Spec(slos=("ttft=100ms", "ttft:p90=80ms", "tpot=50ms")), False, mixed=True),
    "rate": lambda: _build(
        Spec(mode="rate", loads=(5.0, 10.0, 20.0), slos=("ttft=100ms", "e2e:p99=2s"), seed=3, request_class="long"),
        True,
        window_s=1.0,
    ),
}


def _same(got: Any, want: Any, where: str = "") -> None:
    """Equal JSON trees; floats equal to 1e-12 relative (a sum's order may differ)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for k in want:
            _same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert isinstance(got, float) and math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12), (
            f"{where}: {got} != {want}"
        )
    else:
        assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_summary_json_keeps_its_keys_and_values(name: str) -> None:
    want = json.loads((GOLDEN / f"summary_{name}.json").read_text())
    got = json.loads(json.dumps(CASES[name]().to_json(), allow_nan=False))
    assert got.pop("schema_version") == 1
    _same(got, want)


@pytest.mark.parametrize("name", sorted(CASES))
def test_summary_round_trips_through_json(name: str) -> None:
    summary = CASES[name]()
    text = json.dumps(summary.to_json(), allow_nan=False)
    again = RunSummary.from_json(json.loads(text))
    assert again == summary
    assert json.dumps(again.to_json(), allow_nan=False) == text


def test_late_sends_exclude_warmup_like_the_request_count() -> None:
    """A warm-up request sent late is not a measured late send."""
    recs = [
        RequestRecord(index=0, warmup=True, scheduled_ns=1 * MS, sent_ns=50 * MS, done_ns=60 * MS),
        RequestRecord(index=1, scheduled_ns=100 * MS, sent_ns=101 * MS, done_ns=110 * MS),
        RequestRecord(index=2, scheduled_ns=200 * MS, sent_ns=210 * MS, done_ns=220 * MS),
    ]
    level = summarize_level(recs, load={"mode": "rate", "value": 10.0}, scheduled=3)
    assert level.requests.total == 2
    assert level.schedule is not None and level.schedule.late == 1 and level.schedule.scheduled == 3


def test_describe_never_reorders_its_input() -> None:
    """The summary does not depend on the order it describes things in."""
    from loadgen.metrics.stats import describe

    x = np.random.default_rng(0).random(1001)
    before = x.copy()
    describe(x)
    assert np.array_equal(x, before)


def test_unknown_or_wrong_summary_fields_name_the_key() -> None:
    want = json.loads((GOLDEN / "summary_rate.json").read_text())
    want["levels"][1]["requests"]["ok"] = "many"
    with pytest.raises(ValueError, match=r"levels\[1\]\.requests\.ok"):
        RunSummary.from_json(want)
