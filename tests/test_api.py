"""The public Python API: docs/api.md's worked example runs as written, and ``import loadgen`` stays cheap."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

import loadgen

ROOT = Path(__file__).resolve().parent.parent


def _examples() -> list[str]:
    text = (ROOT / "docs" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 2
    return blocks


def _example() -> str:
    return _examples()[0]


def test_the_statistics_example_runs_and_says_what_it_cannot_bound(tmp_path: Path) -> None:
    script = tmp_path / "stats.py"
    script.write_text(_examples()[1])
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second, third = proc.stdout.splitlines()
    n_eff = float(first.split("n_eff ")[1].split(" of ")[0])
    assert first.startswith("p99 ") and n_eff < 20_000 / 5  # strongly correlated: far fewer effective samples
    assert "bounded=False" in second and third.endswith(" 662")


def test_the_documented_example_runs_a_sweep_and_reads_its_records(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_example())
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0].strip() for line in lines[:3]] == ["1 user", "4 users", "16 users"]
    folder = tmp_path / "reports" / "api-sweep"
    assert {"run.json", "records.jsonl", "summary.json", "report.html"} <= {p.name for p in folder.iterdir()}
    summary = loadgen.read_summary(folder)
    frame = loadgen.records_frame(folder)
    assert isinstance(frame, pd.DataFrame) and len(frame) == 60
    for i, level in enumerate(summary.levels):  # the summary and the records tell the same story
        rows = frame[frame["level"] == i]
        assert len(rows) == level.requests.ok == 20
        assert rows["ttft_ms"].median() == level.ttft_ms.p50
    assert summary.levels[2].ttft_ms.p50 > summary.levels[0].ttft_ms.p50  # 16 users queue behind each other
    assert len(list(loadgen.read_records(folder))) == 60


def test_every_public_name_resolves_and_import_is_cheap() -> None:
    for name in loadgen.__all__:
        assert getattr(loadgen, name) is not None, name
    code = "import sys, loadgen; print(sorted(m for m in ('numpy', 'pandas', 'aiohttp', 'rich') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
