"""The redactor masks every secret it knows in each form a server may echo it: as sent,
percent-encoded, JSON-escaped, as HTML entities and base64 (alone or inside a larger blob,
at each alignment). Each form is written here with the standard library, not with the
redactor's own code."""

from __future__ import annotations

import base64
import html
import json
import random
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import pytest

from loadgen.client.redact import MASK, Redactor

KEY = "sk-SEC-AAA111"
ODD = 'pa/ss w&rd"<é😀>'  # a header value with characters every encoding treats differently
HEADERS = {"Authorization": f"Bearer {KEY}", "X-Odd": ODD}


def _all_percent(s: str, upper: bool = True) -> str:
    return "".join(("%%%02X" if upper else "%%%02x") % b for b in s.encode())


def _all_json(s: str) -> str:
    units = s.encode("utf-16-be")
    return "".join(f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2))


def _b64_inside(s: str, offset: int, urlsafe: bool) -> str:
    """``s`` base64-encoded inside a larger blob, ``offset`` bytes after a 3-byte boundary."""
    blob = b"Q" * offset + b"Authorization: Bearer " + s.encode() + b" trailing bytes"
    enc = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    return enc(blob).decode()


FORMS: dict[str, Callable[[str], str]] = {
    "plain": lambda s: s,
    "upper case": str.upper,
    "percent, reserved only": lambda s: quote(s),
    "percent, all but unreserved": lambda s: quote(s, safe=""),
    "percent, every char, upper hex": _all_percent,
    "percent, every char, lower hex": lambda s: _all_percent(s, upper=False),
    "percent, only the dashes": lambda s: s.replace("-", "%2D"),
    "percent, plus for space": quote_plus,
    "json, as json.dumps writes": lambda s: json.dumps(s)[1:-1],
    "json, ascii only": lambda s: json.dumps(s, ensure_ascii=True)[1:-1],
    "json, escaped slashes": lambda s: json.dumps(s)[1:-1].replace("/", "\\/"),
    "json, every char \\u": _all_json,
    "json, mixed \\u and plain": lambda s: "".join(_all_json(c) if i % 2 else c for i, c in enumerate(s)),
    "html, as html.escape writes": html.escape,
    "html, decimal entities": lambda s: "".join(f"&#{ord(c)};" for c in s),
    "html, hex entities": lambda s: "".join(f"&#x{ord(c):X};" for c in s),
    "base64": lambda s: base64.b64encode(s.encode()).decode(),
    "base64, no padding": lambda s: base64.b64encode(s.encode()).decode().rstrip("="),
    "base64 url-safe": lambda s: base64.urlsafe_b64encode(s.encode()).decode(),
    "base64 url-safe, no padding": lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("="),
    **{
        f"base64{' url-safe' if u else ''} inside a blob, offset {k}": (
            lambda s, k=k, u=u: _b64_inside(s, k, u)  # type: ignore[misc]
        )
        for k in range(3)
        for u in (False, True)
    },
}


def _stable_b64(s: str) -> list[str]:
    """What must not survive of ``s``'s base64 inside any blob: every 4-character run made of
    ``s``'s bits alone, at each alignment (what a reader could decode back)."""
    out = []
    for k in range(3):
        enc = base64.b64encode(bytes(k) + s.encode()).decode().rstrip("=")
        if (k + len(s.encode())) % 3:
            enc = enc[:-1]
        inner = enc[(0, 2, 3)[k] :]
        out += [inner[i : i + 8] for i in range(0, len(inner) - 8, 4)]
    return out


@pytest.mark.parametrize("secret", [KEY, ODD])
@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_of_each_secret_is_masked(form: str, secret: str) -> None:
    redact = Redactor(HEADERS)
    echoed = FORMS[form](secret)
    assert echoed, form
    text = f"upstream said: {echoed} (refused)"
    out = redact(text)
    assert MASK in out, (form, out)
    assert echoed not in out and secret not in out, (form, out)
    assert out.startswith("upstream said: ") and out.endswith(" (refused)"), out
    if "base64" in form:
        left = out.replace("-", "+").replace("_", "/")
        assert not [run for run in _stable_b64(secret) if run in left], (form, out)


def test_the_whole_header_value_and_basic_parts_in_every_form() -> None:
    token = base64.b64encode(b"alice:hunter2-pw").decode()
    redact = Redactor({"Authorization": f"Basic {token}"})
    for make in FORMS.values():
        for secret in (f"Basic {token}", token, "alice:hunter2-pw", "hunter2-pw"):
            out = redact(f"[{make(secret)}]")
            assert out == f"[{MASK}]" or (out.startswith("[") and MASK in out and make(secret) not in out), out


def test_ordinary_text_is_left_alone() -> None:
    redact = Redactor(HEADERS)
    rng = random.Random(3)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -_/+=%&#;\\\"'.,:"
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(200)))
        assert redact(text) == text
    for text in ("sk-SEC-AAA11", "sk%2DSEC", "&#115;k-SEC-AAA", "Bearer", "%2D%2D\\u002d&amp;"):
        assert redact(text) == text


def test_a_redactor_without_secrets_returns_its_input() -> None:
    redact = Redactor({"Accept": "a/b", "X-Short": "yes"})  # values under 4 characters are no secrets
    assert not redact and redact("yes a/b") == "yes a/b"
    assert Redactor({"X-Key": KEY}) and Redactor()("any") == "any"


def test_a_vendor_object_is_masked_in_its_keys_and_strings() -> None:
    redact = Redactor(HEADERS)
    obj = {"queue_ms": 1.5, "echo": f"auth={quote(KEY, safe='')}", KEY: [1, {"deep": _all_json(ODD)}]}
    out = redact.value(obj)
    assert out == {"queue_ms": 1.5, "echo": f"auth={MASK}", MASK: [1, {"deep": MASK}]}
    assert redact.value({"plain": 1}) == {"plain": 1}
    deep: dict[str, object] = {"k": KEY}
    for _ in range(40):  # deeper than a vendor object may be: nothing kept
        deep = {"d": deep}
    assert redact.value(deep) is None
