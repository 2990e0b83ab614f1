"""An incremental Server-Sent Events decoder that follows the WHATWG rules.

- Lines end at CR, LF or CRLF only (never ``str.splitlines()``: U+2028, U+2029, U+0085
  and friends are legal inside JSON text and must stay inside the ``data`` value).
- A CRLF split across two reads is one line end.
- An event is dispatched at a blank line; several ``data:`` lines join with ``\\n``.
- ``:`` starts a comment; ``event``, ``id`` (ignored if it holds NUL) and ``retry``
  (digits only) fields are kept; unknown fields are ignored; one space after the colon
  is stripped.
- A UTF-8 BOM at the very start of the stream is skipped.

One deliberate deviation: at end of stream, a pending event that lacks its final blank
line is still dispatched by :meth:`SSEDecoder.close` (the spec drops it). Several servers
end their stream with ``data: [DONE]\\n`` only, and a benchmark must not lose it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEDecoder"]

_CR = 0x0D
_LF = 0x0A


@dataclass(slots=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Feed bytes as they arrive; get back the events they complete."""

    __slots__ = ("_buf", "_skip_lf", "_data", "_has_data", "_event", "_last_id", "_retry", "_started")

    def __init__(self) -> None:
        self._buf = b""
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF belongs to it
        self._data: list[str] = []
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
        buf = self._buf + chunk if self._buf else chunk
        if not self._started:
            if len(buf) < 3 and b"\xef\xbb\xbf".startswith(buf):
                self._buf = buf
                return []
            self._started = True
            if buf.startswith(b"\xef\xbb\xbf"):
                buf = buf[3:]
        events: list[SSEEvent] = []
        pos = 0
        n = len(buf)
        while pos < n:
            lf = buf.find(b"\n", pos)
            cr = buf.find(b"\r", pos, lf if lf >= 0 else n)
            if cr >= 0:
                end = cr
                if cr + 1 < n:
                    nxt = cr + 2 if buf[cr + 1] == _LF else cr + 1
                else:
                    nxt = n
                    self._skip_lf = True
            elif lf >= 0:
                end = lf
                nxt = lf + 1
            else:
                break
            ev = self._line(buf[pos:end])
            if ev is not None:
                events.append(ev)
            pos = nxt
        self._buf = buf[pos:]
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: flush a last line and a pending event (see module docstring)."""
        events: list[SSEEvent] = []
        if self._buf:
            ev = self._line(self._buf)
            self._buf = b""
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
            self._data.append(value)
            self._has_data = True
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
        ev = SSEEvent(
            data="\n".join(self._data),
            event=self._event or "message",
            id=self._last_id,
            retry=self._retry,
        )
        self._data = []
        self._has_data = False
        self._event = ""
        return ev
