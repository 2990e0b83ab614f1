"""loadgen's exception tree. Foreign exceptions are translated once, where they occur.

:class:`LoadgenError` is the base of everything loadgen raises on purpose, its message one
complete line: :class:`ConfigError` (bad user input; :class:`WorkloadError`,
:class:`ProfileError`), :class:`TargetError` (the server cannot be used),
:class:`TransportError` (one request failed: turned into an ``ErrorKind`` on its record in
the client, never escapes the runner) and :class:`ServerError` (the reference server's;
:class:`EngineError`, :class:`PromptTooLong`, :class:`QueueFull`). The CLI prints a
``LoadgenError`` as one line (exit code 2) and catches nothing else. ``Terminated`` (a
``KeyboardInterrupt``) is SIGTERM or SIGHUP outside a run's own handler.

The whole tree: docs/architecture.md, "Errors".
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "Disconnected",
    "EngineError",
    "ErrorEvent",
    "HTTPStatusError",
    "InvalidResponse",
    "LoadgenError",
    "ProfileError",
    "PromptTooLong",
    "QueueFull",
    "RequestTimeout",
    "ServerError",
    "TargetError",
    "Terminated",
    "TransportError",
    "WorkloadError",
    "redirect_text",
]


class LoadgenError(Exception):
    """Base class; ``str(exc)`` is a complete one-line message for the user."""


class ConfigError(LoadgenError):
    """Invalid user input. ``source`` is the file (or ``--flag``), ``key`` the offending key."""

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None) -> None:
        self.source = source
        self.key = key
        prefix = ""
        if source and key:
            prefix = f"{source}: {key}: "
        elif source:
            prefix = f"{source}: "
        elif key:
            prefix = f"{key}: "
        super().__init__(prefix + message)


class WorkloadError(ConfigError):
    """A workload file or length distribution is invalid."""


class ProfileError(ConfigError):
    """A profile file is invalid."""


class TargetError(LoadgenError):
    """The target server cannot be used (unreachable, no model, bad discovery answer)."""


class TransportError(LoadgenError):
    """A single request failed in transport; mapped to an ``ErrorKind`` on its record."""


class HTTPStatusError(TransportError):
    """A status other than 200; a 3xx is never followed and names its ``Location``."""

    def __init__(self, status: int, body: str, location: str | None = None) -> None:
        self.status = status
        self.body = body
        text = redirect_text(location) if 300 <= status < 400 else body[:300]
        super().__init__(f"HTTP {status}: {text}")


def redirect_text(location: str | None) -> str:
    """What a refused redirect says (redirects are not followed: they would carry the
    request's headers to another origin and turn the POST into a GET)."""
    return f"redirect to {location[:200]!r} not followed" if location else "redirect (no Location) not followed"


class RequestTimeout(TransportError):
    pass


class Disconnected(TransportError):
    pass


class InvalidResponse(TransportError):
    pass


class ErrorEvent(TransportError):
    """An SSE ``error`` event or an ``{"error": ...}`` object in a stream that began
    with HTTP 200: the server gave up on the request after answering."""


class ServerError(LoadgenError):
    """Problems on the reference-server side."""


class EngineError(ServerError):
    """The engine cannot take or run a request."""


class PromptTooLong(EngineError):
    """The prompt (plus requested output) does not fit the model's context length."""


class QueueFull(EngineError):
    """The engine's waiting queue is full; the API answers 429."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, ``docker stop``, Kubernetes) or SIGHUP (a closed terminal)
    where no run handles it: unwinds like Ctrl-C; ``signum`` gives the exit code (128 + signum)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"terminated by signal {signum}")
