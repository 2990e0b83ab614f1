"""``--scrape-metrics``: poll the target's Prometheus ``/metrics`` during a run.

Every ``interval_s`` (on an absolute schedule; a missed tick is skipped, not queued) one GET
of the target and of each of ``extra_urls``; the samples this module understands (running
and waiting requests, KV-cache usage, prefix-cache hit rate, DCGM GPU telemetry, and
``raw``, which also keeps the sums and counts of vLLM's latency histograms) are appended as
one JSON line to ``server_metrics.jsonl``, stamped with ``time.perf_counter_ns()`` (the
records' clock). Nothing here raises out of a scrape:
failures are counted in :attr:`MetricsScraper.failures`. The line's format and every name
understood: docs/client.md, "Scraping the server's ``/metrics``".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import aiohttp

__all__ = ["KNOWN_METRICS", "MetricsScraper", "parse_prometheus"]

_SUM = "sum"
_MEAN = "mean"

# name -> how label sets of one name combine
KNOWN_METRICS: dict[str, str] = {
    "vllm:num_requests_running": _SUM,
    "vllm:num_requests_waiting": _SUM,
    "vllm:kv_cache_usage_perc": _MEAN,
    "vllm:gpu_cache_usage_perc": _MEAN,
    "vllm:gpu_prefix_cache_hit_rate": _MEAN,
    "vllm:prefix_cache_queries_total": _SUM,
    "vllm:prefix_cache_hits_total": _SUM,
    "vllm:gpu_prefix_cache_queries_total": _SUM,
    "vllm:gpu_prefix_cache_hits_total": _SUM,
    "vllm:num_preemptions_total": _SUM,
    "vllm:prompt_tokens_total": _SUM,
    "vllm:generation_tokens_total": _SUM,
    **{
        f"vllm:{name}_seconds_{part}": _SUM
        for name in (
            "time_to_first_token",
            "inter_token_latency",
            "e2e_request_latency",
            "request_queue_time",
            "request_prefill_time",
            "request_decode_time",
        )
        for part in ("sum", "count")
    },
    "sglang:num_running_reqs": _SUM,
    "sglang:num_queue_reqs": _SUM,
    "sglang:token_usage": _MEAN,
    "sglang:cache_hit_rate": _MEAN,
    "DCGM_FI_DEV_GPU_UTIL": _MEAN,
    "DCGM_FI_DEV_POWER_USAGE": _SUM,
    "DCGM_FI_DEV_FB_USED": _SUM,
}
_PREFIXES = tuple(
    sorted({name.split(":")[0] + ":" if ":" in name else name.rsplit("_", 1)[0] for name in KNOWN_METRICS})
)
_RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
_WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
_HIT_GAUGES = ("sglang:cache_hit_rate", "vllm:gpu_prefix_cache_hit_rate")
_HIT_COUNTERS = (
    ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
    ("vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"),
)


def _sample_value(rest: str) -> float | None:
    """The value of a sample line's remainder (after the name and labels)."""
    parts = rest.split()
    if not parts:
        return None
    try:
        return float(parts[0])  # float() reads NaN, +Inf, -Inf as Prometheus writes them
    except ValueError:
        return None


def _after_labels(line: str, start: int) -> int:
    """Index just past the ``}`` closing the label set that opens at ``start``."""
    i, quoted = start + 1, False
    while i < len(line):
        c = line[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == "}":
            return i + 1
        i += 1
    return -1


def _samples(text: str, names: Mapping[str, str] = KNOWN_METRICS) -> dict[str, list[float]]:
    """Every sample value of ``names`` in Prometheus text, per name (one per label set)."""
    acc: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line.startswith(_PREFIXES):
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            name = line[:brace]
            end = _after_labels(line, brace)
            if end == -1:
                continue
            rest = line[end:]
        elif space != -1:
            name, rest = line[:space], line[space:]
        else:
            continue
        if name not in names:
            continue
        value = _sample_value(rest)
        if value is None or not math.isfinite(value):
            continue
        acc.setdefault(name, []).append(value)
    return acc


def _reduce(acc: Mapping[str, list[float]], names: Mapping[str, str] = KNOWN_METRICS) -> dict[str, float]:
    return {k: (sum(v) if names[k] == _SUM else sum(v) / len(v)) for k, v in acc.items()}


def parse_prometheus(text: str, names: Mapping[str, str] = KNOWN_METRICS) -> dict[str, float]:
    """The samples of ``names`` in Prometheus text ``text``, label sets combined (sum or
    mean, as ``names`` says). Other lines are skipped cheaply; a malformed line of a
    known name is ignored, and so are NaN and infinite values."""
    return _reduce(_samples(text, names), names)


def _first(raw: Mapping[str, float], names: tuple[str, ...]) -> float | None:
    for n in names:
        if n in raw:
            return raw[n]
    return None


def _redact(url: str) -> str:
    """``url`` without credentials (never in an error line)."""
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}" if sep else url


def _merge(parts: Sequence[Mapping[str, list[float]]]) -> dict[str, float]:
    """Samples of several endpoints in one dict: a name found in several is combined like
    label sets of one (a mean over every GPU, not a mean of the endpoints' means)."""
    acc: dict[str, list[float]] = {}
    for part in parts:
        for k, v in part.items():
            acc.setdefault(k, []).extend(v)
    return _reduce(acc)


class MetricsScraper:
    """Polls ``base_url + "/metrics"`` every ``interval_s`` and appends to ``out_path``.

    ``headers`` (e.g. an Authorization header) are sent but never written. Use
    ``await start()`` / ``await stop()`` (or ``async with``); the file is opened by
    ``start``. Counters: :attr:`scrapes` (lines written), :attr:`failures`,
    :attr:`last_error`.
    """

    def __init__(
        self,
        base_url: str,
        out_path: Path,
        interval_s: float = 1.0,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        extra_urls: Sequence[str] = (),
        on_sample: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise ValueError(f"interval_s must be a positive number, got {interval_s!r}")
        self.url = base_url.rstrip("/") + "/metrics"
        self.extra_urls = list(extra_urls)
        self.out_path = Path(out_path)
        self.interval_s = interval_s
        self.timeout_s = timeout_s if timeout_s is not None else max(interval_s, 2.0)
        self.headers = dict(headers or {})
        self.scrapes = 0
        self.failures = 0
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._file: IO[str] | None = None
        self._prev: dict[str, float] = {}
        self.on_sample = on_sample  # each line written goes to it too (the live dashboard)

    async def __aenter__(self) -> MetricsScraper:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open the output file, scrape once (awaited: the run's first line is before its first
        request) and start polling every ``interval_s`` from then."""
        if self._task is not None:
            return
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.out_path, "a", encoding="utf-8")  # noqa: ASYNC230, SIM115 - once per run, closed on exit
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout)  # headers go to the target only
        await self.scrape_now()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def scrape_now(self) -> None:
        """One scrape now, off the schedule (failures counted, never raised): the run calls it
        when a level's requests have all ended, so each level's counters and histogram sums
        have a line after its last answer (docs/client.md)."""
        if self._session is None or self._file is None:
            return
        try:
            await self.scrape_once()
        except Exception as exc:
            self._fail(f"{type(exc).__name__}: {exc}")

    async def stop(self) -> None:
        """Stop polling, scrape once more (the run's last line, after its last answer), close
        the connection and the file. Safe to call twice."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await self.scrape_now()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._file is not None:
            self._file.close()
            self._file = None

    async def _loop(self) -> None:
        interval_ns = round(self.interval_s * 1e9)
        start = time.perf_counter_ns()
        tick = 0
        while True:  # start() scraped at tick 0
            now = time.perf_counter_ns()
            tick = max(tick + 1, (now - start) // interval_ns + 1)  # skip ticks already missed
            await asyncio.sleep(max(0.0, (start + tick * interval_ns - now) / 1e9))
            try:
                await self.scrape_once()
            except Exception as exc:
                self._fail(f"{type(exc).__name__}: {exc}")

    async def scrape_once(self) -> dict[str, Any] | None:
        """One scrape: the line written, or None when it failed (counted, not raised)."""
        if self._session is None or self._file is None:
            raise RuntimeError("MetricsScraper.scrape_once() before start()")
        answers = await asyncio.gather(*(self._fetch(u) for u in [self.url, *self.extra_urls]))
        t_ns = time.perf_counter_ns()
        found = [a for a in answers if a]
        if not found:
            return None
        raw = _merge(found)
        line = {
            "t_ns": t_ns,
            "running": _first(raw, _RUNNING),
            "waiting": _first(raw, _WAITING),
            "kv_usage": _first(raw, _KV),
            "prefix_hit_rate": self._hit_rate(raw),
            "raw": raw,
        }
        if "DCGM_FI_DEV_GPU_UTIL" in raw:
            line["gpu_util"] = raw["DCGM_FI_DEV_GPU_UTIL"] / 100.0
        if "DCGM_FI_DEV_POWER_USAGE" in raw:
            line["power_w"] = raw["DCGM_FI_DEV_POWER_USAGE"]
        if "DCGM_FI_DEV_FB_USED" in raw:
            line["fb_used_mib"] = raw["DCGM_FI_DEV_FB_USED"]
        self._prev = raw
        try:
            self._file.write(json.dumps(line, allow_nan=False, default=str) + "\n")
            self._file.flush()
        except (OSError, ValueError) as exc:
            self._fail(f"cannot write {self.out_path}: {exc}")
            return None
        self.scrapes += 1
        if self.on_sample is not None:
            self.on_sample(line)
        return line

    async def _fetch(self, url: str) -> dict[str, list[float]] | None:
        """The known samples of one endpoint, per name, or None (the failure counted)."""
        assert self._session is not None
        try:
            headers = self.headers if url == self.url else None  # the target's secrets stay with it
            async with self._session.get(url, headers=headers, allow_redirects=False) as resp:
                body = await resp.text(errors="replace")
                if resp.status != 200:
                    self._fail(f"HTTP {resp.status} from {_redact(url)}")
                    return None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            self._fail(f"{type(exc).__name__}: {exc}")
            return None
        found = _samples(body)
        if not found:
            self._fail(f"no known metric in the answer of {_redact(url)}")
            return None
        return found

    def _hit_rate(self, raw: Mapping[str, float]) -> float | None:
        gauge = _first(raw, _HIT_GAUGES)
        if gauge is not None:
            return gauge
        for queries, hits in _HIT_COUNTERS:
            if queries in raw and hits in raw and queries in self._prev and hits in self._prev:
                dq = raw[queries] - self._prev[queries]
                dh = raw[hits] - self._prev[hits]
                return dh / dq if dq > 0 else None
        return None

    def _fail(self, why: str) -> None:
        self.failures += 1
        self.last_error = why[:300]
