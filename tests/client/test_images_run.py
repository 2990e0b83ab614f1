"""Images end to end: ``loadgen run`` with an ``[images]`` workload against a small aiohttp
server on loopback, which checks the content parts it receives and counts each image as
100 prompt tokens; the records, the summary and the calibration (sent without images)."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from typer.testing import CliRunner

import loadgen
from loadgen.cli import app
from loadgen.workload.images import png
from tests.workload.test_images import _decode

runner = CliRunner()
IMAGE_TOKENS = 100


class VisionServer:
    """Streams a fixed answer; usage.prompt_tokens is the text's words plus 100 per image."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "vision-model", "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        words = images = 0
        for m in body["messages"]:
            content = m["content"]
            for part in [{"type": "text", "text": content}] if isinstance(content, str) else content:
                if part["type"] == "text":
                    words += len(part["text"].split())
                else:
                    images += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = int(body.get("max_tokens", 1))
        for _ in range(n):
            await resp.write(b'data: {"choices":[{"index":0,"delta":{"content":" x"}}]}\n\n')
        usage = {"prompt_tokens": words + IMAGE_TOKENS * images, "completion_tokens": n}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    def __enter__(self) -> VisionServer:
        started = threading.Event()

        async def start() -> None:
            app_ = web.Application(client_max_size=64 << 20)
            app_.router.add_get("/v1/models", self._models)
            app_.router.add_post("/v1/chat/completions", self._chat)
            self._runner = web.AppRunner(app_)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            port = self._runner.addresses[0][1]
            self.url = f"http://127.0.0.1:{port}"
            started.set()

        def main() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(start())
            self._loop.run_forever()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        assert started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._runner is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def vision() -> Iterator[VisionServer]:
    with VisionServer() as srv:
        yield srv


def _workload(tmp_path: Path, images: str) -> Path:
    p = tmp_path / "vision.toml"
    p.write_text(f"prompt_tokens = 40\noutput_tokens = 3\n[images]\n{images}")
    return p


def _run(url: str, workload: Path, out: Path, *extra: str) -> Any:
    return runner.invoke(
        app, ["run", "--url", url, "--workload", str(workload), "--requests", "6", "--out", str(out), "--quiet", *extra]
    )


def _parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    (msg,) = body["messages"]
    assert msg["role"] == "user"
    return msg["content"]  # type: ignore[no-any-return]


def test_a_run_sends_image_parts_and_reports_them(vision: VisionServer, tmp_path: Path) -> None:
    wl = _workload(tmp_path, 'count = "uniform:min=1,max=2"\nwidth = 96\nheight = "uniform:min=32,max=64"\n')
    res = _run(vision.url, wl, tmp_path / "out")
    assert res.exit_code == 0, res.output
    calibration, sent = vision.bodies[:2], vision.bodies[2:]
    assert all(isinstance(b["messages"][0]["content"], str) for b in calibration)  # text only: the fit is the text's
    assert len(sent) == 6
    received: list[tuple[int, int, int]] = []
    for body in sent:
        parts = _parts(body)
        assert parts[0]["type"] == "text" and parts[0]["text"].strip()
        images = parts[1:]
        assert 1 <= len(images) <= 2 and all(p["type"] == "image_url" for p in images)
        raw = []
        for p in images:
            head, b64 = p["image_url"]["url"].split(",", 1)
            assert head == "data:image/png;base64"
            data = base64.b64decode(b64, validate=True)
            w, h, _ = _decode(data)
            assert w == 96 and 32 <= h <= 64
            raw.append(len(data))
        received.append((len(parts[0]["text"].split()), len(images), sum(raw)))
    folder = tmp_path / "out"
    records = [r for r in loadgen.read_records(folder) if not r.warmup]
    assert len(records) == 6
    assert all(r.ok and r.prompt_tokens is not None for r in records)
    recorded = [(r.prompt_tokens - IMAGE_TOKENS * r.images, r.images, r.image_bytes) for r in records]  # type: ignore[operator]
    assert sorted(recorded) == sorted(received)
    run = json.loads((folder / "run.json").read_text())
    calib = run["calibration"]
    assert calib["calibrated"] and calib["overhead_tokens"] == pytest.approx(0, abs=0.5)  # no image tokens in it
    level = loadgen.read_summary(folder).levels[0]
    im = level.images
    assert im is not None and im.requests == 6
    assert im.images_per_request == sum(r.images for r in records) / 6
    assert im.bytes_per_request == sum(r.image_bytes for r in records) / 6
    assert im.prompt_tokens_reported == sum(r.prompt_tokens or 0 for r in records) / 6
    assert im.prompt_tokens_reported - im.prompt_tokens_text == pytest.approx(
        IMAGE_TOKENS * im.images_per_request, abs=2
    )
    report = (folder / "report.html").read_text()
    assert "as the server counted them (images included)" in report


def test_local_files_are_sent_as_they_are(vision: VisionServer, tmp_path: Path) -> None:
    picture = png(7, 5, np.random.default_rng(9))
    (tmp_path / "cat.png").write_bytes(picture)
    res = _run(vision.url, _workload(tmp_path, 'files = "*.png"\n'), tmp_path / "out")
    assert res.exit_code == 0, res.output
    for body in vision.bodies[2:]:
        (image,) = _parts(body)[1:]
        assert image["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(picture).decode()
    assert {r.image_bytes for r in loadgen.read_records(tmp_path / "out")} == {len(picture)}


def test_images_need_the_chat_api_and_local_files(vision: VisionServer, tmp_path: Path) -> None:
    wl = _workload(tmp_path, "width = 8\nheight = 8\n")
    res = _run(vision.url, wl, tmp_path / "a", "--api", "completions")
    assert res.exit_code == 2 and "sends images: they need the chat or responses API" in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    res = _run(vision.url, _workload(tmp_path, 'files = ["https://example.com/cat.png"]\n'), tmp_path / "b")
    assert res.exit_code == 2 and "is a URL; loadgen fetches nothing" in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert vision.bodies == []  # nothing was sent
