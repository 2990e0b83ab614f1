"""What a dialect is: the :class:`Dialect` base, its options and what one event says."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from loadgen.records import RequestSpec

__all__ = ["AnswerInfo", "Dialect", "DialectOptions", "EventInfo"]


@dataclass(slots=True)
class DialectOptions:
    """The run's choices that shape a request body (each dialect reads those it knows)."""

    model: str = ""
    strict: bool = False  # no ignore_eos / min_tokens / continuous_usage_stats
    continuous_usage: bool = False
    temperature: float | None = 0.0
    max_tokens_field: str = "max_tokens"
    extra_body: dict[str, Any] | None = None
    tools: list[Any] | None = None  # the workload's tool definitions (dialects with ``tools``)
    tool_choice: Any = None  # "auto", "required", "none" or {"type": "function", ...}
    inputs: tuple[int, ...] = ()  # non-streamed APIs: inputs per request, cycled by request index (empty: 1)

    def inputs_for(self, index: int) -> int:
        """How many inputs (embeddings' texts, rerank's documents) request ``index`` sends."""
        cycle = self.inputs
        return cycle[index % len(cycle)] if cycle else 1


@dataclass(slots=True)
class EventInfo:
    """What one event's JSON says: output present, its usage, finish reason, errors.

    Whatever the JSON holds, the fields have their types: a ``usage`` or ``vendor`` that is
    not an object is absent (None), a ``finish_reason`` that is not a non-empty string is
    none. ``usage`` is the event's usage object as the server wrote it; the dialect's
    :meth:`Dialect.usage_counts` reads the counts out of it."""

    has_output: bool
    usage: dict[str, Any] | None
    finish_reason: str | None
    error: str | None = None
    vendor: dict[str, Any] | None = None
    reasoning: bool = False  # the event's output is reasoning only (no answer text or tool call)
    text: str = ""  # the answer text it carries


@dataclass(slots=True)
class AnswerInfo:
    """What one non-streamed answer says (:meth:`Dialect.parse_answer`): the usage's prompt
    count as the server wrote it (checked by the caller), how many results it holds
    (embeddings, scores; None: no list), a server-reported error, vendor timings."""

    prompt_tokens: Any
    results: int | None
    error: str | None = None
    vendor: dict[str, Any] | None = None


class Dialect(ABC):
    """One API's wire format: everything loadgen knows about how that API talks.

    The transport POSTs :meth:`build_body` to ``base_url + path`` with the run's headers
    (:meth:`auth_headers` makes the key's), and hands each SSE event's JSON object (read by
    :attr:`decode`) to :meth:`parse_event`. An event whose data is exactly :attr:`done_marker`
    ends the stream (anything after it is ignored); an event with a finish reason ends the answer when
    :meth:`finish_ends` says so for the request's body. Usage objects are read by
    :meth:`usage_counts`; calibration's fallback POSTs :meth:`non_stream_body` and reads
    :meth:`answer_usage` of the one JSON answer.

    Instances hold no state per request: one object serves every request of a run (and is
    pickled, by its class, to worker processes)."""

    name: str  # the --api value
    path: str  # e.g. /v1/chat/completions
    description: str  # one line for help texts
    done_marker: str | None = None  # the data of the event that ends the stream, if the API has one
    tools: bool = False  # the body can carry the workload's tool definitions
    headers: Mapping[str, str] = MappingProxyType({})  # sent with every request: the API's own, never secrets
    images: bool = False  # the body can carry a request's images (RequestSpec.images)
    streams: bool = True  # False: one JSON answer (parse_answer), no events, no TTFT or ITL
    # non-streamed: parse_answer never reads an array of numbers, so an answer over 1 MiB may be
    # parsed with each one emptied (loadgen.client.skim)
    skim_answer: bool = False
    results_key: str = ""  # non-streamed: the answer's list of results, for messages ("data", "results")

    @abstractmethod
    def build_body(self, spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
        """The streamed request's JSON body for ``spec``."""

    @abstractmethod
    def non_stream_body(self, spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
        """The same request asked for as one non-streamed answer of one output token
        (calibration's fallback when a stream carries no prompt usage)."""

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The headers that send ``api_key`` (never written anywhere): ``Authorization:
        Bearer KEY``, as OpenAI-style APIs take it, unless a dialect says otherwise."""
        return {"Authorization": f"Bearer {api_key}"}

    @abstractmethod
    def parse_event(self, obj: dict[str, Any]) -> EventInfo:
        """What one event's JSON object says. Called for every event: keep it lean."""

    @abstractmethod
    def usage_counts(self, usage: dict[str, Any]) -> tuple[Any, Any]:
        """``(prompt_tokens, completion_tokens)`` as the usage object holds them, None when
        absent; completion tokens are cumulative over the answer. The caller checks them."""

    def answer_usage(self, answer: Any) -> dict[str, Any] | None:
        """The usage object of a non-streamed answer (any JSON value), if it has one: its
        ``usage`` field when that is an object, unless a dialect says otherwise."""
        usage = answer.get("usage") if isinstance(answer, dict) else None
        return usage if isinstance(usage, dict) else None

    decode: Any = staticmethod(json.loads)
    """``decode(data)``: the JSON value of one event's data (``json.loads``; a ``ValueError``
    means malformed JSON). A dialect may decode faster where the result is the same."""

    def parse_answer(self, obj: dict[str, Any]) -> AnswerInfo:
        """What a non-streamed answer's JSON object says (dialects whose ``streams`` is False)."""
        raise NotImplementedError(f"{self.name} streams: it has no non-streamed answer")

    def collect_calls(self, obj: dict[str, Any], calls: list[list[Any]]) -> None:
        """Append the tool calls one event's JSON object streams to ``calls`` (agents'
        requests only; :mod:`loadgen.client.dialects.toolcalls`). Default: none."""
        del obj, calls

    def inputs_sent(self, body: dict[str, Any]) -> int:
        """Inputs in a request sent with ``body`` (0 for generation APIs)."""
        return 0

    def request_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """``headers`` (the run's) with this API's constant :attr:`headers` added, those of
        a name the run sets (any case) left out: what every request to the server carries."""
        given = {name.lower() for name in headers}
        return {**{k: v for k, v in self.headers.items() if k.lower() not in given}, **headers}

    def finish_ends(self, body: dict[str, Any]) -> bool:
        """Whether a finish reason ends the answer of a request sent with ``body`` (not
        when several answers were asked for: then only :attr:`done_marker` does)."""
        return True

    def __repr__(self) -> str:
        return f"<dialect {self.name} {self.path}>"
