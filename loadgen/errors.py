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

from typing import Any

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
    """Invalid user input. ``source`` is the file (or ``--flag``), ``key`` the offending key
    as the user wrote it.

    Code below the command line knows a value by its own name, not by the flag or file
    key it came from: it gives ``field`` (``window``, ``prompt_tokens``) instead of
    ``key``, and the layer that read the value from the user names it with
    :meth:`named` (the CLI: ``--window``). Unnamed, the message shows the field."""

    def __init__(
        self, message: str, *, source: str | None = None, key: str | None = None, field: str | None = None
    ) -> None:
        self.message = message
        self.source = source
        self.key = key
        self.field = field
        shown = key or field
        prefix = ""
        if source and shown:
            prefix = f"{source}: {shown}: "
        elif source:
            prefix = f"{source}: "
        elif shown:
            prefix = f"{shown}: "
        super().__init__(prefix + message)

    def named(self, key: str) -> ConfigError:
        """This error with its ``field`` shown as ``key``, the user's spelling of it."""
        out = type(self)(self.message, source=self.source, key=key, field=self.field)
        out.__cause__, out.__traceback__ = self.__cause__, self.__traceback__
        return out

    def __reduce__(self) -> tuple[Any, ...]:  # across processes with its parts, not only its text
        return _config_error, (type(self), self.message, self.source, self.key, self.field)


def _config_error(
    cls: type[ConfigError], message: str, source: str | None, key: str | None, field: str | None
) -> ConfigError:
    return cls(message, source=source, key=key, field=field)


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
