"""Secrets the client sent, taken out of anything the server says back.

A misconfigured proxy or gateway may repeat a request's ``Authorization`` header (or any
other) in its error text: ``bad credentials: Bearer sk-…``. The client knows every value
it sent, so every piece of server text that is kept (an error body, an in-stream error,
a ``Location``, a vendor name) goes through a :class:`Redactor` *before* it is cut to
length, so no prefix of a secret survives a cut either.

Every header value counts as a secret; so do the token after ``Bearer`` or ``Basic``,
the ``user:password`` inside a Basic token and its password alone. Each is removed in
the forms a server may echo it: as sent, URL-encoded, base64, JSON-escaped.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote, quote_plus

__all__ = ["MASK", "Redactor", "redact_argv"]

MASK = "***"
_MIN = 4  # shorter values (a "1", "yes") are not worth masking wherever they occur


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


def _forms(secret: str) -> set[str]:
    escaped = json.dumps(secret)[1:-1]
    forms = {
        secret,
        quote(secret, safe=""),
        quote(secret),
        quote_plus(secret),
        escaped,
        escaped.replace("/", "\\/"),
        base64.b64encode(secret.encode()).decode(),
        base64.urlsafe_b64encode(secret.encode()).decode(),
    }
    return {f for f in forms if len(f) >= _MIN}


class Redactor:
    """``redactor(text)``: ``text`` with every form of every secret replaced by ``***``."""

    __slots__ = ("_pattern",)

    def __init__(self, headers: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> None:
        forms: set[str] = set()
        for secret in _secrets([*(headers or {}).values(), *extra]):
            forms |= _forms(secret)
        # longest first: a Basic token is replaced whole before the password inside it
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered)), re.IGNORECASE) if ordered else None

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MASK, text)

    def __bool__(self) -> bool:
        return self._pattern is not None


def redact_argv(argv: list[str]) -> list[str]:
    """A command line as run.json keeps it: header values, URL credentials and query
    strings removed (a header given without a value shows nothing)."""
    from loadgen.client.discovery import redact_url

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
