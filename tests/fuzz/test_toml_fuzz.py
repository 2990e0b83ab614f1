"""Fuzz workload and profile files: any TOML document (or bytes that are not one) is a
Workload/Profile with sane values, or a one-line LoadgenError naming the file."""

from __future__ import annotations

import json
import math
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from loadgen.errors import LoadgenError
from loadgen.load.profiles import KINDS, load_profile, profile_from_dict
from loadgen.workload.distributions import MAX_LENGTH
from loadgen.workload.spec import load_workload
from tests.fuzz.strategies import assert_one_line, budget


def _string(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's, but DEL must be escaped too)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _float(x: float) -> str:
    return "nan" if math.isnan(x) else repr(x)  # repr gives inf, -inf, 1e+308: all TOML


SPEC_TEXTS = st.sampled_from(
    [
        "256",
        "0",
        "-3",
        "uniform:min=128,max=1024",
        "normal:mean=512,std=128,min=16",
        "lognormal:median=800,sigma=0.9,max=8000",
        "empirical:values=12;40;77",
        "normal:mean=1e308,std=1e308",
        "uniform:min=5,max=1",
        "fixed:value=" + "9" * 400,
        "gamma:k=1",
        "",
    ]
)
NUMBER_TOML = st.one_of(
    st.integers(-5, 300).map(str),
    st.integers().map(str),
    st.floats().map(_float),
    st.sampled_from(
        [
            "0",
            "-1",
            "1",
            "2",
            "4",
            "1e400",
            "inf",
            "-inf",
            "nan",
            "1e308",
            "5e-324",
            "9223372036854775807",
            "9" * 40,
            "9" * 4301,
        ]
    ),
)
# mostly numbers a user would write, sometimes one that is not
EXTREME = st.sampled_from(["0", "-1", "1e400", "inf", "nan", "1e300", "1e-300", "9" * 40, "9" * 4301, "0.0"])
PLAUSIBLE_NUMBER = st.one_of(
    st.integers(1, 64).map(str),
    st.floats(0.01, 100).map(repr),
    st.integers(1, 1000).map(str),
    st.sampled_from(["0.1", "0.5", "1", "2"]),
    EXTREME,
)
SCALAR_TOML = st.one_of(
    NUMBER_TOML,
    st.booleans().map(lambda b: "true" if b else "false"),
    st.text(max_size=8).map(_string),
    SPEC_TEXTS.map(_string),
    st.sampled_from([*KINDS, "concurrency", "rate", "doubling", "linear", "poisson", "queued", "ttft=500ms"]).map(
        _string
    ),
)


def _array(items: list[str]) -> str:
    return "[" + ", ".join(items) + "]"


def _table(pairs: list[tuple[str, str]]) -> str:
    return "{" + ", ".join(f"{k} = {v}" for k, v in pairs) + "}"


def _pairs(keys: list[str], values: st.SearchStrategy[str]) -> st.SearchStrategy[list[tuple[str, str]]]:
    return st.lists(st.tuples(st.sampled_from(keys), values), max_size=len(keys), unique_by=lambda kv: kv[0])


VALUES = st.recursive(
    SCALAR_TOML,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(_array),
        _pairs(["dist", "value", "min", "max", "mean", "std", "groups", "tokens", "x"], inner).map(_table),
    ),
    max_leaves=6,
)

PROFILE_KEYS = [
    "name",
    "description",
    "kind",
    "mode",
    "levels",
    "requests",
    "duration_s",
    "warmup_requests",
    "trim",
    "arrival",
    "burstiness",
    "max_in_flight",
    "max_lateness_s",
    "slos",
    "attainment_target",
    "slo_latency",
    "knee_throughput_gain",
    "knee_metric",
    "max_concurrency",
    "rate_levels",
    "rate_low",
    "rate_high",
    "max_levels",
    "rel_width",
    "window_s",
    "unknown",
]
PROFILE_VALUES = st.one_of(
    SCALAR_TOML, st.lists(NUMBER_TOML, max_size=4).map(_array), st.lists(SCALAR_TOML, max_size=3).map(_array)
)


_NUMERIC = [
    "requests",
    "duration_s",
    "warmup_requests",
    "burstiness",
    "max_in_flight",
    "max_lateness_s",
    "attainment_target",
    "knee_throughput_gain",
    "max_concurrency",
    "rate_levels",
    "rate_low",
    "rate_high",
    "max_levels",
    "rel_width",
    "window_s",
]
PLAUSIBLE = st.fixed_dictionaries(
    {},
    optional={
        **dict.fromkeys(_NUMERIC, PLAUSIBLE_NUMBER),
        "kind": st.sampled_from(KINDS).map(_string),
        "mode": st.sampled_from(["concurrency", "rate"]).map(_string),
        "trim": st.lists(st.sampled_from(["0", "0.1", "0.2", "0.6", "-0.1"]), min_size=2, max_size=2).map(_array),
        "slos": st.lists(st.sampled_from(["ttft=500ms", "tpot=50ms", "e2e=2s", "x"]).map(_string), max_size=2).map(
            _array
        ),
        "slo_latency": st.sampled_from(["queued", "sent"]).map(_string),
    },
)


@st.composite
def profile_documents(draw: st.DrawFn) -> bytes:
    """Values of the right kind for each key (so that later checks are reached), or any."""
    plausible = draw(st.booleans())
    if plausible:
        pairs = list(draw(PLAUSIBLE).items())
    else:
        pairs = draw(_pairs(PROFILE_KEYS, PROFILE_VALUES))
    lines = [f"{k} = {v}" for k, v in pairs]
    generate = draw(st.booleans())
    if plausible and not generate:
        lines.append(f"levels = {_array(draw(st.lists(PLAUSIBLE_NUMBER, min_size=1, max_size=4)))}")
    if generate:
        lines.append("[generate]")
        kinds = st.sampled_from(["doubling", "linear", "x"]).map(_string)
        bound = PLAUSIBLE_NUMBER
        lines += [f"start = {draw(bound)}", f"stop = {draw(bound)}"]
        if draw(st.booleans()):
            lines.append(f"step = {draw(bound)}")
        if draw(st.booleans()):
            lines.append(f"kind = {draw(st.one_of(kinds, SCALAR_TOML))}")
    if draw(st.booleans()):
        lines.append("[stop]")
        lines += [
            f"{k} = {v}"
            for k, v in draw(
                _pairs(
                    ["max_error_rate", "min_attainment", "on_saturation"],
                    st.one_of(st.sampled_from(["0.1", "0.5", "true", "false"]), PLAUSIBLE_NUMBER, SCALAR_TOML),
                )
            )
        ]
    return "\n".join(lines).encode()


CLASS_KEYS = ["name", "weight", "prompt_tokens", "output_tokens", "shared_prefix"]
CLASS_VALUES = st.one_of(
    SPEC_TEXTS.map(_string), NUMBER_TOML, VALUES, _pairs(["groups", "tokens", "x"], NUMBER_TOML).map(_table)
)


GOOD_SPECS = st.one_of(
    st.integers(1, 4096).map(str),
    st.sampled_from(
        [
            "uniform:min=128,max=1024",
            "normal:mean=512,std=128,min=16",
            "lognormal:median=800,sigma=0.9,max=8000",
            "empirical:values=12;40;77",
        ]
    ).map(_string),
    st.integers(1, 4096).map(str),
    SPEC_TEXTS.map(_string),
)
PLAUSIBLE_CLASS = st.fixed_dictionaries(
    {"prompt_tokens": GOOD_SPECS, "output_tokens": GOOD_SPECS},
    optional={
        "weight": st.one_of(st.sampled_from(["1", "0.5", "3"]), PLAUSIBLE_NUMBER),
        "shared_prefix": st.fixed_dictionaries(
            {
                "groups": st.one_of(st.integers(1, 9).map(str), EXTREME),
                "tokens": st.one_of(st.integers(1, 99).map(str), EXTREME),
            }
        ).map(lambda d: _table(list(d.items()))),
    },
)


@st.composite
def workload_documents(draw: st.DrawFn) -> bytes:
    """One class at the top or [[classes]], values mostly of the right kind, or any."""
    lines = [f"{k} = {v}" for k, v in draw(_pairs(["name", "description"], st.text(max_size=8).map(_string)))]
    values = st.one_of(PLAUSIBLE_CLASS.map(lambda d: list(d.items())), _pairs(CLASS_KEYS[1:], CLASS_VALUES))
    if draw(st.booleans()):
        lines += [f"{k} = {v}" for k, v in draw(values) if k != "weight"]  # a class of its own has none
    else:
        for _ in range(draw(st.integers(1, 3))):
            lines += ["[[classes]]", f"name = {draw(st.sampled_from(['a', 'b', '']).map(_string))}"]
            lines += [f"{k} = {v}" for k, v in draw(values)]
    return "\n".join(lines).encode()


def anything() -> st.SearchStrategy[bytes]:
    """Bytes that are seldom TOML, or TOML of any keys."""
    return st.one_of(
        st.binary(max_size=100),
        st.text(max_size=100).map(str.encode),
        _pairs(PROFILE_KEYS + CLASS_KEYS + ["classes"], VALUES).map(
            lambda kvs: "\n".join(f"{k} = {v}" for k, v in kvs).encode()
        ),
    )


@contextmanager
def hang_guard(seconds: int = 5) -> Iterator[None]:
    """Turn a parser that never returns into a failure (a safety net, not a timing check)."""

    def fail(signum: int, frame: Any) -> None:
        raise AssertionError(f"no answer within {seconds} s: the parser hangs")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


def _write(folder: Path, doc: bytes) -> Path:
    path = folder / "fuzzed.toml"
    path.write_bytes(doc)
    return path


@budget(100)
@given(st.one_of(workload_documents(), anything()))
def test_any_workload_file_is_a_workload_or_one_line_error(folder: Path, doc: bytes) -> None:
    path = _write(folder, doc)
    try:
        with hang_guard():
            workload = load_workload(str(path), [])
    except LoadgenError as exc:
        assert_one_line(exc)
        assert str(path) in str(exc)
        event("refused")
        return
    event("a workload")
    assert workload.classes
    for cls in workload.classes:
        assert math.isfinite(cls.weight) and cls.weight > 0
        for dist in (cls.prompt_tokens, cls.output_tokens):
            assert 1 <= dist.mean() <= MAX_LENGTH
        assert 0 <= cls.shared_prefix_tokens <= MAX_LENGTH and cls.shared_prefix_groups >= 0


@budget(120)
@given(st.one_of(profile_documents(), anything()))
def test_any_profile_file_is_a_profile_or_one_line_error(folder: Path, doc: bytes) -> None:
    path = _write(folder, doc)
    try:
        with hang_guard():
            profile = load_profile(str(path), [])
    except LoadgenError as exc:
        assert_one_line(exc)
        event("refused")
        return
    event("a profile")
    assert profile.kind in KINDS
    assert all(math.isfinite(v) and v > 0 for v in profile.levels)
    assert len(profile.levels) <= 10_000
    for value in (
        profile.requests,
        profile.duration_s,
        profile.max_in_flight,
        profile.rate_high,
        profile.warmup_requests,
        profile.burstiness,
        profile.max_lateness_s,
        profile.window_s,
        profile.rate_low,
        profile.max_levels,
        profile.rel_width,
        profile.max_concurrency,
    ):
        assert value is None or (not isinstance(value, bool) and 0 <= value < math.inf), value


BOUNDS = st.one_of(
    st.floats(min_value=1e-300, max_value=1e300),
    st.integers(1, 2**70),
    st.sampled_from([math.inf, 1e308, 1e-308, 0.5, 1, 2, 1000]),
    st.floats(),
)


@budget(200)
@given(
    st.fixed_dictionaries(
        {"start": BOUNDS, "stop": BOUNDS}, optional={"kind": st.sampled_from(["doubling", "linear"]), "step": BOUNDS}
    )
)
def test_any_generate_table_gives_bounded_levels_or_one_line_error(generate: dict[str, Any]) -> None:
    """The [generate] table alone, as TOML would give it (inf and huge values included)."""
    try:
        with hang_guard():
            profile = profile_from_dict({"generate": generate}, "p.toml")
    except LoadgenError as exc:
        assert_one_line(exc)
        event("refused")
        return
    event("levels")
    assert profile.levels and len(profile.levels) <= 10_000
    assert all(math.isfinite(v) and v > 0 for v in profile.levels)
