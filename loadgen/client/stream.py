"""Turns the bytes of one streamed response into a :class:`RequestRecord`.

Shared by every transport: a transport stamps each read with ``perf_counter_ns()``
*before* anything is parsed and hands ``(chunk, t_ns)`` to :meth:`StreamState.feed`; all
events decoded from one read carry that read's timestamp. Parsing runs later, in a
``call_soon`` callback, in slices (:data:`SLICE` bytes, :data:`BUDGET_NS` of work a turn;
settling the tokens at :meth:`StreamState.end` too), and the transport awaits
:meth:`StreamState.drain` so unparsed bytes never pass :data:`MAX_BACKLOG`. The answer ends
at its first finish reason or the dialect's end marker; :attr:`StreamState.on_end` then
lets the transport stop waiting. Output past :func:`output_cap` is ``invalid_response``.
Everything wire-specific comes from the :class:`~loadgen.client.dialects.Dialect`.

Docs: docs/client.md ("How a response becomes a record", "End of a stream", "Every read
is bounded"); token counting, usage checks and reasoning: docs/metrics.md, "Per request".
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from loadgen.client.bounded import MAX_ERROR
from loadgen.client.dialects import Dialect
from loadgen.client.sse import SSEDecoder, SSEEvent
from loadgen.errors import Disconnected, ErrorEvent, InvalidResponse, TransportError
from loadgen.records import RequestRecord, TokenSource

__all__ = [
    "BUDGET_NS",
    "MAX_BACKLOG",
    "OUTPUT_FACTOR",
    "OUTPUT_SLACK",
    "SETTLE_SLICE",
    "SLICE",
    "StreamState",
    "distribute",
    "output_cap",
    "usage_count",
]

SLICE = 64 << 10  # bytes given to the SSE decoder at once
BUDGET_NS = 2_000_000  # parsing per event-loop turn before the loop gets a turn back
MAX_BACKLOG = 1 << 20  # unparsed bytes before the transport waits for the parser
SETTLE_SLICE = 8192  # events whose token counts are settled between two looks at the clock
OUTPUT_FACTOR = 4  # output events a request may stream per token it asked for (per choice)
OUTPUT_SLACK = 64  # and this many more
_MAX_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")

_clock = time.perf_counter_ns


def _identity(text: str) -> str:
    return text


def usage_count(value: Any) -> int | None:
    """A usage count if ``value`` is one (an int >= 0, not a bool), else None."""
    return value if type(value) is int and value >= 0 else None


def output_cap(body: dict[str, Any]) -> int | None:
    """The most output events a request sent with ``body`` may stream (see the module);
    None when the body asks for no output length."""
    asked = [v for k in _MAX_FIELDS if type(v := body.get(k)) is int and v > 0]
    if not asked:
        return None
    n = body.get("n")
    choices = n if type(n) is int and n > 1 else 1
    return OUTPUT_FACTOR * max(asked) * choices + OUTPUT_SLACK


def distribute(total: int, n: int) -> list[int]:
    """Split ``total`` tokens over ``n`` events as evenly as integers allow."""
    return [((i + 1) * total) // n - (i * total) // n for i in range(n)]


class StreamState:
    """Decodes one response stream into ``record`` (events, usage, completion)."""

    __slots__ = (
        "_answer",
        "_backlog",
        "_bad_usage",
        "_calls",
        "_completed",
        "_counts",
        "_decode",
        "_deltas",
        "_done",
        "_ended",
        "_error",
        "_finish",
        "_finish_ends",
        "_last_cum",
        "_last_ns",
        "_loop",
        "_marker",
        "_max_events",
        "_n_bytes",
        "_n_delta_ok",
        "_n_events",
        "_parse",
        "_pending",
        "_prompt",
        "_reasoning",
        "_redact",
        "_scheduled",
        "_size_total",
        "_sse",
        "_usage",
        "dialect",
        "on_end",
        "record",
    )

    def __init__(
        self,
        record: RequestRecord,
        dialect: Dialect,
        defer: bool = True,
        answer: list[str] | None = None,
        redact: Callable[[str], str] | None = None,
        finish_ends: bool = True,
        calls: list[list[Any]] | None = None,
        max_events: int | None = None,
    ) -> None:
        self.record = record
        self._max_events = max_events if max_events is not None else 1 << 62  # output_cap() of the request
        self._calls = calls  # agents: the tool calls streamed back, collected by the dialect
        self._redact = redact or _identity
        self._backlog = 0  # bytes fed and not parsed yet
        self._reasoning: list[int] = []  # the output events (their indices) that are reasoning only
        self._answer = answer
        self.dialect = dialect
        self._parse = dialect.parse_event  # looked up once, not per event
        self._decode = dialect.decode
        self._marker = dialect.done_marker
        self._counts = dialect.usage_counts
        self._sse = SSEDecoder()
        self._done = False  # saw [DONE]
        self._finish: str | None = None
        self._finish_ends = finish_ends  # a finish_reason ends the answer (one choice asked for)
        self._ended = False
        self.on_end: Callable[[], None] | None = None  # called once, when the answer has ended
        self._deltas: list[int] = []  # usage deltas of the output events that carried a count
        self._n_delta_ok = 0  # deltas that are a count >= 1 (all n events' when usage counts every event)
        self._last_cum = 0
        self._usage = False  # a usage object was seen
        self._prompt: Any = None  # the last prompt count seen, as the server wrote it
        self._completed: Any = None  # the last completion count seen, as the server wrote it
        self._last_ns = 0  # the last event's time, up to [DONE]
        self._pending: deque[tuple[bytes, int, int]] = deque()  # (read, offset parsed up to, t_ns)
        self._n_events = 0  # SSE events decoded (any kind)
        self._n_bytes = 0
        self._size_total = 0  # characters of data of the output events: their most tokens
        self._bad_usage = False  # a usage count that is not an int >= 0, or more than was streamed
        self._scheduled = False
        self._error: Exception | None = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop() if defer else None
        except RuntimeError:
            self._loop = None

    @property
    def done(self) -> bool:
        """``[DONE]`` was read."""
        return self._done

    @property
    def failed(self) -> bool:
        """A bad event was found (it is raised by the next :meth:`feed`, :meth:`drain` or :meth:`end`)."""
        return self._error is not None

    @property
    def ended(self) -> bool:
        """The answer has ended: a ``finish_reason`` (see ``finish_ends``) or ``[DONE]`` was read."""
        return self._ended

    def feed(self, chunk: bytes, t_ns: int) -> None:
        """Take one read (already stamped); it is parsed soon after, or now without a loop.

        A bad event (InvalidResponse / ErrorEvent) is raised by this call or a later one,
        or by :meth:`close`.
        """
        if self._error is not None:
            raise self._error
        self._pending.append((chunk, 0, t_ns))
        self._n_bytes += len(chunk)
        self._backlog += len(chunk)
        if self._loop is None:
            self._parse_pending()
            if self._error is not None:
                raise self._error
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._parse_pending)

    @property
    def backlog(self) -> int:
        """Bytes fed and not parsed yet."""
        return self._backlog

    async def drain(self, limit: int = MAX_BACKLOG) -> None:
        """Wait until at most ``limit`` bytes are unparsed (each wait is one slice of
        parsing); a bad event found meanwhile is raised."""
        while self._backlog > limit and self._error is None and self._loop is not None:
            if not self._scheduled:
                self._scheduled = True
                self._loop.call_soon(self._parse_pending)
            await asyncio.sleep(0)
        if self._error is not None:
            raise self._error

    def _parse_pending(self, budget_ns: int | None = BUDGET_NS) -> None:
        """Parse what is pending; with a ``budget_ns`` (and a loop), give the loop back after
        that much work and go on in a later turn."""
        self._scheduled = False
        pending = self._pending
        if self._error is not None:
            pending.clear()
            self._backlog = 0
            return
        start = _clock()
        sse_feed, on_event = self._sse.feed, self._event
        events, cap = self.record.events, self._max_events
        try:
            while pending:
                chunk, off, t_ns = pending.popleft()
                if off or len(chunk) > SLICE:
                    piece = chunk[off : off + SLICE]
                    if off + len(piece) < len(chunk):
                        pending.appendleft((chunk, off + len(piece), t_ns))
                else:
                    piece = chunk
                self._backlog -= len(piece)
                for ev in sse_feed(piece):
                    on_event(ev, t_ns)
                if len(events) > cap:  # per piece, not per event: the hot path pays nothing
                    raise InvalidResponse(
                        f"more output than asked for: over {cap} output events"
                        f" ({OUTPUT_FACTOR} per token of max_tokens, plus {OUTPUT_SLACK})"
                    )
                if pending and budget_ns is not None and self._loop is not None and _clock() - start > budget_ns:
                    self._scheduled = True
                    self._loop.call_soon(self._parse_pending)
                    return
        except TransportError as exc:
            self._error = exc
            pending.clear()
            self._backlog = 0
            if self.on_end is not None:  # no need to wait for more: the transport may stop now
                self.on_end()

    def salvage(self) -> None:
        """The stream failed: keep the events that did arrive (parse errors are moot now)."""
        self._parse_pending(None)

    def close(self, t_ns: int) -> None:
        """End of the byte stream: flush the decoder, check completion, settle tokens, all
        at once (a transport uses :meth:`end`)."""
        self._parse_pending(None)
        self._check_end(t_ns)
        for _ in self._settle():
            pass

    async def end(self, t_ns: int) -> None:
        """:meth:`close` for a transport: what is unparsed is parsed in slices first, and
        the tokens are settled in slices of :data:`SETTLE_SLICE` events that give the loop
        back after :data:`BUDGET_NS` of work."""
        await self.drain(0)
        self._parse_pending(None)
        self._check_end(t_ns)
        start = _clock()
        for _ in self._settle():
            if _clock() - start > BUDGET_NS:
                await asyncio.sleep(0)
                start = _clock()

    def _check_end(self, t_ns: int) -> None:
        if self._error is not None:
            raise self._error
        for ev in self._sse.close():  # an event without its blank line: the stream may have been cut
            try:
                self._event(ev, t_ns)
            except InvalidResponse as exc:
                raise Disconnected(f"stream ended mid-event ({exc})") from exc
        rec = self.record
        rec.done_ns = self._last_ns or t_ns
        if self._n_events == 0 and self._n_bytes > 0:
            raise InvalidResponse(f"the response is not an event stream ({self._n_bytes} bytes, no SSE event)")
        if not self._done and self._finish is None:
            raise Disconnected(f"stream ended before {self._ends('', ' or ')}a finish_reason")
        if not rec.events and self._finish is None:  # an empty answer still says why it stopped
            raise InvalidResponse(
                f"no output: the stream ended {self._ends('with ', ' ')}without output or a finish_reason"
            )

    def _mark_end(self) -> None:
        if not self._ended:
            self._ended = True
            if self.on_end is not None:
                self.on_end()

    def _event(self, ev: SSEEvent, t_ns: int) -> None:
        self._n_events += 1
        if self._done:
            return  # anything after [DONE] is ignored
        self._last_ns = t_ns
        data = ev.data
        if data == self._marker:
            self._done = True
            self._mark_end()
            return
        if ev.event == "error":
            raise ErrorEvent(f"error event: {self._clip(data, 300)}")
        try:
            obj = self._decode(data)
        except ValueError as exc:
            raise InvalidResponse(f"malformed JSON in SSE event: {self._clip(data, 120)!r}") from exc
        if not isinstance(obj, dict):
            raise InvalidResponse(f"SSE event is not a JSON object: {self._clip(data, 120)!r}")
        info = self._parse(obj)
        if self._calls is not None:  # only an agent's request asks for its tool calls
            self.dialect.collect_calls(obj, self._calls)
        if info.error is not None:
            raise ErrorEvent(f"error in stream: {self._clip(info.error, 300)}")
        cum = None
        if info.usage is not None:
            self._usage = True
            prompt, completed = self._counts(info.usage)
            if prompt is not None:
                self._prompt = prompt
            if completed is not None:
                self._completed = completed
                if type(completed) is int and completed >= 0:  # usage_count(), inlined: this runs per event
                    cum = completed
                else:
                    self._bad_usage = True
        if info.has_output:
            if cum is not None:
                delta = cum - self._last_cum
                self._last_cum = cum
                if delta > len(data):
                    self._bad_usage = True
                elif delta >= 1:
                    self._n_delta_ok += 1
                self._deltas.append(delta)  # used only when every output event has one >= 1
            self._size_total += len(data)
            rec = self.record
            if info.reasoning:
                self._reasoning.append(len(rec.events))
            elif not rec.first_answer_ns:
                rec.first_answer_ns = t_ns
            rec.events.append([t_ns, 1])
            if self._answer is not None and info.text:
                self._answer.append(info.text)
        elif cum is not None:
            self._last_cum = max(self._last_cum, cum)
        if info.finish_reason:
            self._finish = info.finish_reason
            if self._finish_ends:
                self._mark_end()
        if info.vendor is not None:
            self.record.server = info.vendor

    def _ends(self, before: str, after: str) -> str:
        """The end marker in a message, between ``before`` and ``after`` (nothing when the API has none)."""
        return "" if self._marker is None else f"{before}{self._marker}{after}"

    def _clip(self, text: str, n: int) -> str:
        """Server text for a message: secrets masked first, then cut to ``n`` characters."""
        return self._redact(text[:MAX_ERROR])[:n]

    def _settle(self) -> Iterator[None]:
        """Settle the tokens (docs/metrics.md, "Per request") and the reasoning tokens,
        yielding after every :data:`SETTLE_SLICE` events."""
        rec = self.record
        if self._usage:  # an invalid count was noted when it came
            rec.prompt_tokens = usage_count(self._prompt)
            rec.completion_tokens = usage_count(self._completed)
            if self._prompt is not None and rec.prompt_tokens is None:
                self._bad_usage = True
        events = rec.events
        n = len(events)
        if rec.completion_tokens is not None and rec.completion_tokens > self._size_total:
            self._bad_usage = True
        if self._bad_usage:
            rec.token_source = TokenSource.USAGE_REJECTED  # events keep one token each
        elif not events:
            rec.token_source = TokenSource.EVENTS
        elif self._n_delta_ok == n:
            deltas = self._deltas
            for lo in range(0, n, SETTLE_SLICE):
                for i in range(lo, min(lo + SETTLE_SLICE, n)):
                    events[i][1] = deltas[i]
                yield
            rec.token_source = TokenSource.USAGE_DELTA
        elif rec.completion_tokens is not None and rec.completion_tokens >= n:
            # fewer tokens than output events would leave events with none: keep 1 each
            total = rec.completion_tokens
            for lo in range(0, n, SETTLE_SLICE):
                for i in range(lo, min(lo + SETTLE_SLICE, n)):
                    events[i][1] = ((i + 1) * total) // n - (i * total) // n  # distribute(), in place
                yield
            rec.token_source = TokenSource.EVENTS_CORRECTED
        else:
            rec.token_source = TokenSource.EVENTS
        reasoning = self._reasoning
        if reasoning:
            tokens = 0
            for lo in range(0, len(reasoning), SETTLE_SLICE):
                tokens += sum(events[i][1] for i in reasoning[lo : lo + SETTLE_SLICE])
                yield
            rec.reasoning_tokens = tokens
