"""A workload's lengths laid over by ``--prompt-tokens``/``--output-tokens``, and whether its
requests fit a server's context window.

:func:`override_lengths` gives every class of a workload the flag's length distribution.
``--prompt-tokens`` is the whole prompt: a class with a shared prefix keeps its prefix and
its unique suffix becomes the rest (the flag's distribution moved down by the prefix), so a
length that does not reach past the prefix is refused, as is a lognormal (which has no
shifted lognormal). A ``[dataset]`` workload takes only a whole ``--output-tokens``.

:func:`over_context` says, before anything is sent, when requests of the workload would
not fit the server's ``max_model_len`` (prompt + ``max_tokens``): docs/guide.md, "Measure a server".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from loadgen.errors import ConfigError
from loadgen.workload.distributions import Distribution, Empirical, Fixed, Normal, Uniform, parse_distribution
from loadgen.workload.spec import RequestClass, Workload

__all__ = ["CONTEXT_SHARE", "OverContext", "over_context", "override_lengths"]

CONTEXT_SHARE = 0.01  # refused when at least this share of a workload's requests would not fit the context
_DRAWS = 20_000  # requests drawn (seeded) to estimate that share


def _flag(text: str, flag: str) -> Distribution:
    try:
        return parse_distribution(text, source="command line", key=flag)
    except ConfigError as exc:
        raise ConfigError(exc.message, key=flag) from None


def _suffix(dist: Distribution, prefix: int, cls: str, wl: str) -> Distribution:
    """The unique suffix's length when the whole prompt is ``dist`` and ``prefix`` tokens are shared."""
    lowest = {Fixed: lambda d: d.value, Uniform: lambda d: d.min, Normal: lambda d: d.min, Empirical: _min_value}
    why = (
        f"workload {wl!r}: class {cls!r} puts a {prefix:,}-token shared prefix before every prompt, and "
        "--prompt-tokens is the whole prompt"
    )
    get = lowest.get(type(dist))
    if get is None:
        raise ConfigError(
            f"{why}: give a fixed, uniform, normal or empirical length (a lognormal cannot be moved)",
            key="--prompt-tokens",
        )
    lo = get(dist)
    if lo <= prefix:
        raise ConfigError(
            f"{why}: every length must be above {prefix:,}, and {dist.describe()} reaches {lo:,}",
            key="--prompt-tokens",
        )
    if isinstance(dist, Fixed):
        return Fixed(dist.value - prefix)
    if isinstance(dist, Uniform):
        return Uniform(dist.min - prefix, dist.max - prefix)
    if isinstance(dist, Normal):
        hi = None if dist.max is None else dist.max - prefix
        return Normal(dist.mu - prefix, dist.std, dist.min - prefix, hi)
    assert isinstance(dist, Empirical)
    return Empirical(tuple(v - prefix for v in dist.values), dist.weights)


def _min_value(d: Empirical) -> int:
    return min(d.values)


def override_lengths(wl: Workload, prompt_tokens: str | None, output_tokens: str | None) -> Workload:
    """``wl`` with every class's prompt and/or output length set from the flags' text; the
    override is said in its ``overrides`` (run.json, the console)."""
    flags = (("--prompt-tokens", prompt_tokens), ("--output-tokens", output_tokens))
    said = [f"{flag} {text}" for flag, text in flags if text]
    if not said:
        return wl
    if wl.dataset is not None:
        if prompt_tokens:
            raise ConfigError(
                f"workload {wl.name!r} replays a dataset's prompts; their lengths cannot be set "
                "(give min_prompt_tokens/max_prompt_tokens in its [dataset] table)",
                key="--prompt-tokens",
            )
        assert output_tokens is not None
        out = _flag(output_tokens, "--output-tokens")
        if not isinstance(out, Fixed):
            raise ConfigError(
                f"workload {wl.name!r} replays a dataset: a whole number of tokens for every request, "
                f"got {output_tokens!r}",
                key="--output-tokens",
            )
        dataset = dataclasses.replace(wl.dataset, output_tokens=out.value)
        return dataclasses.replace(wl, dataset=dataset, overrides=said)
    prompt = None if not prompt_tokens else _flag(prompt_tokens, "--prompt-tokens")
    output = None if not output_tokens else _flag(output_tokens, "--output-tokens")
    classes = [_override(c, prompt, output, wl.name) for c in wl.classes]
    return dataclasses.replace(wl, classes=classes, overrides=said)


def _override(c: RequestClass, prompt: Distribution | None, output: Distribution | None, wl: str) -> RequestClass:
    new = dataclasses.replace(c, joint=None)  # one side set: the other keeps its marginal (drawn alone)
    if prompt is not None:
        new.prompt_tokens = _suffix(prompt, c.shared_prefix_tokens, c.name, wl) if c.shared_prefix_groups else prompt
    if output is not None:
        new.output_tokens = output
    return new


def _support_max(d: Distribution) -> int | None:
    """The largest length ``d`` can draw, when it is bounded (None: a tail without a max)."""
    if isinstance(d, Fixed):
        return d.value
    if isinstance(d, Uniform):
        return d.max
    if isinstance(d, Empirical):
        return max(d.values)
    return getattr(d, "max", None)


@dataclass(frozen=True, slots=True)
class OverContext:
    """Requests of a workload over a context window: about ``share`` of them, ``every`` one
    of class ``cls`` or most of them there; that class's totals (prompt + ``max_tokens``)
    drawn from ``shortest`` to ``longest``, and bounded by ``bound`` (None: a tail without a max)."""

    share: float
    cls: str
    every: bool
    shortest: int
    longest: int
    bound: int | None


def over_context(wl: Workload, max_model_len: int | None, seed: int = 0) -> OverContext | None:
    """Whether ``wl``'s requests are over ``max_model_len`` tokens (prompt, shared prefix
    included, + output, which is each request's ``max_tokens``) so often that the run is
    refused (None: they fit, or the server does not say its window).

    Refused when a class's shortest request is over it (every one would be rejected), or
    when at least :data:`CONTEXT_SHARE` of requests would be (estimated from a seeded draw
    of the workload's lengths). A rarer tail is let through: the server rejects those few,
    and the console says its message. A conversation's later turns (which carry the history)
    and a dataset's prompts are not checked here."""
    if max_model_len is None or not wl.classes:
        return None
    rng = np.random.default_rng(seed)
    weights = np.array([c.weight for c in wl.classes], dtype=float)
    shares = weights / weights.sum()
    found: list[tuple[float, OverContext]] = []
    for c, w in zip(wl.classes, shares, strict=True):
        if c.joint is not None:
            prompt, output = c.joint.sample_pairs(rng, _DRAWS)
        else:
            prompt, output = c.prompt_tokens.sample(rng, _DRAWS), c.output_tokens.sample(rng, _DRAWS)
        total = prompt + output + (c.shared_prefix_tokens if c.shared_prefix_groups else 0)
        over = float(np.mean(total > max_model_len))
        if over == 0:
            continue
        caps = [_support_max(d) for d in (c.prompt_tokens, c.output_tokens)]
        bound = None if caps[0] is None or caps[1] is None else caps[0] + caps[1] + c.shared_prefix_tokens
        every = bool(total.min() > max_model_len)
        found.append(
            (float(w) * over, OverContext(float(w) * over, c.name, every, int(total.min()), int(total.max()), bound))
        )
    share = sum(s for s, _ in found)
    everyone = [o for _, o in found if o.every]
    if everyone:
        return dataclasses.replace(everyone[0], share=share)
    if not found or share < CONTEXT_SHARE:
        return None
    return dataclasses.replace(max(found, key=lambda f: f[0])[1], share=share)
