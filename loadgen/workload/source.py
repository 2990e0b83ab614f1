"""A run's requests by position: :class:`WorkloadSource` (the runner's ``SpecSource``).

Requests are numbered as :data:`loadgen.records.LEVEL_STRIDE` and
:data:`~loadgen.records.USER_STRIDE` say. A request depends only on the workload, the
seed, its index and the synthesiser's calibration (:mod:`loadgen.workload.generate`), so
any process that holds the same source builds the same request.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from loadgen.records import LEVEL_STRIDE, USER_STRIDE, RequestSpec
from loadgen.workload.generate import generate_specs, specs_at
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.spec import Workload

__all__ = ["WorkloadSource"]

_FIRST_CHUNK = 8
_MAX_CHUNK = 256
_QUOTA_CHUNK = 1024  # a user's quota, built this many at a time


@dataclass(slots=True)
class WorkloadSource:
    """Requests of ``workload`` with ``seed``, prompts from the (calibrated) ``synth``."""

    workload: Workload
    seed: int
    synth: PromptSynthesizer

    def user(self, level: int, user: int, quota: int | None) -> Iterator[RequestSpec]:
        start = level * LEVEL_STRIDE + user * USER_STRIDE
        limit = USER_STRIDE if quota is None else min(quota, USER_STRIDE)
        done, chunk = 0, _FIRST_CHUNK if quota is None else _QUOTA_CHUNK
        while done < limit:  # built as asked: a quota of 10**12 costs nothing until it is sent
            n = min(chunk, limit - done)
            yield from generate_specs(self.workload, n, seed=self.seed, synth=self.synth, start_index=start + done)
            done += n
            if quota is None:  # duration-bound: small chunks first, then larger
                chunk = min(chunk * 2, _MAX_CHUNK)

    def sends(self, level: int, positions: Sequence[int]) -> list[RequestSpec]:
        base = level * LEVEL_STRIDE
        return specs_at(self.workload, [base + p for p in positions], seed=self.seed, synth=self.synth)
