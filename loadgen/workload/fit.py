"""Fit a workload file from real traffic: ``loadgen workload fit PATH -o workloads/NAME.toml``.

Reads a dataset (:mod:`loadgen.workload.datasets`) or a trace (:mod:`loadgen.workload.traces`)
and writes a workload whose class draws (prompt, output) pairs from their joint 2-D
histogram (:mod:`loadgen.workload.joint`), so the correlation between the two lengths
survives. For a trace it adds ``[arrivals]``: the mean rate over the trace's span and the
burstiness, the gamma shape ``1 / CV²`` of the inter-arrival gaps (1 is Poisson, < 1 burstier).
A recorded agent trace (``kind = "agent"``, or auto for a loadgen agent trace) fits an
agentic workload instead (:mod:`loadgen.workload.agent_fit`).

Dataset lengths are exact with a tokenizer, else one token per word (the words a
calibrated run would send for the same count); traces carry their own token counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.errors import ConfigError
from loadgen.inputs import open_input
from loadgen.workload.agent_fit import AgentFit, fit_agent_trace
from loadgen.workload.agent_trace import is_agent_trace
from loadgen.workload.datasets import DatasetOptions, load_dataset, measure
from loadgen.workload.joint import JointLengths, fit_joint
from loadgen.workload.prompts import PromptSynthesizer, TokenCounter
from loadgen.workload.traces import TraceOptions, gamma_shape, load_trace

__all__ = ["Fit", "fit_workload", "is_trace"]


@dataclass(slots=True)
class Fit:
    """What was fitted; :meth:`to_toml` is the workload file."""

    name: str
    source: str
    kind: str  # "dataset" | "trace"
    rows: int
    joint: JointLengths
    prompt: np.ndarray
    output: np.ndarray
    rate: float | None = None
    burstiness: float | None = None
    exact: bool = False

    @property
    def correlation(self) -> float:
        """Pearson correlation of log prompt and log output lengths (0 when either is constant)."""
        lp, lo = np.log(self.prompt), np.log(self.output)
        if lp.std() == 0 or lo.std() == 0:
            return 0.0
        return float(np.corrcoef(lp, lo)[0, 1])

    def to_toml(self) -> str:
        p50, o50 = int(np.median(self.prompt)), int(np.median(self.output))
        how = (
            "traced token counts"
            if self.kind == "trace"
            else ("exact token counts" if self.exact else "one token per word")
        )
        desc = (
            f"fitted from {Path(self.source).name}: {self.rows} requests, prompt median {p50}, output median "
            f"{o50}, log-length correlation {self.correlation:.2f}"
        )
        lines = [
            f"# Fitted by `loadgen workload fit` from {self.source} ({how}).",
            "# The joint (prompt, output) histogram keeps the correlation of the two lengths.",
            f"name = {_q(self.name)}",
            f"description = {_q(desc)}",
            "",
        ]
        if self.rate is not None:
            lines += [
                "[arrivals]  # the trace's mean rate and inter-arrival burstiness (gamma shape = 1/CV^2)",
                f"rate = {self.rate:.6g}",
                f"burstiness = {self.burstiness:.4g}",
                "",
            ]
        return "\n".join(lines) + "\n" + self.joint.to_toml()


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def is_trace(path: Path) -> bool:
    """A Mooncake JSONL, Azure or BurstGPT CSV (by its first line)."""
    try:
        with open_input(path) as fh:  # (a FIFO: refused, then named by the dataset reader)
            first = fh.readline(65536).decode("utf-8", errors="replace")
    except OSError:
        return False
    if path.suffix.lower() == ".csv":
        return "TIMESTAMP" in first or "Timestamp" in first
    return path.suffix.lower() == ".jsonl" and '"input_length"' in first and '"timestamp"' in first


def fit_workload(
    path: str, name: str, *, bins: int = 32, counter: TokenCounter | None = None, kind: str = "auto"
) -> Fit | AgentFit:
    """Fit ``path`` (a dataset, a trace or an agent trace; ``kind`` auto, dataset, trace or agent)."""
    if not 2 <= bins <= 256:
        raise ConfigError(f"must be between 2 and 256, got {bins}", field="bins")
    if kind not in ("auto", "dataset", "trace", "agent"):
        raise ConfigError(f"choose auto, dataset, trace or agent, got {kind!r}", field="kind")
    p = Path(path)
    if kind == "agent" or (kind == "auto" and is_agent_trace(p) == "loadgen"):
        return fit_agent_trace(path, name, bins=bins)
    if kind == "trace" or (kind == "auto" and is_trace(p)):
        tr = load_trace(TraceOptions(path))
        prompt, output = tr.input_tokens, tr.output_tokens
        rate = tr.mean_rate if len(tr) > 1 else None
        shape = gamma_shape(tr.offsets) if rate is not None else None
        return Fit(
            name,
            path,
            "trace",
            len(tr),
            fit_joint(prompt, output, bins),
            prompt,
            output,
            rate,
            shape if shape is not None else 1.0,
            exact=True,
        )
    opts = DatasetOptions(path)
    data = measure(load_dataset(opts), opts, PromptSynthesizer(0, counter=counter))
    return Fit(
        name,
        path,
        "dataset",
        len(data),
        fit_joint(data.prompt_tokens, data.output_tokens, bins),
        data.prompt_tokens,
        data.output_tokens,
        exact=data.exact,
    )
