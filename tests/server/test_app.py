"""Running the server: start_server, serve_in_thread and run_forever (signals)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from loadgen.errors import ConfigError
from loadgen.server.api import create_app
from loadgen.server.app import serve_in_thread, start_server
from tests.server.helpers import MODEL, make_engine

ROOT = Path(__file__).resolve().parents[2]


async def test_start_server_binds_a_free_port() -> None:
    app = create_app(make_engine(), model_name=MODEL)
    runner, url = await start_server(app, port=0)
    try:
        host, port = url.removeprefix("http://").split(":")
        assert host == "127.0.0.1" and int(port) > 0
        assert runner.addresses[0][1] == int(port)
    finally:
        await runner.cleanup()


def _refused(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) != 0


def test_serve_in_thread_serves_and_stops() -> None:
    engines: list[Any] = []

    def factory() -> Any:
        engines.append(make_engine())
        return create_app(engines[0], model_name=MODEL)

    with serve_in_thread(factory) as url:
        with urllib.request.urlopen(url + "/health") as resp:
            assert resp.read() == b"ok"
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        with client:
            out = client.completions.create(model=MODEL, prompt="a b c", max_tokens=3, extra_body={"ignore_eos": True})
        assert out.usage is not None and out.usage.completion_tokens == 3
    assert _refused(url)
    assert not [t for t in threading.enumerate() if t.name == "loadgen-server"]


def test_serve_in_thread_ends_open_streams_on_exit() -> None:
    engines: list[Any] = []

    def factory() -> Any:
        engines.append(make_engine(time_scale=1.0))
        return create_app(engines[0], model_name=MODEL)

    with serve_in_thread(factory) as url:
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port))
        body = {"model": MODEL, "prompt": "a", "max_tokens": 3000, "ignore_eos": True, "stream": True}
        conn.request("POST", "/v1/completions", json.dumps(body))
        resp = conn.getresponse()
        assert resp.status == 200 and resp.readline().startswith(b"data: ")
    with pytest.raises(http.client.IncompleteRead):
        resp.read()
    conn.close()
    stats = engines[0].stats()
    assert (stats.running, stats.waiting) == (0, 0)


def test_serve_in_thread_raises_startup_errors() -> None:
    def factory() -> Any:
        raise ConfigError("bad engine", key="--gpu")

    with pytest.raises(ConfigError, match="--gpu"), serve_in_thread(factory):
        pass  # pragma: no cover - never entered


_SCRIPT = """
import sys
from loadgen.server.api import create_app
from loadgen.server.app import run_forever
from tests.server.helpers import make_engine

app = create_app(make_engine(), model_name="m")

async def cleanup(app):
    print("cleaned-up", flush=True)

app.on_cleanup.append(cleanup)
run_forever(app, "127.0.0.1", 0, on_ready=lambda url: print(url, flush=True))
print("exited", flush=True)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_run_forever_stops_cleanly_on_signal(sig: signal.Signals) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        with urllib.request.urlopen(url + "/health") as resp:
            assert resp.read() == b"ok"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out.split() == ["cleaned-up", "exited"]
    assert "Traceback" not in err
