"""The data model shared by every part of loadgen: what to send and what happened.

Stdlib only; nothing here imports the rest of the project.

- :class:`RequestSpec` — one request to send (prompt, target lengths, class, group).
- :class:`RequestRecord` — what happened to it: monotonic timestamps of the schedule,
  the send, every output-carrying SSE event and the end, plus status and counts.
- :class:`ErrorKind` — the status of a finished request.
- :data:`LEVEL_STRIDE`, :data:`USER_STRIDE` — how a run numbers its requests
  (``RequestSpec.index``) by level, user and position.

All ``*_ns`` times are ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LEVEL_STRIDE",
    "MAX_LEVEL_S",
    "USER_STRIDE",
    "ChatMessage",
    "ErrorKind",
    "ImageData",
    "Prompt",
    "RequestRecord",
    "RequestSpec",
    "SessionPlan",
    "TaskBranch",
    "TaskPlan",
    "TokenSource",
    "record_and_events",
    "record_from_json",
    "record_to_json",
]

MAX_LEVEL_S = 30 * 86_400  # the longest a level may last, or a trace take to replay, in seconds (30 days)

# A run's request indices (``RequestSpec.index``), shared by every source of requests and
# readable by whoever holds a record: level ``L`` owns the indices from ``L * LEVEL_STRIDE``;
# closed-loop user ``u`` takes ``USER_STRIDE`` of them from ``L * LEVEL_STRIDE + u * USER_STRIDE``
# on, an open-loop send ``i`` takes ``L * LEVEL_STRIDE + i``. No two levels or users share an
# index, so none shares a prompt by accident.
USER_STRIDE = 1 << 24  # requests one user may send in one level
LEVEL_STRIDE = 1 << 44  # request indices of one level (2**20 users)


class ErrorKind(str, enum.Enum):
    """Status of a finished request (``ok`` or why it failed)."""

    OK = "ok"
    HTTP_ERROR = "http_error"
    TIMEOUT = "timeout"
    DISCONNECTED = "disconnected"
    CANCELLED = "cancelled"
    INVALID_RESPONSE = "invalid_response"
    ERROR_EVENT = "error_event"  # the server reported an error inside its stream (HTTP 200)
    WORKER_LOST = "worker_lost"  # in flight on a worker that was lost (process or node died): outcome unknown


class TokenSource(str, enum.Enum):
    """How the output tokens of each event were counted."""

    USAGE_DELTA = "usage_delta"  # per-event usage (continuous_usage_stats)
    EVENTS = "events"  # one token per output-carrying event, no final usage seen
    EVENTS_CORRECTED = "events_corrected"  # one per event, rescaled to final usage
    USAGE_REJECTED = "usage_rejected"  # one per event: the server's usage was invalid or implausible


ChatMessage = dict[str, str]  # {"role": ..., "content": ...}
Prompt = str | list[ChatMessage]  # completion text, or a list of chat messages
ImageData = tuple[str, bytes]  # (MIME type such as "image/png", the file's bytes)


@dataclass(slots=True)
class RequestSpec:
    """One request of a workload.

    ``prompt`` is text for the completions API; the chat dialect wraps it in a user
    message unless it already is a list of messages. ``prompt_tokens`` is the *target*
    length the synthesiser aimed at; ``max_tokens`` the requested output length.
    """

    index: int
    prompt: Prompt
    prompt_tokens: int
    max_tokens: int
    request_class: str = "default"
    group: int | None = None  # shared-prefix group, if any
    session: int | None = None  # multi-turn sessions: the session's id within its level
    turn: int = 0  # its turn in the session, from 1 (0: not a session's request)
    turns: int = 0  # the turns its session was drawn to have
    answer: list[str] | None = None  # when a list, the transport appends the answer text streamed back
    source_row: int | None = None  # the dataset entry or trace row it came from (0-based data row)
    images: tuple[ImageData, ...] = ()  # sent with the (last) user message as image parts (chat dialects)
    task: int | None = None  # agentic workloads: the task's id within its level
    step: int = 0  # its step within the task, from 1 (a fan-out's branches share the step number)
    branch: int = 0  # its fan-out branch within the step, from 0
    steps: int = 0  # the steps its task was drawn to have
    tools: list[Any] | None = None  # tool definitions of this request (None: the run's, DialectOptions.tools)
    calls: list[list[Any]] | None = None  # when a list, the transport appends the tool calls streamed back


@dataclass(slots=True)
class SessionPlan:
    """One multi-turn conversation to hold: per turn, the new user message as a spec (its
    ``prompt`` the message, its lengths and class); ``think_s[t]`` is the pause before
    turn ``t + 2``; ``system`` an optional system prompt of ``system_tokens`` tokens (its
    shared group ``group``). The runner builds each turn's prompt from the history."""

    session: int
    turns: list[RequestSpec]
    think_s: list[float] = field(default_factory=list)
    system: str | None = None
    system_tokens: int = 0
    group: int | None = None


@dataclass(slots=True)
class TaskBranch:
    """One LLM call of an agent's step: its request (``spec``: the branch's own message as
    its ``prompt``, its lengths and class; the first step's is the task; a step that does
    not fan out adds no message: ``prompt`` empty), the tool it calls (``tool``, a name) and
    the tool's result: ``tool_s`` of latency and a text of ``output_tokens`` tokens (made
    when needed from ``output_key``). The last step runs no tool (``tool_s`` 0)."""

    spec: RequestSpec
    tool: str
    tool_s: float = 0.0
    output_tokens: int = 0
    output_key: int = 0


@dataclass(slots=True)
class TaskPlan:
    """One agentic task to run (:mod:`loadgen.workload.agent`): ``steps[s]`` holds the
    branches of step ``s + 1`` (one, or a fan-out's). ``system`` and ``tools`` are its
    group's system prompt and tool definitions (``context_tokens`` long together)."""

    task: int
    steps: list[list[TaskBranch]]
    system: str | None = None
    tools: list[Any] | None = None
    context_tokens: int = 0
    group: int | None = None


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request. Appended to ``records.jsonl`` when it finishes.

    ``events`` holds one ``[t_ns, n_tokens]`` pair per SSE event that carried output,
    stamped when its bytes were read (events from one read share a timestamp; the
    metrics count those as coalesced instead of zero gaps). Reasoning events are among
    them (``reasoning_tokens`` of their tokens); ``first_answer_ns`` is the first event
    with answer output. A multi-turn request carries its ``session``, ``turn`` and ``turns``;
    an agent's call its ``task``, ``step``, ``branch``, ``steps`` and ``tool_ms``.
    ``new_connection`` and ``connect_ms`` say whether it waited for a connection to be
    opened and for how long (that wait is inside its TTFT); files written before them
    read as ``None`` (not known).
    """

    index: int
    level: int = 0
    worker: int = 0
    request_class: str = "default"
    target_prompt_tokens: int = 0
    target_output_tokens: int = 0
    scheduled_ns: int = 0
    sent_ns: int = 0
    done_ns: int = 0
    events: list[list[int]] = field(default_factory=list)
    status: ErrorKind = ErrorKind.OK
    http_status: int | None = None
    error: str | None = None
    prompt_tokens: int | None = None  # server-reported usage.prompt_tokens
    completion_tokens: int | None = None  # server-reported usage.completion_tokens
    token_source: TokenSource = TokenSource.EVENTS
    warmup: bool = False
    server: dict[str, Any] | None = None  # vendor timings (reference server's "loadgen")
    credit_ns: int = 0  # open loop with a cap: when it got its in-flight credit (0: it needed none)
    session: int | None = None  # multi-turn sessions: the session's id within the level
    turn: int = 0  # the turn within the session, from 1 (0: not a session's request)
    turns: int = 0  # the turns the session was drawn to have (its last turn has turn == turns)
    first_answer_ns: int = 0  # the first event carrying answer output (not reasoning); 0: none
    reasoning_tokens: int = 0  # output tokens streamed as reasoning (reasoning_content / reasoning deltas)
    trial: int = 0  # --trials: the repetition of the level it belongs to, from 0
    source_row: int | None = None  # the dataset entry or trace row it replays (0-based data row; None: synthetic)
    retries: int = 0  # times sent again on a new connection (the stale keep-alive race; loadgen.client.keepalive)
    new_connection: bool | None = None  # its (last) try opened a connection of its own (None: not known)
    connect_ms: float | None = None  # how long that connect took (TCP, and TLS if any), in ms (None: reused, unknown)
    inputs: int = 0  # inputs in the request: embeddings' texts, rerank's documents (0: a generation API)
    images: int = 0  # images sent with it (a workload's [images] table)
    image_bytes: int = 0  # their total size in bytes (the files, before base64)
    task: int | None = None  # agentic workloads: the task's id within its level (None: not an agent's call)
    step: int = 0  # its step within the task, from 1 (a fan-out's branches share the step number)
    branch: int = 0  # its fan-out branch within the step, from 0
    steps: int = 0  # the steps its task was drawn to have
    tool_ms: float = 0.0  # the tool that ran after this call (the next step waited for it), in ms; 0: none

    @property
    def ok(self) -> bool:
        return self.status is ErrorKind.OK

    @property
    def output_tokens(self) -> int:
        """Output tokens received, as counted per ``token_source``."""
        return sum(n for _, n in self.events)

    def fail(self, kind: ErrorKind, message: str, now_ns: int, http_status: int | None = None) -> None:
        """Mark the request failed (the first failure wins; later ones are ignored)."""
        if self.status is not ErrorKind.OK:
            return
        self.status = kind
        self.error = message[:500]
        if http_status is not None:
            self.http_status = http_status
        if not self.done_ns:
            self.done_ns = now_ns


def record_to_json(rec: RequestRecord) -> str:
    """One compact, self-contained JSON line, events inline (the ``records.jsonl`` line
    of older versions; run folders now keep the events in ``events.bin``)."""
    d = dataclasses.asdict(rec)
    d["status"] = rec.status.value
    d["token_source"] = rec.token_source.value
    return json.dumps(d, separators=(",", ":"), ensure_ascii=False)


_FIELDS = frozenset(f.name for f in dataclasses.fields(RequestRecord))
_STATUS = {k.value: k for k in ErrorKind}
_SOURCE = {k.value: k for k in TokenSource}


def record_from_json(line: str | dict[str, Any]) -> RequestRecord:
    """Parse one ``records.jsonl`` line; unknown keys (from newer versions) are ignored.
    Raises ValueError or TypeError when it is not a record, or when its events are in
    the run folder's ``events.bin`` (read the folder with
    ``loadgen.report.files.read_records``)."""
    d = json.loads(line) if isinstance(line, str) else line
    if isinstance(d, dict) and isinstance(d.get("events"), dict):
        raise ValueError("this line's events are in events.bin: read the run folder, not the line")
    if not _FIELDS.issuperset(d):
        d = {k: v for k, v in d.items() if k in _FIELDS}
    return _enums(RequestRecord(**d))


def _enums(rec: RequestRecord) -> RequestRecord:
    # the report reads 100,000s of these: the enums by lookup
    rec.status = _STATUS.get(rec.status) or ErrorKind(rec.status)
    rec.token_source = _SOURCE.get(rec.token_source) or TokenSource(rec.token_source)
    return rec


_ORDER = tuple(f.name for f in dataclasses.fields(RequestRecord))
_PREFIXES = frozenset(_ORDER[:n] for n in range(_ORDER.index("events") + 1, len(_ORDER) + 1))


def record_and_events(d: dict[str, Any]) -> tuple[RequestRecord, Any]:
    """:func:`record_from_json` of a parsed line whose ``events`` are kept apart: the
    record (its ``events`` empty) and the line's ``events`` value (a list of pairs, a
    reference into ``events.bin``, or whatever else it holds; ``[]`` when absent).
    Raises ValueError or TypeError when it is not a record."""
    # every field in the writer's order, or the fields of an older writer (a prefix of
    # them, the newer ones left at their defaults): by position (about 5x faster)
    if tuple(d) in _PREFIXES:
        rec = RequestRecord(*d.values())
        events, rec.events = rec.events, []
        return _enums(rec), events
    events = d.pop("events", [])
    return record_from_json(d), events
