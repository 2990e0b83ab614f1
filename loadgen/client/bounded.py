"""Every read from the network is bounded: the limits, and a decoder that keeps to them.

A server, or anything between it and loadgen, can answer with more than anyone asked for
(a line of hundreds of megabytes, a gzip bomb, a byte every few seconds). Each read has a
cap on the bytes kept *after* decompression and each phase a wall-clock deadline:
:data:`MAX_LINE` (one SSE line or event), :data:`MAX_ERROR` (an error body),
:data:`MAX_ANSWER` (``/v1/models``, the probe), :data:`MAX_RATIO` (inflation) and
:data:`DISCOVERY_S` (discovery). Each limit's value and what happens over it:
docs/client.md, "Every read is bounded".

aiohttp (3.12 and later) inflates in bounded steps itself; for httpx, whose decoders
inflate a whole network read at once, :class:`Inflater` decodes the raw bytes in steps
of :data:`STEP` bytes, so memory stays bounded by the cap whatever the ratio.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator

from loadgen.errors import InvalidResponse

__all__ = [
    "ACCEPT_ENCODING",
    "DISCOVERY_S",
    "MAX_ANSWER",
    "MAX_ERROR",
    "MAX_LINE",
    "MAX_RATIO",
    "STEP",
    "Inflater",
    "mib",
    "read_capped",
]

MAX_LINE = 1 << 20  # bytes of one SSE line, and of one event's data lines together
MAX_ERROR = 64 << 10  # bytes of an error body read (its first 300 characters are kept)
MAX_ANSWER = 8 << 20  # bytes of a discovery or probe answer
MAX_RATIO = 200  # decompressed / compressed bytes, checked once 1 MiB came out
_RATIO_AFTER = 1 << 20
DISCOVERY_S = 30.0  # the whole of discovery (each read also has its own timeout)
STEP = 64 << 10  # bytes inflated per step
ACCEPT_ENCODING = "gzip, deflate"  # what :class:`Inflater` decodes


def mib(n: int) -> str:
    """``n`` bytes as the limits are documented: ``1 MiB``, ``64 KiB``."""
    if n >= 1 << 20 and not n % (1 << 20):
        return f"{n >> 20} MiB"
    return f"{n >> 10} KiB" if n >= 1 << 10 and not n % (1 << 10) else f"{n} bytes"


class Inflater:
    """Decodes one body's raw bytes (``Content-Encoding`` identity, gzip or deflate) in
    bounded steps; :meth:`feed` returns the decoded pieces. ``cap``: most bytes decoded;
    ``max_ratio``: most decoded per compressed byte (checked after 1 MiB). ``None``: no
    limit (a stream, bounded by its line cap, its backlog and its timeout instead).
    Over a limit: :class:`InvalidResponse`."""

    __slots__ = ("_deflate", "_out", "_raw", "_z", "cap", "max_ratio")

    def __init__(self, encoding: str | None, cap: int | None = None, max_ratio: int | None = MAX_RATIO) -> None:
        enc = (encoding or "identity").strip().lower()
        self.cap = cap
        self.max_ratio = max_ratio
        self._deflate = enc == "deflate"
        if enc in ("identity", ""):
            self._z = None
        elif enc in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif enc == "deflate":
            self._z = zlib.decompressobj(zlib.MAX_WBITS)  # zlib-wrapped; raw deflate on its first byte
        else:
            raise InvalidResponse(f"unsupported Content-Encoding {enc[:40]!r} (asked for {ACCEPT_ENCODING})")
        self._raw = 0
        self._out = 0

    def feed(self, raw: bytes) -> Iterator[bytes]:
        """The decoded bytes of ``raw``, in pieces of at most :data:`STEP` bytes, each
        inflated only when asked for (a reader that stops early inflates no more)."""
        self._raw += len(raw)
        if self._z is None:
            if raw:
                yield self._count(raw)
            return
        data = raw
        while data:
            try:
                piece = self._z.decompress(data, STEP)
            except zlib.error as exc:
                if self._deflate and self._out == 0 and self._raw == len(raw):  # raw deflate, no zlib header
                    self._z, self._deflate = zlib.decompressobj(-zlib.MAX_WBITS), False
                    continue
                raise InvalidResponse(f"the compressed body is corrupt ({exc})") from exc
            if piece:
                yield self._count(piece)
            data = self._z.unconsumed_tail
            if self._z.eof:
                break

    def _count(self, piece: bytes) -> bytes:
        self._out += len(piece)
        if self.cap is not None and self._out > self.cap:
            raise InvalidResponse(f"the body is larger than {mib(self.cap)} (after decompression)")
        ratio = self.max_ratio
        if ratio is not None and self._out > _RATIO_AFTER and self._out > ratio * max(self._raw, 1):
            raise InvalidResponse(f"the body inflates more than {ratio}-fold (a decompression bomb?)")
        return piece


async def read_capped(raw: AsyncIterator[bytes], encoding: str | None, cap: int, *, truncate: bool) -> bytes:
    """The decoded body of ``raw`` up to ``cap`` bytes. ``truncate``: stop reading at the
    cap and keep what came (an error body); else a larger body raises :class:`InvalidResponse`."""
    inflater = Inflater(encoding, None if truncate else cap)
    parts: list[bytes] = []
    size = 0
    async for chunk in raw:
        for piece in inflater.feed(chunk):
            parts.append(piece)
            size += len(piece)
            if truncate and size >= cap:
                return b"".join(parts)[:cap]
    return b"".join(parts)
