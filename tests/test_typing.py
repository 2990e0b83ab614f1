"""``mypy --strict`` is clean on the package: a misspelt field of a result is a type error."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# mypy follows the torch engine's imports: without them it cannot check that code
_EXTRAS = {"torch": "server", "gguf": "server", "tokenizers": "tokenizer"}


@pytest.mark.slow
def test_mypy_strict_is_clean(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    missing = sorted({extra for module, extra in _EXTRAS.items() if importlib.util.find_spec(module) is None})
    if missing:
        pytest.skip(
            f"mypy checks the torch engine and the tokenizer code too: needs the optional extras "
            f"(pip install torch==2.13.0 && pip install -e '.[{','.join(missing)}]')"
        )
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), "loadgen"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]


def test_a_misspelt_result_field_is_a_type_error(tmp_path: Path) -> None:
    """The point of typed results: reading ``level.ttft_ms.p999`` fails the type check."""
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from loadgen.metrics.results import LevelSummary\n\n\n"
        "def f(level: LevelSummary) -> float | None:\n    return level.ttft_ms.p999\n"
    )
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports", "silent", str(probe)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 1 and 'has no attribute "p999"' in res.stdout, res.stdout


def test_a_misspelt_mode_or_kind_is_a_type_error(tmp_path: Path) -> None:
    """Load modes and profile kinds are ``Literal`` types: comparing a plan's mode with a
    misspelt one, or building a profile of a misspelt kind, fails the type check."""
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from loadgen.load.plan import LevelPlan\n"
        "from loadgen.load.profiles import Profile\n\n\n"
        "def closed(plan: LevelPlan) -> bool:\n    return plan.mode == 'concurency'\n\n\n"
        "def soak() -> Profile:\n    return Profile(kind='sock')\n"
    )
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports", "silent", str(probe)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 1, res.stdout
    assert "Non-overlapping equality check" in res.stdout and "Literal['concurency']" in res.stdout, res.stdout
    assert 'Argument "kind" to "Profile" has incompatible type' in res.stdout, res.stdout
