"""Secrets the client sent, taken out of anything the server says back.

A misconfigured proxy or gateway may repeat a request's ``Authorization`` header (or any
other) in its error text: ``bad credentials: Bearer sk-…``. The client knows every value
it sent, so every piece of server text that is kept (an error body, an in-stream error,
a ``Location``, a vendor name) goes through a :class:`Redactor` *before* it is cut to
length, so no prefix of a secret survives a cut either.

Every header value counts as a secret; so do the token after ``Bearer`` or ``Basic``,
the ``user:password`` inside a Basic token and its password alone. Each is removed in
the forms a server may echo it (:mod:`loadgen.client.secret_forms`): as sent (in any
letter case), percent-encoded, JSON-escaped or written as HTML entities (any mix of them,
character by character), and base64 (standard or URL-safe, alone or inside a larger blob).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from loadgen.client.secret_forms import join_patterns, secret_patterns

__all__ = ["MASK", "Redactor", "redact_argv", "redact_url"]

MASK = "***"
MAX_DEPTH = 32  # of a vendor object kept on a record (a deeper one is not kept)
_MIN = 4  # shorter values (a "1", "yes") are not worth masking wherever they occur


class _TooDeep(Exception):
    pass


def _basic_parts(token: str) -> list[str]:
    try:
        text = base64.b64decode(token, validate=True).decode()
    except (binascii.Error, ValueError):
        return []
    _user, _, password = text.partition(":")
    return [text, password] if password else [text]


def _secrets(values: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for value in values:
        value = value.strip()
        out.add(value)
        scheme, _, token = value.partition(" ")
        token = token.strip()
        if token and scheme.lower() in ("bearer", "basic", "token", "apikey"):
            out.add(token)
            if scheme.lower() == "basic":
                out.update(_basic_parts(token))
    return {s for s in out if len(s) >= _MIN}


class Redactor:
    """``redactor(text)``: ``text`` with every form of every secret replaced by ``***``.

    The forms (:mod:`loadgen.client.secret_forms`) are built once, here, into one regular
    expression; a call is one ``sub`` over the text. Only server text that is kept goes
    through it (an error body, an error event, a ``Location``, a vendor object: see
    :meth:`value`), never every event of a stream."""

    __slots__ = ("_pattern",)

    def __init__(self, headers: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> None:
        sources: dict[str, int] = {}
        for secret in _secrets([*(headers or {}).values(), *extra]):
            for length, src in secret_patterns(secret):
                sources[src] = max(length, sources.get(src, 0))
        # longest first: a Basic token is replaced whole before the password inside it
        ordered = sorted(sources, key=lambda src: (-sources[src], src))
        self._pattern = re.compile(join_patterns(ordered)) if ordered else None

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MASK, text)

    def __bool__(self) -> bool:
        return self._pattern is not None

    def value(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """A JSON object the server sent (a vendor object kept on a record) with the secrets
        masked in its keys and strings; None when it nests deeper than :data:`MAX_DEPTH`."""
        if self._pattern is None:
            return obj
        try:
            return self._walk(obj, MAX_DEPTH)  # type: ignore[no-any-return]
        except _TooDeep:
            return None

    def _walk(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return self(value)
        if depth == 0:
            raise _TooDeep
        if isinstance(value, dict):
            return {self(str(k)): self._walk(v, depth - 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk(v, depth - 1) for v in value]
        return value


def redact_url(url: str) -> str:
    """The URL without user:password and without a query string or fragment (may hold
    keys). Never raises: it also cleans text that only looks like a URL."""
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed "[" in the host: keep nothing but the scheme
        return url.partition("://")[0] + "://..."
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def redact_argv(argv: list[str]) -> list[str]:
    """A command line as run.json keeps it: header values, URL credentials and query
    strings removed (a header given without a value shows nothing)."""

    def header(value: str) -> str:
        return (value.split(":", 1)[0] if ":" in value else "") + ": ***"

    out, hide = [], False
    for a in argv:
        if hide:
            a, hide = header(a), False
        elif a == "--header":
            hide = True
        elif a.startswith("--header="):
            a = "--header=" + header(a.split("=", 1)[1])
        elif "://" in a:
            head, sep, url = a.partition("=") if a.startswith("--") else ("", "", a)
            a = head + sep + redact_url(url)
        out.append(a)
    return out
