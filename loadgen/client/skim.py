"""A large JSON answer without its arrays of numbers, made in slices that leave the event loop free.

An embeddings answer near the 64 MiB cap is millions of floats. ``orjson.loads`` of it
builds every one of them as a Python object (1.3 GB for four such answers at once) and
holds the event loop, and the GIL, for the whole parse: a worker thread would not help,
since the parser never lets the GIL go. What loadgen reads of such an answer (the number of
results, ``usage``, ``error``, a vendor object) holds no array of numbers, so
:func:`skim_numbers` replaces each long array of numbers with ``[]``; what is left is small.

Each candidate (``[`` and ``]`` around at least :data:`_MIN_ARRAY` bytes that can only be
numbers, commas and blanks) is parsed on its own by ``orjson`` and replaced only when it is
a valid JSON array: the skimmed text is then valid JSON exactly when the answer is, and an
invalid number (``1e400``, ``01``, ``1,,2``) fails the answer as before. A candidate holds
no quote or backslash, so one inside a string only changes that string's text. Parsing one
array at a time keeps one vector's floats alive at most, and costs about what the parse of
the whole answer did. The work goes in slices of about :data:`SLICE` bytes, cut where no
candidate can cross (after ``]``, ``"`` or ``}``, or before ``[``), with a pause for the
event loop after each; an array longer than a slice is parsed in one go. The reads are
never joined into one copy of the whole answer.
"""

from __future__ import annotations

import asyncio
import re

import orjson

__all__ = ["LARGE", "SLICE", "skim_numbers"]

LARGE = 1 << 20  # answers longer than this are skimmed (a dialect that allows it: Dialect.skim_answer)
SLICE = 256 << 10  # bytes skimmed between two pauses for the event loop (about 2 ms)
_MIN_ARRAY = 256  # shorter arrays stay: parsing them with the rest costs less than a call each
_NUMBERS = re.compile(rb"\[[-+.0-9eE, \t\r\n]{%d,}\]" % _MIN_ARRAY)
_CUT = re.compile(rb'[\[\]"}]')  # where a slice may end: no candidate crosses these


def _last_cut(part: bytes) -> int:
    """The last place in ``part`` where a slice may end (0: none)."""
    return max(part.rfind(b"]") + 1, part.rfind(b'"') + 1, part.rfind(b"}") + 1, part.rfind(b"["), 0)


def _skim(data: bytes, pieces: list[bytes]) -> None:
    """Append ``data`` to ``pieces`` with its long, valid arrays of numbers as ``[]``."""
    view = memoryview(data)  # a candidate is parsed where it lies, not copied
    last = 0
    for m in _NUMBERS.finditer(data):
        start, stop = m.span()
        try:
            orjson.loads(view[start:stop])
        except orjson.JSONDecodeError:
            continue  # kept: the answer's own parse fails on it
        pieces.append(data[last:start])
        pieces.append(b"[]")
        last = stop
    pieces.append(data[last:] if last else data)


async def skim_numbers(parts: list[bytes]) -> bytes:
    """The answer whose reads are ``parts`` (emptied as they are used) with every long,
    valid array of JSON numbers replaced by ``[]``, made in slices with a pause for the
    event loop after each."""
    pieces: list[bytes] = []
    pending: list[bytes] = []
    size = 0
    for i, part in enumerate(parts):
        parts[i] = b""  # freed as the answer is skimmed
        size += len(part)
        cut = _last_cut(part) if size >= SLICE else 0
        if not cut:
            pending.append(part)
            continue
        pending.append(part[:cut])
        _skim(b"".join(pending), pieces)
        pending, size = [part[cut:]], len(part) - cut
        await asyncio.sleep(0)
    parts.clear()
    _skim(b"".join(pending), pieces)
    return b"".join(pieces)
