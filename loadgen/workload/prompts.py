"""Prompt text of a target token length, without a tokenizer.

A prompt is ``words_for(n_tokens)`` words from a corpus of common English words
(``loadgen/data/words.txt``), each normally one BPE token. The words-per-token ratio is
corrected from the server's own count: send :meth:`PromptSynthesizer.calibration_texts`,
read ``usage.prompt_tokens`` and call :meth:`PromptSynthesizer.calibrate`, which fits
``tokens = tokens_per_word * words + overhead_tokens``. The first three words spell the
request index, so no two prompts of a run share a first KV block (a shared-prefix
``group`` starts with its group's words instead). Text depends only on ``(seed, salt,
index, group)`` and the lengths. The ``salt`` (a run's own random number, or None) keys
every word from the first, so two runs with different salts share no prompt text, not
even a group's shared prefix, while the prompts of one run share what they did.

Docs: workloads/README.md, "Prompt text and calibration".
"""

from __future__ import annotations

import functools
import importlib
import math
import secrets
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from loadgen.errors import ConfigError

__all__ = [
    "PromptSynthesizer",
    "TokenCounter",
    "TokenizerCounter",
    "default_corpus",
    "format_salt",
    "new_salt",
    "parse_salt",
]

_UNIQUE, _GROUP, _CALIB, _DIGIT = 1, 2, 3, 4  # hash streams
_DIGITS = 3  # leading words that spell the key
_G1 = np.uint64(0x9E3779B97F4A7C15)
_G2 = np.uint64(0xD1B54A32D192ED03)
_M64 = (1 << 64) - 1


def new_salt() -> int:
    """A fresh prompt salt: 64 random bits from the operating system (never 0)."""
    return secrets.randbits(64) or 1


def format_salt(salt: int) -> str:
    """A salt as run.json and ``--prompt-salt`` write it: 16 hex digits."""
    return f"{salt:016x}"


def parse_salt(text: str | None, key: str = "--prompt-salt") -> int | None:
    """A salt from :func:`format_salt`'s form (1 to 16 hex digits, not all zero); None: none given."""
    if text is None:
        return None
    t = text.strip().lower()
    if not 1 <= len(t) <= 16 or any(c not in "0123456789abcdef" for c in t) or int(t, 16) == 0:
        raise ConfigError(
            f"a prompt salt is 1 to 16 hex digits, not all zero (as run.json writes it), got {text!r}", key=key
        )
    return int(t, 16)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on a uint64 array (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


@functools.lru_cache(maxsize=1)
def default_corpus() -> tuple[str, ...]:
    """The bundled word list (``loadgen/data/words.txt``), read once."""
    text = resources.files("loadgen").joinpath("data").joinpath("words.txt").read_text(encoding="utf-8")
    return tuple(w for w in (line.strip() for line in text.splitlines()) if w and not w.startswith("#"))


class TokenCounter(Protocol):
    """Anything that counts the tokens of a text (no special tokens added)."""

    def count(self, text: str) -> int: ...


class TokenizerCounter:
    """Exact counts from a local Hugging Face ``tokenizer.json`` (needs ``tokenizers``).

    The package is imported here, the file is read on the first :meth:`count`.
    """

    def __init__(self, path: Path) -> None:
        try:
            tokenizers = importlib.import_module("tokenizers")
        except ImportError as exc:
            raise ConfigError(
                "exact token counts need the 'tokenizers' package: pip install loadgen[tokenizer]", key="tokenizer"
            ) from exc
        self.path = Path(path)
        self._module: Any = tokenizers
        self._tok: Any = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickles as its path (worker processes load the file again)."""
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def _load(self) -> Any:
        if self._tok is None:
            try:
                self._tok = self._module.Tokenizer.from_file(str(self.path))
            except Exception as exc:  # the Rust binding raises plain Exception
                raise ConfigError(f"cannot load tokenizer: {exc}", source=str(self.path), key="tokenizer") from exc
        return self._tok

    def count(self, text: str) -> int:
        """Number of tokens of ``text``, without BOS/EOS or other special tokens."""
        return len(self._load().encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """:meth:`count` of each text, batched (the tokenizer's own threads): a dataset at once."""
        tok = self._load()
        batch = getattr(tok, "encode_batch_fast", None) or tok.encode_batch  # _fast: no offsets (tokenizers >= 0.20)
        return [len(e.ids) for e in batch(list(texts), add_special_tokens=False)]


class PromptSynthesizer:
    """Builds deterministic prompt text of a target token length.

    ``tokens_per_word`` and ``overhead_tokens`` start at 1 and 0 and are set by
    :meth:`calibrate`. With a ``counter`` (argument or attribute), :meth:`text` trims or
    extends to the exact count instead. A ``salt`` (None: unsalted) changes every word of
    every text but none of the lengths: the same word counts, other words.
    """

    def __init__(
        self,
        seed: int,
        corpus: Sequence[str] | None = None,
        *,
        counter: TokenCounter | None = None,
        salt: int | None = None,
    ) -> None:
        self.seed = int(seed)
        if salt is not None and (isinstance(salt, bool) or not isinstance(salt, int) or not 0 <= salt <= _M64):
            raise ConfigError(f"a prompt salt is a 64-bit whole number, got {salt!r}", key="prompt_salt")
        self.salt = salt
        # every word is drawn from this key: the seed alone when unsalted (the texts before salts), else both
        self._key = self.seed & _M64
        if salt is not None:
            mixed = (int(_mix(np.array([self._key], dtype=np.uint64))[0]) ^ salt) + int(_G1)
            self._key = int(_mix(np.array([mixed & _M64], dtype=np.uint64))[0])
        self.tokens_per_word: float = 1.0
        self.overhead_tokens: float = 0.0
        self.counter = counter
        self._corpus: tuple[str, ...] | None = None
        if corpus is not None:
            words = tuple(corpus)
            for w in words:
                if not isinstance(w, str) or not w or any(ch.isspace() for ch in w):
                    raise ConfigError(f"corpus words must be non-empty and without whitespace, got {w!r}", key="corpus")
            if len(set(words)) < 2:
                raise ConfigError("a corpus needs at least 2 distinct words", key="corpus")
            self._corpus = words
        self._table: np.ndarray | None = None
        self._perms: dict[int, np.ndarray] = {}

    # ------------------------------------------------------------ lengths

    def words_for(self, n_tokens: int) -> int:
        """Words to send for ``n_tokens`` prompt tokens (at least 1)."""
        return max(1, round((n_tokens - self.overhead_tokens) / self.tokens_per_word))

    def _words_for(self, n_tokens: np.ndarray) -> np.ndarray:
        w = np.rint((n_tokens - self.overhead_tokens) / self.tokens_per_word)
        return np.maximum(1, w).astype(np.int64)

    def calibrate(self, samples: Sequence[tuple[int, int]]) -> None:
        """Fit ``tokens_per_word`` and ``overhead_tokens`` from ``(words sent, prompt tokens)``.

        Two or more distinct word counts: least-squares line. Otherwise: the ratio, with
        no overhead. Non-positive inputs or a non-positive slope raise ``ConfigError``.
        With a counter, ``samples`` are the answers to :meth:`calibration_texts` of their
        word counts, in order, and the overhead is exact instead of fitted: the server's
        count less the counter's for the same text, when every sample agrees on it (a
        fitted intercept is off by whole tokens when words are not all one token each).
        """
        pairs = [(float(w), float(t)) for w, t in samples]
        if not pairs:
            raise ConfigError("calibration needs at least one (words, prompt_tokens) pair", key="calibration")
        for w, t in pairs:
            if not (w > 0 and t > 0 and math.isfinite(w) and math.isfinite(t)):
                raise ConfigError(
                    f"calibration pair (words={w:g}, prompt_tokens={t:g}) must be positive", key="calibration"
                )
        n = len(pairs)
        if len({w for w, _ in pairs}) >= 2:
            mw = math.fsum(w for w, _ in pairs) / n
            mt = math.fsum(t for _, t in pairs) / n
            sxx = math.fsum((w - mw) ** 2 for w, _ in pairs)
            sxy = math.fsum((w - mw) * (t - mt) for w, t in pairs)
            slope, intercept = sxy / sxx, mt - (sxy / sxx) * mw
        else:
            slope, intercept = math.fsum(t for _, t in pairs) / math.fsum(w for w, _ in pairs), 0.0
        if not slope > 0:
            raise ConfigError(
                f"calibration gives {slope:g} tokens per word; the server's prompt_tokens do not grow with the prompt",
                key="calibration",
            )
        self.tokens_per_word, self.overhead_tokens = slope, intercept
        exact = self.exact_overhead(samples)
        if exact is not None:
            self.overhead_tokens = float(exact)

    def exact_overhead(self, samples: Sequence[tuple[int, int]]) -> int | None:
        """The tokens the server adds to a prompt (its chat template, BOS), counted: each
        sample's prompt tokens less the counter's count of its calibration text; None
        without a counter, or when the samples disagree (the counter is not the server's)."""
        if self.counter is None or not samples:
            return None
        texts = self.calibration_texts([int(w) for w, _ in samples])
        added = {int(t) - self.counter.count(text) for (_, t), (_, text) in zip(samples, texts)}
        return added.pop() if len(added) == 1 else None

    # ------------------------------------------------------------ word ids

    def _words(self) -> np.ndarray:
        if self._table is None:
            self._table = np.array(self._corpus or default_corpus(), dtype=object)
        return self._table

    def _perm(self, stream: int) -> np.ndarray:
        if stream not in self._perms:
            rng = np.random.default_rng([self._key, stream])
            self._perms[stream] = rng.permutation(len(self._words()))
        return self._perms[stream]

    def _base(self, stream: int) -> np.uint64:
        return np.uint64(_mix(np.array([(self._key * 0x100000001B3 + stream) & _M64], dtype=np.uint64))[0])

    def _segment(self, stream: int, keys: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Word ids of one segment per key (``counts[i]`` words), concatenated."""
        v = len(self._words())
        starts = np.cumsum(counts) - counts
        pos = np.arange(int(counts.sum()), dtype=np.uint64) - np.repeat(starts.astype(np.uint64), counts)
        kh = _mix(self._base(stream) ^ (keys.astype(np.uint64) * _G1))
        h = _mix(np.repeat(kh, counts) + pos * _G2)
        ids = (((h >> np.uint64(32)) * np.uint64(v)) >> np.uint64(32)).view(np.int64)  # in [0, v); no division
        perm = self._perm(stream)
        for j in range(_DIGITS):  # the key spelt in base v, digit j shifted by a hash of the lower digits
            rows = np.flatnonzero(counts > j)
            if rows.size == 0:
                break
            k = keys[rows]
            low = (k % v**j).astype(np.uint64)
            salt = np.uint64((j * int(_G2)) & _M64)
            off = (_mix(self._base(_DIGIT) ^ (low * _G1 + salt)) % np.uint64(v)).astype(np.int64)
            ids[starts[rows] + j] = perm[((k // v**j) % v + off) % v]
        return ids

    @staticmethod
    def _spread(offsets: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Flat positions ``offsets[i] + 0 .. counts[i]-1``, concatenated."""
        starts = np.cumsum(counts) - counts
        out: np.ndarray = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(offsets - starts, counts)
        return out

    def _compose(
        self, words: np.ndarray, shared: np.ndarray, keys: np.ndarray, groups: np.ndarray, stream: int = _UNIQUE
    ) -> list[str]:
        """Texts of ``words[i]`` words: ``shared[i]`` group words, then unique ones."""
        starts = np.cumsum(words) - words
        uniq = words - shared
        rows = np.flatnonzero(shared > 0)
        if rows.size:
            flat = np.empty(int(words.sum()), dtype=np.int64)
            flat[self._spread(starts[rows], shared[rows])] = self._segment(_GROUP, groups[rows], shared[rows])
            flat[self._spread(starts + shared, uniq)] = self._segment(stream, keys, uniq)
        else:
            flat = self._segment(stream, keys, uniq)
        text = self._words()[flat].tolist()
        return [" ".join(text[a:b]) for a, b in zip(starts.tolist(), (starts + words).tolist())]

    # ------------------------------------------------------------ text

    def texts(
        self,
        n_tokens: Sequence[int] | np.ndarray,
        indices: Sequence[int] | np.ndarray,
        groups: Sequence[int | None] | np.ndarray | None = None,
        shared_tokens: Sequence[int] | np.ndarray | int = 0,
    ) -> list[str]:
        """Vectorised :meth:`text` (no counter): one prompt per ``(n_tokens, index)``.

        ``groups`` holds a group id, or ``None``/``-1`` for none, per prompt.
        """
        n = np.asarray(n_tokens, dtype=np.int64)
        keys = np.asarray(indices, dtype=np.int64)
        if groups is None:
            g = np.full(n.shape, -1, dtype=np.int64)
        else:
            g = np.array([-1 if x is None else x for x in groups], dtype=np.int64)
        st = np.broadcast_to(np.asarray(shared_tokens, dtype=np.int64), n.shape)
        words = self._words_for(n)
        shared = np.where((g >= 0) & (st > 0), np.minimum(self._words_for(st), words), 0)
        return self._compose(words, shared, keys, g)

    def text(
        self,
        n_tokens: int,
        index: int,
        group: int | None = None,
        shared_tokens: int = 0,
        counter: TokenCounter | None = None,
    ) -> str:
        """The prompt of request ``index``: ``words_for(n_tokens)`` words.

        With a ``group``, the first ``words_for(shared_tokens)`` words are the group's
        (capped at the prompt's length). With a counter, the word count is searched so the
        counted tokens equal ``n_tokens - round(overhead_tokens)`` when a word boundary
        allows it, else the longest text below.
        """
        counter = counter if counter is not None else self.counter
        if counter is None:
            return self.texts([n_tokens], [index], [group], shared_tokens)[0]
        return self._exact(n_tokens, index, group, shared_tokens, counter)

    def _exact(self, n_tokens: int, index: int, group: int | None, shared_tokens: int, counter: TokenCounter) -> str:
        target = max(1, n_tokens - round(self.overhead_tokens))
        s_words = self.words_for(shared_tokens) if group is not None and shared_tokens > 0 else 0
        g = np.array([-1 if group is None else group], dtype=np.int64)
        cache: dict[int, tuple[str, int]] = {}

        def build(w: int) -> tuple[str, int]:
            if w not in cache:
                text = self._compose(np.array([w]), np.array([min(s_words, w)]), np.array([index]), g)[0]
                cache[w] = (text, counter.count(text))
            return cache[w]

        lo = hi = self.words_for(n_tokens)
        for _ in range(64):  # bracket: count(lo) <= target < count(hi), or lo == 1
            c = build(lo)[1]
            if c == target:
                return build(lo)[0]
            if c < target:
                hi = lo + max(1, target - c)
                if build(hi)[1] > target:
                    break
                lo = hi
            else:
                hi, lo = lo, max(1, lo - max(1, c - target))
                if lo == 1 or build(lo)[1] <= target:
                    break
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if build(mid)[1] <= target:
                lo = mid
            else:
                hi = mid
        return build(lo)[0]

    def group_text(self, group: int, words: int) -> str:
        """The first ``words`` words of shared block ``group`` (the text a shared prefix of
        that group starts with; a shorter one is a prefix of a longer one)."""
        w = np.array([max(1, int(words))], dtype=np.int64)
        return self._compose(w, w, np.zeros(1, dtype=np.int64), np.array([int(group)], dtype=np.int64))[0]

    def calibration_texts(self, word_counts: Sequence[int] = (32, 256)) -> list[tuple[int, str]]:
        """``(words, text)`` pairs for calibration requests, unlike any request prompt."""
        w = np.asarray(word_counts, dtype=np.int64)
        if w.size == 0 or (w < 1).any():
            raise ConfigError(f"calibration word counts must be >= 1, got {list(word_counts)}", key="calibration")
        zeros = np.zeros_like(w)
        texts = self._compose(w, zeros, np.arange(w.size, dtype=np.int64), zeros - 1, stream=_CALIB)
        return list(zip(w.tolist(), texts))
