"""Strategies and checks shared by the fuzz tests."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from loadgen.errors import LoadgenError

_SCALE = float(os.environ.get("LOADGEN_FUZZ_SCALE", "1"))


def budget(examples: int) -> settings:
    """``@budget(n)``: at most ``n`` examples (times ``LOADGEN_FUZZ_SCALE``), with no deadline
    and no health check on generation speed or size: a test outside tests/fuzz (whose
    conftest sets that profile) runs on a shared, loaded machine too, where generation was
    seen to take over a second for one example (HealthCheck.too_slow failed CI runs)."""
    return settings(
        max_examples=max(1, int(examples * _SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def assert_one_line(exc: LoadgenError) -> None:
    """The CLI prints a LoadgenError as one line: it must be one, and say something."""
    text = str(exc)
    assert text.strip() and "\n" not in text and "\r" not in text, repr(text)


# numbers a hostile or careless input holds: huge, tiny, negative, non-finite, bool
NUMBERS: st.SearchStrategy[Any] = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 2**63, -(2**63), 10**30, 1e308, -1e308, 5e-324, 0.5, True, False]),
)

# whole numbers as text, up to past Python's 4,300-digit limit on int(str)
DIGITS: st.SearchStrategy[str] = st.builds(
    lambda sign, n: sign + "9" * n, st.sampled_from(["", "-"]), st.sampled_from([19, 20, 40, 309, 400, 4301, 5000])
)

# the same numbers as ints (Python's json and tomllib read them so)
BIG_INTS: st.SearchStrategy[int] = st.builds(
    lambda neg, n: (-1 if neg else 1) * (10**n - 1), st.booleans(), st.sampled_from([19, 20, 40, 309, 400, 4301, 5000])
)

SCALARS: st.SearchStrategy[Any] = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=20))


def json_values(
    keys: st.SearchStrategy[str] | None = None,
    leaves: st.SearchStrategy[Any] = SCALARS,
    max_leaves: int = 12,
    allow_nan: bool = False,
) -> st.SearchStrategy[Any]:
    """Any JSON value, keys drawn from ``keys``; NaN and infinities (which Python's
    ``json`` writes and reads, though JSON has none) only with ``allow_nan``."""
    keys = keys if keys is not None else st.text(max_size=12)
    if not allow_nan:
        leaves = leaves.filter(lambda v: not (isinstance(v, float) and not math.isfinite(v)))
    return st.recursive(
        leaves,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)),
        max_leaves=max_leaves,
    )


def dumps(value: Any) -> str:
    return json.dumps(value)
