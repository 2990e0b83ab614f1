"""A dataset's image column: the images an entry sends with its prompt.

An entry (JSON, JSONL, CSV or a Parquet row) may name its images in an ``image`` field
(ShareGPT-4V / LLaVA style; ``images`` also works): a local file, or an array of them,
relative to ``image_root`` (the ``[dataset]`` key; default: the dataset file's folder).
A Parquet column may instead hold the bytes, as Hugging Face ``datasets`` stores an
``Image`` feature: a struct ``{bytes, path}`` (a null ``bytes`` reads ``path``) or plain
bytes. A ``<image>`` placeholder in the prompt of an entry with images is removed: the
image travels as its own content part.

**When files are checked.** While the dataset is indexed, every reference of every entry
is checked to be a local regular file that exists (one ``stat`` each): a missing file, a
folder or a device (each named as what it is) or an ``http(s)://`` reference (loadgen
fetches nothing) is a one-line error naming the row, before anything is sent, rather than
one failed request per pass over that entry. The bytes are read when a request needs them
(a dataset of 100,000 images is never held whole) and then kept in a small cache; an image
that went missing or is not a PNG, JPEG, GIF or WebP by then stops the run with a one-line
error naming the row.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.errors import WorkloadError
from loadgen.inputs import input_problem
from loadgen.records import ImageData, Prompt
from loadgen.workload.images import MAX_COUNT, mime_of, read_image

__all__ = ["COLUMNS", "ImageRef", "ImageResolver", "image_refs", "with_images"]

ImageRef = str | ImageData  # a resolved local path, or (MIME type, bytes) from a Parquet column
COLUMNS = ("image", "images")
_PLACEHOLDER = "<image>"
_CACHE = 256  # images kept read


def _ref(v: Any, base: Path, src: str, where: str, fld: str) -> ImageRef:
    if isinstance(v, dict) or (hasattr(v, "keys") and not isinstance(v, str)):
        data, name = v.get("bytes"), v.get("path")
        if data is not None:
            v = data
        elif name is not None:
            v = name
        else:
            raise WorkloadError("an image struct with neither bytes nor path", source=f"{src}: {where}", key=fld)
    if isinstance(v, (bytes, bytearray, memoryview)):
        data = bytes(v)
        mime = mime_of(data)
        if mime is None:
            raise WorkloadError("the bytes are not a PNG, JPEG, GIF or WebP image", source=f"{src}: {where}", key=fld)
        return mime, data
    if not isinstance(v, str) or not v.strip():
        raise WorkloadError(f"expected a file name, got {type(v).__name__}", source=f"{src}: {where}", key=fld)
    if v.strip().lower().startswith(("http://", "https://")):
        raise WorkloadError(
            f"{v!r} is a URL; loadgen fetches nothing: give local files", source=f"{src}: {where}", key=fld
        )
    full = v if os.path.isabs(v) else str(base / v)
    why = input_problem(full)  # (a stat: a folder or a device is named for what it is, not "missing")
    if why is not None:
        sep = " " if why.startswith("is ") else ": "
        msg = f"no such image file {full}" if why == "no such file" else f"image {full}{sep}{why}"
        raise WorkloadError(msg, source=f"{src}: {where}", key=fld)
    return full


def image_refs(obj: Any, base: Path, src: str, where: str) -> tuple[ImageRef, ...]:
    """The images entry ``obj`` names (none: an empty tuple), checked as the module says."""
    if not isinstance(obj, dict):
        return ()
    col = next((c for c in COLUMNS if c in obj), None)
    value = None if col is None else obj[col]
    if value is None or (isinstance(value, str) and not value.strip()):  # (a CSV cell left empty)
        return ()
    many = isinstance(value, (list, tuple, np.ndarray))
    items = list(value) if many else [value]
    if len(items) > MAX_COUNT:
        raise WorkloadError(f"at most {MAX_COUNT} images an entry, got {len(items)}", source=f"{src}: {where}", key=col)
    return tuple(_ref(v, base, src, where, f"{col}[{i}]" if many else str(col)) for i, v in enumerate(items))


def _strip(prompt: Prompt) -> Prompt:
    if isinstance(prompt, str):
        return prompt.replace(_PLACEHOLDER, "").strip() or prompt
    return [{**m, "content": m["content"].replace(_PLACEHOLDER, "").strip()} for m in prompt]


def with_images(parse: Callable[[str, Any, str], Any], base: str, src: str, obj: Any, where: str) -> Any:
    """``parse(src, obj, where)``'s entry with the images of ``obj`` as its fourth part."""
    entry = parse(src, obj, where)
    if entry is None:
        return None
    refs = image_refs(obj, Path(base), src, where)
    prompt = _strip(entry[0]) if refs else entry[0]
    return prompt, entry[1], entry[2], refs


class ImageResolver:
    """An entry's references as the request's images: files read when first asked for,
    the last :data:`_CACHE` of them kept."""

    def __init__(self, src: str) -> None:
        self.src = src
        self._cache: dict[str, ImageData] = {}

    def __call__(self, refs: tuple[ImageRef, ...], row: int) -> tuple[ImageData, ...]:
        return tuple(r if isinstance(r, tuple) else self._file(r, row) for r in refs)

    def _file(self, name: str, row: int) -> ImageData:
        got = self._cache.get(name)
        if got is None:
            got = read_image(Path(name), f"{self.src}: row {row}", "image")
            if len(self._cache) >= _CACHE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[name] = got
        return got
