"""Hypothesis settings for the fuzz tests: reproducible and bounded for CI.

``derandomize`` draws the same examples on every run (a seed derived from each test), and
each test sets its own ``max_examples`` through :func:`tests.fuzz.strategies.budget`, so
all of ``tests/fuzz`` runs in well under a minute. For a longer hunt on a workstation:
``LOADGEN_FUZZ_SCALE=20 LOADGEN_FUZZ_RANDOM=1 python3 -m pytest tests/fuzz``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "loadgen-fuzz",
    deadline=None,
    derandomize=not os.environ.get("LOADGEN_FUZZ_RANDOM"),
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("loadgen-fuzz")
