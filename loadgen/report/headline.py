"""``--save-result FILE``: a run's headline numbers in the shape of ``vllm bench serve``'s
result JSON, so scripts written for vLLM's files read loadgen's.

One level gives one object; a sweep gives a list of them, one per level, in order. Each
object has vLLM's keys (``completed``, ``request_throughput``, ``mean_ttft_ms``,
``p99_itl_ms``…; the mapping and its caveats are in docs/metrics.md; the rates are vLLM's
``completed / duration``, the whole window's, not loadgen's headline) and one key of its
own, ``loadgen``, that names the level and the run folder. vLLM's per-request lists
(``--save-detailed``) are left out: they are in the run folder's records.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat as stat_mode
import tempfile
import time
from pathlib import Path
from typing import Any

from loadgen.errors import ConfigError
from loadgen.metrics.results import Distribution, LevelSummary, RunSummary
from loadgen.report.files import is_run_folder
from loadgen.runinfo import RunInfo

__all__ = ["check_result_path", "vllm_result", "write_result"]

# vLLM's name for each latency, and the loadgen distribution with its definition
_LATENCIES = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("itl", "inter_chunk_ms"), ("e2el", "e2e_ms"))
_PERCENTILES = (("90", "p90"), ("95", "p95"), ("99", "p99"), ("99.9", "p99.9"))
_BACKENDS = {"chat": "openai-chat", "completions": "openai"}  # vLLM's --backend for the same API


def _total(d: Distribution) -> int:
    """The sum of the samples (count × mean; exact up to the mean's rounding)."""
    return 0 if d.mean is None else round(d.mean * d.count)


def _whole_goodput(level: LevelSummary) -> float | None:
    """Goodput over the whole window (a file before schema version 3: its only goodput)."""
    good = level.goodput
    return good.requests_per_s if good.whole_requests_per_s is None else good.whole_requests_per_s


def vllm_result(level: LevelSummary, run: RunInfo, folder: Path | None = None) -> dict[str, Any]:
    """One level as ``vllm bench serve`` writes its result (``run`` is the run's run.json)."""
    target, profile = run.target, run.profile
    closed = level.load.mode == "concurrency"
    arrival = profile.arrival
    burstiness = {"poisson": 1.0, "gamma": profile.burstiness}.get(arrival)
    started = run.started_at
    try:
        date = time.strftime("%Y%m%d-%H%M%S", time.strptime(started, "%Y-%m-%dT%H:%M:%S%z")) if started else None
    except ValueError:
        date = None
    whole = level.throughput.whole_rates(level.duration_s)
    out: dict[str, Any] = {
        "date": date,
        "backend": None if target is None else _BACKENDS.get(target.api, target.api),
        "label": run.label or None,
        "model_id": None if target is None else target.model,
        "tokenizer_id": run.tokenizer,
        "num_prompts": level.requests.total,
        # a closed loop of N users is vLLM's rate inf with N requests in flight
        "request_rate": "inf" if closed else level.load.value,
        "burstiness": None if closed else burstiness,
        "max_concurrency": int(level.load.value) if closed else profile.max_in_flight,
        "duration": level.duration_s,
        "completed": level.requests.ok,
        "failed": level.requests.failed,
        "total_input_tokens": _total(level.prompt_tokens),
        "total_output_tokens": _total(level.output_tokens),
        # vLLM's rates are completed / duration: the whole window's, not loadgen's headline
        "request_throughput": whole.requests_per_s,
        "request_goodput": _whole_goodput(level) if level.goodput.slos else None,
        "output_throughput": whole.output_tokens_per_s,
        "total_token_throughput": whole.total_tokens_per_s,
    }
    for name, key in _LATENCIES:
        d = level.dist(key)
        out[f"mean_{name}_ms"], out[f"median_{name}_ms"], out[f"std_{name}_ms"] = d.mean, d.p50, d.std
        for word, stat in _PERCENTILES:
            out[f"p{word}_{name}_ms"] = d.stat(stat)
    out["loadgen"] = {
        "load": level.load.to_json(),
        "arrival": None if closed else arrival,
        "slos": list(level.goodput.slos),
        "slo_attainment": level.goodput.slo_attainment,
        "client": level.client.verdict,
        **({} if folder is None else {"run_folder": str(folder)}),
    }
    return out


def _refuse(message: str) -> ConfigError:
    return ConfigError(message, field="save_result")


def _run_folder_above(target: Path) -> Path | None:
    """The run folder ``target`` lies in, at any depth (:func:`~loadgen.report.files.is_run_folder`)."""
    return next((folder for folder in target.parents if is_run_folder(folder)), None)


def _check_writable(folder: Path) -> None:
    """Refuse a folder the result could not be written in: a temporary file is made and
    removed there (nothing else is touched); a folder not made yet needs its nearest
    existing parent writable."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise _refuse(f"{existing} is not a folder")
    if existing != folder:
        if not os.access(existing, os.W_OK | os.X_OK):
            raise _refuse(f"cannot make {folder}: {existing} is not writable")
        return
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".loadgen-result-")
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise _refuse(f"cannot write in {folder}: {exc.strerror or exc}") from None


def check_result_path(path: Path, out: Path | None = None) -> None:
    """Refuse, before anything is sent, a ``--save-result`` path that cannot take the
    result: a folder, a device or anything else that is not a regular file, a path inside
    this run's folder ``out`` or inside any run folder (symlinks followed: the result
    would replace a run's own files), a file or folder that cannot be written."""
    if path.is_dir():
        raise _refuse(f"{path} is a folder; give the JSON file's path")
    if path.parent.exists() and not path.parent.is_dir():
        raise _refuse(f"{path.parent} is not a folder")
    try:
        target = path.resolve()
        run = None if out is None else out.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise _refuse(f"cannot resolve {path}: {exc}") from None
    leads = "" if target == path.absolute() else f" (it leads to {target})"
    if run is not None and (target == run or run in target.parents):
        raise _refuse(f"{path} is inside this run's folder {out}{leads}; give a path outside it")
    other = _run_folder_above(target)
    if other is not None:
        raise _refuse(f"{path} is inside the run folder {other}{leads}; give a path outside it")
    if target.exists():
        if not stat_mode.S_ISREG(target.stat().st_mode):
            raise _refuse(f"{path} is not a regular file (a device, pipe or socket){leads}; give a file's path")
        if not os.access(target, os.W_OK):
            raise _refuse(f"{path} is not writable{leads}")
    _check_writable(target.parent)


def write_result(path: Path, summary: RunSummary, run: RunInfo | dict[str, Any], folder: Path | None = None) -> None:
    """Write ``--save-result``: an object for one level, a list of them for several
    (``run``: the run's record, or its ``run.json`` as read). The file is written beside
    the target and renamed onto it (symlinks followed), so a failed write leaves an
    earlier result whole and a hard link to another file is never written through."""
    info = run if isinstance(run, RunInfo) else RunInfo.from_json(run)
    doc = [vllm_result(lv, info, folder) for lv in summary.levels]
    text = json.dumps(doc[0] if len(doc) == 1 else doc, indent=2) + "\n"
    target = path.resolve()
    tmp = target.parent / f".{target.name}.{os.getpid()}.tmp"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise ConfigError(f"cannot write: {exc.strerror or exc}", source=str(path), field="save_result") from None
