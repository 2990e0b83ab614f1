"""The forms a secret takes when a server echoes it, as one regular expression per secret.

A proxy or gateway that repeats a request's credentials may encode them on the way: a
query string percent-encodes (``sk%2DKEY`` or ``sk-KEY``: any subset of characters, hex in
either case, ``+`` for a space), a JSON body escapes (``\\u002d`` for any character,
``\\/``, ``\\"``), an HTML page writes entities (``&#45;``, ``&#x2d;``, ``&amp;``), and a
log of headers may hold the secret base64-encoded, alone or inside a larger blob (say
``Authorization: Bearer sk-…`` encoded whole).

:func:`secret_patterns` turns one secret into regular-expression sources, each matching
every mix of those per-character encodings. Base64 is matched by the part of the encoding
that does not depend on the bytes around the secret: at each of the three alignments the
secret can have inside a larger blob (its offset modulo 3), the characters made of the
secret's bits alone (the first one or two and the last one are shared with the neighbours
and are left out), in the standard and the URL-safe alphabet. The whole encoding of the
secret alone, padding included, is matched too, so that nothing of it is left.

Every source begins with a literal character, so a :class:`re.Pattern` joining them with
``|`` (no flags) skips text positions that cannot start a match at C speed.
"""

from __future__ import annotations

import base64
import re

__all__ = ["join_patterns", "secret_patterns"]

_SHORT_JSON = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NAMED_HTML = {"&": ("amp",), "<": ("lt",), ">": ("gt",), '"': ("quot",), "'": ("apos",)}
_MIN_BASE64 = 4  # a shorter stable part would mask ordinary base64 text


def _hex(value: int, width: int) -> str:
    """``value`` as ``width`` hex digits, each in either case."""
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{value:0{width}x}")


def _json_units(ch: str) -> list[int]:
    code = ord(ch)
    if code < 0x10000:
        return [code]
    code -= 0x10000
    return [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]


def _char_forms(ch: str, cased: bool) -> list[str]:
    """Regular-expression sources for one character of a secret, each starting with a literal."""
    forms = [re.escape(ch)]
    if cased and len(ch.swapcase()) == 1 and ch.swapcase() != ch:
        forms.append(re.escape(ch.swapcase()))
    forms.append("".join("%" + _hex(b, 2) for b in ch.encode()))
    if ch == " ":
        forms.append(r"\+")
    forms.append("".join(r"\\u" + _hex(u, 4) for u in _json_units(ch)))
    if ch in _SHORT_JSON:
        forms.append(re.escape(_SHORT_JSON[ch]))
    forms.append(f"&\\#0*{ord(ch)};?")
    forms.append(f"&\\#[xX]0*{_hex(ord(ch), 1)};?")
    forms.extend(f"&{name};" for name in _NAMED_HTML.get(ch, ()))
    return forms


def _encoded(text: str, cased: bool) -> list[str]:
    """Sources matching ``text`` with each character in any of its forms; one per form of
    the first character, so that every source starts with a literal."""
    rest = "".join(f"(?:{'|'.join(_char_forms(ch, cased))})" for ch in text[1:])
    return [first + rest for first in _char_forms(text[0], cased)]


def join_patterns(sources: list[str]) -> str:
    """One alternation of ``sources`` (each starting with a literal character, kept in
    order within a group) grouped by that first character: a text position is then tried
    against one branch per distinct first character, not against every source."""
    groups: dict[str, list[str]] = {}
    for src in sources:
        n = 2 if src.startswith("\\") else 1
        groups.setdefault(src[:n], []).append(src[n:])
    return "|".join(f"{first}(?:{'|'.join(rests)})" for first, rests in groups.items())


def _base64_parts(secret: bytes) -> set[str]:
    """The secret's base64 (standard and URL-safe): alone with its padding, and the stable
    inner part at each alignment inside a larger blob."""
    out = {base64.b64encode(secret).decode()}
    for offset in range(3):
        total = offset + len(secret)
        enc = base64.b64encode(bytes(offset) + secret).decode().rstrip("=")
        if total % 3:
            enc = enc[:-1]  # the last character also holds bits of what follows
        out.add(enc[(0, 2, 3)[offset] :])  # the first ones also hold bits of what came before
    out |= {s.translate(str.maketrans("+/", "-_")) for s in out}
    return {s for s in out if len(s) >= _MIN_BASE64}


def secret_patterns(secret: str) -> list[tuple[int, str]]:
    """Regular-expression sources matching ``secret`` in every form named in the module
    docstring, each with the length of the text it stands for (to order longest first)."""
    out = [(len(secret), src) for src in _encoded(secret, cased=True)]
    for part in _base64_parts(secret.encode()):
        out.extend((len(part), src) for src in _encoded(part, cased=False))
    return out
