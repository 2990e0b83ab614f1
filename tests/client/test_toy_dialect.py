"""Adding an API is one module: a toy API, defined and registered here only, runs a real
short run through ``execute``.

The toy API differs from OpenAI in everything a dialect owns: its path (``/toy/generate``),
its body (``input``/``limit``/``meter``), its key's header (``X-Toy-Key``), its events
(``{"piece": ..., "meter": {"in": P, "out": N}}``, a ``{"why": ...}`` stop event) and its
end-of-stream marker (``<<END>>``). A real aiohttp server on loopback, in its own thread,
speaks it and nothing else; with the toy's usage streamed calibration reads it from the
stream, without it from the toy's non-streamed answer.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from rich.console import Console

from loadgen.client.dialects import Dialect, DialectOptions, EventInfo, dialect_names, get_dialect, register, unregister
from loadgen.errors import ConfigError
from loadgen.load.profiles import Profile
from loadgen.orchestrate import RunConfig, execute, load_matrix, run_matrix
from loadgen.records import ErrorKind, RequestSpec, TokenSource
from loadgen.report.readers import read_records
from loadgen.workload.spec import workload_from_flags

KEY = "toy-secret-4f1c"
END = "<<END>>"
OVERHEAD = 2  # the toy server's template: prompt tokens = words + 2


class Toy(Dialect):
    """The toy API's wire format (the whole of what loadgen needs to know about it)."""

    name = "toy"
    path = "/toy/generate"
    description = "a toy API for tests (POST /toy/generate)"
    done_marker = END

    def build_body(self, spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
        prompt = spec.prompt
        text = prompt if isinstance(prompt, str) else "\n".join(str(m.get("content", "")) for m in prompt)
        return {"engine": options.model, "input": text, "limit": spec.max_tokens, "live": True, "meter": True}

    def non_stream_body(self, spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
        return {**self.build_body(spec, options), "limit": 1, "live": False}

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"X-Toy-Key": api_key}

    def parse_event(self, obj: dict[str, Any]) -> EventInfo:
        piece, meter, why = obj.get("piece"), obj.get("meter"), obj.get("why")
        fault = obj.get("fault")
        return EventInfo(
            has_output=isinstance(piece, str) and piece != "",
            usage=meter if isinstance(meter, dict) else None,
            finish_reason=why if isinstance(why, str) and why else None,
            error=None if fault is None else str(fault),
            text=piece if isinstance(piece, str) else "",
        )

    def usage_counts(self, usage: dict[str, Any]) -> tuple[Any, Any]:
        return usage.get("in"), usage.get("out")

    def answer_usage(self, answer: Any) -> dict[str, Any] | None:
        meter = answer.get("meter") if isinstance(answer, dict) else None
        return meter if isinstance(meter, dict) else None


class ToyServer:
    """The toy API on 127.0.0.1 in a thread of its own (``execute`` runs its own loop).
    ``stream_meter=False``: the stream carries no usage, only the non-streamed answer does."""

    def __init__(self, stream_meter: bool) -> None:
        self.stream_meter = stream_meter
        self.bodies: list[dict[str, Any]] = []  # what the toy route was sent
        self.other_paths: list[str] = []  # anything else asked for
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("X-Toy-Key") != KEY or "Authorization" in request.headers:
            return web.json_response({"fault": "bad key"}, status=401)
        body = await request.json()
        self.bodies.append(body)
        prompt = len(body["input"].split()) + OVERHEAD
        if not body["live"]:
            return web.json_response({"output": "w", "meter": {"in": prompt, "out": 1}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for k in range(body["limit"]):
            await asyncio.sleep(0.002)
            event: dict[str, Any] = {"piece": f" w{k}"}
            if self.stream_meter:
                event["meter"] = {"in": prompt, "out": k + 1}
            await resp.write(f"data: {json.dumps(event)}\n\n".encode())
        await resp.write(b'data: {"why": "limit"}\n\n')
        await resp.write(f"data: {END}\n\n".encode())
        await resp.write_eof()
        return resp

    async def _other(self, request: web.Request) -> web.Response:
        self.other_paths.append(request.path)
        return web.Response(status=404)

    async def _start(self, sock: socket.socket) -> None:
        app = web.Application()
        app.router.add_post("/toy/generate", self._generate)
        app.router.add_route("*", "/{tail:.*}", self._other)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    def __enter__(self) -> ToyServer:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(sock), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._runner is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def toy() -> Iterator[Toy]:
    dialect = register(Toy())
    try:
        yield dialect
    finally:
        unregister("toy")


def _run(srv: ToyServer, out: Path) -> Path:
    cfg = RunConfig(
        url=srv.url,
        api="toy",
        model="toy-1",
        workload=workload_from_flags("16", "8"),
        profile=Profile(levels=[2], requests=6, warmup_requests=0, trim=(0.0, 0.0)),
        out=out,
        headers=get_dialect("toy").auth_headers(KEY),
        live=False,
        read_timeout_s=10,
        request_timeout_s=20,
    )
    outcome = execute(cfg, Console(file=io.StringIO(), width=150))
    return outcome.folder


def _no_secret(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_registered_and_listed(toy: Toy) -> None:
    assert get_dialect("toy") is toy and dialect_names()[-1] == "toy" and "chat" in dialect_names()
    with pytest.raises(ConfigError, match="registered already"):
        register(Toy())


def test_a_run_over_the_toy_api_with_streamed_usage(toy: Toy, tmp_path: Path) -> None:
    with ToyServer(stream_meter=True) as srv:
        folder = _run(srv, tmp_path / "toy")
    recs = [r for r in read_records(folder) if r.index >= 0]
    assert len(recs) == 6
    for r in recs:
        assert r.status is ErrorKind.OK, r.error
        assert r.token_source is TokenSource.USAGE_DELTA  # the toy's meter, read by its usage_counts
        assert r.output_tokens == r.completion_tokens == 8 and len(r.events) == 8
        assert r.prompt_tokens == r.target_prompt_tokens  # the toy's meter, and prompts sized by its calibration
        assert r.events[0][0] > r.sent_ns  # a TTFT
        assert r.done_ns >= r.events[-1][0]
    calib = json.loads((folder / "run.json").read_text())["calibration"]
    assert calib["calibrated"] and calib["method"] == "stream" and calib["api"] == "toy"
    assert calib["tokens_per_word"] == pytest.approx(1.0) and calib["overhead_tokens"] == pytest.approx(OVERHEAD)
    # every request (2 calibration + 6) went to the toy's path in the toy's body shape, streamed
    assert len(srv.bodies) == 8 and all(set(b) == {"engine", "input", "limit", "live", "meter"} for b in srv.bodies)
    assert all(b["live"] is True and b["engine"] == "toy-1" for b in srv.bodies)
    assert srv.other_paths == ["/v1/models"]  # discovery asked, the given model was trusted
    _no_secret(folder)


def test_calibration_falls_back_to_the_toys_non_streamed_body(toy: Toy, tmp_path: Path) -> None:
    with ToyServer(stream_meter=False) as srv:
        folder = _run(srv, tmp_path / "toy")
    calib = json.loads((folder / "run.json").read_text())["calibration"]
    assert calib["calibrated"] and calib["method"] == "non-stream"
    assert calib["tokens_per_word"] == pytest.approx(1.0) and calib["overhead_tokens"] == pytest.approx(OVERHEAD)
    probes = [b for b in srv.bodies if not b["live"]]
    assert len(probes) == 2 and all(b["limit"] == 1 and b["meter"] is True for b in probes)
    recs = [r for r in read_records(folder) if r.index >= 0]
    assert len(recs) == 6 and all(r.status is ErrorKind.OK for r in recs)
    assert all(r.token_source is TokenSource.EVENTS and r.output_tokens == 8 and r.prompt_tokens is None for r in recs)
    _no_secret(folder)


MATRIX = """
[server]
url = "{url}"
[run]
api = "toy"
model = "toy-1"
api_key_env = "LOADGEN_TOY_KEY"
prompt_tokens = "16"
output_tokens = "4"
[run.profile]
levels = [1]
requests = 2
warmup_requests = 0
"""


def test_a_matrix_runs_the_toy_api_with_its_key_header(
    toy: Toy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The matrix file's ``run.api`` is checked against the registry, and its key goes out as the toy's header."""
    monkeypatch.setenv("LOADGEN_TOY_KEY", KEY)
    with ToyServer(stream_meter=True) as srv:
        path = tmp_path / "m.toml"
        path.write_text(MATRIX.format(url=srv.url))
        doc = run_matrix(load_matrix(path), tmp_path / "out", Console(file=io.StringIO()))
    assert [c["status"] for c in doc["configs"]] == ["ok"]
    assert len(srv.bodies) == 2 + 2  # calibration and the level: every one had the key (a 401 otherwise)
    _no_secret(tmp_path / "out")


def test_unregistered_is_gone(tmp_path: Path) -> None:
    """Run after the fixture's cleanup: the toy left nothing behind."""
    assert "toy" not in dialect_names()
    with pytest.raises(ConfigError, match="unknown API 'toy'"):
        get_dialect("toy")
    path = tmp_path / "m.toml"
    path.write_text(MATRIX.format(url="http://127.0.0.1:1"))
    with pytest.raises(ConfigError, match=r"run.api: unknown API 'toy'; choose one of: chat, completions"):
        load_matrix(path)
