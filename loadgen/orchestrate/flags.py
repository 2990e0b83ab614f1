"""``loadgen run``'s options as the user gave them: :class:`RunFlags`.

``None`` (or an empty list) means *not given*, so a flag that repeats a default still wins
over a ``--profile`` file or a fitted workload's arrivals. :mod:`loadgen.orchestrate.from_flags`
turns them into one :class:`~loadgen.orchestrate.config.RunConfig`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RunFlags"]


@dataclass
class RunFlags:
    """``loadgen run``'s options by their Python names; ``None`` means not given."""

    url: str | None = None
    api: str | None = None
    model: str | None = None
    header: list[str] = field(default_factory=list)
    api_key_env: str | None = None
    workload: str | None = None
    prompt_tokens: str | None = None
    batch_size: str | None = None
    documents: str | None = None
    output_tokens: str | None = None
    dataset: str | None = None
    dataset_format: str | None = None
    min_prompt_tokens: int | None = None
    max_prompt_tokens: int | None = None
    replacement: bool = False
    tokenizer: str | None = None
    trace: str | None = None
    trace_format: str | None = None
    speed: float | None = None
    window: str | None = None
    seed: int | None = None
    prompt_salt: str | None = None
    repeat_prompts: bool = False
    concurrency: int | None = None
    rate: float | None = None
    arrival: str | None = None
    burstiness: float | None = None
    max_in_flight: int | None = None
    profile: str | None = None
    levels: str | None = None
    requests: int | None = None
    duration: float | None = None
    warmup: int | None = None
    precision: list[str] = field(default_factory=list)
    confidence: float | None = None
    min_duration: float | None = None
    max_duration: float | None = None
    trials: int | None = None
    slo: list[str] = field(default_factory=list)
    slo_latency: str | None = None
    fail_on: list[str] = field(default_factory=list)
    max_error_rate: float | None = None
    abort_on_fail: bool = False
    out: str | None = None
    label: str | None = None
    save_result: Path | None = None
    quiet: bool = False
    scrape_metrics: bool = False
    scrape_url: list[str] = field(default_factory=list)
    resume: Path | None = None
    workers: str | None = None
    ray: str | None = None
    config: Path | None = None
    transport: str | None = None
    http2: bool = False
    strict: bool = False
    continuous_usage: bool = False
    calibrate: bool = True
    timeout: float | None = None
    read_timeout: float | None = None
    warm_connections: bool = True
    ramp_up: float | None = None
    dashboard: bool = False
    dashboard_port: int | None = None
    dashboard_host: str | None = None

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> RunFlags:
        """From typer's parsed parameters (a repeatable option not given may be None)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in params.items() if k in names}
        for k in ("header", "slo", "fail_on", "scrape_url", "precision"):
            values[k] = list(values.get(k) or [])
        return cls(**values)
