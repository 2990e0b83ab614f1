"""Prompt synthesis: exact word counts, determinism, unique and shared prefixes, calibration."""

from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path

import pytest

from loadgen.errors import ConfigError
from loadgen.workload.prompts import PromptSynthesizer, TokenizerCounter, default_corpus, format_salt, parse_salt

HAS_TOKENIZERS = importlib.util.find_spec("tokenizers") is not None


def words(text: str) -> list[str]:
    return text.split(" ")


def test_default_corpus() -> None:
    corpus = default_corpus()
    assert len(corpus) == 2000 and len(set(corpus)) == 2000
    assert all(re.fullmatch(r"[a-z]+", w) for w in corpus)


def test_words_for_formula() -> None:
    s = PromptSynthesizer(seed=0)
    assert [s.words_for(n) for n in (0, 1, 2, 256)] == [1, 1, 2, 256]
    s.tokens_per_word, s.overhead_tokens = 1.25, 7.0
    assert s.words_for(132) == 100  # (132 - 7) / 1.25
    assert s.words_for(133) == 101  # 100.8 -> 101
    assert s.words_for(8) == 1 and s.words_for(3) == 1  # never below one word


@pytest.mark.parametrize(("tpw", "overhead"), [(1.0, 0.0), (1.3, 5.0), (0.8, -2.0)])
def test_word_count_matches_words_for_exactly(tpw: float, overhead: float) -> None:
    s = PromptSynthesizer(seed=3)
    s.tokens_per_word, s.overhead_tokens = tpw, overhead
    corpus = set(default_corpus())
    for n in [*list(range(1, 300)), 1000, 4096, 16000]:
        text = s.text(n, index=n)
        ws = words(text)
        assert len(ws) == s.words_for(n)
        assert text == " ".join(ws) and "  " not in text and text.strip() == text
        assert set(ws) <= corpus


def test_deterministic_per_seed_and_index() -> None:
    a, b = PromptSynthesizer(seed=11), PromptSynthesizer(seed=11)
    assert a.text(200, 5) == b.text(200, 5)
    assert a.text(200, 5) != a.text(200, 6)
    assert a.text(200, 5) != PromptSynthesizer(seed=12).text(200, 5)
    assert a.text(200, 5, group=1, shared_tokens=100) == b.text(200, 5, group=1, shared_tokens=100)


def test_shorter_prompt_is_a_prefix_of_longer() -> None:
    s = PromptSynthesizer(seed=1)
    assert s.text(500, 9).startswith(s.text(100, 9) + " ")


def test_batch_equals_single() -> None:
    s = PromptSynthesizer(seed=2)
    s.tokens_per_word, s.overhead_tokens = 1.1, 3.0
    ns, idx = [5, 300, 1, 77, 1200], [0, 1, 2, 3, 4000]
    groups = [None, 3, None, 0, 3]
    batch = s.texts(ns, idx, groups, [0, 120, 0, 500, 120])
    assert batch == [s.text(n, i, g, st) for n, i, g, st in zip(ns, idx, groups, [0, 120, 0, 500, 120])]


def test_non_group_prompts_differ_in_first_16_words() -> None:
    s = PromptSynthesizer(seed=4)
    firsts = [tuple(words(t)[:16]) for t in s.texts([64] * 3000, range(3000))]
    assert len(set(firsts)) == 3000
    # Guaranteed, not just likely: the first three words spell the index.
    assert len({f[:3] for f in firsts}) == 3000


def test_unique_prefix_is_guaranteed_even_with_a_tiny_corpus() -> None:
    s = PromptSynthesizer(seed=5, corpus=[f"w{i}" for i in range(10)])
    firsts = {tuple(words(t)[:3]) for t in s.texts([3] * 1000, range(1000))}
    assert len(firsts) == 1000  # 10**3 indices, 10**3 distinct three-word heads


def test_group_members_share_their_prefix() -> None:
    s = PromptSynthesizer(seed=6)
    s.tokens_per_word = 1.25
    shared = s.words_for(1024)
    assert shared == 819
    members = [words(s.text(1200, i, group=2, shared_tokens=1024)) for i in range(10, 20)]
    for m in members:
        assert len(m) == s.words_for(1200)
        assert m[:shared] == members[0][:shared]
    # The unique parts start differently (each starts with its index's words).
    assert len({tuple(m[shared : shared + 3]) for m in members}) == len(members)
    other = words(s.text(1200, 10, group=3, shared_tokens=1024))
    assert other[:3] != members[0][:3]
    assert other[shared:] == members[0][shared:]  # same index: same unique part


def test_group_prefix_capped_at_prompt_length() -> None:
    s = PromptSynthesizer(seed=7)
    a, b = s.text(50, 1, group=0, shared_tokens=100), s.text(50, 2, group=0, shared_tokens=100)
    assert a == b == " ".join(words(s.text(120, 3, group=0, shared_tokens=100))[:50])


def test_calibrate_recovers_known_line_exactly() -> None:
    s = PromptSynthesizer(seed=0)
    s.calibrate([(40, 57), (100, 132), (400, 507)])  # tokens = 1.25 * words + 7
    assert (s.tokens_per_word, s.overhead_tokens) == (1.25, 7.0)
    assert s.words_for(132) == 100


def test_calibrate_least_squares_non_dyadic() -> None:
    s = PromptSynthesizer(seed=0)
    pairs = [(w, 1.3 * w + 11) for w in (16, 32, 64, 256, 1024)]
    s.calibrate(pairs)  # type: ignore[arg-type]
    assert s.tokens_per_word == pytest.approx(1.3, rel=1e-12)
    assert s.overhead_tokens == pytest.approx(11.0, rel=1e-12)


def test_calibrate_one_word_count_gives_ratio_without_overhead() -> None:
    s = PromptSynthesizer(seed=0)
    s.calibrate([(200, 250)])
    assert (s.tokens_per_word, s.overhead_tokens) == (1.25, 0.0)
    s.calibrate([(100, 110), (100, 130)])
    assert (s.tokens_per_word, s.overhead_tokens) == (1.2, 0.0)


@pytest.mark.parametrize(
    ("pairs", "part"),
    [
        ([], "at least one"),
        ([(0, 10)], "must be positive"),
        ([(10, -1)], "must be positive"),
        ([(10, 100), (100, 20)], "tokens per word"),
    ],
)
def test_calibrate_rejects_nonsense(pairs: list[tuple[int, int]], part: str) -> None:
    s = PromptSynthesizer(seed=0)
    with pytest.raises(ConfigError, match=part) as info:
        s.calibrate(pairs)
    assert info.value.key == "calibration"
    assert (s.tokens_per_word, s.overhead_tokens) == (1.0, 0.0)  # unchanged


def test_calibration_texts_are_unlike_request_prompts() -> None:
    s = PromptSynthesizer(seed=8)
    cal = s.calibration_texts((32, 256))
    assert [w for w, _ in cal] == [32, 256]
    assert [len(words(t)) for _, t in cal] == [32, 256]
    heads = {tuple(words(t)[:3]) for t in s.texts([8] * 2000, range(2000))}
    assert not any(tuple(words(t)[:3]) in heads for _, t in cal)
    with pytest.raises(ConfigError, match="must be >= 1"):
        s.calibration_texts([0])


@pytest.mark.parametrize("bad", [[], ["a"], ["a", "a"], ["a", "b c"], ["a", ""]])
def test_custom_corpus_validated(bad: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        PromptSynthesizer(seed=0, corpus=bad)
    assert info.value.key == "corpus"


class LengthCounter:
    """A fake tokenizer: words longer than 6 letters are 2 tokens, others 1."""

    def __init__(self) -> None:
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return sum(2 if len(w) > 6 else 1 for w in text.split(" "))


@pytest.mark.parametrize("overhead", [0.0, 4.0])
def test_counter_gives_exact_length_when_possible(overhead: float) -> None:
    counter = LengthCounter()
    s = PromptSynthesizer(seed=9, counter=counter)
    s.overhead_tokens = overhead
    plain = PromptSynthesizer(seed=9)  # 1 token per word: text(k) has exactly k words
    exact = 0
    for n in [*list(range(5, 200, 7)), 1000, 3000]:
        target = n - round(overhead)
        counter.calls = 0
        text = s.text(n, index=n)
        calls = counter.calls
        got = counter.count(text)
        assert text == plain.text(len(words(text)), index=n)  # same words, just as many as fit
        nxt = counter.count(plain.text(len(words(text)) + 1, index=n))
        assert got == target or got < target < nxt
        exact += got == target
        assert calls <= 2 * (n.bit_length() + 4)  # bracket + bisection, no linear scan
    assert exact >= 20  # most targets are hit exactly; misses end where a 2-token word would not fit


def test_counter_keeps_group_prefix() -> None:
    s = PromptSynthesizer(seed=10)
    plain = words(s.text(300, 1, group=1, shared_tokens=100))
    exact = words(s.text(300, 1, group=1, shared_tokens=100, counter=LengthCounter()))
    assert exact[:100] == plain[:100]


@pytest.mark.skipif(HAS_TOKENIZERS, reason="checks the message shown when 'tokenizers' is missing")
def test_tokenizer_counter_without_package_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"pip install loadgen\[tokenizer\]"):
        TokenizerCounter(tmp_path / "tokenizer.json")


def test_tokenizer_counter_exact_lengths(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers", reason="optional extra loadgen[tokenizer] is not installed")
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(default_corpus())}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    counter = TokenizerCounter(path)
    s = PromptSynthesizer(seed=0)
    s.tokens_per_word = 1.4  # a wrong guess: the counter corrects it
    for n in (10, 100, 777):
        assert counter.count(s.text(n, 1, counter=counter)) == n


def test_tokenizer_counter_bad_file(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers", reason="optional extra loadgen[tokenizer] is not installed")
    path = tmp_path / "tokenizer.json"
    path.write_text("not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot load tokenizer"):
        TokenizerCounter(path).count("hello")


# ---------------------------------------------------------------- a run's salt


def test_a_salt_changes_every_prompt_from_its_first_words_but_no_length() -> None:
    plain, a, b = PromptSynthesizer(seed=4), PromptSynthesizer(seed=4, salt=1), PromptSynthesizer(seed=4, salt=2)
    n, idx = [40, 300, 7, 90], [0, 1, 2, 3]
    texts = [s.texts(n, idx) for s in (plain, a, b)]
    for x, y in itertools.combinations(texts, 2):  # other words, as many
        assert [len(words(t)) for t in x] == [len(words(t)) for t in y]
        assert all(words(p)[:3] != words(q)[:3] for p in x for q in y)
    calib = [s.calibration_texts() for s in (plain, a, b)]
    assert len({c[1][1] for c in calib}) == 3 and [w for w, _ in calib[1]] == [32, 256]


def test_a_salted_group_still_shares_its_prefix_within_the_salt() -> None:
    a, b = PromptSynthesizer(seed=4, salt=9), PromptSynthesizer(seed=4, salt=10)
    x = [words(a.text(200, i, group=2, shared_tokens=120)) for i in range(3)]
    assert x[0][:120] == x[1][:120] == x[2][:120] and x[0][120:123] != x[1][120:123]
    assert words(a.group_text(2, 120)) == x[0][:120]
    assert words(b.text(200, 0, group=2, shared_tokens=120))[:3] != x[0][:3]  # another run's prefix: another text


def test_a_salted_prompt_keeps_its_exact_length() -> None:
    counter = LengthCounter()
    s = PromptSynthesizer(seed=9, counter=counter, salt=0xFEED)
    plain = PromptSynthesizer(seed=9, salt=0xFEED)
    for n in range(20, 400, 37):
        text = s.text(n, index=n)
        nxt = counter.count(plain.text(len(words(text)) + 1, index=n))
        assert counter.count(text) == n or counter.count(text) < n < nxt


@pytest.mark.parametrize("bad", [-1, 1 << 64, True, 1.5])
def test_a_salt_is_a_64_bit_whole_number(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        PromptSynthesizer(seed=0, salt=bad)  # type: ignore[arg-type]
    assert info.value.key == "prompt_salt"


@pytest.mark.parametrize("text", ["", "0", "00000000", "xyz", "1" * 17, "-1"])
def test_salts_written_wrong_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="1 to 16 hex digits"):
        parse_salt(text)
    assert parse_salt(format_salt(0xABC)) == 0xABC and format_salt(0xABC) == "0000000000000abc"
