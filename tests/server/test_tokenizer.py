"""The word-level tokenizer and word-level stop sequences."""

from __future__ import annotations

import hashlib

import pytest

from loadgen.errors import ConfigError
from loadgen.server.tokenizer import EOS_ID, EOT_ID, NUM_RESERVED, PAD_ID, StopMatcher, WordTokenizer, count_words


def _expected_id(word: str, vocab: int) -> int:
    digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (vocab - NUM_RESERVED) + NUM_RESERVED


def test_encode_is_one_stable_hash_per_word() -> None:
    tok = WordTokenizer(1000)
    ids = tok.encode("  hello\tworld\nhello \u2028 x ")
    assert ids == [_expected_id(w, 1000) for w in ("hello", "world", "hello", "x")]
    assert ids[0] == ids[2]
    assert tok.encode("") == [] and tok.encode(" \n\t ") == []
    assert count_words("  a b\tc ") == 3


def test_encode_never_gives_reserved_ids_and_ignores_seed() -> None:
    tok = WordTokenizer(NUM_RESERVED + 3)
    ids = tok.encode(" ".join(f"w{i}" for i in range(200)))
    assert set(ids) == {NUM_RESERVED, NUM_RESERVED + 1, NUM_RESERVED + 2}
    assert WordTokenizer(500, seed=1).encode("a b c") == WordTokenizer(500, seed=2).encode("a b c")


def test_chat_template_counts_two_tokens_per_message() -> None:
    tok = WordTokenizer()
    ids = tok.apply_chat_template([("system", "be brief"), ("user", "one two three")])
    assert len(ids) == (2 + 2) + (3 + 2)
    assert ids[0] == tok.token_id("<|system|>") and ids[3] == EOT_ID
    assert ids[4] == tok.token_id("<|user|>") and ids[-1] == EOT_ID
    assert ids[5:8] == tok.encode("one two three")
    assert tok.apply_chat_template([("user", "")]) == [tok.token_id("<|user|>"), EOT_ID]


def test_decode_gives_one_distinct_word_per_id() -> None:
    tok = WordTokenizer(8000)
    words = [tok.word(i) for i in range(8000)]
    assert len(set(words)) == len(words)
    assert words[:NUM_RESERVED] == ["<pad>", "<s>", "</s>", "<eot>"]
    assert all(w.isalpha() and w.isascii() for w in words[NUM_RESERVED:])
    assert words[PAD_ID] == "<pad>" and words[EOS_ID] == "</s>"
    assert tok.decode([10, 11, 12]) == " ".join(words[10:13])
    assert count_words(tok.decode(list(range(8000)))) == 8000
    with pytest.raises(ValueError):
        tok.word(8000)


def test_decode_words_depend_on_seed_only() -> None:
    a, b, c = WordTokenizer(100, seed=1), WordTokenizer(100, seed=1), WordTokenizer(100, seed=2)
    ids = list(range(NUM_RESERVED, 100))
    assert a.decode(ids) == b.decode(ids) != c.decode(ids)


def test_vocab_must_exceed_reserved() -> None:
    with pytest.raises(ConfigError, match="vocab_size"):
        WordTokenizer(NUM_RESERVED)


def _run(stops: list[tuple[str, ...]], words: str, min_ok: int = 0) -> tuple[list[str], bool]:
    m = StopMatcher(stops)
    out: list[str] = []
    for i, w in enumerate(words.split(), start=1):
        release, stopped = m.push(w, may_stop=i >= min_ok)
        out += release
        if stopped:
            return out, True
    return out + m.flush(), False


def test_stop_single_and_multi_word() -> None:
    assert _run([("c",)], "a b c d") == (["a", "b"], True)
    assert _run([("b", "c")], "a b c d") == (["a"], True)
    assert _run([("b", "c")], "a b d b") == (["a", "b", "d", "b"], False)
    assert _run([], "a b") == (["a", "b"], False)


def test_stop_holds_back_partial_matches() -> None:
    m = StopMatcher([("x", "y", "z")])
    assert m.push("a") == (["a"], False)
    assert m.push("x") == ([], False)
    assert m.push("y") == ([], False)
    assert m.push("q") == (["x", "y", "q"], False)
    assert m.push("x") == ([], False)
    assert m.push("x") == (["x"], False)  # the second x may still start a match
    assert m.push("y") == ([], False)
    assert m.push("z") == ([], True) and m.matched == "x y z"


def test_stop_overlapping_prefix_and_min_tokens() -> None:
    assert _run([("a", "a", "b")], "a a a b c") == (["a"], True)
    assert _run([("c",), ("a", "b")], "x a b c") == (["x"], True)
    assert _run([("b",)], "b b c b", min_ok=3) == (["b", "b", "c"], True)
