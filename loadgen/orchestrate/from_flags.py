"""``loadgen run``'s options as given, turned into one :class:`~loadgen.orchestrate.config.RunConfig`.

:class:`~loadgen.orchestrate.flags.RunFlags` holds the options as the user gave them
(``None``: not given, so a flag always wins over a profile file). :func:`build_run_config` applies the rules of
combination (which flags go together, what overrides what) and leaves every check of
a value to ``RunConfig`` and ``Profile.validate``, with the flags' names for their
errors (:class:`~loadgen.orchestrate.config.Origin`). :func:`resume_run_config` is ``--resume``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.errors import ConfigError
from loadgen.load.profiles import Profile, precision_targets
from loadgen.metrics.gates import Gates
from loadgen.orchestrate.config import DEFAULT_TRANSPORT, DashboardAt, Origin, RunConfig
from loadgen.orchestrate.flags import RunFlags
from loadgen.paths import search_dirs, shipped
from loadgen.workload.agent_trace import AgentTrace
from loadgen.workload.distributions import Distribution, parse_distribution
from loadgen.workload.prompts import parse_salt
from loadgen.workload.spec import Workload
from loadgen.workload.traces import Trace

__all__ = ["CLI_KEYS", "RESUME_FLAGS", "Replay", "build_run_config", "dashboard_at", "resume_run_config"]

# RunConfig's fields (and the profile's, as ``profile.NAME``) by the flag that sets them
CLI_KEYS = {
    "url": "--url",
    "api": "--api",
    "transport": "--transport",
    "http2": "--http2",
    "seed": "--seed",
    "prompt_salt": "--prompt-salt",
    "repeat_prompts": "--repeat-prompts",
    "read_timeout_s": "--read-timeout",
    "request_timeout_s": "--timeout",
    "trials": "--trials",
    "workers": "--workers",
    "ray": "--ray",
    "out": "--out",
    "scrape_urls": "--scrape-url",
    "headers": "--header",
    "gates": "--fail-on",
    "max_error_rate": "--max-error-rate",
    "slos": "--slo",
    "trace": "--trace",
    "model": "--model",
    "label": "--label",
    "warm_connections": "--warm-connections",
    "ramp_up_s": "--ramp-up",
}
_PROFILE_FLAGS = {
    "requests": ("requests", "--requests"),
    "duration_s": ("duration", "--duration"),
    "warmup_requests": ("warmup", "--warmup"),
    "max_in_flight": ("max_in_flight", "--max-in-flight"),
    "arrival": ("arrival", "--arrival"),
    "burstiness": ("burstiness", "--burstiness"),
    "slo_latency": ("slo_latency", "--slo-latency"),
    "precision": ("precision", "--precision"),
    "confidence": ("confidence", "--confidence"),
    "min_duration_s": ("min_duration", "--min-duration"),
    "max_duration_s": ("max_duration", "--max-duration"),
}
_PRECISION_FLAGS = ("min_duration", "max_duration")
# what --resume takes besides the folder: the URL and headers (never stored) and the gates
RESUME_FLAGS = (
    "resume",
    "url",
    "header",
    "api_key_env",
    "quiet",
    "fail_on",
    "max_error_rate",
    "save_result",
    "dashboard",
    "dashboard_port",
    "dashboard_host",
)


@dataclass(frozen=True)
class Replay:
    """What ``--dataset`` or ``--trace`` replays: the run's workload, and the trace."""

    workload: Workload
    trace: Trace | None = None
    agent_trace: AgentTrace | None = None


def headers(header: list[str], api_key_env: str | None, api: str) -> dict[str, str]:
    """``--header 'Name: value'`` and the API key of ``--api-key-env`` (or ``OPENAI_API_KEY``
    when set), the key in the dialect's own authentication header."""
    out: dict[str, str] = {}
    for h in header:
        if ":" not in h:
            raise ConfigError(f"expected 'Name: value', got {h.split(':')[0]!r}…", key="--header")
        name, value = (x.strip() for x in h.split(":", 1))
        out[name] = value
    env = api_key_env or ("OPENAI_API_KEY" if os.environ.get("OPENAI_API_KEY") else None)
    if env:
        key = os.environ.get(env)
        if key is None and api_key_env:
            raise ConfigError(f"environment variable {api_key_env} is not set", key="--api-key-env")
        if key:
            from loadgen.client.dialects import get_dialect

            for name, value in get_dialect(api).auth_headers(key).items():
                out.setdefault(name, value)  # an explicit --header of that name wins
    return out


def gates(fail_on: list[str], max_error_rate: float | None, abort_on_fail: bool, attainment_target: float) -> Gates:
    """The --fail-on gates; --max-error-rate implies errors, --abort-on-fail alone slo,errors."""
    from loadgen.metrics.gates import parse_fail_on

    reasons = parse_fail_on(fail_on)
    if max_error_rate is not None:
        reasons |= {"errors"}
    if abort_on_fail and not reasons:
        reasons = frozenset({"slo", "errors"})
    rate = 0.0 if max_error_rate is None else max_error_rate
    return Gates(reasons, rate, attainment_target)


def _workers(text: str) -> int | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"expected a whole number or 'auto', got {text!r}", key="--workers") from None


def _target(url: str | None) -> tuple[str, dict[str, str]]:
    """The base URL without its credentials, and the credentials as a header."""
    from loadgen.client.discovery import normalize_url, split_credentials

    if url is None:
        raise ConfigError("required (the server's base URL, e.g. http://127.0.0.1:8000)", key="--url")
    return split_credentials(normalize_url(url))


def build_run_config(f: RunFlags, command: list[str], *, live: bool) -> RunConfig:
    """The run ``f`` asks for (``command``: the redacted argv that run.json keeps)."""
    from loadgen.metrics.slo import parse_slo
    from loadgen.report.files import default_run_dir
    from loadgen.workload.hf_cache import resolve_tokenizer

    base, url_auth = _target(f.url)
    if f.out is not None and not f.out.strip():
        raise ConfigError("give a folder (an empty name would mean the current directory)", key="--out")
    if f.ray is not None:
        from loadgen.load.ray_pool import import_ray

        if not f.ray.strip():
            raise ConfigError("give auto or a Ray cluster's address", key="--ray")
        if f.precision:  # said before Ray is looked for: the refusal holds whether or not it is installed
            raise ConfigError("not with --ray yet (Ray actors cannot be told to end a level early)", key="--precision")
        import_ray()  # before anything else: one clear line when Ray is missing
    replay = _replay(f)
    trace = None if replay is None else replay.trace
    agent_trace = None if replay is None else replay.agent_trace
    wl = replay.workload if replay is not None else _workload(f)
    level_flag: str | None
    if agent_trace is not None:
        prof, level_flag = _agent_profile(agent_trace, f), "--concurrency" if f.concurrency else "--trace"
    else:
        prof, level_flag = (_trace_profile(trace, f), "--trace") if trace is not None else _profile(f, wl)
    api = f.api or "chat"
    keys = {**CLI_KEYS, **({} if level_flag is None else {"profile.levels": level_flag})}
    keys.update(
        {f"profile.{name}": flag for name, (attr, flag) in _PROFILE_FLAGS.items() if getattr(f, attr) not in (None, [])}
    )
    label = f.label or (wl.name if replay is not None else _default_label(wl, prof, f))
    return RunConfig(
        url=base,
        api=api,
        workload=wl,
        profile=prof,
        out=Path(f.out) if f.out is not None else default_run_dir(Path("reports"), label),
        model=f.model,
        slos=[parse_slo(s) for s in (f.slo or prof.slos)],
        seed=0 if f.seed is None else f.seed,
        prompt_salt=None if f.repeat_prompts else parse_salt(f.prompt_salt),
        repeat_prompts=f.repeat_prompts,
        transport=f.transport or ("httpx" if f.http2 else DEFAULT_TRANSPORT),  # --http2 alone: httpx
        http2=f.http2,
        headers={**url_auth, **headers(f.header, f.api_key_env, api)},
        strict=f.strict,
        continuous_usage=f.continuous_usage,
        inputs=_inputs(f, api),
        calibrate=f.calibrate,
        read_timeout_s=120.0 if f.read_timeout is None else f.read_timeout,
        request_timeout_s=600.0 if f.timeout is None else f.timeout,
        label=label,
        command=command,
        live=live,
        scrape_metrics=f.scrape_metrics or bool(f.scrape_url),
        scrape_urls=[u.strip() for u in f.scrape_url],
        workers=_workers(f.workers or "auto"),
        ray=f.ray,
        tokenizer=None if f.tokenizer is None else resolve_tokenizer(str(shipped(f.tokenizer))),
        trace=trace,
        agent_trace=agent_trace,
        gates=gates(f.fail_on, f.max_error_rate, f.abort_on_fail, prof.attainment_target),
        abort_on_fail=f.abort_on_fail,
        trials=1 if f.trials is None else f.trials,
        warm_connections=f.warm_connections,
        ramp_up_s=0.0 if f.ramp_up is None else f.ramp_up,
        dashboard=dashboard_at(f),
        origin=Origin(keys={**keys, "dashboard": "--dashboard"}),
    )


def _default_label(wl: Workload, prof: Profile, f: RunFlags) -> str:
    """A run's name when ``--label`` is not given: the workload (what the length flags ask
    for, when they made it) and, without a profile file, the load: ``chat, 8 users``,
    ``prompt 256, output 128, 2 req/s``, ``chat, 1–16 users``."""
    from loadgen.metrics.results import Load, unit_label
    from loadgen.numfmt import fmt

    name = wl.description if wl.source == "command line" else wl.name
    if f.profile or not prof.levels:
        return name
    lo, hi = min(prof.levels), max(prof.levels)
    load = Load(prof.mode, lo).label() if lo == hi else f"{fmt(lo)}–{fmt(hi)} {unit_label(prof.mode, hi)}"
    return f"{name}, {load}"


def dashboard_at(f: RunFlags) -> DashboardAt | None:
    """``--dashboard`` (implied by ``--dashboard-port`` or ``--dashboard-host``)."""
    if not (f.dashboard or f.dashboard_port is not None or f.dashboard_host is not None):
        return None
    default = DashboardAt()
    return DashboardAt(
        host=default.host if f.dashboard_host is None else f.dashboard_host.strip(),
        port=default.port if f.dashboard_port is None else f.dashboard_port,
    )


def resume_run_config(f: RunFlags, given: list[str], command: list[str], *, live: bool) -> RunConfig:
    """``run --resume FOLDER``: the run's own settings from its run.json; only the URL and
    the headers (never stored) may be given again, and the CI gates that judge the result.
    ``given``: the options given besides (by their Python names)."""
    from loadgen.orchestrate.recover import resume_config
    from loadgen.report.files import read_run_info

    assert f.resume is not None
    extra = sorted(name for name in given if name not in RESUME_FLAGS)
    if extra:
        flags = ", ".join("--" + name.replace("_", "-") for name in extra)
        raise ConfigError(
            f"the run's settings come from its run.json; {flags} cannot change them (give only --url, "
            "--header, --api-key-env, --quiet, --fail-on, --max-error-rate, --save-result, --dashboard)",
            key="--resume",
        )
    folder = f.resume
    api = "chat"
    if (folder / "run.json").is_file():
        earlier = read_run_info(folder)
        if earlier.trace is not None or (earlier.workload is not None and earlier.workload.dataset is not None):
            raise ConfigError("a dataset or trace replay cannot be resumed yet; run it again", key="--resume")
        api = earlier.target.api if earlier.target is not None else api
    base, url_auth = (None, {}) if f.url is None else _target(f.url)
    cfg, _ = resume_config(
        folder, base, {**url_auth, **headers(f.header, f.api_key_env, api)}, command=command, live=live
    )
    return replace(
        cfg, gates=gates(f.fail_on, f.max_error_rate, False, cfg.profile.attainment_target), dashboard=dashboard_at(f)
    )


def _workload(f: RunFlags) -> Workload:
    """--workload, or --prompt-tokens/--output-tokens, or the ``chat`` workload; with both,
    the flags set the workload's lengths (:func:`loadgen.workload.lengths.override_lengths`)."""
    from loadgen.workload.lengths import override_lengths
    from loadgen.workload.spec import load_workload, workload_from_flags

    if f.workload:
        wl = load_workload(str(shipped(f.workload)), search_dirs("workloads"))
        return override_lengths(wl, f.prompt_tokens, f.output_tokens)
    if f.prompt_tokens or f.output_tokens:
        return workload_from_flags(f.prompt_tokens or "256", f.output_tokens or "128")
    return load_workload("chat", search_dirs("workloads"))


def _level_values(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"expected numbers separated by commas, got {text!r}", key="--levels") from None
    if not values or not all(0 < v < math.inf for v in values):
        raise ConfigError("levels must be positive numbers", key="--levels")
    return values


def _profile(f: RunFlags, wl: Workload) -> tuple[Profile, str | None]:
    """A profile from --profile (or a one-level default) with the flags laid over it, and
    the flag that set its levels (None: the profile file or the default)."""
    from loadgen.load.profiles import load_profile, with_budget

    if f.concurrency is not None and f.rate is not None:
        raise ConfigError("give either --concurrency (closed loop) or --rate (open loop), not both")
    if f.rate == math.inf:  # vllm bench serve's default
        raise ConfigError(
            "inf (vllm bench serve's every request at once) has no open-loop schedule here: give a "
            "finite rate, or --concurrency N for N requests in flight",
            key="--rate/--request-rate",
        )
    rate, arrival, burstiness = f.rate, f.arrival, f.burstiness
    if wl.arrivals is not None and f.profile is None and f.concurrency is None and rate is None and not f.levels:
        rate = wl.arrivals.rate  # a fitted workload's own arrivals, unless a flag says otherwise
        if arrival is None:
            arrival = "gamma"
            burstiness = wl.arrivals.burstiness if burstiness is None else burstiness
    prof = load_profile(f.profile, search_dirs("profiles")) if f.profile else Profile(levels=[8.0])
    if f.levels:
        prof = replace(prof, levels=_level_values(f.levels))
    if f.concurrency is not None:
        prof = replace(prof, mode="concurrency", levels=prof.levels if f.levels else [float(f.concurrency)])
    if rate is not None:
        prof = replace(prof, mode="rate", levels=prof.levels if f.levels else [rate])
    if not f.profile and (rate is not None or f.concurrency is not None or f.levels):
        prof = replace(prof, name="cli", kind="levels")
    prof = with_budget(prof, f.requests, f.duration, f.warmup)
    changes: dict[str, Any] = {
        "slo_latency": f.slo_latency,
        "arrival": arrival,
        "burstiness": burstiness,
        "max_in_flight": f.max_in_flight,
    }
    prof = replace(prof, **{k: v for k, v in changes.items() if v is not None})
    prof = _precision(prof, f)
    if f.max_in_flight is not None and prof.mode == "concurrency" and prof.kind not in ("sweep-rate", "capacity"):
        raise ConfigError(
            "caps the requests in flight of an open loop (--rate/--request-rate); vllm bench serve's "
            "--max-concurrency N without a rate is --concurrency N here",
            key="--max-in-flight/--max-concurrency",
        )
    level_flag = "--levels" if f.levels else "--concurrency" if f.concurrency is not None else "--rate"
    return prof, level_flag if (f.levels or f.concurrency is not None or f.rate is not None) else None


def _precision(prof: Profile, f: RunFlags) -> Profile:
    """--precision and its bounds laid over the profile: a level runs until its targets are met
    or --max-duration (or --requests, when given), not the default 100 requests."""
    for name in _PRECISION_FLAGS:
        if getattr(f, name) is not None and not (f.precision or prof.precision):
            raise ConfigError("only goes with --precision", key="--" + name.replace("_", "-"))
    if f.precision:
        try:
            targets = precision_targets(f.precision)
        except ValueError as exc:
            raise ConfigError(str(exc), key="--precision") from None
        prof = replace(prof, precision=targets, requests=f.requests)
    changes: dict[str, Any] = {
        "confidence": f.confidence,
        "min_duration_s": f.min_duration,
        "max_duration_s": f.max_duration,
    }
    return replace(prof, **{k: v for k, v in changes.items() if v is not None})


def _replay(f: RunFlags) -> Replay | None:
    """The workload (and trace) of --dataset / --trace, or None without either."""
    from loadgen.orchestrate.agent_replay import agent_format, agent_replay
    from loadgen.workload.datasets import DatasetOptions
    from loadgen.workload.traces import TraceOptions, load_trace, parse_window

    dataset = None if f.dataset is None else str(shipped(f.dataset))
    trace = None if f.trace is None else str(shipped(f.trace))
    for flag, given in (("--speed", f.speed), ("--window", f.window), ("--trace-format", f.trace_format)):
        if given is not None and trace is None:
            raise ConfigError("only goes with --trace", key=flag)
    for flag, given in (
        ("--min-prompt-tokens", f.min_prompt_tokens),
        ("--max-prompt-tokens", f.max_prompt_tokens),
        ("--replacement", f.replacement or None),
        ("--dataset-format", f.dataset_format),
    ):
        if given is not None and dataset is None:
            raise ConfigError("only goes with --dataset", key=flag)
    if dataset is None and trace is None:
        return None
    sources = [
        flag
        for flag, v in (
            ("--dataset", dataset),
            ("--trace", trace),
            ("--workload", f.workload),
            ("--prompt-tokens", f.prompt_tokens),
        )
        if v
    ]
    if len(sources) > 1:
        raise ConfigError(f"give one of --dataset, --trace, --workload or --prompt-tokens, not {' and '.join(sources)}")
    if trace is not None and (fmt := agent_format(trace, f.trace_format)) is not None:
        wl, agent = agent_replay(f, trace, fmt)
        return Replay(wl, agent_trace=agent)
    if trace is not None:
        if f.output_tokens:
            raise ConfigError("a trace gives each request's output length; remove it", key="--output-tokens")
        if f.arrival is not None or f.burstiness is not None:
            raise ConfigError("a trace replays at its recorded times; remove it", key="--arrival/--burstiness")
        window = parse_window(f.window) if f.window else None
        tr = load_trace(
            TraceOptions(trace, f.trace_format or "auto", 1.0 if f.speed is None else f.speed, window, f.rate)
        )
        wl = Workload(name=Path(trace).stem, description=f"{tr.format} trace {trace}", classes=[], source=trace)
        return Replay(wl, tr)
    assert dataset is not None
    for flag, v in (("--min-prompt-tokens", f.min_prompt_tokens), ("--max-prompt-tokens", f.max_prompt_tokens)):
        if v is not None and v < 1:
            raise ConfigError(f"must be >= 1, got {v}", key=flag)
    out = None
    if f.output_tokens is not None:
        try:
            out = int(f.output_tokens)
        except ValueError:
            raise ConfigError(
                f"with --dataset, a whole number of tokens for every request, got {f.output_tokens!r}",
                key="--output-tokens",
            ) from None
        if out < 1:
            raise ConfigError(f"must be >= 1, got {out}", key="--output-tokens")
    opts = DatasetOptions(
        dataset, f.dataset_format or "auto", f.min_prompt_tokens, f.max_prompt_tokens, f.replacement, out
    )
    wl = Workload(name=Path(dataset).stem, description=f"dataset {dataset}", classes=[], source=dataset, dataset=opts)
    return Replay(wl)


def _agent_profile(tr: AgentTrace, f: RunFlags) -> Profile:
    """An agent trace's one level (:func:`loadgen.orchestrate.agent_replay.agent_trace_profile`), with --precision."""
    from loadgen.orchestrate.agent_replay import agent_trace_profile

    prof = agent_trace_profile(tr, f)
    return replace(_precision(prof, f), requests=prof.requests)


def _trace_profile(tr: Trace, f: RunFlags) -> Profile:
    """One open-loop level: the trace's rows at their recorded times (--requests/--duration cut it)."""
    for flag, given in (("--profile", f.profile), ("--concurrency", f.concurrency), ("--levels", f.levels)):
        if given is not None:
            raise ConfigError("a trace replays as one open-loop level at its recorded times; remove it", key=flag)
    warm = f.warmup or 0
    if warm < 0 or warm >= len(tr):
        raise ConfigError(f"must be >= 0 and below the trace's {len(tr)} rows, got {warm}", key="--warmup")
    n = min(f.requests if f.requests is not None else len(tr), len(tr) - warm)
    prof = Profile(
        name="trace",
        kind="levels",
        mode="rate",
        levels=[round(tr.mean_rate, 6)],
        requests=n,
        duration_s=f.duration,
        warmup_requests=warm,
        arrival="trace",
        max_in_flight=f.max_in_flight,
        slo_latency=f.slo_latency or "queued",
        source=tr.path,
        max_duration_s=None,  # with --precision: the trace's rows bound the level unless --max-duration
    )
    return replace(_precision(prof, f), requests=n)


def _inputs(f: RunFlags, api: str) -> Distribution | None:
    """--batch-size (embeddings) or --documents (rerank, score): inputs per request."""
    if f.batch_size is not None and f.documents is not None:
        raise ConfigError("give --batch-size (embeddings) or --documents (rerank, score), not both")
    flag, text = ("--batch-size", f.batch_size) if f.batch_size is not None else ("--documents", f.documents)
    if text is None:
        return None
    want = "embeddings" if flag == "--batch-size" else "rerank or score"
    if api not in want.split(" or "):
        raise ConfigError(f"{flag} is for --api {want}, not {api}", key=flag)
    return parse_distribution(text, source="command line", key=flag)
