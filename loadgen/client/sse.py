"""An incremental Server-Sent Events decoder that follows the WHATWG rules.

- Lines end at CR, LF or CRLF only (never ``str.splitlines()``: U+2028, U+2029, U+0085
  and friends are legal inside JSON text and must stay inside the ``data`` value).
- A CRLF split across two reads is one line end.
- An event is dispatched at a blank line; several ``data:`` lines join with ``\\n``.
- ``:`` starts a comment; ``event``, ``id`` (ignored if it holds NUL) and ``retry``
  (digits only) fields are kept; unknown fields are ignored; one space after the colon
  is stripped.
- A UTF-8 BOM at the very start of the stream is skipped.
- Bounded: a line, or one event's ``data`` lines together, over ``max_line`` bytes
  (:data:`loadgen.client.bounded.MAX_LINE`, 1 MiB) raises ``InvalidResponse``; the time
  spent is linear in the bytes fed, however long a line is.

One deliberate deviation: at end of stream, a pending event that lacks its final blank
line is still dispatched by :meth:`SSEDecoder.close` (the spec drops it). Several servers
end their stream with ``data: [DONE]\\n`` only, and a benchmark must not lose it.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.client.bounded import MAX_LINE, mib
from loadgen.errors import InvalidResponse

__all__ = ["SSEDecoder", "SSEEvent"]

_CR = 0x0D
_LF = 0x0A


@dataclass(slots=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Feed bytes as they arrive; get back the events they complete.

    Memory and time are linear in the bytes fed: a partial line is kept as a list of
    pieces and only new bytes are searched for a line end. A line, or one event's data
    lines together, longer than ``max_line`` bytes raises :class:`InvalidResponse`.
    """

    __slots__ = (
        "_data",
        "_dlen",
        "_event",
        "_has_data",
        "_last_id",
        "_parts",
        "_plen",
        "_retry",
        "_skip_lf",
        "_started",
        "max_line",
    )

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._parts: list[bytes] = []  # the line begun in earlier chunks (no CR or LF in it)
        self._plen = 0
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF belongs to it
        self._data: list[str] = []
        self._dlen = 0  # bytes of the pending event's data lines
        self._has_data = False
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None
        self._started = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode one chunk of the byte stream; return the events it completes."""
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == _LF:
                chunk = chunk[1:]
        if not self._started:
            head = b"".join(self._parts) + chunk
            if len(head) < 3 and b"\xef\xbb\xbf".startswith(head):
                self._parts, self._plen = [head], len(head)
                return []
            self._started = True
            self._parts, self._plen = [], 0
            chunk = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
        if b"\r" not in chunk:
            return self._feed_lf(chunk)
        events: list[SSEEvent] = []
        pos = 0
        n = len(chunk)
        while pos < n:
            lf = chunk.find(b"\n", pos)
            cr = chunk.find(b"\r", pos, lf if lf >= 0 else n)
            if cr >= 0:
                end = cr
                if cr + 1 < n:
                    nxt = cr + 2 if chunk[cr + 1] == _LF else cr + 1
                else:
                    nxt = n
                    self._skip_lf = True
            elif lf >= 0:
                end = lf
                nxt = lf + 1
            else:
                break
            if self._parts:
                self._check(self._plen + end - pos)
                raw = b"".join(self._parts) + chunk[pos:end]
                self._parts, self._plen = [], 0
            else:
                self._check(end - pos)
                raw = chunk[pos:end]
            ev = self._line(raw)
            if ev is not None:
                events.append(ev)
            pos = nxt
        if pos < n:
            self._check(self._plen + n - pos)
            self._parts.append(chunk[pos:] if pos else chunk)
            self._plen += n - pos
        return events

    def _feed_lf(self, chunk: bytes) -> list[SSEEvent]:
        """:meth:`feed` for a chunk without CR (the common case): its lines end at LF only,
        so ``bytes.split`` finds them all at once; the lines are handled in the same order,
        with the same checks, as the general loop does."""
        n = len(chunk)
        if (
            chunk[:6] == b"data: "
            and chunk.find(b"\n") == n - 2
            and chunk[-1] == _LF
            and not self._parts
            and not self._data
        ):
            return self._one_event(chunk)
        events: list[SSEEvent] = []
        lines = chunk.split(b"\n")
        rest = lines.pop()  # after the last LF: the start of a line (b"" when the chunk ends in LF)
        limit = self.max_line
        if lines and self._parts:
            self._check(self._plen + len(lines[0]))
            lines[0] = b"".join(self._parts) + lines[0]
            self._parts, self._plen = [], 0
        for raw in lines:
            if not raw:
                ev = self._dispatch()
                if ev is not None:
                    events.append(ev)
            elif raw[:6] == b"data: ":  # the usual field: decoded after its ASCII name, as _line would
                if len(raw) > limit:
                    self._check(len(raw))
                self._add_data(raw[6:].decode("utf-8", errors="replace"))
            else:
                self._check(len(raw))
                self._line(raw)  # a field line never completes an event
        if rest:
            self._check(self._plen + len(rest))
            self._parts.append(rest)
            self._plen += len(rest)
        return events

    def _one_event(self, chunk: bytes) -> list[SSEEvent]:
        """The commonest read: ``data: VALUE\\n\\n`` and nothing pending, one event."""
        self._check(len(chunk) - 2)
        value = chunk[6:-2].decode("utf-8", errors="replace")
        if len(value) > self.max_line:
            raise self._data_too_long()
        ev = SSEEvent(value, self._event or "message", self._last_id, self._retry)
        self._event = ""
        return [ev]

    def _add_data(self, value: str) -> None:
        """A ``data`` field's value: the event's data so far, within the limit once joined by LF."""
        self._dlen += len(value) + (1 if self._data else 0)  # joined by \n
        if self._dlen > self.max_line:
            raise self._data_too_long()
        self._data.append(value)
        self._has_data = True

    def _data_too_long(self) -> InvalidResponse:
        return InvalidResponse(f"an SSE event's data is longer than {mib(self.max_line)} (the client's limit)")

    def _check(self, size: int) -> None:
        if size > self.max_line:
            raise InvalidResponse(f"an SSE line is longer than {mib(self.max_line)} (the client's limit)")

    def close(self) -> list[SSEEvent]:
        """End of stream: flush a last line and a pending event (see module docstring)."""
        events: list[SSEEvent] = []
        if self._parts:
            ev = self._line(b"".join(self._parts))
            self._parts, self._plen = [], 0
            if ev is not None:
                events.append(ev)
        ev = self._line(b"")
        if ev is not None:
            events.append(ev)
        return events

    def _line(self, raw: bytes) -> SSEEvent | None:
        if not raw:
            return self._dispatch()
        line = raw.decode("utf-8", errors="replace")
        if line[0] == ":":
            return None
        colon = line.find(":")
        if colon >= 0:
            name = line[:colon]
            value = line[colon + 1 :]
            if value[:1] == " ":
                value = value[1:]
        else:
            name, value = line, ""
        if name == "data":
            self._add_data(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\x00" not in value:
                self._last_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._has_data:
            self._event = ""
            return None
        data = self._data
        ev = SSEEvent(
            data[0] if len(data) == 1 else "\n".join(data), self._event or "message", self._last_id, self._retry
        )
        self._data = []
        self._dlen = 0
        self._has_data = False
        self._event = ""
        return ev
