"""Canary secrets: an API key, a custom header value and a URL password, passed through
every entry point (``run`` plain, ``--workers 2``, ``--ray``, ``report``, ``compare``,
and against the reference server), never reach a run folder (every file, binary
``events.bin`` and the HTML included), the console (stdout, stderr) or the reference
server's log — in plain, URL-encoded or base64 form.

The target is a real aiohttp server on 127.0.0.1 that answers 401 unless the request
carries the canary credentials, so every run below also proves that the secrets did
reach the server: its requests are all ``ok`` and the server counted them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web

from loadgen.server.process import ServerProcess

_TAG = secrets.token_hex(6)
KEY = f"CANARYKEY-{_TAG}"
HEADER = f"CANARYHDR-{_TAG}"
USER = "canaryuser"
PASSWORD = f"CANARYPW-{_TAG}/+:x"  # characters that the URL must percent-encode
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
KEY_ENV = "LOADGEN_CANARY_KEY"


def _forms() -> dict[str, bytes]:
    out = {}
    for name, s in (("key", KEY), ("header", HEADER), ("password", PASSWORD)):
        out[name] = s.encode()
        out[f"{name} (url-encoded)"] = quote(s, safe="").encode()
        out[f"{name} (base64)"] = base64.b64encode(s.encode())
    out["basic auth user:password (base64)"] = BASIC.encode()
    out["canary tag"] = _TAG.encode()  # the random part alone: any partial copy
    return out


FORMS = _forms()


def leaks(blob: bytes) -> list[str]:
    """The canary forms found in ``blob``."""
    return [name for name, form in FORMS.items() if form in blob]


def assert_clean(where: str, blob: bytes) -> None:
    found = leaks(blob)
    assert not found, f"{where} holds {found}"


def assert_folder_clean(folder: Path) -> int:
    n = 0
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            assert_clean(str(path), path.read_bytes())
            n += 1
    return n


class AuthServer:
    """An OpenAI-style completions server on loopback (its own thread and loop) that
    answers 401 unless ``Authorization`` is what it expects and ``X-Custom-Token`` is
    the canary header. Counts the requests it accepted and refused."""

    def __init__(self) -> None:
        self.expect_auth = f"Bearer {KEY}"
        self.accepted = 0
        self.refused = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(30), "the canary server did not start"

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def counts(self) -> tuple[int, int]:
        return self.accepted, self.refused

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    def _allowed(self, request: web.Request) -> bool:
        h = request.headers
        key_ok = h.get("Authorization") == self.expect_auth or (  # Bearer, or Anthropic's header (and no Bearer)
            h.get("x-api-key") == KEY and h.get("anthropic-version") == "2023-06-01" and "Authorization" not in h
        )
        ok = key_ok and h.get("X-Custom-Token") == HEADER
        if ok:
            self.accepted += 1
        else:
            self.refused += 1
        return ok

    async def _models(self, request: web.Request) -> web.Response:
        if not self._allowed(request):
            return web.json_response({"error": {"message": "unauthorized"}}, status=401)
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        if not self._allowed(request):
            return web.json_response({"error": {"message": "unauthorized"}}, status=401)
        body = await request.json()
        n = max(int(body.get("max_tokens") or 4), 1)
        prompt = len(str(body.get("prompt", "")).split())
        usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
        if not body.get("stream"):
            return web.json_response(
                {
                    "object": "text_completion",
                    "model": "m",
                    "usage": usage,
                    "choices": [{"index": 0, "text": " w" * n, "finish_reason": "length"}],
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for k in range(n):
            await asyncio.sleep(0.002)
            fin = "length" if k == n - 1 else None
            event = {
                "object": "text_completion",
                "model": "m",
                "choices": [{"index": 0, "text": " w", "finish_reason": fin}],
            }
            await resp.write(f"data: {json.dumps(event)}\n\n".encode())
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        """Anthropic's Messages API, its event format, with the key only as ``x-api-key``."""
        if not self._allowed(request) or request.headers.get("x-api-key") != KEY:
            return web.json_response({"type": "error", "error": {"message": "unauthorized"}}, status=401)
        body = await request.json()
        n = max(int(body.get("max_tokens") or 4), 1)
        prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        if not body.get("stream"):
            usage = {"input_tokens": prompt, "output_tokens": n}
            return web.json_response(
                {"type": "message", "content": [{"type": "text", "text": " w" * n}], "usage": usage}
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        start = {"type": "message_start", "message": {"usage": {"input_tokens": prompt, "output_tokens": 1}}}
        events = [start] + [{"type": "content_block_delta", "delta": {"type": "text_delta", "text": " w"}}] * n
        events += [
            {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": n}},
            {"type": "message_stop"},
        ]
        for event in events:
            await asyncio.sleep(0.002)
            await resp.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        await resp.write_eof()
        return resp

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/messages", self._messages)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._stop = asyncio.Event()
        self._ready.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), 1800)  # bounded: the fixture stops it long before
        await runner.cleanup()


@pytest.fixture(scope="module")
def target() -> Iterator[AuthServer]:
    srv = AuthServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return {**env, "COLUMNS": "200", "PYTHONUNBUFFERED": "1", **extra}


def loadgen(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess[bytes]:
    """``loadgen ARGS`` as a real subprocess; its stdout and stderr are checked for canaries."""
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", *args],
        capture_output=True,
        env=env or _env(),
        timeout=timeout,
        check=False,
    )
    assert_clean(f"stdout of loadgen {args[0]}", proc.stdout)
    assert_clean(f"stderr of loadgen {args[0]}", proc.stderr)
    return proc


def _run_args(url: str, out: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--url",
        url,
        "--api",
        "completions",
        "--concurrency",
        "2",
        "--requests",
        "6",
        "--prompt-tokens",
        "8",
        "--output-tokens",
        "4",
        "--header",
        f"X-Custom-Token: {HEADER}",
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def _check_run(
    proc: subprocess.CompletedProcess[bytes], out: Path, target: AuthServer, before: tuple[int, int]
) -> None:
    assert proc.returncode == 0, proc.stdout.decode(errors="replace")[-2000:] + proc.stderr.decode(errors="replace")
    recs = _records(out)
    assert len(recs) == 6 and all(r["status"] == "ok" for r in recs)
    accepted, refused = target.counts()
    # the secrets reached the server: every request (discovery, calibration, the 6 sent) accepted, none refused
    assert accepted - before[0] >= 7 and refused == before[1]
    files = assert_folder_clean(out)
    assert {"run.json", "records.jsonl", "summary.json", "report.html"} <= {p.name for p in out.iterdir()}
    assert files >= 4


def test_the_canary_detector_finds_every_form() -> None:
    for name, form in FORMS.items():
        assert leaks(b"..." + form + b"...") != [], name
    assert leaks(b"nothing secret here") == []


def test_run_with_an_api_key_and_a_header_keeps_them_out_of_everything(target: AuthServer, tmp_path: Path) -> None:
    target.expect_auth = f"Bearer {KEY}"
    before = target.counts()
    out = tmp_path / "plain"
    proc = loadgen(*_run_args(target.url, out, "--api-key-env", KEY_ENV), env=_env(**{KEY_ENV: KEY}))
    _check_run(proc, out, target, before)
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["header_names"] == ["Authorization", "X-Custom-Token"]  # names only

    # the default key variable, OPENAI_API_KEY, likewise
    before = target.counts()
    out2 = tmp_path / "openai-env"
    _check_run(loadgen(*_run_args(target.url, out2), env=_env(OPENAI_API_KEY=KEY)), out2, target, before)

    # report and compare re-read the folders and write HTML: still nothing
    rep = loadgen("report", str(out))
    assert rep.returncode == 0, rep.stderr
    assert_folder_clean(out)
    cmp_html = tmp_path / "cmp" / "comparison.html"
    cmp = loadgen("compare", str(out), str(out2), "--out", str(cmp_html))
    assert cmp.returncode == 0, cmp.stdout.decode(errors="replace") + cmp.stderr.decode(errors="replace")
    assert cmp_html.exists()
    assert_folder_clean(tmp_path / "cmp")


def test_the_messages_api_key_goes_as_x_api_key_and_reaches_no_file(target: AuthServer, tmp_path: Path) -> None:
    """``--api messages``: the key goes out as ``x-api-key`` (the server refuses it as a Bearer
    token or without it), and no run file, report or console line holds it."""
    before = target.counts()
    out = tmp_path / "messages"
    args = _run_args(target.url, out, "--api-key-env", KEY_ENV)
    args[args.index("--api") + 1] = "messages"
    _check_run(loadgen(*args, env=_env(**{KEY_ENV: KEY})), out, target, before)
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["header_names"] == [
        "X-Custom-Token",
        "x-api-key",
    ]  # names only (anthropic-version is the API's own)
    rep = loadgen("report", str(out))
    assert rep.returncode == 0, rep.stderr
    assert_folder_clean(out)


def test_a_password_in_the_url_reaches_the_server_and_nothing_else(target: AuthServer, tmp_path: Path) -> None:
    target.expect_auth = f"Basic {BASIC}"
    try:
        before = target.counts()
        host = target.url.removeprefix("http://")
        url = f"http://{USER}:{quote(PASSWORD, safe='')}@{host}/v1"
        out = tmp_path / "url"
        _check_run(loadgen(*_run_args(url, out)), out, target, before)
        run = json.loads((out / "run.json").read_text())
        assert run["target"]["url"] == f"{target.url}/v1" or run["target"]["url"].startswith(target.url)
    finally:
        target.expect_auth = f"Bearer {KEY}"


@pytest.mark.slow
def test_worker_processes_keep_the_secrets_out(target: AuthServer, tmp_path: Path) -> None:
    target.expect_auth = f"Bearer {KEY}"
    before = target.counts()
    out = tmp_path / "workers"
    proc = loadgen(*_run_args(target.url, out, "--workers", "2", "--api-key-env", KEY_ENV), env=_env(**{KEY_ENV: KEY}))
    _check_run(proc, out, target, before)
    assert len({r["worker"] for r in _records(out)}) == 2


@pytest.mark.slow
def test_ray_actors_keep_the_secrets_out(target: AuthServer, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'loadgen[distributed]')")
    target.expect_auth = f"Bearer {KEY}"
    before = target.counts()
    out = tmp_path / "ray"
    # a local Ray instance on loopback (tests/conftest.py sets these; the subprocess inherits them)
    env = _env(**{KEY_ENV: KEY, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"})
    env.pop("RAY_ADDRESS", None)
    sessions = Path("/tmp/ray")  # Ray's default temp folder: its logs
    old = set(sessions.iterdir()) if sessions.is_dir() else set()
    proc = loadgen(
        *_run_args(target.url, out, "--ray", "auto", "--workers", "2", "--api-key-env", KEY_ENV), env=env, timeout=400
    )
    _check_run(proc, out, target, before)
    run = json.loads((out / "run.json").read_text())
    assert {w["address"] for w in run["workers"]} == {"127.0.0.1"}  # Ray stayed on loopback
    new = (set(sessions.iterdir()) if sessions.is_dir() else set()) - old
    for session in new:  # the Ray session this run started (and any other started meanwhile)
        if not session.is_symlink():
            for path in session.rglob("*"):
                if path.is_file() and not path.is_symlink() and path.stat().st_size < 64 << 20:
                    assert_clean(str(path), path.read_bytes())


def _serve_has_api_key() -> bool:
    res = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
        check=False,
    )
    return "--api-key" in res.stdout


def test_the_reference_server_logs_no_secret(tmp_path: Path) -> None:
    """Every canary sent to ``loadgen serve`` (its own ``--api-key`` too, where it has one):
    its log and the client's run folder stay clean, and the requests succeed."""
    server_args = ["--gpu", "b200", "--time-scale", "0.1"]
    has_key = _serve_has_api_key()
    if has_key:
        server_args += ["--api-key", KEY]
    srv = ServerProcess(server_args)
    with srv as url:
        host = url.removeprefix("http://")
        out = tmp_path / "ref"
        # with a key the server checks, Bearer must win over the URL's Basic credentials
        proc = loadgen(
            *_run_args(f"http://{USER}:{quote(PASSWORD, safe='')}@{host}", out, "--api-key-env", KEY_ENV),
            env=_env(**{KEY_ENV: KEY}),
        )
        assert proc.returncode == 0, proc.stdout.decode(errors="replace")[-2000:] + proc.stderr.decode(errors="replace")
        recs = _records(out)
        assert len(recs) == 6 and all(r["status"] == "ok" for r in recs)
        assert_folder_clean(out)
    log = "\n".join(srv.output).encode()
    assert b"listening on" in log  # the log was captured
    assert_clean("the reference server's log", log)


def test_a_matrix_takes_its_secrets_from_the_environment_and_writes_none(target: AuthServer, tmp_path: Path) -> None:
    """``loadgen matrix`` against a fixed URL with a password in it, a key and a header
    value from environment variables: every request authorised, no canary written."""
    target.expect_auth = f"Bearer {KEY}"
    before = target.counts()
    host = target.url.removeprefix("http://")
    matrix = tmp_path / "m.toml"
    matrix.write_text(f'''name = "canary"
[server]
url = "http://{USER}:{quote(PASSWORD, safe="")}@{host}"
[run]
api = "completions"
prompt_tokens = "8"
output_tokens = "4"
api_key_env = "{KEY_ENV}"
header_env = {{ "X-Custom-Token" = "CANARY_HEADER_VAR" }}
[run.profile]
levels = [2]
requests = 6
''')
    out = tmp_path / "matrix"
    proc = loadgen("matrix", str(matrix), "--out", str(out), env=_env(**{KEY_ENV: KEY, "CANARY_HEADER_VAR": HEADER}))
    assert proc.returncode == 0, proc.stdout.decode(errors="replace")[-2000:] + proc.stderr.decode(errors="replace")
    (entry,) = json.loads((out / "matrix.json").read_text())["configs"]
    assert entry["status"] == "ok" and entry["summary"]["levels"][0]["ok"] == 6
    accepted, refused = target.counts()
    assert accepted - before[0] >= 7 and refused == before[1]  # the key and the header reached it
    for path in sorted(out.rglob("*")):  # the matrix file itself holds the password, the outputs none
        if path.is_file():
            assert_clean(str(path), path.read_bytes())


def test_secrets_echoed_by_the_server_are_masked_everywhere(tmp_path: Path) -> None:
    """A server (a misconfigured proxy) that repeats every request header in its answers:
    in a 401 body, an SSE error event, a JSON error object, a redirect's Location and a
    malformed event, and in the calibration probe's error. The run folder, the console and
    the calibration note hold none of the secrets; the records show the mask instead."""
    from tests.hostile_server import HostileServer

    streams = [
        "ok",
        "echo_status",
        "echo_status",
        "echo_event",
        "echo_object",
        "echo_redirect",
        "echo_malformed",
        "echo_status",
    ]
    with HostileServer(streams=streams) as srv:
        host = srv.url.removeprefix("http://")
        url = f"http://{USER}:{quote(PASSWORD, safe='')}@{host}/v1"
        out = tmp_path / "echo"
        args = _run_args(url, out, "--api-key-env", KEY_ENV)
        args[args.index("--concurrency") + 1] = "1"  # one at a time: each request meets its own echo
        proc = loadgen(*args, env=_env(**{KEY_ENV: KEY}))
        assert srv.handled == 1 + 1 + 6  # calibration's stream, its probe, the six requests
    assert proc.returncode == 1, proc.stdout.decode(errors="replace")[-2000:] + proc.stderr.decode(errors="replace")
    recs = _records(out)
    assert [r["status"] for r in recs] == [
        "http_error",
        "error_event",
        "error_event",
        "http_error",
        "invalid_response",
        "http_error",
    ]
    assert all("***" in r["error"] for r in recs), [r["error"] for r in recs]
    calib = json.loads((out / "run.json").read_text())["calibration"]
    assert not calib["calibrated"] and "HTTP 401: bad credentials:" in calib["reason"] and "***" in calib["reason"]
    assert b"bad credentials:" in proc.stdout + proc.stderr  # the calibration warning was shown, masked
    assert assert_folder_clean(out) >= 4
