"""Fixtures of the torch engine tests: the model, scheduler-driven runs, live servers.

The whole directory is skipped when torch is not installed (``pip install -e '.[server]'``):
each module is reported as skipped with that reason, whether the suite or this folder runs.
Every test runs torch on one CPU thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REASON = "the torch engine needs torch: pip install -e '.[server]'"

try:
    import torch
except ImportError:  # every module here imports torch: skip each one, with the reason
    torch = None

    class _NeedsTorch(pytest.Module):
        def collect(self) -> Any:
            pytest.skip(REASON)

    def pytest_pycollect_makemodule(module_path: Path, parent: Any) -> Any:
        return _NeedsTorch.from_parent(parent, path=module_path)

else:
    from loadgen.server.engine.models import get_model
    from loadgen.server.torch.loader import build_model
    from loadgen.server.torch.model import LlamaModel

    @pytest.fixture(scope="session", autouse=True)
    def _one_thread() -> None:
        torch.set_num_threads(1)

    @pytest.fixture(scope="session")
    def tiny() -> LlamaModel:
        """The tiny preset (random weights, seed 0), fp32 on the CPU."""
        return build_model(get_model("tiny"), device="cpu", dtype=torch.float32, seed=0)


def child_pids() -> set[int]:
    """Live (not zombie) child processes of this process, from /proc (Linux)."""
    me = os.getpid()
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == me:
            try:
                cmd = (stat.parent / "cmdline").read_bytes()
            except OSError:
                continue
            if b"resource_tracker" not in cmd:  # multiprocessing's, lives for the session
                pids.add(int(stat.parent.name))
    return pids


@pytest.fixture(autouse=True)
def _no_orphans() -> Iterator[None]:
    """No test leaves a child process (an engine) running."""
    before = child_pids() if Path("/proc").is_dir() else set()
    yield
    if Path("/proc").is_dir():
        left = child_pids() - before
        assert not left, f"child processes left running: {sorted(left)}"
