"""A run folder after a crash: its summary rebuilt, its sweep resumed.

A run appends its records as requests finish, writes ``summary.json`` after each level and
says in ``run.json`` when it ``finished``; a ``kill -9`` leaves the records, ``run.json``
and at most that per-level summary. :func:`recover` replays the run's sweep over what the
folder holds: a finished level keeps the summary the run wrote, the others are summarised
again from their records by the same ``summarize_level``. :func:`rebuild_summary` writes
the result (``loadgen report``); :func:`resume_config` turns it into a :class:`RunConfig`
that runs the sweep on from its first unfinished level (``loadgen run --resume``), after
:class:`~loadgen.report.files.RunWriter` (``keep_levels_below``) cut a partly-run level's
records off the files.

docs/guarantees.md, "Stopping, crashes and resuming", says what a rebuilt or resumed run
keeps and loses.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import ConfigError
from loadgen.load.profiles import Profile
from loadgen.load.runner import LevelPlan, LevelResult
from loadgen.load.sweeps import Sweep, sweep
from loadgen.metrics.results import LevelSummary, RunSummary
from loadgen.metrics.slo import SLO, parse_slo
from loadgen.orchestrate.config import Origin, Resume, RunConfig
from loadgen.orchestrate.sweep_driver import run_summary, summarize_result
from loadgen.records import RequestRecord
from loadgen.report.files import read_run_info, write_json
from loadgen.report.readers import read_records
from loadgen.runinfo import DatasetInfo, ImagesInfo, RunInfo
from loadgen.workload.datasets import DatasetOptions
from loadgen.workload.distributions import Distribution, parse_distribution
from loadgen.workload.images import ImageConfig, files_digest, parse_images
from loadgen.workload.prompts import parse_salt
from loadgen.workload.spec import RequestClass, Workload

__all__ = ["Recovered", "needs_rebuild", "rebuild_summary", "recover", "resume_config", "workload_of"]


@dataclass
class Recovered:
    """What a run folder says of its run, replayed through its sweep."""

    folder: Path
    run: RunInfo  # run.json
    profile: Profile
    slos: list[SLO]
    levels: list[LevelSummary]  # every level with records, in order (a partial one last)
    finished: int  # how many leading levels finished
    gen: Sweep  # the sweep, fed the finished levels' summaries
    plan: LevelPlan | None  # the first level that did not finish (None: the sweep is over)
    stopped: str | None  # why the sweep ended early (a stop rule), when it is over
    complete: bool  # run.json says the run ended on its own (not interrupted)
    rebuilt: int  # levels summarised again from their records
    torn: bool  # the last line of records.jsonl was cut off mid-write (and is skipped)


def _run_info(folder: Path) -> RunInfo:
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder (expected a loadgen run folder)")
    if not (folder / "run.json").is_file():
        raise ConfigError(f"{folder} has no run.json: not a loadgen run folder")
    return read_run_info(folder)


def profile_of(run: RunInfo) -> Profile:
    """The profile a run ran, from its ``run.json`` (a copy: the sweep may not change the record's)."""
    return dataclasses.replace(run.profile)


def _slos(run: RunInfo) -> list[SLO]:
    return [parse_slo(s) for s in run.slos]


def _written_levels(folder: Path) -> list[LevelSummary]:
    """The level summaries of the folder's ``summary.json`` (none when it is absent or unreadable)."""
    try:
        raw = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        return [LevelSummary.from_json(lv) for lv in raw["levels"]]
    except (OSError, ValueError, TypeError, KeyError):
        return []


def _torn(folder: Path) -> bool:
    try:
        with open(folder / "records.jsonl", "rb") as fh:
            if fh.seek(0, os.SEEK_END) == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except OSError:
        return False


def recover(folder: Path) -> Recovered:
    """Replay the run in ``folder`` (see the module docstring). Raises :class:`ConfigError`
    when it is not a loadgen run folder."""
    folder = Path(folder)
    run = _run_info(folder)
    prof, slos, anchor_ns = profile_of(run), _slos(run), run.anchor_ns or 0
    complete = run.complete
    written = _written_levels(folder)
    kept = next((i for i, lv in enumerate(written) if lv.interrupted), len(written))  # summaries to keep
    by_level: dict[int, list[RequestRecord]] = defaultdict(list)
    last = -1
    if (folder / "records.jsonl").is_file():
        for rec in read_records(folder):
            last = max(last, rec.level)
            if rec.level >= kept:  # only the levels to summarise are held in memory
                by_level[rec.level].append(rec)
    gen = sweep(prof, run.config.seed)
    plan: LevelPlan | None = next(gen)
    levels: list[LevelSummary] = []
    stopped: str | None = None
    rebuilt = 0
    while plan is not None:
        i = plan.index
        if i < kept:
            level = written[i]  # the run's own summary of a level that finished
        elif i in by_level:
            partial = i == last and not complete
            res = LevelResult(plan, records=by_level[i], interrupted=partial)
            res.scheduled = len(by_level[i])  # open loop: what was sent (the unsent are not in the records)
            level = _noted(summarize_result(res, prof, slos, anchor_ns))
            rebuilt += 1
        else:
            break
        levels.append(level)
        if level.interrupted:
            break
        try:
            plan = gen.send(level)
        except StopIteration as stop:
            stopped, plan = stop.value, None
    finished = len(levels) - (1 if levels and levels[-1].interrupted else 0)
    return Recovered(folder, run, prof, slos, levels, finished, gen, plan, stopped, complete, rebuilt, _torn(folder))


REBUILT_NOTE = (
    "summarised again from records.jsonl: the event-loop lag and the workers' own health are not "
    "in the records, so the verdict rests on send lateness alone"
)


def _noted(level: LevelSummary) -> LevelSummary:
    client = dataclasses.replace(level.client, notes=[*(level.client.notes or []), REBUILT_NOTE])
    return dataclasses.replace(level, client=client)


def rebuilt_summary(rec: Recovered) -> RunSummary:
    """The run's summary over the recovered levels; ``interrupted`` unless the run ended on its own."""
    interrupted = not rec.complete
    ended = rec.run.finished
    stopped = (ended.stopped if ended is not None else None) or rec.stopped  # --abort-on-fail is not in the sweep
    return run_summary(rec.levels, rec.profile, None if interrupted else stopped, interrupted)


def rebuild_summary(folder: Path) -> tuple[Recovered, RunSummary]:
    """Write ``folder/summary.json`` again from the records (see :func:`recover`)."""
    rec = recover(folder)
    if not rec.levels:
        raise ConfigError(f"{folder} holds no records to summarise")
    summary = rebuilt_summary(rec)
    write_json(folder, "summary.json", summary.to_json())
    return rec, summary


def workload_of(run: RunInfo) -> Workload:
    """The workload a run drew its requests from, from its ``run.json`` (each length
    distribution is written as text that parses back to the same one)."""
    wl = run.workload
    if wl is None:
        raise ConfigError("missing", source="run.json", key="workload")

    def dist(text: str, i: int, key: str) -> Distribution:
        return parse_distribution(text, source="run.json", key=f"workload.classes[{i}].{key}")

    classes = [
        RequestClass(
            name=c.name,
            weight=c.weight,
            prompt_tokens=dist(c.prompt_tokens, i, "prompt_tokens"),
            output_tokens=dist(c.output_tokens, i, "output_tokens"),
            shared_prefix_groups=c.shared_prefix_groups,
            shared_prefix_tokens=c.shared_prefix_tokens,
        )
        for i, c in enumerate(wl.classes)
    ]
    return Workload(
        name=wl.name,
        description=wl.description,
        classes=classes,
        source=wl.source or "run.json",
        dataset=None if wl.dataset is None else _dataset_of(wl.dataset),
        images=None if wl.images is None else _images_of(wl.images),
        overrides=None if wl.overrides is None else list(wl.overrides),
    )


def _dataset_of(d: DatasetInfo) -> DatasetOptions:
    return DatasetOptions(
        path=d.path,
        format=d.format,
        min_prompt_tokens=d.min_prompt_tokens,
        max_prompt_tokens=d.max_prompt_tokens,
        replacement=d.replacement,
        output_tokens=d.output_tokens,
        image_root=d.image_root,
    )


def _images_of(info: ImagesInfo) -> ImageConfig:
    """The ``[images]`` table again: the same distributions, or the same files (their globs
    are absolute; refused when the files' bytes are not the ones the run sent)."""
    keys = ("count", "width", "height", "format", "files")
    table = {k: getattr(info, k) for k in keys if getattr(info, k) is not None}
    cfg = parse_images(table, "run.json", Path.cwd())
    if info.sha256 is not None and files_digest(cfg.files) != info.sha256:
        raise ConfigError(
            "the image files are not the ones the run sent (their bytes changed)",
            source="run.json",
            key="workload.images.files",
        )
    return cfg


def resume_config(
    folder: Path, url: str | None, headers: dict[str, str], *, command: list[str], live: bool
) -> tuple[RunConfig, Recovered]:
    """The :class:`RunConfig` that continues the run in ``folder`` at its first unfinished
    level: everything from its ``run.json`` but the URL (when given again: its credentials
    and query string were never written) and the headers (their values never were)."""
    folder = Path(folder)
    rec = recover(folder)
    if rec.complete or rec.plan is None:
        raise ConfigError(f"the run in {folder} finished already; nothing to resume", field="resume")
    run, conf, target = rec.run, rec.run.config, rec.run.target
    if target is None:
        raise ConfigError("missing", source=str(folder / "run.json"), key="target")
    missing = sorted(set(conf.header_names) - set(headers))
    if missing:
        raise ConfigError(
            f"the run sent the header(s) {', '.join(missing)}, whose values are never stored: give them "
            "again (--header, --api-key-env)",
            field="resume",
        )
    cfg = RunConfig(
        url=url or target.url,
        api=target.api,
        workload=workload_of(run),
        profile=rec.profile,
        out=folder,
        model=target.model,
        slos=rec.slos,
        seed=conf.seed,
        prompt_salt=parse_salt(conf.prompt_salt, key="config.prompt_salt"),
        repeat_prompts=conf.prompt_salt is None,  # a run that sent its prompts unsalted goes on without
        transport=conf.transport,
        http2=conf.http2,
        headers=headers,
        strict=conf.strict,
        continuous_usage=conf.continuous_usage,
        inputs=None if conf.inputs is None else parse_distribution(conf.inputs, source="run.json", key="client.inputs"),
        calibrate=False,
        read_timeout_s=conf.read_timeout_s,
        request_timeout_s=conf.request_timeout_s,
        label=run.label,
        command=command,
        live=live,
        workers=conf.workers,
        ray=conf.ray,
        resume=Resume(run=run, gen=rec.gen, plan=rec.plan, levels=rec.levels[: rec.finished]),
        trials=conf.trials,
        warm_connections=conf.warm_connections,
        ramp_up_s=conf.ramp_up_s,
        origin=_resume_origin(folder, url is not None),
    )
    return cfg, rec


def _resume_origin(folder: Path, url_given: bool) -> Origin:
    """A resumed run's values come from run.json (the URL and headers from the command line)."""
    keys = {
        name: f"config.{name}"
        for name in (
            *("seed", "transport", "http2", "read_timeout_s", "request_timeout_s", "workers", "ray", "trials"),
            *("warm_connections", "ramp_up_s", "prompt_salt", "repeat_prompts"),
        )
    }
    keys.update(api="target.api", model="target.model", url="--url" if url_given else "target.url", headers="--header")
    return Origin(source=str(folder / "run.json"), keys=keys)


def needs_rebuild(folder: Path) -> bool:
    """Whether ``folder`` is a run folder whose ``summary.json`` is missing or is the one
    written level by level (a run that never reached its end writes no other)."""
    folder = Path(folder)
    if not (folder / "run.json").is_file():
        return False
    try:
        raw = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False  # unreadable: reading it says why
    return isinstance(raw, dict) and "interrupted" not in raw
