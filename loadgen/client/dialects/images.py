"""A request's images as content parts: chat's ``image_url`` and the Responses API's ``input_image``.

Both carry the image inline as a ``data:`` URL (``data:image/png;base64,...``); loadgen
never sends a link for the server to fetch. The images go with the last user message
(:func:`with_image_parts`), after its text.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from loadgen.records import ImageData

__all__ = ["chat_image_parts", "data_url", "input_image_parts", "with_image_parts"]


def data_url(image: ImageData) -> str:
    """``data:<mime>;base64,<the bytes>``."""
    mime, data = image
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def chat_image_parts(images: Sequence[ImageData]) -> list[dict[str, Any]]:
    """Chat completions parts: ``{"type": "image_url", "image_url": {"url": data URL}}`` each."""
    return [{"type": "image_url", "image_url": {"url": data_url(im)}} for im in images]


def input_image_parts(images: Sequence[ImageData]) -> list[dict[str, Any]]:
    """Responses API parts: ``{"type": "input_image", "image_url": data URL}`` each."""
    return [{"type": "input_image", "image_url": data_url(im)} for im in images]


def with_image_parts(
    messages: list[dict[str, Any]], parts: list[dict[str, Any]], text_type: str = "text"
) -> list[dict[str, Any]]:
    """A copy of ``messages`` whose last user message's content is a list of parts: its
    text as ``{"type": text_type, "text": ...}`` (``"input_text"`` for the Responses API),
    then ``parts``. Without a user message, one is added holding only the parts."""
    out = list(messages)
    for i in range(len(out) - 1, -1, -1):
        if out[i].get("role") == "user":
            content = out[i].get("content", "")
            text = content if isinstance(content, list) else [{"type": text_type, "text": str(content)}]
            out[i] = {**out[i], "content": [*text, *parts]}
            return out
    out.append({"role": "user", "content": parts})
    return out
