"""Prompt calibration: two short requests fit the server's tokens per word and template
overhead, so synthetic prompts hit their target lengths (docs/metrics.md, "Prompt lengths").

Also the run's request options as its dialect takes them (:func:`dialect_options`) and
the non-streamed fallback a calibration uses when a stream carries no usage
(:func:`probe_for`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.discovery import ServerInfo
from loadgen.client.probe import ProbeResult, probe_prompt_tokens
from loadgen.errors import ConfigError, TargetError
from loadgen.orchestrate.config import RunConfig
from loadgen.records import RequestRecord, RequestSpec
from loadgen.workload.distributions import Distribution
from loadgen.workload.prompts import PromptSynthesizer

__all__ = ["Probe", "calibrate", "dialect_options", "probe_for"]

Probe = Callable[[RequestSpec], Awaitable[ProbeResult]]


async def _streamed_prompt_tokens(transport: Any, spec: RequestSpec) -> int | None:
    rec = RequestRecord(index=spec.index)
    await transport.send(spec, rec)
    if not rec.ok:
        raise TargetError(f"calibration request failed ({rec.status.value}): {rec.error}")
    return rec.prompt_tokens


async def calibrate(
    transport: Any, synth: PromptSynthesizer, api: str, probe: Probe | None = None, deadline_s: float | None = None
) -> dict[str, Any]:
    """Two short requests of known word counts fit tokens-per-word and the template overhead.

    They are streamed like the run's requests; when a stream carries no
    ``usage.prompt_tokens`` (llama.cpp's server and others ignore
    ``stream_options.include_usage``), both prompts go through ``probe`` instead, which
    asks without streaming. ``method`` in the result says which answers the fit came from.
    ``deadline_s`` bounds the whole calibration (a :class:`TargetError` past it).
    """
    if deadline_s is not None:
        try:
            async with asyncio.timeout(deadline_s):
                return await calibrate(transport, synth, api, probe)
        except TimeoutError as exc:
            raise TargetError(
                f"calibration did not finish within {deadline_s:g} s (the --timeout of a request)"
            ) from exc
    specs = [
        (words, RequestSpec(index=-1 - i, prompt=text, prompt_tokens=words, max_tokens=1))
        for i, (words, text) in enumerate(synth.calibration_texts((32, 256)))
    ]
    method = "stream"
    counts: list[int] = []
    for _, spec in specs:
        n = await _streamed_prompt_tokens(transport, spec)
        if n is None:
            break
        counts.append(n)
    if len(counts) < len(specs):
        if probe is None:
            return {"calibrated": False, "method": None, "reason": "the server streams no usage.prompt_tokens"}
        method, counts = "non-stream", []
        for _, spec in specs:
            res = await probe(spec)
            if res.prompt_tokens is None:
                return {
                    "calibrated": False,
                    "method": None,
                    "reason": f"the server streams no usage.prompt_tokens and {res.error}",
                }
            counts.append(res.prompt_tokens)
    samples = [(words, n) for (words, _), n in zip(specs, counts)]
    try:
        synth.calibrate(samples)
    except ConfigError as exc:
        return {"calibrated": False, "method": method, "reason": str(exc), "samples": samples}
    return {
        "calibrated": True,
        "method": method,
        "samples": samples,
        "tokens_per_word": synth.tokens_per_word,
        "overhead_tokens": synth.overhead_tokens,
        "api": api,
    }


def dialect_options(cfg: RunConfig, info: ServerInfo) -> DialectOptions:
    """The run's request options: the model the server names, the flags, the workload's tools."""
    wl = cfg.workload
    return DialectOptions(
        model=info.model,
        strict=cfg.strict,
        continuous_usage=cfg.continuous_usage,
        tools=wl.tools,
        tool_choice=wl.tool_choice,
        inputs=input_counts(cfg.inputs, cfg.seed),
    )


INPUT_CYCLE = 4096  # inputs per request drawn once per run and cycled by request index


def input_counts(dist: Distribution | None, seed: int) -> tuple[int, ...]:
    """A run's inputs per request (a non-streamed API's), drawn once from ``dist`` with
    ``seed``; request ``i`` sends entry ``i % len``, so a level's requests are the same in
    every level and trial. Empty: one input each."""
    if dist is None:
        return ()
    rng = np.random.default_rng([seed, 0x1B7A])
    return tuple(int(n) for n in dist.sample(rng, INPUT_CYCLE))


def probe_for(cfg: RunConfig, info: ServerInfo) -> Probe:
    """Calibration's non-streamed fallback: the run's URL, dialect, options and headers."""
    dialect, options = get_dialect(cfg.api), dialect_options(cfg, info)

    async def probe(spec: RequestSpec) -> ProbeResult:
        headers = dialect.request_headers(cfg.headers)
        return await probe_prompt_tokens(cfg.url, dialect, options, spec, headers, cfg.read_timeout_s)

    return probe
