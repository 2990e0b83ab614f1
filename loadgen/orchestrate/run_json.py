"""What a run's ``run.json`` says (:class:`~loadgen.runinfo.RunInfo`), built from its
:class:`~loadgen.orchestrate.RunConfig`, the server it found and its calibration: the
target, the workload (classes, sessions, dataset, images), the client's configuration
(header names only: values may be secrets) and the replayed trace, if any."""

from __future__ import annotations

import dataclasses
import time

from loadgen.client.discovery import ServerInfo
from loadgen.client.redact import redact_url
from loadgen.orchestrate.config import RunConfig
from loadgen.report.files import machine_info
from loadgen.runinfo import (
    Calibration,
    ClassInfo,
    ClientConfig,
    ClockAnchor,
    DatasetInfo,
    ImagesInfo,
    RunInfo,
    SessionsInfo,
    Target,
    TraceInfo,
    WorkloadInfo,
)
from loadgen.workload.prompts import format_salt
from loadgen.workload.spec import Workload

__all__ = ["run_json"]


def _workload_info(wl: Workload) -> WorkloadInfo:
    classes = [
        ClassInfo(
            name=c.name,
            weight=c.weight,
            prompt_tokens=c.prompt_tokens.describe(),
            output_tokens=c.output_tokens.describe(),
            shared_prefix_groups=c.shared_prefix_groups,
            shared_prefix_tokens=c.shared_prefix_tokens,
        )
        for c in wl.classes
    ]
    sessions = None if wl.sessions is None else SessionsInfo.from_json(wl.sessions.to_dict())
    dataset = None if wl.dataset is None else DatasetInfo.from_json(wl.dataset.describe())
    return WorkloadInfo(
        classes=classes,
        name=wl.name,
        description=wl.description,
        source=wl.source,
        sessions=sessions,
        tools=None if wl.tools is None else len(wl.tools),
        dataset=dataset,
        images=None if wl.images is None else ImagesInfo.from_json(wl.images.describe()),
        overrides=None if wl.overrides is None else list(wl.overrides),
    )


def run_json(
    cfg: RunConfig, info: ServerInfo, calib: Calibration, started: float, anchor_ns: int, n_workers: int
) -> RunInfo:
    return RunInfo(
        label=cfg.label,
        command=list(cfg.command),
        started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        clock_anchor=ClockAnchor(unix_s=started, perf_counter_ns=anchor_ns),
        target=Target(url=redact_url(cfg.url), api=cfg.api, model=info.model, max_model_len=info.max_model_len),
        workload=_workload_info(cfg.workload),
        profile=dataclasses.replace(cfg.profile),
        slos=[str(s) for s in cfg.slos],
        config=ClientConfig(
            seed=cfg.seed,
            prompt_salt=None if cfg.prompt_salt is None else format_salt(cfg.prompt_salt),
            transport=cfg.transport,
            http2=cfg.http2,
            strict=cfg.strict,
            continuous_usage=cfg.continuous_usage,
            inputs=None if cfg.inputs is None else cfg.inputs.describe(),
            read_timeout_s=cfg.read_timeout_s,
            request_timeout_s=cfg.request_timeout_s,
            header_names=sorted(cfg.headers),  # names only: values may be secrets
            workers=cfg.workers,
            workers_started=n_workers,
            ray=None if cfg.ray is None else redact_url(cfg.ray),
            trials=cfg.trials,
            warm_connections=cfg.warm_connections,
            ramp_up_s=cfg.ramp_up_s,
        ),
        calibration=calib,
        machine=machine_info(),
        tokenizer=None if cfg.tokenizer is None else str(cfg.tokenizer),
        trace=_trace_info(cfg),
    )


def _trace_info(cfg: RunConfig) -> TraceInfo | None:
    """run.json's ``trace``: the replayed trace or agent trace, if any."""
    if cfg.trace is not None:
        return TraceInfo.from_json(cfg.trace.describe())
    if cfg.agent_trace is not None:
        info = cfg.agent_trace.describe()
        offsets = cfg.agent_trace.offsets
        if cfg.profile.mode == "rate" and offsets is not None and len(offsets) > 1 and offsets[-1] > 0:
            info["mean_rate"] = (len(offsets) - 1) / float(offsets[-1])  # tasks per second
        return TraceInfo.from_json(info)
    return None
