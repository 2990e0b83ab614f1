"""A deterministic word-level tokenizer, so that token counts are exact and predictable.

Every whitespace-separated word is one token (no BOS); its id is a blake2b hash of the word
above the reserved ids (:data:`PAD_ID`, :data:`BOS_ID`, :data:`EOS_ID`, :data:`EOT_ID`); a
chat message is ``[role token] + words + [EOT_ID]``; :meth:`WordTokenizer.decode` maps each
id to a seeded pseudo-word, so N tokens are exactly N words. :class:`StopMatcher` matches
``stop`` sequences on whole words. :class:`Tokenizer` is what the API needs from any
tokenizer (``encode``, ``apply_chat_template``, ``output_stream``; :class:`WordStream` for
this one). Stable across processes, platforms and Python versions.

The exact rules: docs/server.md, "The word tokenizer".
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from typing import Protocol

from loadgen.errors import ConfigError

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "EOT_ID",
    "NUM_RESERVED",
    "PAD_ID",
    "OutputStream",
    "StopMatcher",
    "Tokenizer",
    "WordStream",
    "WordTokenizer",
    "count_words",
]

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
EOT_ID = 3
NUM_RESERVED = 4

_SPECIAL_WORDS = ("<pad>", "<s>", "</s>", "<eot>")
_CONSONANTS = "bdfghklmnprstvz"
_VOWELS = "aeiou"


class OutputStream(Protocol):
    """Generated ids to text, one token at a time, with ``stop`` sequences applied."""

    @property
    def matched(self) -> str | None:
        """The stop string that ended generation, if one did."""
        ...

    def push(self, token_id: int, *, may_stop: bool = True) -> tuple[str, bool]:
        """Add one generated id; return ``(text to release now, stopped)``."""
        ...

    def flush(self) -> str:
        """The text still held back, when generation ends for another reason."""
        ...


class Tokenizer(Protocol):
    """What the API needs from a tokenizer."""

    vocab_size: int

    def encode(self, text: str) -> list[int]:
        """Ids of a completion prompt."""
        ...

    def apply_chat_template(self, messages: Iterable[tuple[str, str]]) -> list[int]:
        """Ids of a chat prompt given ``(role, content)`` pairs."""
        ...

    def output_stream(self, stop: Sequence[Sequence[str]]) -> OutputStream:
        """A stream for one generation; ``stop`` holds each stop string's words."""
        ...


def count_words(text: str) -> int:
    """Number of tokens :meth:`WordTokenizer.encode` gives for ``text``."""
    return len(text.split())


class WordTokenizer:
    """Word-level tokenizer over a vocabulary of ``vocab_size`` ids (see module docs).

    ``seed`` only changes which pseudo-word each id decodes to, never the ids of
    :meth:`encode`.
    """

    __slots__ = ("_ids", "_syllables", "_words", "seed", "vocab_size")

    # each memo holds at most this many entries (about 5 MB), then starts afresh: a
    # llama-3 vocabulary is 128k ids, and a memo of every word the sim samples
    # uniformly from it grew towards ~19 MB (13 MB after 150,000 sampled tokens)
    _MAX_CACHED_WORDS = 1 << 15

    def __init__(self, vocab_size: int = 32_000, *, seed: int = 0) -> None:
        if vocab_size <= NUM_RESERVED:
            raise ConfigError(
                f"vocab_size must be greater than {NUM_RESERVED}, got {vocab_size}",
                key="vocab_size",
            )
        self.vocab_size = vocab_size
        self.seed = seed
        syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
        random.Random(seed).shuffle(syllables)
        self._syllables = tuple(syllables)
        self._ids: dict[str, int] = {}  # memo of token_id (bounded)
        self._words: dict[int, str] = {}  # memo of word (bounded)

    def token_id(self, word: str) -> int:
        """The id of one word (no whitespace inside)."""
        token_id = self._ids.get(word)
        if token_id is None:
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            token_id = int.from_bytes(digest, "little") % (self.vocab_size - NUM_RESERVED) + NUM_RESERVED
            if len(self._ids) >= self._MAX_CACHED_WORDS:
                self._ids.clear()
            self._ids[word] = token_id
        return token_id

    def encode(self, text: str) -> list[int]:
        """One id per whitespace-separated word of ``text``."""
        memo, token_id = self._ids, self.token_id
        return [memo.get(word) or token_id(word) for word in text.split()]  # ids are never 0

    def encode_at_most(self, text: str, limit: int) -> list[int] | None:
        """:meth:`encode`, or None when ``text`` has more than ``limit`` tokens: only the
        first ``limit + 1`` words are split off and nothing is hashed, so the cost is bounded
        by ``limit``, not by the length of ``text``."""
        words = text.split(maxsplit=max(limit, 0))
        if len(words) > limit:
            return None
        memo, token_id = self._ids, self.token_id
        return [memo.get(word) or token_id(word) for word in words]

    def apply_chat_template_at_most(self, messages: Iterable[tuple[str, str]], limit: int) -> list[int] | None:
        """:meth:`apply_chat_template`, or None past ``limit`` tokens (bounded as
        :meth:`encode_at_most`)."""
        ids: list[int] = []
        for role, content in messages:
            words = self.encode_at_most(content, limit - len(ids) - 2)
            if words is None:
                return None
            ids.append(self.token_id(f"<|{role}|>"))
            ids.extend(words)
            ids.append(EOT_ID)
        return ids

    def apply_chat_template(self, messages: Iterable[tuple[str, str]]) -> list[int]:
        """Ids of a chat prompt given ``(role, content)`` pairs.

        Each message becomes ``[id("<|role|>")] + encode(content) + [EOT_ID]``.
        """
        ids: list[int] = []
        for role, content in messages:
            ids.append(self.token_id(f"<|{role}|>"))
            ids.extend(self.encode(content))
            ids.append(EOT_ID)
        return ids

    def word(self, token_id: int) -> str:
        """The one word an id decodes to (reserved ids: ``<pad>``, ``<s>``, ``</s>``, ``<eot>``).

        Ids outside the vocabulary raise ``ValueError``.
        """
        cached = self._words.get(token_id)
        if cached is not None:
            return cached
        word = self._make_word(token_id)
        if len(self._words) >= self._MAX_CACHED_WORDS:
            self._words.clear()
        self._words[token_id] = word
        return word

    def _make_word(self, token_id: int) -> str:
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} outside the vocabulary [0, {self.vocab_size})")
        if token_id < NUM_RESERVED:
            return _SPECIAL_WORDS[token_id]
        index = token_id - NUM_RESERVED
        syl = self._syllables
        n = len(syl)
        # Bijective numbering: all 1-syllable words, then all 2-syllable words, ...
        length = 1
        block = n
        while index >= block:
            index -= block
            length += 1
            block *= n
        parts = []
        for _ in range(length):
            index, digit = divmod(index, n)
            parts.append(syl[digit])
        return "".join(parts)

    def decode(self, ids: Sequence[int]) -> str:
        """The words of ``ids``, joined by single spaces."""
        return " ".join(self.word(i) for i in ids)

    def output_stream(self, stop: Sequence[Sequence[str]]) -> WordStream:
        """A :class:`WordStream` over this tokenizer."""
        return WordStream(self, stop)


class StopMatcher:
    """Word-level ``stop`` handling for one generation (see module docs).

    Feed generated words one at a time to :meth:`push`; it returns the words that can be
    released now and whether a stop sequence matched. :meth:`flush` releases the held
    words when generation ends for another reason.
    """

    __slots__ = ("_held", "_stops", "matched")

    def __init__(self, stops: Iterable[Sequence[str]]) -> None:
        self._stops = [tuple(s) for s in stops if s]
        self._held: list[str] = []
        self.matched: str | None = None  # the stop string that ended generation

    def push(self, word: str, *, may_stop: bool = True) -> tuple[list[str], bool]:
        """Add one word. Returns ``(words to release, stopped)``.

        With ``may_stop=False`` (fewer than ``min_tokens`` generated) a full match does not
        stop generation.
        """
        if not self._stops:
            return [word], False
        held = self._held
        held.append(word)
        if may_stop:
            for stop in self._stops:
                k = len(stop)
                if len(held) >= k and tuple(held[-k:]) == stop:
                    release = held[:-k]
                    held.clear()
                    self.matched = " ".join(stop)
                    return release, True
        keep = self._longest_partial(held)
        split = len(held) - keep
        release = held[:split]
        del held[:split]
        return release, False

    def flush(self) -> list[str]:
        """Release every held word (generation ended without a match)."""
        release = list(self._held)
        self._held.clear()
        return release

    def _longest_partial(self, held: list[str]) -> int:
        best = 0
        for stop in self._stops:
            for k in range(min(len(stop) - 1, len(held)), best, -1):
                if tuple(held[-k:]) == stop[:k]:
                    best = k
                    break
        return best


class WordStream:
    """Generated ids to words joined by single spaces (the first without a leading space),
    ``stop`` matched on whole words by a :class:`StopMatcher`."""

    __slots__ = ("_any_text", "_matcher", "_tok")

    def __init__(self, tok: WordTokenizer, stop: Sequence[Sequence[str]]) -> None:
        self._tok = tok
        self._matcher = StopMatcher(stop)
        self._any_text = False

    @property
    def matched(self) -> str | None:
        return self._matcher.matched

    def push(self, token_id: int, *, may_stop: bool = True) -> tuple[str, bool]:
        """Add one generated id; return ``(text to release now, stopped)``."""
        release, stopped = self._matcher.push(self._tok.word(token_id), may_stop=may_stop)
        return self._text(release), stopped

    def flush(self) -> str:
        """The words still held back."""
        return self._text(self._matcher.flush())

    def _text(self, words: list[str]) -> str:
        if not words:
            return ""
        text = " ".join(words)
        if self._any_text:
            text = " " + text
        self._any_text = True
        return text
