"""Server metrics in the Prometheus text format (0.0.4), written by hand, with vLLM names.

Gauges and counters of the engine (running/waiting requests, KV-cache usage, prefix-cache
queries and hits, preemptions, prompt/generation tokens; vLLM counts the prefix-cache
lookups of preempted requests apart and does not export them, ``loadgen:`` names do) are read from
:meth:`AsyncEngine.stats` at scrape time. Per-request histograms are observed by the API
when a request ends:

- ``vllm:time_to_first_token_seconds``: from the request's arrival at the API (the
  handler's start) to the first output token handed to the HTTP response: the moment its
  event is written to the socket for streams, the moment the body is complete otherwise.
- ``vllm:inter_token_latency_seconds`` (and the older ``vllm:time_per_output_token_seconds``,
  same samples): each gap between consecutive output events, divided evenly over that
  event's tokens, one sample per token.
- ``vllm:e2e_request_latency_seconds``: arrival to the last byte of the answer.
- ``vllm:request_{queue,prefill,decode}_time_seconds``: the engine's own timings.

:class:`RequestLog` keeps the server timings of the last N finished requests, served as
JSON at ``GET /loadgen/requests`` so end-to-end tests can compare a client's measurements
with the server's.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgen.server.engine.interface import EngineStats

__all__ = [
    "FINISH_REASONS",
    "ITL_BUCKETS",
    "LATENCY_BUCKETS",
    "TTFT_BUCKETS",
    "Histogram",
    "RequestLog",
    "RequestTrace",
    "ServerMetrics",
    "format_value",
]

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
LATENCY_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
FINISH_REASONS = ("stop", "length", "abort")
# the simulated GPUs' telemetry under the DCGM exporter's names: (name, help, field, scale)
_DCGM = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util", 100.0),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_w", 1.0),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "fb_used_mib", 1.0),
)


def format_value(value: float) -> str:
    """A sample value or ``le`` bound as Prometheus writes it (``+Inf``, ``NaN``, ``1.0``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


class Histogram:
    """A Prometheus histogram: ``le`` buckets (observations <= bound), sum and count."""

    __slots__ = ("_counts", "bounds", "count", "help", "name", "sum")

    def __init__(self, name: str, help_text: str, bounds: Sequence[float]) -> None:
        self.name = name
        self.help = help_text
        self.bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self._counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def render(self, labels: Sequence[tuple[str, str]]) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        cumulative = 0
        for bound, n in zip((*self.bounds, math.inf), self._counts):
            cumulative += n
            le = _labels((*labels, ("le", format_value(bound))))
            lines.append(f"{self.name}_bucket{le} {format_value(cumulative)}")
        lab = _labels(labels)
        lines.append(f"{self.name}_sum{lab} {format_value(self.sum)}")
        lines.append(f"{self.name}_count{lab} {format_value(self.count)}")
        return lines


@dataclass(slots=True)
class RequestTrace:
    """What the API saw of one request; filled while it runs, logged when it ends.

    ``events`` holds ``(t_ns, n_tokens)`` per output-carrying event (``perf_counter_ns``
    right before its bytes are written), ``n_tokens`` being the engine tokens since the
    previous one.
    """

    id: str
    endpoint: str
    stream: bool
    arrival_ns: int
    prompt_tokens: int
    output_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str = "abort"
    done_ns: int = 0
    events: list[tuple[int, int]] = field(default_factory=list)
    engine: dict[str, float] | None = None

    @property
    def ttft_s(self) -> float | None:
        return (self.events[0][0] - self.arrival_ns) / 1e9 if self.events else None

    @property
    def e2e_s(self) -> float:
        return (self.done_ns - self.arrival_ns) / 1e9

    def itl_s(self) -> array[float]:
        """Per-token inter-token latencies (see module docs)."""
        out: array[float] = array("d")
        for (t0, _), (t1, n) in zip(self.events, self.events[1:]):
            if n > 0:
                out.extend([(t1 - t0) / 1e9 / n] * n)
        return out


@dataclass(slots=True)
class _Logged:
    """What the log keeps of a finished request: its trace less the per-event list (a
    Python tuple per event would make the log's 10,000 entries tens of MB)."""

    trace: RequestTrace  # its ``events`` emptied
    first_token_ns: int | None
    n_events: int
    itl: array[float]


class RequestLog:
    """The last ``capacity`` finished requests, as JSON-ready dicts."""

    __slots__ = ("_items",)

    def __init__(self, capacity: int = 10_000) -> None:
        self._items: deque[_Logged] = deque(maxlen=capacity)

    def append(self, trace: RequestTrace, itl: array[float]) -> None:
        """Keep ``trace`` (its ``events`` are dropped: only the first's time and their
        number are kept) and its per-token ITL."""
        first = trace.events[0][0] if trace.events else None
        n = len(trace.events)
        trace.events = []
        self._items.append(_Logged(trace, first, n, itl))

    def __len__(self) -> int:
        return len(self._items)

    def to_json(self, limit: int | None = None) -> list[dict[str, Any]]:
        items = list(self._items)
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return [
            {
                "id": t.id,
                "endpoint": t.endpoint,
                "stream": t.stream,
                "finish_reason": t.finish_reason,
                "prompt_tokens": t.prompt_tokens,
                "output_tokens": t.output_tokens,
                "cached_tokens": t.cached_tokens,
                "arrival_ns": t.arrival_ns,
                "first_token_ns": e.first_token_ns,
                "done_ns": t.done_ns,
                "ttft_s": None if e.first_token_ns is None else (e.first_token_ns - t.arrival_ns) / 1e9,
                "e2e_s": t.e2e_s,
                "itl_s": e.itl.tolist(),
                "events": e.n_events,
                "engine": t.engine,
            }
            for e in items
            for t in (e.trace,)
        ]


class ServerMetrics:
    """All metrics of one served model; :meth:`render` produces the ``/metrics`` body."""

    __slots__ = (
        "decode",
        "e2e",
        "faults",
        "finished",
        "itl",
        "log",
        "model_name",
        "prefill",
        "queue",
        "rejected",
        "tpot",
        "ttft",
    )

    def __init__(self, model_name: str, *, history: int = 10_000) -> None:
        self.model_name = model_name
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS
        )
        self.tpot = Histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds (deprecated name of vllm:inter_token_latency_seconds).",
            ITL_BUCKETS,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", LATENCY_BUCKETS
        )
        self.queue = Histogram(
            "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", LATENCY_BUCKETS
        )
        self.prefill = Histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            LATENCY_BUCKETS,
        )
        self.decode = Histogram(
            "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", LATENCY_BUCKETS
        )
        self.finished = dict.fromkeys(FINISH_REASONS, 0)
        self.rejected: dict[str, int] = {}
        self.faults = dict.fromkeys(("fail", "stall", "disconnect"), 0)
        self.log = RequestLog(history)

    def record(self, trace: RequestTrace) -> None:
        """Observe a finished request (any finish reason) and append it to the log."""
        itl = trace.itl_s()
        ttft = trace.ttft_s
        if ttft is not None:
            self.ttft.observe(ttft)
        for value in itl:
            self.itl.observe(value)
            self.tpot.observe(value)
        self.e2e.observe(trace.e2e_s)
        timings = trace.engine or {}
        for hist, key in ((self.queue, "queue_s"), (self.prefill, "prefill_s"), (self.decode, "decode_s")):
            seconds = timings.get(key)
            if seconds is not None:
                hist.observe(seconds)
        self.finished[trace.finish_reason] = self.finished.get(trace.finish_reason, 0) + 1
        self.log.append(trace, itl)

    def reject(self, status: int) -> None:
        """Count a request answered with an error status before it reached the engine."""
        key = str(status)
        self.rejected[key] = self.rejected.get(key, 0) + 1

    def render(self, stats: EngineStats, replicas: Sequence[EngineStats] = (), gpus: Sequence[Any] = ()) -> str:
        """The ``/metrics`` body. With more than one replica the engine's gauges and
        counters are written once per replica, labelled ``engine="i"`` (as vLLM labels its
        data-parallel engines); a scraper sums or averages them."""
        model = (("model_name", self.model_name),)
        lab = _labels(model)
        lines: list[str] = []
        per_engine = list(replicas) if len(replicas) > 1 else []

        def sample(name: str, kind: str, help_text: str, value: float, field: str | None = None) -> None:
            lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"))
            if field is None or not per_engine:
                lines.append(f"{name}{lab} {format_value(value)}")
                return
            for i, part in enumerate(per_engine):
                labels = _labels((*model, ("engine", str(i))))
                lines.append(f"{name}{labels} {format_value(getattr(part, field))}")

        sample(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            stats.running,
            "running",
        )
        sample(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            stats.waiting,
            "waiting",
        )
        sample(
            "vllm:gpu_cache_usage_perc",
            "gauge",
            "GPU KV-cache usage. 1 means 100 percent usage.",
            stats.kv_usage,
            "kv_usage",
        )
        sample(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            stats.kv_usage,
            "kv_usage",
        )
        sample(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            stats.prefix_cache_queries,
            "prefix_cache_queries",
        )
        sample(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            stats.prefix_cache_hits,
            "prefix_cache_hits",
        )
        sample(
            "loadgen:prefix_cache_preempted_queries_total",
            "counter",
            "Prefix cache queries of requests preempted before (not in vllm:prefix_cache_queries_total), in tokens.",
            stats.prefix_cache_preempted_queries,
            "prefix_cache_preempted_queries",
        )
        sample(
            "loadgen:prefix_cache_preempted_hits_total",
            "counter",
            "Prefix cache hits of requests preempted before (not in vllm:prefix_cache_hits_total), in tokens.",
            stats.prefix_cache_preempted_hits,
            "prefix_cache_preempted_hits",
        )
        sample(
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemptions from the engine.",
            stats.preemptions,
            "preemptions",
        )
        sample(
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            stats.prompt_tokens,
            "prompt_tokens",
        )
        sample(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            stats.generation_tokens,
            "generation_tokens",
        )
        sample("loadgen:engine_steps_total", "counter", "Engine steps executed.", stats.steps, "steps")

        def labelled(name: str, help_text: str, key: str, counts: dict[str, int]) -> None:
            lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} counter"))
            for k, v in counts.items():
                lines.append(f"{name}{_labels((*model, (key, k)))} {format_value(v)}")

        labelled(
            "vllm:request_success_total",
            "Count of finished requests by finish reason.",
            "finished_reason",
            self.finished,
        )
        labelled(
            "loadgen:requests_rejected_total",
            "Requests answered with an error status before reaching the engine.",
            "status",
            self.rejected,
        )
        labelled("loadgen:faults_injected_total", "Faults injected, by kind.", "kind", self.faults)
        for hist in (self.ttft, self.itl, self.tpot, self.e2e, self.queue, self.prefill, self.decode):
            lines.extend(hist.render(model))
        for name, help_text, attr, scale in _DCGM:
            if not gpus:
                break
            lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} gauge"))
            for i, g in enumerate(gpus):
                labels = _labels((("gpu", str(i)), ("modelName", "loadgen sim")))
                lines.append(f"{name}{labels} {format_value(round(getattr(g, attr) * scale, 3))}")
        return "\n".join(lines) + "\n"
