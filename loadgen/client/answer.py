"""Turns the bytes of one non-streamed (JSON) response into a :class:`RequestRecord`.

The non-streamed APIs (embeddings, rerank, score: a :class:`~loadgen.client.dialects.Dialect`
whose ``streams`` is False) answer with one JSON object. :class:`AnswerState` takes the
body's reads as :class:`~loadgen.client.stream.StreamState` does (``feed(chunk, t_ns)``,
stamped before anything is parsed), keeps at most :data:`MAX_BODY` bytes (more is
``invalid_response``), and at the end parses the whole body once (an answer over 1 MiB in
slices that leave the event loop free: :mod:`loadgen.client.skim`). ``done_ns`` is the last
read; no event is recorded, so a record has no TTFT or ITL. How the usage count is checked,
the one-result-per-input check and the failure kinds: docs/metrics.md, "Per request"
("Non-streamed APIs"). Timeouts, disconnects and HTTP errors are the transport's, as for a
stream; server text kept on a record goes through the transport's redactor before it is cut.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import orjson

from loadgen.client.bounded import MAX_ERROR, mib
from loadgen.client.dialects import Dialect
from loadgen.client.skim import LARGE, skim_numbers
from loadgen.client.stream import usage_count
from loadgen.errors import ErrorEvent, InvalidResponse, TransportError
from loadgen.records import RequestRecord, TokenSource

__all__ = ["MAX_BODY", "AnswerState", "BodyState"]

MAX_BODY = 64 << 20  # bytes of one non-streamed answer after decompression (embeddings of large batches)


class BodyState(Protocol):
    """What a transport feeds a 200 body to: :class:`~loadgen.client.stream.StreamState`
    (streamed APIs) or :class:`AnswerState` (one JSON answer)."""

    record: RequestRecord
    on_end: Callable[[], None] | None

    @property
    def failed(self) -> bool: ...

    @property
    def ended(self) -> bool: ...

    @property
    def backlog(self) -> int: ...

    def feed(self, chunk: bytes, t_ns: int) -> None: ...

    async def drain(self, limit: int = ...) -> None: ...

    async def end(self, t_ns: int) -> None: ...

    def salvage(self) -> None: ...


def _identity(text: str) -> str:
    return text


def _head(parts: list[bytes], n: int) -> bytes:
    """The first ``n`` bytes of ``parts`` joined."""
    out, size = [], 0
    for part in parts:
        if size >= n:
            break
        out.append(part)
        size += len(part)
    return b"".join(out)[:n]


class AnswerState:
    """Buffers one JSON answer (bounded) and parses it at the end into ``record``."""

    __slots__ = ("_error", "_head", "_last_ns", "_parts", "_redact", "_size", "dialect", "on_end", "record")

    def __init__(self, record: RequestRecord, dialect: Dialect, redact: Callable[[str], str] | None = None) -> None:
        self.record = record
        self.dialect = dialect
        self._redact = redact or _identity
        self._parts: list[bytes] = []
        self._size = 0
        self._head = b""  # a skimmed answer's first bytes as sent, for messages
        self._last_ns = 0
        self._error: TransportError | None = None
        self.on_end: Callable[[], None] | None = None  # the same hook as a stream's; an answer ends with its body

    @property
    def failed(self) -> bool:
        """The body grew past :data:`MAX_BODY` (raised by the next feed, drain or end)."""
        return self._error is not None

    @property
    def ended(self) -> bool:
        """Never before the body's end: a JSON answer is complete only when all of it came."""
        return False

    @property
    def backlog(self) -> int:
        """Nothing waits to be parsed before the end."""
        return 0

    def feed(self, chunk: bytes, t_ns: int) -> None:
        """Take one read (already stamped)."""
        if self._error is not None:
            raise self._error
        self._last_ns = t_ns
        self._size += len(chunk)
        if self._size > MAX_BODY:
            self._parts.clear()
            self._error = InvalidResponse(f"the answer is longer than {mib(MAX_BODY)}")
            if self.on_end is not None:  # no need to read more
                self.on_end()
            raise self._error
        self._parts.append(chunk)

    async def drain(self, limit: int = 0) -> None:
        """Nothing to drain; raises the failure found, if any."""
        if self._error is not None:
            raise self._error

    def salvage(self) -> None:
        """The request failed: nothing of a partial answer is kept."""
        self._parts.clear()

    async def end(self, t_ns: int) -> None:
        """The body ended at ``t_ns``: parse it, fill the record (or raise its failure). An
        answer over :data:`~loadgen.client.skim.LARGE` bytes is parsed without its arrays
        of numbers, made in slices (:mod:`loadgen.client.skim`) when the dialect allows it."""
        if self._error is None and self._size > LARGE and self.dialect.skim_answer:
            self._head = _head(self._parts, MAX_ERROR)
            self._parts = [await skim_numbers(self._parts)]
        self.close(t_ns)

    def close(self, t_ns: int) -> None:
        """:meth:`end`, without a loop."""
        if self._error is not None:
            raise self._error
        rec = self.record
        rec.done_ns = self._last_ns or t_ns
        data = b"".join(self._parts)
        self._parts.clear()
        head = self._head or data
        try:
            obj: Any = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise InvalidResponse(f"malformed JSON answer ({self._size} bytes): {self._clip(head, 120)!r}") from exc
        if not isinstance(obj, dict):
            raise InvalidResponse(f"the answer is not a JSON object: {self._clip(head, 120)!r}")
        info = self.dialect.parse_answer(obj)
        if info.error is not None:
            raise ErrorEvent(f"error in answer: {self._clip_text(info.error, 300)}")
        rec.prompt_tokens = usage_count(info.prompt_tokens)
        if info.prompt_tokens is not None and rec.prompt_tokens is None:
            rec.token_source = TokenSource.USAGE_REJECTED  # noted in the level's notes
        if info.vendor is not None:
            rec.server = info.vendor
        if info.results is None:
            raise InvalidResponse(f"the answer has no {self.dialect.results_key} list")
        if info.results != rec.inputs:
            raise InvalidResponse(
                f"the answer has {info.results} {self.dialect.results_key} for {rec.inputs} input(s) sent"
            )

    def _clip(self, data: bytes, n: int) -> str:
        return self._clip_text(data[:MAX_ERROR].decode("utf-8", errors="replace"), n)

    def _clip_text(self, text: str, n: int) -> str:
        return self._redact(text[:MAX_ERROR])[:n]
