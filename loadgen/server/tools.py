"""Tool calls: when an answer calls one of the request's tools, and how its arguments stream.

When (:func:`choose_tool`), for a request with ``tools``: ``tool_choice`` ``"none"`` never
calls; ``"required"`` (Messages: ``"any"``) calls the first tool, a named function calls
that one; ``"auto"`` (the default) calls the first tool on a share of requests
(:attr:`ToolPolicy.share`, ``loadgen serve --tool-call-share``) — unless the history already
holds :attr:`ToolPolicy.max_results` tool results (``--max-tool-results``), then it answers
in text. That cap is how an agent's model ends a task: after some rounds of tools it
answers, so an agent's loop against the server always ends. The draw is a hash of the
server's seed, the request's ``seed`` and its prompt ids: the same request gets the same
answer whatever order requests arrive in, and each step of an agent's task (a longer
history) draws anew.

The arguments: the answer's generated text, as one JSON object ``{"KEY": "TEXT"}`` (``KEY``
is the tool's first string parameter, else ``query``). Each engine output streams as one
argument piece (the first opens the object, the last closes it), so the token counts,
TTFT and ITL of a tool call are those of the same answer in text; the arguments are valid
JSON once the answer ends (for any reason but an abort, ``max_tokens`` too: the call is
complete, its finish reason is the API's tool-call reason).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass

import numpy as np

from loadgen.errors import ConfigError
from loadgen.server.protocol import ParsedRequest

__all__ = ["ToolCall", "ToolPolicy", "choose_tool"]


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """How often ``tool_choice: "auto"`` calls a tool (module doc)."""

    share: float = 0.7
    max_results: int = 8

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ConfigError(f"must be between 0 and 1, got {self.share}", key="--tool-call-share")
        if self.max_results < 0:
            raise ConfigError(f"must be >= 0, got {self.max_results}", key="--max-tool-results")


def _draw(seed: int, parsed: ParsedRequest) -> float:
    """A uniform number in [0, 1) from the server's seed, the request's seed and its prompt."""
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{seed}:{parsed.seed}:".encode())
    h.update(np.asarray(parsed.prompt_ids, dtype=np.int64).tobytes())
    return int.from_bytes(h.digest(), "big") / 2.0**64


def choose_tool(parsed: ParsedRequest, policy: ToolPolicy, seed: int) -> tuple[str, str] | None:
    """The tool ``(name, argument key)`` the answer calls, or None for a text answer."""
    if not parsed.tools or parsed.tool_choice == "none":
        return None
    if parsed.tool_name is not None:
        return next(tool for tool in parsed.tools if tool[0] == parsed.tool_name)
    if parsed.tool_choice == "auto":
        if parsed.tool_results >= policy.max_results or _draw(seed, parsed) >= policy.share:
            return None
    return parsed.tools[0]


def _escape(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


class ToolCall:
    """One call's id and arguments, streamed piece by piece (:meth:`piece`)."""

    __slots__ = ("arguments", "call_id", "closed", "key", "name", "opened")

    def __init__(self, call: tuple[str, str], prefix: str = "call_") -> None:
        self.name, self.key = call
        self.call_id = f"{prefix}{uuid.uuid4().hex[:24]}"
        self.opened = False
        self.closed = False
        self.arguments: list[str] = []

    def piece(self, text: str, final: bool) -> str:
        """The next argument piece: ``text`` escaped (the first opens the object, a final one closes it)."""
        out = "" if self.opened else "{" + json.dumps(self.key) + ": " + '"'
        self.opened = True
        self.closed = final
        out += _escape(text) + ('"}' if final else "")
        self.arguments.append(out)
        return out

    def whole(self, text: str) -> str:
        """All the arguments of an answer that is not streamed."""
        return self.piece(text, True)

    @property
    def text(self) -> str:
        """The arguments streamed so far."""
        return "".join(self.arguments)
