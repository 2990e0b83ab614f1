"""Shared fixtures: a scripted streaming server on loopback. Ray, where a test starts it,
stays on loopback too (127.0.0.1 instead of the network interface's address; Ray reads
these when it is imported, and its processes inherit them) and sends no usage stats."""

from __future__ import annotations

import os
from typing import AsyncIterator

import pytest

from tests.scripted_server import Script, ScriptedServer

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer(Script()) as srv:
        yield srv
