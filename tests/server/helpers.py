"""Shared helpers of the server tests: engines, a live server, a Prometheus text parser."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from loadgen.server.api import create_app
from loadgen.server.app import start_server
from loadgen.server.config import SchedulerLimits, ServeConfig, SimOptions
from loadgen.server.faults import FaultConfig
from loadgen.server.sim.build import sim_engine
from loadgen.server.sim.engine import SimEngine

MODEL = "test-model"

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def make_engine(*, time_scale: float = 0.01, **limits: Any) -> SimEngine:
    """The real sim engine (Llama-3.1-8B on an H100), fast: ``time_scale`` 0.01 by default.

    A decode step is then ~60 µs of real time; ``time_scale=1`` gives real-speed steps
    (~6 ms) for tests that need a request to stay running. ``limits``: scheduler limits
    (``max_model_len`` 4096 by default).
    """
    scheduler = SchedulerLimits(**{"max_model_len": 4096, **limits})
    return sim_engine(ServeConfig(scheduler=scheduler, sim=SimOptions(time_scale=time_scale)))


@contextlib.asynccontextmanager
async def serve(engine: Any, *, faults: FaultConfig | None = None, **kw: Any) -> AsyncIterator[str]:
    """Serve ``engine`` on a free loopback port for the duration of the block."""
    app = create_app(engine, model_name=MODEL, faults=faults, **kw)
    runner, url = await start_server(app)
    try:
        yield url
    finally:
        await runner.cleanup()


def parse_prometheus(text: str) -> tuple[Samples, dict[str, str]]:
    """Parse text exposition strictly: returns ``(samples, types)``; raises on a bad line."""
    samples: Samples = {}
    types: dict[str, str] = {}
    helps: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helps.add(line.split(" ", 3)[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types, f"duplicate TYPE for {name}"
            assert name in helps, f"TYPE before HELP for {name}"
            types[name] = kind
        else:
            m = _SAMPLE.match(line)
            assert m, f"bad sample line: {line!r}"
            labels = frozenset(_LABEL.findall(m.group(3) or ""))
            key = (m.group(1), labels)
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = float(m.group(4))
    return samples, types


def sample(samples: Samples, name: str, **labels: str) -> float:
    """One sample by name and labels (``model_name`` and ``engine="0"`` unless given)."""
    return samples[(name, frozenset({"model_name": MODEL, "engine": "0", **labels}.items()))]


async def scrape(session: aiohttp.ClientSession, url: str) -> Samples:
    async with session.get(url + "/metrics") as resp:
        assert resp.status == 200
        return parse_prometheus(await resp.text())[0]


async def read_sse(resp: aiohttp.ClientResponse) -> list[Any]:
    """All events of a complete stream (``"[DONE]"`` kept as a string)."""
    import json

    body = (await resp.read()).decode()
    assert body.endswith("\n\n")
    events: list[Any] = []
    for block in body.split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        data = block[len("data: ") :]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events
