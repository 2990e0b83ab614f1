"""Run folders and rendered pages shared by the report tests (built once per session)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from loadgen.report.compare import render_comparison
from loadgen.report.html import render_run_report
from tests.report.synth import EVIL, Spec, make_run


@pytest.fixture(scope="session")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three concurrency levels, failures, long prompts, server metrics — and hostile text
    wherever a user or a server can put text."""
    spec = Spec(
        model=EVIL,
        label=EVIL,
        error_text=f"HTTP 500: {EVIL}",
        url=f"http://127.0.0.1:8000/{EVIL}",
        workload=EVIL,
        request_class=EVIL,
        loads=(1, 4, 16, 32),
    )
    return make_run(tmp_path_factory.mktemp("run") / "a", spec)


@pytest.fixture(scope="session")
def crowded_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose capacity and knee fall close together (20 and 16 users), whose long prompts
    are a class of their own, and that has no coalesced event: the marks that could
    collide and the panels that could be empty."""
    spec = Spec(loads=(1, 4, 16, 32), slos=("ttft=140ms",), long_class="long", request_class="chat", coalesce=False)
    return render_run_report(make_run(tmp_path_factory.mktemp("crowded") / "a", spec))


@pytest.fixture(scope="session")
def report(run_folder: Path) -> Path:
    return render_run_report(run_folder)


@pytest.fixture(scope="session")
def baseline_and_slower(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two runs of one workload; the second has every TTFT 25 ms longer."""
    root = tmp_path_factory.mktemp("cmp")
    a = make_run(root / "base", Spec(per_level=400, seed=1, label="base"))
    b = make_run(root / "slow", Spec(per_level=400, seed=2, ttft_shift_ms=25.0, label="slow"))
    return a, b


@pytest.fixture(scope="session")
def comparison(baseline_and_slower: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    a, b = baseline_and_slower
    return render_comparison([a, b], tmp_path_factory.mktemp("page") / "cmp.html", labels=["base", EVIL])


_FIG = re.compile(r'<script type="application/json" id="([\w-]+)-data">(.*?)</script>', re.S)


def figures(html: str) -> dict[str, dict[str, Any]]:
    """The figures embedded in a page, parsed back: div id -> {"data", "layout"}."""
    return {m.group(1): json.loads(m.group(2)) for m in _FIG.finditer(html)}


def trace(fig: dict[str, Any], meta: str) -> dict[str, Any]:
    found = [t for t in fig["data"] if t.get("meta") == meta]
    assert len(found) == 1, (meta, [t.get("meta") for t in fig["data"]])
    return found[0]
