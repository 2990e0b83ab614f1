"""Server metrics in the Prometheus text format (0.0.4), written by hand, with vLLM V1's
names, labels, bucket boundaries and sample semantics (vLLM >= 0.11).

Every sample carries ``model_name`` and ``engine`` (one per replica). Gauges and counters
are read from :meth:`AsyncEngine.stats` at scrape time; per-request histograms are observed
when a request ends, from the times the API received the engine's outputs (where vLLM's
frontend stamps an engine-core output). :class:`RequestLog` keeps the server timings of the
last N finished requests, served at ``GET /loadgen/requests``.

Every series, what each sample is, the buckets and the vLLM sources: docs/server.md,
"``/metrics``".
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgen.server.engine.interface import EngineStats, TokenOutput

__all__ = [
    "FINISH_REASONS",
    "HISTOGRAMS",
    "ITL_BUCKETS",
    "LATENCY_BUCKETS",
    "TTFT_BUCKETS",
    "Histogram",
    "RequestLog",
    "RequestTrace",
    "ServerMetrics",
    "format_value",
]

# vLLM V1's boundaries (vllm/v1/metrics/loggers.py, v0.11): TTFT from 1 ms, the per-token
# series from 10 ms, the request-phase series (``request_latency_buckets``) from 0.3 s
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
# (attribute, name, help, bounds) of the per-request histograms, in vLLM's order
HISTOGRAMS = (
    ("ttft", "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS),
    ("itl", "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS),
    (
        "tpot",
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
        ITL_BUCKETS,
    ),
    (
        "request_tpot",
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        ITL_BUCKETS,
    ),
    ("e2e", "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", LATENCY_BUCKETS),
    (
        "queue",
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        LATENCY_BUCKETS,
    ),
    (
        "inference",
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        LATENCY_BUCKETS,
    ),
    (
        "prefill",
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        LATENCY_BUCKETS,
    ),
    (
        "decode",
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        LATENCY_BUCKETS,
    ),
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
        """Its ``# HELP``/``# TYPE`` lines and samples."""
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram", *self.samples(labels)]

    def samples(self, labels: Sequence[tuple[str, str]]) -> list[str]:
        """Its bucket, sum and count samples, labelled ``labels``."""
        lines: list[str] = []
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
    previous one. ``outputs`` holds the ``perf_counter_ns`` at which each engine output with
    tokens reached the API, ``final_ns`` the one that carried the finish reason.
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
    outputs: list[int] = field(default_factory=list)
    final_ns: int = 0

    def output_arrived(self, out: TokenOutput, now_ns: int) -> None:
        """Note an engine output's arrival (vLLM's frontend stamps each one so)."""
        if out.token_ids:
            self.outputs.append(now_ns)
        if out.finish_reason is not None:
            self.final_ns = now_ns

    def output_gaps_s(self) -> list[float]:
        """vLLM's inter-token latencies: one per output after the first, the whole gap."""
        return [(t1 - t0) / 1e9 for t0, t1 in zip(self.outputs, self.outputs[1:])]

    @property
    def request_tpot_s(self) -> float:
        """First to last output over ``output_tokens - 1`` (0 for fewer than two tokens)."""
        if self.output_tokens < 2 or not self.outputs:
            return 0.0
        return (self.outputs[-1] - self.outputs[0]) / 1e9 / (self.output_tokens - 1)

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

    trace: RequestTrace  # its ``events`` and ``outputs`` emptied
    first_token_ns: int | None
    n_events: int
    itl: array[float]
    first_output_ns: int | None
    last_output_ns: int | None
    n_outputs: int


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
        first_output, last_output = (trace.outputs[0], trace.outputs[-1]) if trace.outputs else (None, None)
        n_outputs = len(trace.outputs)
        trace.events = []
        trace.outputs = []
        self._items.append(_Logged(trace, first, n, itl, first_output, last_output, n_outputs))

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
                "first_output_ns": e.first_output_ns,
                "last_output_ns": e.last_output_ns,
                "final_ns": t.final_ns or None,
                "outputs": e.n_outputs,
                "engine": t.engine,
            }
            for e in items
            for t in (e.trace,)
        ]


class _EngineSeries:
    """The per-request histograms and finish counts of one engine (replica)."""

    __slots__ = ("finished", "hist")

    def __init__(self) -> None:
        self.hist = {attr: Histogram(name, help_text, bounds) for attr, name, help_text, bounds in HISTOGRAMS}
        self.finished = dict.fromkeys(FINISH_REASONS, 0)

    def record(self, trace: RequestTrace) -> None:
        hist = self.hist
        if trace.outputs:
            hist["ttft"].observe((trace.outputs[0] - trace.arrival_ns) / 1e9)
        for gap in trace.output_gaps_s():
            hist["itl"].observe(gap)
            hist["tpot"].observe(gap)
        end_ns = trace.final_ns or trace.done_ns
        hist["e2e"].observe((end_ns - trace.arrival_ns) / 1e9)
        timings = trace.engine or {}
        if timings:
            hist["request_tpot"].observe(trace.request_tpot_s)
        for key, name in (("queue", "queue_s"), ("prefill", "prefill_s"), ("decode", "decode_s")):
            seconds = timings.get(name)
            if seconds is not None:
                hist[key].observe(seconds)
        if "prefill_s" in timings and "decode_s" in timings:
            hist["inference"].observe(timings["prefill_s"] + timings["decode_s"])
        self.finished[trace.finish_reason] = self.finished.get(trace.finish_reason, 0) + 1


class ServerMetrics:
    """All metrics of one served model; :meth:`render` produces the ``/metrics`` body."""

    __slots__ = ("engines", "faults", "log", "model_name", "rejected")

    def __init__(self, model_name: str, *, history: int = 10_000) -> None:
        self.model_name = model_name
        self.engines: dict[int, _EngineSeries] = {0: _EngineSeries()}
        self.rejected: dict[str, int] = {}
        self.faults = dict.fromkeys(("fail", "stall", "disconnect"), 0)
        self.log = RequestLog(history)

    def histogram(self, attr: str, engine: int = 0) -> Histogram:
        """One engine's histogram by its attribute name in :data:`HISTOGRAMS` (``"ttft"``...)."""
        return self.engines[engine].hist[attr]

    def record(self, trace: RequestTrace) -> None:
        """Observe a finished request (any finish reason) and append it to the log; a request
        a replica served (its timings name the ``engine``) goes to that replica's series."""
        index = int((trace.engine or {}).get("engine", 0))
        series = self.engines.get(index)
        if series is None:
            series = self.engines[index] = _EngineSeries()
        series.record(trace)
        self.log.append(trace, trace.itl_s())

    def reject(self, status: int) -> None:
        """Count a request answered with an error status before it reached the engine."""
        key = str(status)
        self.rejected[key] = self.rejected.get(key, 0) + 1

    def render(self, stats: EngineStats, replicas: Sequence[EngineStats] = (), gpus: Sequence[Any] = ()) -> str:
        """The ``/metrics`` body. The engine's gauges and counters are written once per
        engine, labelled ``engine="i"`` (``"0"`` alone with one engine), as vLLM labels its
        engine cores; a scraper sums or averages them."""
        parts = list(replicas) if len(replicas) > 1 else [stats]
        engines = [(("model_name", self.model_name), ("engine", str(i))) for i in range(len(parts))]
        for index in self.engines:
            while index >= len(engines):
                engines.append((("model_name", self.model_name), ("engine", str(len(engines)))))
        lines: list[str] = []

        def sample(name: str, kind: str, help_text: str, attr: str) -> None:
            lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"))
            for labels, part in zip(engines, parts):
                lines.append(f"{name}{_labels(labels)} {format_value(getattr(part, attr))}")

        for name, kind, help_text, attr in _ENGINE_SERIES:
            sample(name, kind, help_text, attr)
        if stats.spec_drafts or stats.spec_draft_tokens or stats.spec_accepted_per_position:
            for name, help_text, attr in _SPEC_SERIES:
                sample(name, "counter", help_text, attr)
            name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            lines.extend((f"# HELP {name} Accepted tokens per draft position.", f"# TYPE {name} counter"))
            for labels, part in zip(engines, parts):
                for pos, n in enumerate(part.spec_accepted_per_position):
                    lines.append(f"{name}{_labels((*labels, ('position', str(pos))))} {format_value(n)}")

        def labelled(name: str, help_text: str, key: str, counts: dict[str, int]) -> None:
            lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} counter"))
            for k, v in counts.items():
                lines.append(f"{name}{_labels((*engines[0], (key, k)))} {format_value(v)}")

        name = "vllm:request_success_total"
        lines.extend((f"# HELP {name} Count of successfully processed requests.", f"# TYPE {name} counter"))
        for index, series in sorted(self.engines.items()):
            for reason, n in series.finished.items():
                lab = _labels((*engines[index], ("finished_reason", reason)))
                lines.append(f"{name}{lab} {format_value(n)}")
        labelled(
            "loadgen:requests_rejected_total",
            "Requests answered with an error status before reaching the engine.",
            "status",
            self.rejected,
        )
        labelled("loadgen:faults_injected_total", "Faults injected, by kind.", "kind", self.faults)
        for attr, name, help_text, _ in HISTOGRAMS:
            lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} histogram"))
            for index, series in sorted(self.engines.items()):
                lines.extend(series.hist[attr].samples(engines[index]))
        for name, help_text, attr, scale in _DCGM:
            if not gpus:
                break
            lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} gauge"))
            for i, g in enumerate(gpus):
                lab = _labels((("gpu", str(i)), ("modelName", "loadgen sim")))
                lines.append(f"{name}{lab} {format_value(round(getattr(g, attr) * scale, 3))}")
        return "\n".join(lines) + "\n"


# the engine's gauges and counters: (name, type, help, EngineStats field)
_ENGINE_SERIES = (
    ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", "running"),
    ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", "waiting"),
    ("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.", "kv_usage"),
    ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", "kv_usage"),
    (
        "vllm:prefix_cache_queries_total",
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
        "prefix_cache_queries",
    ),
    (
        "vllm:prefix_cache_hits_total",
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
        "prefix_cache_hits",
    ),
    (
        "loadgen:prefix_cache_preempted_queries_total",
        "counter",
        "Prefix cache queries of requests preempted before (not in vllm:prefix_cache_queries_total), in tokens.",
        "prefix_cache_preempted_queries",
    ),
    (
        "loadgen:prefix_cache_preempted_hits_total",
        "counter",
        "Prefix cache hits of requests preempted before (not in vllm:prefix_cache_hits_total), in tokens.",
        "prefix_cache_preempted_hits",
    ),
    ("vllm:num_preemptions_total", "counter", "Cumulative number of preemptions from the engine.", "preemptions"),
    ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", "prompt_tokens"),
    ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", "generation_tokens"),
    ("loadgen:engine_steps_total", "counter", "Engine steps executed.", "steps"),
)
# vLLM's SpecDecodingProm counters (exported when the engine speculates)
_SPEC_SERIES = (
    ("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", "spec_drafts"),
    ("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", "spec_draft_tokens"),
    ("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", "spec_accepted_tokens"),
)
