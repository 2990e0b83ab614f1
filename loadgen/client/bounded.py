"""Every read from the network is bounded: the limits, and a decoder that keeps to them.

A server, or anything between it and loadgen, can answer with more than anyone asked
for: one SSE line of hundreds of megabytes, a gzip body that inflates a thousandfold, a
model list of gigabytes, a byte every few seconds. Each read therefore has a cap on the
bytes kept *after* decompression and each phase a wall-clock deadline:

=========================  ===================  =========================================
what                        limit                over it
=========================  ===================  =========================================
one SSE line / one event    :data:`MAX_LINE`     the request is ``invalid_response``
an error body (non-200)     :data:`MAX_ERROR`    the rest is not read (300 characters kept)
``/v1/models``, the probe   :data:`MAX_ANSWER`   one-line error (discovery) / not calibrated
inflation of any body       :data:`MAX_RATIO`    as the body's own cap (after 1 MiB out)
discovery, whole phase      :data:`DISCOVERY_S`  one-line error
=========================  ===================  =========================================

aiohttp (3.12 and later) inflates in bounded steps itself; for httpx, whose decoders
inflate a whole network read at once, :class:`Inflater` decodes the raw bytes in steps
of :data:`STEP` bytes, so memory stays bounded by the cap whatever the ratio.
"""

from __future__ import annotations

import zlib
from typing import AsyncIterator

from loadgen.errors import InvalidResponse

__all__ = [
    "MAX_LINE", "MAX_ERROR", "MAX_ANSWER", "MAX_RATIO", "DISCOVERY_S", "STEP", "ACCEPT_ENCODING",
    "BodyTooLarge", "Inflater", "read_capped", "mib",
]  # fmt: skip

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
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n >> 10} KiB"


class BodyTooLarge(InvalidResponse):
    """A body over its cap (after decompression), or one that inflates past :data:`MAX_RATIO`."""


class Inflater:
    """Decodes one body's raw bytes (``Content-Encoding`` identity, gzip or deflate) in
    bounded steps; :meth:`feed` yields the decoded pieces. ``cap``: most bytes decoded
    (``None``: no total, e.g. a stream bounded by its line cap and its timeout)."""

    __slots__ = ("cap", "_z", "_raw", "_out", "_deflate")

    def __init__(self, encoding: str | None, cap: int | None = None) -> None:
        enc = (encoding or "identity").strip().lower()
        self.cap = cap
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

    def feed(self, raw: bytes) -> list[bytes]:
        """The decoded bytes of ``raw``, in pieces of at most :data:`STEP` bytes."""
        self._raw += len(raw)
        if self._z is None:
            return [self._count(raw)] if raw else []
        pieces: list[bytes] = []
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
                pieces.append(self._count(piece))
            data = self._z.unconsumed_tail
            if self._z.eof:
                break
        return pieces

    def _count(self, piece: bytes) -> bytes:
        self._out += len(piece)
        if self.cap is not None and self._out > self.cap:
            raise BodyTooLarge(f"the body is larger than {mib(self.cap)} (after decompression)")
        if self._out > _RATIO_AFTER and self._out > MAX_RATIO * max(self._raw, 1):
            raise BodyTooLarge(f"the body inflates more than {MAX_RATIO}-fold (a decompression bomb?)")
        return piece


async def read_capped(raw: AsyncIterator[bytes], encoding: str | None, cap: int, *, truncate: bool) -> bytes:
    """The decoded body of ``raw`` up to ``cap`` bytes. ``truncate``: stop reading at the
    cap and keep what came (an error body); else a larger body raises :class:`BodyTooLarge`."""
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
