"""generate_specs / spec_stream: seeded, consistent, weights and shared prefixes respected."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from loadgen.records import RequestSpec
from loadgen.workload.distributions import parse_distribution
from loadgen.workload.generate import BLOCK, generate_specs, spec_stream
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.spec import RequestClass, Workload, load_workload, workload_from_flags

REPO_WORKLOADS = Path(__file__).resolve().parents[2] / "workloads"


def two_class(weight_a: float = 95, weight_b: float = 5) -> Workload:
    return Workload(
        "two",
        "",
        [
            RequestClass("a", weight_a, parse_distribution("uniform:min=10,max=20"), parse_distribution(7)),
            RequestClass("b", weight_b, parse_distribution(300), parse_distribution("uniform:min=1,max=3")),
        ],
        "test",
    )


def test_fields_follow_the_workload() -> None:
    synth = PromptSynthesizer(seed=1)
    specs = generate_specs(two_class(), 2000, seed=5, synth=synth)
    assert [s.index for s in specs] == list(range(2000))
    assert all(isinstance(s, RequestSpec) and s.group is None for s in specs)
    for s in specs:
        assert len(s.prompt.split(" ")) == synth.words_for(s.prompt_tokens)
        if s.request_class == "a":
            assert 10 <= s.prompt_tokens <= 20 and s.max_tokens == 7
        else:
            assert s.request_class == "b" and s.prompt_tokens == 300 and 1 <= s.max_tokens <= 3
        assert s.prompt == synth.text(s.prompt_tokens, s.index)


def test_same_seed_same_specs_other_seed_differs() -> None:
    wl = load_workload("mixed", [REPO_WORKLOADS])
    a = generate_specs(wl, 500, seed=3, synth=PromptSynthesizer(seed=3))
    b = generate_specs(wl, 500, seed=3, synth=PromptSynthesizer(seed=3))
    c = generate_specs(wl, 500, seed=4, synth=PromptSynthesizer(seed=3))
    assert a == b
    assert [s.prompt_tokens for s in a] != [s.prompt_tokens for s in c]


def test_class_weights_respected_over_10k_draws() -> None:
    specs = generate_specs(two_class(95, 5), 10_000, seed=11, synth=PromptSynthesizer(seed=0))
    frac_b = sum(s.request_class == "b" for s in specs) / len(specs)
    assert abs(frac_b - 0.05) < 5 * math.sqrt(0.05 * 0.95 / 10_000)  # 5 binomial sd ~ 0.011
    specs = generate_specs(two_class(1, 3), 10_000, seed=12, synth=PromptSynthesizer(seed=0))
    frac_b = sum(s.request_class == "b" for s in specs) / len(specs)
    assert abs(frac_b - 0.75) < 5 * math.sqrt(0.75 * 0.25 / 10_000)


def test_stream_and_slices_agree_with_generate_specs() -> None:
    wl = load_workload("mixed", [REPO_WORKLOADS])
    synth = PromptSynthesizer(seed=2)
    n = BLOCK * 2 + 100
    full = generate_specs(wl, n, seed=9, synth=synth)
    assert list(itertools.islice(spec_stream(wl, seed=9, synth=synth), n)) == full
    assert generate_specs(wl, 50, seed=9, synth=synth, start_index=BLOCK - 20) == full[BLOCK - 20 : BLOCK + 30]
    stream = spec_stream(wl, seed=9, synth=synth, start_index=BLOCK + 5)
    assert list(itertools.islice(stream, 300)) == full[BLOCK + 5 : BLOCK + 305]
    assert generate_specs(wl, 0, seed=9, synth=synth) == []
    with pytest.raises(ValueError):
        generate_specs(wl, 1, seed=9, synth=synth, start_index=-1)


def test_prompt_lengths_follow_the_distribution() -> None:
    wl = workload_from_flags("normal:mean=400,std=50,min=100", "64")
    specs = generate_specs(wl, 5000, seed=1, synth=PromptSynthesizer(seed=1))
    mean = sum(s.prompt_tokens for s in specs) / len(specs)
    assert abs(mean - 400) < 5 * 50 / math.sqrt(5000)
    assert {s.max_tokens for s in specs} == {64}


def test_shared_prefix_groups_are_numbered_across_classes() -> None:
    wl = Workload(
        "prefixes",
        "",
        [
            RequestClass(
                "p", 1, parse_distribution(16), parse_distribution(4), shared_prefix_groups=4, shared_prefix_tokens=64
            ),
            RequestClass("plain", 1, parse_distribution(16), parse_distribution(4)),
            RequestClass(
                "q", 1, parse_distribution(8), parse_distribution(4), shared_prefix_groups=2, shared_prefix_tokens=32
            ),
        ],
        "test",
    )
    synth = PromptSynthesizer(seed=4)
    specs = generate_specs(wl, 3000, seed=6, synth=synth)
    by_class: dict[str, set[int | None]] = {}
    for s in specs:
        by_class.setdefault(s.request_class, set()).add(s.group)
    assert by_class == {"p": {0, 1, 2, 3}, "plain": {None}, "q": {4, 5}}
    heads: dict[int, set[str]] = {}
    for s in specs:
        if s.group is None:
            assert s.prompt_tokens == 16
            continue
        shared = 64 if s.request_class == "p" else 32
        assert s.prompt_tokens == shared + (16 if s.request_class == "p" else 8)  # prefix + unique part
        ws = s.prompt.split(" ")
        assert len(ws) == s.prompt_tokens
        heads.setdefault(s.group, set()).add(" ".join(ws[:shared]))
    assert all(len(h) == 1 for h in heads.values())  # one prefix per group
    assert len({tuple(next(iter(h)).split(" ")[:3]) for h in heads.values()}) == 6  # groups differ early


def test_prefix_workload_file() -> None:
    wl = load_workload("prefix", [REPO_WORKLOADS])
    specs = generate_specs(wl, 400, seed=1, synth=PromptSynthesizer(seed=1))
    assert {s.group for s in specs} == {0, 1, 2, 3}
    assert all(1024 + 32 <= s.prompt_tokens <= 1024 + 256 for s in specs)
    firsts = {s.group: s.prompt.split(" ")[:1024] for s in specs}
    assert all(s.prompt.split(" ")[:1024] == firsts[s.group] for s in specs)


class CountingCounter:
    def count(self, text: str) -> int:
        return sum(2 if len(w) > 6 else 1 for w in text.split(" "))


def test_generate_uses_the_synthesizers_counter() -> None:
    counter = CountingCounter()
    synth = PromptSynthesizer(seed=3, counter=counter)
    specs = generate_specs(workload_from_flags("uniform:min=50,max=80", "8"), 40, seed=2, synth=synth)
    hits = sum(counter.count(s.prompt) == s.prompt_tokens for s in specs)
    assert all(counter.count(s.prompt) <= s.prompt_tokens for s in specs)
    assert hits >= 30
