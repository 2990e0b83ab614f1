"""Shared fixtures: a scripted streaming server on loopback."""

from __future__ import annotations

from typing import AsyncIterator

import pytest

from tests.scripted_server import Script, ScriptedServer


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer(Script()) as srv:
        yield srv
