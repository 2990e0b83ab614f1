"""Images in prompts: their size from the file header, their prompt tokens, their encoder work.

An image arrives inline as a ``data:`` URL, in a chat content part (:func:`chat_image_part`)
or a Responses input part (:func:`responses_image_part`); nothing is fetched, and only the
PNG or JPEG header is read. Tokens follow Qwen2-VL's ``smart_resize``: sides to multiples of
28, pixels into ``[min_pixels, max_pixels]``, ``(h/28) * (w/28)`` tokens, which join the
prompt as one placeholder id per image derived from its bytes (a repeated image can hit the
prefix cache). The sim prices the encoder
(:meth:`~loadgen.server.sim.roofline.RooflineModel.encoder_time`) in the admitting step.

Docs: docs/server.md, "Pooling routes and images".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import struct
from dataclasses import dataclass
from typing import Any

from loadgen.server.rejected import RequestRejected
from loadgen.server.tokenizer import NUM_RESERVED

__all__ = [
    "MAX_PIXELS",
    "MIN_PIXELS",
    "ImageInput",
    "chat_image_part",
    "image_prompt_ids",
    "image_size",
    "parse_image_url",
    "responses_image_part",
    "smart_resize",
]

PATCH = 14
MERGE = 2
FACTOR = PATCH * MERGE  # 28
MIN_PIXELS = 56 * 56
MAX_PIXELS = 28 * 28 * 1280
MAX_RATIO = 200
_PNG = b"\x89PNG\r\n\x1a\n"
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


@dataclass(frozen=True, slots=True)
class ImageInput:
    """One image of a prompt: its pixels as sent, its prompt tokens, its ViT patches."""

    width: int
    height: int
    tokens: int
    patches: int
    token_id: int  # the placeholder id its tokens use (from the image's bytes)


def smart_resize(
    height: int, width: int, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS
) -> tuple[int, int]:
    """Qwen2-VL's resize (module docstring): ``(height, width)``, multiples of 28."""
    if min(height, width) < 1:
        raise ValueError(f"the image is {width}x{height} pixels")
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(f"the image's aspect ratio is over {MAX_RATIO} ({width}x{height})")
    h = max(FACTOR, round(height / FACTOR) * FACTOR)
    w = max(FACTOR, round(width / FACTOR) * FACTOR)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(FACTOR, math.floor(height / beta / FACTOR) * FACTOR)
        w = max(FACTOR, math.floor(width / beta / FACTOR) * FACTOR)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / FACTOR) * FACTOR
        w = math.ceil(width * beta / FACTOR) * FACTOR
    return h, w


def image_size(data: bytes) -> tuple[int, int]:
    """``(width, height)`` from a PNG or JPEG header; ValueError for anything else."""
    if data.startswith(_PNG):
        if len(data) < 24 or data[12:16] != b"IHDR":
            raise ValueError("the PNG has no IHDR chunk")
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data.startswith(b"\xff\xd8"):
        i = 2
        while i + 4 <= len(data):
            if data[i] != 0xFF:
                raise ValueError("the JPEG's markers are corrupt")
            marker = data[i + 1]
            if marker == 0xFF:  # fill byte
                i += 1
                continue
            if marker in (0x01, *range(0xD0, 0xD9)):  # markers without a length
                i += 2
                continue
            (length,) = struct.unpack(">H", data[i + 2 : i + 4])
            if marker in _SOF:
                if i + 9 > len(data):
                    break
                height, width = struct.unpack(">HH", data[i + 5 : i + 9])
                return int(width), int(height)
            if marker == 0xDA or length < 2:  # image data before any frame header
                break
            i += 2 + length
        raise ValueError("the JPEG has no frame header (SOF)")
    raise ValueError("the image is neither PNG nor JPEG")


def parse_image_url(url: Any, param: str) -> ImageInput:
    """An image from a ``data:`` URL; :class:`RequestRejected` (400) for anything else."""
    if not isinstance(url, str):
        raise RequestRejected(f"{param}: the image URL must be a string", param=param)
    if not url.startswith("data:"):
        scheme = url.split(":", 1)[0][:16] if ":" in url else "no scheme"
        raise RequestRejected(
            f"{param}: only data: URLs are accepted (this server fetches nothing; got {scheme})",
            param=param,
            code="invalid_image_url",
        )
    head, sep, payload = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        raise RequestRejected(f"{param}: the data URL must be base64 (data:image/...;base64,...)", param=param)
    try:
        data = base64.b64decode(payload, validate=True)
        width, height = image_size(data)
        h, w = smart_resize(height, width)
    except (binascii.Error, ValueError) as exc:
        raise RequestRejected(f"{param}: {exc}", param=param, code="invalid_image") from None
    tokens = (h // FACTOR) * (w // FACTOR)
    digest = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    return ImageInput(width, height, tokens, tokens * MERGE * MERGE, digest)


def chat_image_part(part: dict[str, Any], param: str) -> ImageInput:
    """A chat content part ``{"type": "image_url", "image_url": {"url": ...}}`` (a bare
    string ``image_url`` is accepted too, as vLLM does)."""
    value = part.get("image_url")
    url = value.get("url") if isinstance(value, dict) else value
    return parse_image_url(url, param)


def responses_image_part(part: dict[str, Any], param: str = "input") -> ImageInput:
    """A Responses API input part ``{"type": "input_image", "image_url": "data:..."}``."""
    return parse_image_url(part.get("image_url"), param)


def image_prompt_ids(images: list[ImageInput], vocab_size: int) -> list[int]:
    """The placeholder tokens of ``images``, in order (module docstring)."""
    ids: list[int] = []
    span = vocab_size - NUM_RESERVED
    for image in images:
        ids.extend([NUM_RESERVED + image.token_id % span] * image.tokens)
    return ids
