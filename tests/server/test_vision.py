"""Images in prompts: header sizes, Qwen2-VL token counts, usage over HTTP, encoder cost in TTFT."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

import aiohttp
import pytest

from loadgen.server.engine.core import EngineCore, ManualClock
from loadgen.server.engine.interface import EngineRequest, SamplingParams, TokenOutput
from loadgen.server.engine.models import get_model
from loadgen.server.engine.scheduler import EngineConfig
from loadgen.server.sim.gpus import get_gpu
from loadgen.server.sim.roofline import RooflineModel
from loadgen.server.sim.runner import SimRunner
from loadgen.server.vision import image_size, parse_image_url, smart_resize
from tests.server.helpers import MODEL, make_engine, serve


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof + b"\xff\xd9"


def data_url(raw: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(raw).decode()


def test_headers_give_width_and_height() -> None:
    assert image_size(png(640, 480)) == (640, 480)
    assert image_size(jpeg(1920, 1080)) == (1920, 1080)
    for bad in (b"GIF89a....", b"\xff\xd8\xff\xda\x00\x02", png(1, 1)[:20]):
        with pytest.raises(ValueError):
            image_size(bad)


@pytest.mark.parametrize(
    ("w", "h", "tokens"),
    [
        (512, 512, 18 * 18),  # 504x504
        (640, 480, 23 * 17),  # round(640/28)=23, round(480/28)=17
        (28, 28, 2 * 2),  # below min_pixels (56*56): scaled up to 56x56
        (4000, 3000, None),  # above max_pixels: scaled down within 1280 tokens
    ],
)
def test_qwen2_vl_token_rule(w: int, h: int, tokens: int | None) -> None:
    image = parse_image_url(data_url(png(w, h)), "p")
    rh, rw = smart_resize(h, w)
    assert rh % 28 == 0 and rw % 28 == 0 and 56 * 56 <= rh * rw <= 28 * 28 * 1280
    assert image.tokens == (rh // 28) * (rw // 28)
    assert image.patches == 4 * image.tokens
    if tokens is not None:
        assert image.tokens == tokens
    else:
        assert image.tokens <= 1280


def chat_body(images: int, size: tuple[int, int] = (512, 512), words: int = 20) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": " ".join(["w"] * words)}]
    for i in range(images):
        parts.append({"type": "image_url", "image_url": {"url": data_url(png(size[0] + i, size[1]))}})
    return {"model": MODEL, "messages": [{"role": "user", "content": parts}], "max_tokens": 2}


async def test_image_tokens_count_in_usage() -> None:
    async with serve(make_engine()) as url, aiohttp.ClientSession() as session:
        usage = []
        for n in (0, 1, 2):
            async with session.post(url + "/v1/chat/completions", json=chat_body(n, (512, 512))) as resp:
                assert resp.status == 200, await resp.text()
                usage.append((await resp.json())["usage"]["prompt_tokens"])
        # 20 words + role token + end of turn; 512x512 and 513x512 both resize to 504x504
        assert usage == [22, 22 + 324, 22 + 2 * 324]
        jpg = {"type": "image_url", "image_url": {"url": data_url(jpeg(640, 480), "image/jpeg")}}
        body = {"model": MODEL, "messages": [{"role": "user", "content": [jpg]}], "max_tokens": 1}
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            assert (await resp.json())["usage"]["prompt_tokens"] == 2 + 23 * 17


@pytest.mark.parametrize(
    ("image_url", "code"),
    [
        ({"url": "https://example.com/cat.png"}, "invalid_image_url"),
        ({"url": "http://127.0.0.1/cat.png"}, "invalid_image_url"),
        ({"url": "data:image/png;base64,!!!notbase64"}, "invalid_image"),
        ({"url": data_url(b"not an image")}, "invalid_image"),
        ({"url": data_url(png(10000, 10))}, "invalid_image"),  # aspect ratio over 200
        ({"url": "data:image/png,rawbytes"}, None),
        ({"url": 7}, None),
        (None, None),
    ],
)
async def test_bad_images_get_400(image_url: Any, code: str | None) -> None:
    part = {"type": "image_url", "image_url": image_url}
    body = {"model": MODEL, "messages": [{"role": "user", "content": [part]}], "max_tokens": 1}
    async with serve(make_engine()) as url, aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 400
            error = (await resp.json())["error"]
            assert error["type"] == "invalid_request_error" and error["param"].startswith("messages[0].content[0]")
            if code is not None:
                assert error["code"] == code


def virtual_ttft(patches: int, text_tokens: int = 256) -> tuple[float, RooflineModel]:
    roofline = RooflineModel(get_gpu("h100"), get_model("llama-3.1-8b"))
    clock = ManualClock()
    core = EngineCore(EngineConfig(max_model_len=16384, max_num_batched_tokens=8192), SimRunner(roofline), clock)
    prompt = [5] * text_tokens + [9] * (patches // 4)
    core.add_request(EngineRequest("r", prompt, SamplingParams(max_tokens=2), encoder_patches=patches))
    done: list[TokenOutput] = []
    while (t := core.next_event_time()) is not None:
        clock.advance_to(t)
        done.extend(o for o in core.poll() if o.finish_reason)
    assert done and done[0].timings is not None
    return done[0].timings["ttft_s"], roofline


def test_encoder_cost_shows_in_virtual_ttft() -> None:
    per_image = 1296  # a 512x512 image: 36x36 patches of 14 px, 324 tokens
    base, roofline = virtual_ttft(0)
    ttfts = {n: virtual_ttft(n * per_image)[0] for n in (1, 4)}
    for n, ttft in ttfts.items():
        # the step prefills the text and the image tokens, after the encoder's patches
        expected = roofline.prefill_time(256 + n * 324) + roofline.encoder_time(n * per_image)
        assert ttft == pytest.approx(expected, rel=1e-9)
    # the encoder is compute-bound: 2 * 675M params * patches at the bf16 peak * mfu
    gpu = get_gpu("h100")
    assert roofline.encoder_time(per_image) == pytest.approx(2 * 675e6 * per_image / (gpu.peak_flops * 0.6))
    assert base < ttfts[1] < ttfts[4]
    print(
        f"virtual TTFT, 256 text tokens + 0/1/4 images of 512x512: {base * 1e3:.2f} / "
        f"{ttfts[1] * 1e3:.2f} / {ttfts[4] * 1e3:.2f} ms"
    )
