"""A dataset file read as a stream of entries with their byte spans, and entries read back by span.

A JSONL line, a CSV record or an element of a JSON array is parsed one at a time, so
reading a file costs one entry's memory, not the file's; the caller keeps what it needs
(counts, the span) and reads the few entries a run sends back with :class:`FileEntries`.
The JSON array is split into elements by a scanner over 256 KiB blocks (strings, brackets
and commas; each element then parsed by orjson), so a 300 MB ShareGPT file is never held
whole.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from loadgen.errors import WorkloadError
from loadgen.inputs import open_input

__all__ = [
    "EntryView",
    "FileEntries",
    "HeldEntries",
    "Span",
    "Store",
    "csv_spans",
    "json_array_spans",
    "jsonl_spans",
    "stamp",
]

Span = tuple[int, int, str, Any]  # byte offset, length, where ("line 3", "entry 2"), the parsed entry
_BLOCK = 1 << 18
_BOM = b"\xef\xbb\xbf"
_TOKEN = re.compile(rb'["\[\]{}]')
_SCALAR_END = re.compile(rb"[,\]\s]")
_SPACES = re.compile(rb"[ \t\r\n]+")


def _err(path: str, where: str, message: str) -> WorkloadError:
    return WorkloadError(message, source=f"{path}: {where}")


def stamp(fh: BinaryIO) -> tuple[int, int]:
    """The open file's size and modification time: an entry read back checks them."""
    st = os.fstat(fh.fileno())
    return st.st_size, st.st_mtime_ns


def jsonl_spans(fh: BinaryIO, path: str) -> Iterator[Span]:
    """Each non-blank line of a JSONL file, parsed."""
    offset = 0
    for n, line in enumerate(fh, start=1):
        if line.strip():
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise _err(path, f"line {n}", f"not valid JSON: {exc.msg}") from None
            yield offset, len(line), f"line {n}", obj
        offset += len(line)


def _string_end(buf: bytearray, start: int) -> int:
    """The end of the JSON string whose text begins at ``buf[start]`` (past its closing
    quote), or -1 when the buffer ends first."""
    i = start
    while True:
        q = buf.find(b'"', i)
        if q < 0:
            return -1
        k = q
        while k > start and buf[k - 1] == 0x5C:  # a quote after an odd run of backslashes is escaped
            k -= 1
        if (q - k) % 2 == 0:
            return q + 1
        i = q + 1


def _kind_of_text(head: bytes) -> str:
    c = head[:1]
    return {b"{": "an object", b'"': "a string", b"t": "a boolean", b"f": "a boolean", b"n": "null"}.get(
        c, "a number" if c in b"-0123456789" and c else ""
    )


class _Scanner:
    """A JSON array's elements as byte spans, read in blocks (``buf[at:]`` is still to scan)."""

    def __init__(self, fh: BinaryIO, path: str) -> None:
        self.fh, self.path = fh, path
        self.buf, self.at, self.base, self.lines, self.eof = bytearray(), 0, 0, 1, False  # base: file offset of buf[0]

    def more(self) -> int:
        """Reads a block; returns how far the buffer moved (-1: nothing left)."""
        if self.eof:
            return -1
        block = self.fh.read(_BLOCK)
        self.eof = not block
        shift = self.at
        del self.buf[:shift]  # (in place: the buffer holds a block and the element being read)
        self.buf += block
        self.base, self.at = self.base + shift, 0
        return shift if block else -1

    def drop(self, pos: int) -> None:
        self.lines += self.buf.count(b"\n", self.at, pos)
        self.at = pos

    def skip_space(self) -> int:
        """Moves past the white space ahead; returns the next byte (-1 at the end)."""
        while True:
            m = _SPACES.match(self.buf, self.at)
            self.drop(m.end() if m else self.at)
            if self.at < len(self.buf):
                return self.buf[self.at]
            if self.more() < 0:
                return -1

    def bad(self, message: str, pos: int | None = None) -> WorkloadError:
        line = self.lines + self.buf.count(b"\n", self.at, self.at if pos is None else pos)
        return _err(self.path, f"line {line}", f"not valid JSON: {message}")

    def element_end(self) -> int:
        """The end of the element at ``buf[at]`` (an object, an array or a scalar)."""
        if self.buf[self.at] not in b"{[":
            return self.scalar_end()
        buf, search, depth, pos = self.buf, _TOKEN.search, 0, self.at
        while True:
            m = search(buf, pos)
            if m is not None:
                i = m.start()
                c = buf[i]
                if c == 0x22:  # a string: skipped whole
                    end = _string_end(buf, i + 1)
                    if end >= 0:
                        pos = end
                        continue
                else:
                    depth += 1 if c in b"{[" else -1
                    pos = i + 1
                    if depth == 0:
                        return pos
                    continue
            again = m.start() if m is not None else len(buf)  # the element goes on in the next block
            shift = self.more()
            if shift < 0:
                raise self.bad("unexpected end of data", len(buf))
            pos = again - shift

    def scalar_end(self) -> int:
        """The end of the string, number or literal at ``buf[at]``."""
        while True:
            if self.buf[self.at] == 0x22:
                end = _string_end(self.buf, self.at + 1)
            else:
                m = _SCALAR_END.search(self.buf, self.at)
                end = -1 if m is None else m.start()
            if end >= 0:
                return end
            if self.more() < 0:
                raise self.bad("unexpected end of data", len(self.buf))

    def elements(self) -> Iterator[Span]:
        first = self.skip_space()
        if first != ord("["):
            kind = _kind_of_text(bytes(self.buf[self.at : self.at + 1]))
            if kind:
                raise _err(self.path, "line 1", f"expected a JSON array of entries, got {kind}")
            raise self.bad("expected a JSON array" if first >= 0 else "empty file")
        self.drop(self.at + 1)
        i = 0
        if self.skip_space() == ord("]"):
            self.drop(self.at + 1)
        else:
            while True:
                end = self.element_end()
                raw = self.buf[self.at : end]
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise self.bad(exc.msg, self.at + min(exc.pos, len(raw))) from None
                yield self.base + self.at, end - self.at, f"entry {i}", obj
                self.drop(end)
                i += 1
                nxt = self.skip_space()
                if nxt == ord("]"):
                    self.drop(self.at + 1)
                    break
                if nxt != ord(","):
                    raise self.bad("unexpected end of data" if nxt < 0 else "expected ',' or ']' after an entry")
                self.drop(self.at + 1)
                self.skip_space()
        if self.skip_space() != -1:
            raise self.bad("trailing data after the array")


def json_array_spans(fh: BinaryIO, path: str) -> Iterator[Span]:
    """Each element of a file that holds one JSON array, parsed."""
    return _Scanner(fh, path).elements()


def csv_spans(fh: BinaryIO, path: str) -> tuple[list[str], Iterator[Span]]:
    """The header of a CSV file and its records as dicts (a record may span lines)."""
    end = [0]

    def lines() -> Iterator[str]:
        first = True
        for raw in fh:
            end[0] += len(raw)
            yield (raw[3:] if first and raw.startswith(_BOM) else raw).decode("utf-8")
            first = False

    reader = csv.reader(lines())
    header = next(reader, [])

    def records() -> Iterator[Span]:
        start = end[0]
        for rec in reader:
            if rec:  # (a blank line is no record)
                yield start, end[0] - start, f"line {reader.line_num}", dict(zip(header, rec))
            start = end[0]

    return header, records()


class FileEntries:
    """Entries of a dataset file read back by their spans (``parse(obj, where)`` makes an
    entry of one parsed object). Pickles as its path and spans: a worker process opens
    the file again, and refuses it if it changed since it was indexed."""

    def __init__(
        self,
        path: str,
        fmt: str,
        spans: np.ndarray,
        header: list[str],
        file_stamp: tuple[int, int],
        parse: Callable[[Any, str], Any],
    ) -> None:
        self.path, self.fmt, self.spans, self.header, self.stamp, self.parse = (
            path,
            fmt,
            spans,
            header,
            file_stamp,
            parse,
        )
        self._fh: BinaryIO | None = None
        self._cache: dict[int, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("path", "fmt", "spans", "header", "stamp", "parse")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**{("file_stamp" if k == "stamp" else k): v for k, v in state.items()})  # type: ignore[misc]

    def __len__(self) -> int:
        return int(self.spans.shape[0])

    def _file(self) -> BinaryIO:
        if self._fh is None:
            try:
                fh = open_input(Path(self.path))
            except OSError as exc:
                raise WorkloadError(f"cannot read: {exc.strerror or exc}", source=self.path) from None
            if stamp(fh) != self.stamp:
                fh.close()
                raise WorkloadError(
                    "changed since it was read: the run's prompts would not be the ones measured", source=self.path
                )
            self._fh = fh
        return self._fh

    def read(self, k: int) -> Any:
        """Entry ``k`` read from the file (not cached)."""
        offset, length = (int(v) for v in self.spans[k])
        fh = self._file()
        fh.seek(offset)
        raw = fh.read(length)
        where = f"the entry at byte {offset}"
        if self.fmt == "csv":
            rec = next((r for r in csv.reader(io.StringIO(raw.decode("utf-8"))) if r), [])
            return self.parse(dict(zip(self.header, rec)), where)
        try:
            return self.parse(orjson.loads(raw), where)
        except orjson.JSONDecodeError:
            raise WorkloadError("changed since it was read", source=self.path) from None

    def get(self, k: int) -> Any:
        """Entry ``k``, cached (a run sends an entry again on every pass)."""
        if k not in self._cache:
            if len(self._cache) >= 4096:
                self._cache.clear()
            self._cache[k] = self.read(k)
        return self._cache[k]

    def close(self) -> None:
        """Closes the file (the next read opens it again)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __del__(self) -> None:
        if getattr(self, "_fh", None) is not None:
            self.close()


class HeldEntries:
    """Entries held in memory (Parquet, read whole by pyarrow; a run over Ray)."""

    def __init__(self, entries: list[Any]) -> None:
        self.entries = entries

    def __len__(self) -> int:
        return len(self.entries)

    def read(self, k: int) -> Any:
        return self.entries[k]

    get = read


Store = FileEntries | HeldEntries


class EntryView(Sequence[Any]):
    """One part (0 prompt, 1 answer) of some entries of a store, read when indexed."""

    def __init__(self, store: Store, part: int, index: np.ndarray) -> None:
        self.store, self.part, self.keys = store, part, index

    def __len__(self) -> int:
        return int(self.keys.size)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return EntryView(self.store, self.part, self.keys[i])
        return self.store.get(int(self.keys[i]))[self.part]

    def __iter__(self) -> Iterator[Any]:
        return (self.store.get(k)[self.part] for k in self.keys.tolist())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EntryView({len(self)} of {self.store!r})"
