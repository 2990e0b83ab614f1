"""Images in prompts: a workload's ``[images]`` table and the images each request sends.

**Synthesised images** are PNG, written with the standard library (``zlib`` and
``struct``), their pixels from the request's own seeded generator (every request sends
different bytes; the same seed the same images), a few random rows repeated so that they
stay cheap. **Files** (PNG, JPEG, GIF or WebP, told by their first bytes) are read when the
workload is parsed and drawn at random. A request's images depend only on the seed and its
index, so adding ``[images]`` changes no prompt text. Limits: :data:`MAX_COUNT`,
:data:`MAX_SIDE`, :data:`MAX_FILE_BYTES`, :data:`MAX_FILES_BYTES`; an ``http(s)://``
reference is refused.

The table's keys and what a record carries: workloads/README.md, "Images".
"""

from __future__ import annotations

import glob
import hashlib
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.errors import WorkloadError
from loadgen.inputs import open_input
from loadgen.records import ImageData
from loadgen.workload.distributions import Distribution, parse_distribution

__all__ = [
    "FORMATS",
    "MAX_COUNT",
    "MAX_SIDE",
    "ImageConfig",
    "files_digest",
    "mime_of",
    "parse_images",
    "png",
    "read_image",
    "request_images",
]

FORMATS = ("png",)
MAX_COUNT = 64  # images in one request
MAX_SIDE = 4096  # pixels of a synthesised image's side
MAX_FILE_BYTES = 20 << 20  # one image file
MAX_FILES_BYTES = 256 << 20  # all of a workload's image files together (held in memory)
_KEYS = ("count", "width", "height", "format", "files")
_WINDOW = 32 << 10  # deflate's window: the distinct rows must fit in it to be found again
_MAX_ROWS = 8
_M64 = (1 << 64) - 1
_TAG = 0x1A6E5  # keeps the images' generator apart from the one that draws lengths
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


@dataclass(slots=True)
class ImageConfig:
    """A workload's ``[images]`` table: ``count`` a request; synthesised ``width`` x
    ``height`` PNGs, or one of ``files`` (MIME type and bytes, read when parsed)."""

    count: Distribution
    width: Distribution | None = None
    height: Distribution | None = None
    format: str = "png"
    files: tuple[ImageData, ...] = ()
    patterns: tuple[str, ...] = ()  # the globs, made absolute (for describe and a resumed run)

    def describe(self) -> dict[str, Any]:
        """Plain JSON-able description (for ``run.json``; :func:`parse_images` of it without
        ``matched`` and ``sha256`` reads the same images again)."""
        if self.files:
            return {
                "count": self.count.describe(),
                "files": list(self.patterns),
                "matched": len(self.files),
                "sha256": files_digest(self.files),
            }
        assert self.width is not None and self.height is not None
        return {
            "count": self.count.describe(),
            "width": self.width.describe(),
            "height": self.height.describe(),
            "format": self.format,
        }


def files_digest(files: tuple[ImageData, ...]) -> str:
    """SHA-256 of the image files' bytes in order (a resumed run checks it has the same ones)."""
    h = hashlib.sha256()
    for _, data in files:
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int, height: int, rng: np.random.Generator) -> bytes:
    """A valid 8-bit RGB PNG of ``width`` x ``height`` pixels: a few rows of random pixels
    from ``rng``, repeated down the image (see the module docstring)."""
    if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
        raise ValueError(f"image sides must be in [1, {MAX_SIDE}], got {width}x{height}")
    stride = 3 * width + 1  # a filter byte (0: none), then the row's RGB bytes
    k = max(1, min(_MAX_ROWS, height, _WINDOW // stride - 1))
    rows = np.zeros((k, stride), dtype=np.uint8)
    rows[:, 1:] = rng.integers(0, 256, size=(k, stride - 1), dtype=np.uint8)
    block = rows.tobytes()
    z = zlib.compressobj(1)
    parts = [z.compress(block) for _ in range(height // k)]  # fed in pieces: the raw image is never whole
    parts.append(z.compress(block[: (height % k) * stride]))
    parts.append(z.flush())
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", b"".join(parts)) + _chunk(b"IEND", b"")


def _draw(d: Distribution, rng: np.random.Generator, n: int, cap: int) -> list[int]:
    return np.minimum(d.sample(rng, n), cap).tolist()  # type: ignore[no-any-return]


def request_images(cfg: ImageConfig, seed: int, index: int) -> tuple[ImageData, ...]:
    """The images request ``index`` of a run with ``seed`` sends (the same ones every time)."""
    rng = np.random.default_rng([seed & _M64, _TAG, index & _M64])
    n = _draw(cfg.count, rng, 1, MAX_COUNT)[0]
    if cfg.files:
        return tuple(cfg.files[i] for i in rng.integers(0, len(cfg.files), size=n).tolist())
    assert cfg.width is not None and cfg.height is not None
    widths, heights = _draw(cfg.width, rng, n, MAX_SIDE), _draw(cfg.height, rng, n, MAX_SIDE)
    return tuple(("image/png", png(w, h, rng)) for w, h in zip(widths, heights))


def mime_of(data: bytes) -> str | None:
    """An image's MIME type told by its first bytes (PNG, JPEG, GIF, WebP); None: none of them."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _remote(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower().startswith(("http://", "https://"))


def read_image(path: Path, source: str, key: str | None = None) -> ImageData:
    """One local image file (PNG, JPEG, GIF or WebP, at most :data:`MAX_FILE_BYTES`): its
    MIME type and bytes; a one-line :class:`~loadgen.errors.WorkloadError` otherwise."""
    try:
        with open_input(path) as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise WorkloadError(f"cannot read {path}: {exc.strerror or exc}", source=source, key=key) from None
    if len(data) > MAX_FILE_BYTES:
        raise WorkloadError(f"{path} is over {MAX_FILE_BYTES >> 20} MiB", source=source, key=key)
    mime = mime_of(data)
    if mime is None:
        raise WorkloadError(f"{path} is not a PNG, JPEG, GIF or WebP image", source=source, key=key)
    return mime, data


def _read_files(patterns: list[str], base: Path, source: str) -> tuple[ImageData, ...]:
    out: list[ImageData] = []
    total = 0
    for pattern in patterns:
        full = pattern if Path(pattern).is_absolute() else str(base / pattern)
        matches = sorted(glob.glob(full, recursive=True))
        if not matches:
            raise WorkloadError(f"{pattern!r} matches no file (relative to {base})", source=source, key="images.files")
        for name in matches:
            image = read_image(Path(name), source, "images.files")
            total += len(image[1])
            if total > MAX_FILES_BYTES:
                raise WorkloadError(
                    f"the image files are over {MAX_FILES_BYTES >> 20} MiB together", source=source, key="images.files"
                )
            out.append(image)
    return tuple(out)


def parse_images(table: object, source: str, base: Path) -> ImageConfig:
    """The ``[images]`` table of the workload file ``source`` (in folder ``base``);
    a :class:`~loadgen.errors.WorkloadError` naming the key when it is malformed."""

    def err(key: str, message: str) -> WorkloadError:
        return WorkloadError(message, source=source, key=f"images.{key}" if key else "images")

    if not isinstance(table, dict):
        raise err("", f"expected a table with {', '.join(_KEYS)}, got {type(table).__name__}")
    for k in table:
        if k not in _KEYS:
            raise err(k, f"unknown key {k!r}; allowed keys: {', '.join(_KEYS)}")

    def dist(k: str, cap: int, default: int | None = None) -> Distribution:
        if k not in table:
            if default is not None:
                return parse_distribution(default, source=source, key=f"images.{k}")
            raise err(
                k, 'missing; it is required (pixels: a whole number or a distribution, e.g. "uniform:min=256,max=1024")'
            )
        v = table[k]
        if _remote(v):
            raise err(k, "a number or a distribution, not a URL")
        if isinstance(v, bool) or not isinstance(v, (str, int, dict)):
            raise err(k, f"expected a whole number, spec text or a distribution table, got {type(v).__name__} {v!r}")
        d = parse_distribution(v, source=source, key=f"images.{k}", base_dir=base)
        probe = d.sample(np.random.default_rng(0), 4096)
        if int(probe.max()) > cap:
            raise err(k, f"at most {cap:,}, but {d.describe()} draws up to {int(probe.max()):,} (give it a max)")
        return d

    count = dist("count", MAX_COUNT, default=1)
    fmt = table.get("format", "png")
    if not isinstance(fmt, str) or fmt.lower() not in FORMATS:
        why = " (JPEG needs an image library, none is a dependency)" if str(fmt).lower() in ("jpeg", "jpg") else ""
        raise err("format", f"unknown format {fmt!r}; synthesised images are: {', '.join(FORMATS)}{why}")
    if "files" in table:
        files = table["files"]
        if isinstance(files, str):
            files = [files]
        if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
            raise err("files", "expected a path or glob, or an array of them (relative to the workload file)")
        remote = [f for f in files if _remote(f)]
        if remote:
            raise err("files", f"{remote[0]!r} is a URL; loadgen fetches nothing: give local files")
        for k in ("width", "height", "format"):
            if k in table:
                raise err(k, "give either files or width/height/format (a synthesised image), not both")
        absolute = tuple(f if Path(f).is_absolute() else str(base / f) for f in files)
        return ImageConfig(count=count, files=_read_files(files, base, source), patterns=absolute)
    return ImageConfig(count=count, width=dist("width", MAX_SIDE), height=dist("height", MAX_SIDE), format="png")
