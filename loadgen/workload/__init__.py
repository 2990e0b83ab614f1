"""Workloads: length distributions, workload files, prompt synthesis -> RequestSpec stream.

- :mod:`.distributions` — seeded length distributions and their spec-text parser.
- :mod:`.spec` — :class:`Workload` / :class:`RequestClass` and the strict TOML loader.
- :mod:`.prompts` — prompt text of a target token length, calibration, exact counts.
- :mod:`.generate` — :func:`generate_specs` / :func:`spec_stream`.
- :mod:`.sessions` — multi-turn sessions of a workload with a ``[sessions]`` table.
- :mod:`.agent_trace` — recorded agent traces replayed as tasks; :mod:`.agent_fit` fits ``[agent]`` from one.

Pure: numpy and the stdlib only; no network, no CLI.
"""

from loadgen.workload.distributions import Distribution, parse_distribution
from loadgen.workload.generate import generate_specs, spec_stream
from loadgen.workload.prompts import PromptSynthesizer, TokenCounter, TokenizerCounter
from loadgen.workload.sessions import SessionSource
from loadgen.workload.spec import (
    RequestClass,
    SessionConfig,
    Workload,
    list_workloads,
    load_workload,
    workload_from_flags,
)

__all__ = [
    "Distribution",
    "PromptSynthesizer",
    "RequestClass",
    "SessionConfig",
    "SessionSource",
    "TokenCounter",
    "TokenizerCounter",
    "Workload",
    "generate_specs",
    "list_workloads",
    "load_workload",
    "parse_distribution",
    "spec_stream",
    "workload_from_flags",
]
