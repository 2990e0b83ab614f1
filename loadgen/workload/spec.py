"""Workloads: weighted request classes with length distributions, loaded from TOML.

A workload file is either one class (``prompt_tokens``, ``output_tokens``, an optional
``[shared_prefix]``) or a weighted mix of ``[[classes]]``. With a shared prefix,
``prompt_tokens`` is the length of the *unique* part. Optional tables: ``[sessions]``
(:mod:`loadgen.workload.sessions`), ``tools`` and ``tool_choice``, ``[joint_tokens]``
(:mod:`loadgen.workload.joint`), ``[dataset]`` (:mod:`loadgen.workload.datasets`),
``[arrivals]``, ``[images]`` (:mod:`loadgen.workload.images`) and ``[agent]``
(:mod:`loadgen.workload.agent`). Parsing is strict: unknown keys, wrong types and bad values
raise :class:`~loadgen.errors.WorkloadError` naming the file, the key and what is allowed.

The format, every table and its keys: workloads/README.md ("File format" and the sections
after it).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.errors import WorkloadError
from loadgen.inputs import input_problem, open_input
from loadgen.workload.agent import AgentConfig, parse_agent
from loadgen.workload.datasets import FORMATS, DatasetOptions
from loadgen.workload.distributions import MAX_LENGTH, Distribution, parse_distribution
from loadgen.workload.images import ImageConfig, parse_images
from loadgen.workload.joint import JointLengths, Marginal, parse_joint

MAX_TOOLS_BYTES = 16 << 20  # a tools JSON file larger than this is refused (read whole, sent with each request)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "Arrivals",
    "RequestClass",
    "SessionConfig",
    "Workload",
    "list_workloads",
    "load_workload",
    "workload_from_flags",
]

_TOP_KEYS = (
    "name",
    "description",
    "prompt_tokens",
    "output_tokens",
    "joint_tokens",
    "shared_prefix",
    "classes",
    "sessions",
    "tools",
    "tool_choice",
    "dataset",
    "arrivals",
    "images",
    "agent",
)
_SESSION_KEYS = ("turns", "think_time_ms", "system_prompt_tokens", "groups", "zipf")
_CLASS_KEYS = ("name", "weight", "prompt_tokens", "output_tokens", "joint_tokens", "shared_prefix")
_DATASET_KEYS = (
    "path",
    "format",
    "min_prompt_tokens",
    "max_prompt_tokens",
    "replacement",
    "output_tokens",
    "image_root",
)
_ARRIVAL_KEYS = ("rate", "burstiness")
_PREFIX_KEYS = ("groups", "tokens")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(slots=True)
class RequestClass:
    """One kind of request in a workload, drawn with probability ``weight / sum(weights)``.

    ``shared_prefix_groups > 0`` gives every request of the class one of that many shared
    prefixes of ``shared_prefix_tokens`` tokens (``prompt_tokens`` is then the unique part).
    """

    name: str
    weight: float
    prompt_tokens: Distribution
    output_tokens: Distribution
    shared_prefix_groups: int = 0
    shared_prefix_tokens: int = 0
    joint: JointLengths | None = None  # prompt and output drawn together (both fields are its sides)


@dataclass(frozen=True, slots=True)
class Arrivals:
    """A workload's own open-loop arrivals (fitted from a trace): gamma gaps at ``rate``."""

    rate: float
    burstiness: float = 1.0


@dataclass(slots=True)
class SessionConfig:
    """A workload's ``[sessions]`` table (see the module docstring)."""

    turns: Distribution
    think_time_ms: Distribution | None = None  # None: no think time
    system_prompt_tokens: int = 0  # 0: no system prompt
    groups: int = 1
    zipf: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "turns": self.turns.describe(),
            "think_time_ms": None if self.think_time_ms is None else self.think_time_ms.describe(),
            "system_prompt_tokens": self.system_prompt_tokens,
            "groups": self.groups,
            "zipf": self.zipf,
        }


@dataclass(slots=True)
class Workload:
    """A named, weighted mix of request classes; ``source`` is the file (or the flags).

    ``sessions``: multi-turn conversations; ``tools``/``tool_choice``: sent with chat requests.
    With ``dataset``, requests replay the dataset's prompts instead (``classes`` is empty).
    """

    name: str
    description: str
    classes: list[RequestClass]
    source: str
    sessions: SessionConfig | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    dataset: DatasetOptions | None = None
    arrivals: Arrivals | None = None
    images: ImageConfig | None = None  # images sent with each request
    agent: AgentConfig | None = None  # agentic tasks (loadgen.workload.agent)
    overrides: list[str] | None = None  # the flags that set its lengths (loadgen.workload.lengths)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able description (for ``run.json``)."""
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "classes": [
                {
                    "name": c.name,
                    "weight": c.weight,
                    "prompt_tokens": c.prompt_tokens.describe(),
                    "output_tokens": c.output_tokens.describe(),
                    "shared_prefix": {"groups": c.shared_prefix_groups, "tokens": c.shared_prefix_tokens},
                }
                for c in self.classes
            ],
            **({} if self.sessions is None else {"sessions": self.sessions.to_dict()}),
            **({} if self.tools is None else {"tools": len(self.tools), "tool_choice": self.tool_choice}),
            **({"dataset": self.dataset.describe()} if self.dataset is not None else {}),
            **(
                {"arrivals": {"rate": self.arrivals.rate, "burstiness": self.arrivals.burstiness}}
                if self.arrivals is not None
                else {}
            ),
            **({} if self.images is None else {"images": self.images.describe()}),
            **({} if self.agent is None else {"agent": self.agent.to_dict()}),
            **({} if self.overrides is None else {"overrides": list(self.overrides)}),
        }


_TOML_TYPES = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}


def _type_name(value: Any) -> str:
    return _TOML_TYPES.get(type(value), type(value).__name__)


class _File:
    """Strict access to one parsed TOML document; every error names the file and key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.source = str(path)

    def error(self, key: str | None, message: str) -> WorkloadError:
        return WorkloadError(message, source=self.source, key=key)

    def check_keys(self, table: dict[str, Any], allowed: Sequence[str], where: str) -> None:
        for k in table:
            if k not in allowed:
                key = f"{where}.{k}" if where else k
                raise self.error(key, f"unknown key {k!r}; allowed keys: {', '.join(allowed)}")

    def string(self, table: dict[str, Any], k: str, key: str, default: str | None = None) -> str:
        if k not in table:
            if default is None:
                raise self.error(key, "missing; it is required (a string)")
            return default
        v = table[k]
        if not isinstance(v, str):
            raise self.error(key, f"expected a string, got {_type_name(v)} {v!r}")
        return v

    def positive_int(self, table: dict[str, Any], k: str, key: str) -> int:
        if k not in table:
            raise self.error(key, "missing; it is required (a whole number >= 1)")
        v = table[k]
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(key, f"expected a whole number >= 1, got {_type_name(v)} {v!r}")
        if not 1 <= v <= MAX_LENGTH:  # a prefix is built in memory, like a prompt
            raise self.error(key, f"must be in [1, {MAX_LENGTH:,}], got {v}")
        return v

    def weight(self, table: dict[str, Any], key: str) -> float:
        v = table.get("weight", 1.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.error(key, f"expected a number > 0, got {_type_name(v)} {v!r}")
        if not v > 0 or v == float("inf"):
            raise self.error(key, f"must be a finite number > 0, got {v}")
        return float(v)

    def dist(self, table: dict[str, Any], k: str, key: str) -> Distribution:
        if k not in table:
            raise self.error(
                key,
                'missing; it is required (e.g. "lognormal:median=800,sigma=0.9" '
                'or {dist = "normal", mean = 512, std = 128})',
            )
        v = table[k]
        if isinstance(v, bool) or not isinstance(v, (str, int, dict)):
            raise self.error(
                key, f"expected spec text, a whole number or a table with dist = ..., got {_type_name(v)} {v!r}"
            )
        return parse_distribution(v, source=self.source, key=key, base_dir=self.path.parent)

    def shared_prefix(self, table: dict[str, Any], key: str) -> tuple[int, int]:
        if "shared_prefix" not in table:
            return 0, 0
        sp = table["shared_prefix"]
        if not isinstance(sp, dict):
            raise self.error(key, f"expected a table with {', '.join(_PREFIX_KEYS)}, got {_type_name(sp)}")
        self.check_keys(sp, _PREFIX_KEYS, key)
        return self.positive_int(sp, "groups", f"{key}.groups"), self.positive_int(sp, "tokens", f"{key}.tokens")

    def sessions(self, doc: dict[str, Any]) -> SessionConfig | None:
        if "sessions" not in doc:
            return None
        t = doc["sessions"]
        if not isinstance(t, dict):
            raise self.error("sessions", f"expected a table with {', '.join(_SESSION_KEYS)}, got {_type_name(t)}")
        self.check_keys(t, _SESSION_KEYS, "sessions")
        think = None
        if t.get("think_time_ms", 0) != 0:
            think = self.dist(t, "think_time_ms", "sessions.think_time_ms")
        system = (
            self.positive_int(t, "system_prompt_tokens", "sessions.system_prompt_tokens")
            if "system_prompt_tokens" in t
            else 0
        )
        groups = self.positive_int(t, "groups", "sessions.groups") if "groups" in t else 1
        if "groups" in t and not system:
            raise self.error("sessions.groups", "groups of system prompts need sessions.system_prompt_tokens")
        zipf = t.get("zipf", 1.0)
        if isinstance(zipf, bool) or not isinstance(zipf, (int, float)) or not 0 <= zipf < float("inf"):
            raise self.error("sessions.zipf", f"expected a finite number >= 0, got {zipf!r}")
        return SessionConfig(
            turns=self.dist(t, "turns", "sessions.turns"),
            think_time_ms=think,
            system_prompt_tokens=system,
            groups=groups,
            zipf=float(zipf),
        )

    def tools(self, doc: dict[str, Any]) -> tuple[list[Any] | None, Any]:
        tools = doc.get("tools")
        if isinstance(tools, str):
            path = self.path.parent / tools
            try:
                with open_input(path) as fh:  # (a device such as /dev/zero or a FIFO: refused)
                    raw = fh.read(MAX_TOOLS_BYTES + 1)
                if len(raw) > MAX_TOOLS_BYTES:
                    raise self.error(
                        "tools", f"{path} is over {MAX_TOOLS_BYTES >> 20} MiB; tool definitions are small JSON"
                    )
                tools = json.loads(raw.decode("utf-8"))
            except OSError as exc:
                raise self.error("tools", f"cannot read {path}: {exc.strerror or exc}") from exc
            except (ValueError, RecursionError) as exc:
                raise self.error("tools", f"{path} is not JSON: {exc}") from exc
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(x, dict) for x in tools)):
            raise self.error(
                "tools", f"expected an array of tool tables (or a JSON file of one), got {_type_name(tools)}"
            )
        choice = doc.get("tool_choice")
        if choice is not None and not isinstance(choice, (str, dict)):
            raise self.error("tool_choice", f"expected a string or a table, got {_type_name(choice)}")
        if choice is not None and tools is None:
            raise self.error("tool_choice", "needs tools")
        return tools, choice

    def request_class(self, table: dict[str, Any], where: str, name: str | None) -> RequestClass:
        def key(k: str) -> str:
            return f"{where}.{k}" if where else k

        groups, tokens = self.shared_prefix(table, key("shared_prefix"))
        if "joint_tokens" in table:
            both = [k for k in ("prompt_tokens", "output_tokens") if k in table]
            if both:
                raise self.error(key(both[0]), "give either joint_tokens or prompt_tokens/output_tokens, not both")
            joint = parse_joint(table["joint_tokens"], self.source, key("joint_tokens"))
            return RequestClass(
                name=name if name is not None else self.string(table, "name", key("name")),
                weight=self.weight(table, key("weight")),
                prompt_tokens=Marginal(joint, 0),
                output_tokens=Marginal(joint, 1),
                shared_prefix_groups=groups,
                shared_prefix_tokens=tokens,
                joint=joint,
            )
        return RequestClass(
            name=name if name is not None else self.string(table, "name", key("name")),
            weight=self.weight(table, key("weight")),
            prompt_tokens=self.dist(table, "prompt_tokens", key("prompt_tokens")),
            output_tokens=self.dist(table, "output_tokens", key("output_tokens")),
            shared_prefix_groups=groups,
            shared_prefix_tokens=tokens,
        )


def _dataset(doc: dict[str, Any], f: _File) -> DatasetOptions:
    t = doc["dataset"]
    if not isinstance(t, dict):
        raise f.error("dataset", f"expected a table with {', '.join(_DATASET_KEYS)}, got {_type_name(t)}")
    f.check_keys(t, _DATASET_KEYS, "dataset")
    path = Path(f.string(t, "path", "dataset.path"))
    fmt = f.string(t, "format", "dataset.format", default="auto")
    if fmt not in FORMATS:
        raise f.error("dataset.format", f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    ints = {
        k: f.positive_int(t, k, f"dataset.{k}")
        for k in ("min_prompt_tokens", "max_prompt_tokens", "output_tokens")
        if k in t
    }
    for k, v in ints.items():
        if v > MAX_LENGTH:
            raise f.error(f"dataset.{k}", f"at most {MAX_LENGTH:,} tokens, got {v:,}")
    repl = t.get("replacement", False)
    if not isinstance(repl, bool):
        raise f.error("dataset.replacement", f"expected true or false, got {_type_name(repl)} {repl!r}")
    root = Path(f.string(t, "image_root", "dataset.image_root")) if "image_root" in t else None
    if root is not None and not root.is_absolute():
        root = f.path.parent / root
    return DatasetOptions(
        path=str(path if path.is_absolute() else f.path.parent / path),
        format=fmt,
        replacement=repl,
        image_root=None if root is None else str(root),
        **ints,
    )


def _arrivals(doc: dict[str, Any], f: _File) -> Arrivals:
    t = doc["arrivals"]
    if not isinstance(t, dict):
        raise f.error("arrivals", f"expected a table with {', '.join(_ARRIVAL_KEYS)}, got {_type_name(t)}")
    f.check_keys(t, _ARRIVAL_KEYS, "arrivals")
    vals = {}
    for k in _ARRIVAL_KEYS:
        if k not in t:
            if k == "rate":
                raise f.error("arrivals.rate", "missing; it is required (requests per second > 0)")
            continue
        v = t[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
            raise f.error(f"arrivals.{k}", f"expected a number > 0, got {_type_name(v)} {v!r}")
        vals[k] = float(v)
    return Arrivals(**vals)


def _parse(doc: dict[str, Any], f: _File) -> Workload:
    f.check_keys(doc, _TOP_KEYS, "")
    name = f.string(doc, "name", "name", default=f.path.stem)
    description = f.string(doc, "description", "description", default="")
    arrivals = _arrivals(doc, f) if "arrivals" in doc else None
    single = [k for k in ("prompt_tokens", "output_tokens", "joint_tokens", "shared_prefix") if k in doc]
    if "dataset" in doc:
        other = single + [k for k in ("classes", "sessions", "agent") if k in doc]
        if other:
            raise f.error(
                other[0], "a [dataset] workload takes its prompts and lengths from the dataset; remove this key"
            )
        tools, tool_choice = f.tools(doc)
        return Workload(
            name=name,
            description=description,
            classes=[],
            source=f.source,
            dataset=_dataset(doc, f),
            arrivals=arrivals,
            tools=tools,
            tool_choice=tool_choice,
            images=parse_images(doc["images"], f.source, f.path.parent) if "images" in doc else None,
        )
    if "classes" in doc:
        if single:
            raise f.error(single[0], "give either top-level prompt_tokens/output_tokens or [[classes]], not both")
        raw = doc["classes"]
        if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
            raise f.error("classes", f"expected an array of tables ([[classes]]), got {_type_name(raw)}")
        if not raw:
            raise f.error("classes", "needs at least one class")
        classes: list[RequestClass] = []
        for i, table in enumerate(raw):
            where = f"classes[{i}]"
            f.check_keys(table, _CLASS_KEYS, where)
            rc = f.request_class(table, where, None)
            if not rc.name.strip():
                raise f.error(f"{where}.name", "must not be empty")
            if any(c.name == rc.name for c in classes):
                raise f.error(f"{where}.name", f"duplicate class name {rc.name!r}")
            classes.append(rc)
    else:
        classes = [f.request_class(doc, "", "default")]
    tools, tool_choice = f.tools(doc)
    if "agent" in doc and "sessions" in doc:
        raise f.error("agent", "give either [agent] (tasks of tool calls) or [sessions] (conversations), not both")
    return Workload(
        name=name,
        description=description,
        agent=parse_agent(doc["agent"], f, tools is not None) if "agent" in doc else None,
        classes=classes,
        source=f.source,
        sessions=f.sessions(doc),
        tools=tools,
        tool_choice=tool_choice,
        arrivals=arrivals,
        images=parse_images(doc["images"], f.source, f.path.parent) if "images" in doc else None,
    )


def _read(path: Path) -> Workload:
    f = _File(path)
    try:
        with open_input(path) as fh:
            text = fh.read().decode("utf-8")
    except OSError as exc:
        raise f.error(None, f"cannot read workload file: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise f.error(None, f"not UTF-8 text: {exc}") from exc
    try:
        doc = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer of over 4,300 digits
        raise f.error(None, f"invalid TOML: {exc}") from exc
    return _parse(doc, f)


def _available(search_dirs: Sequence[Path]) -> list[str]:
    names: dict[str, None] = {}
    for d in search_dirs:
        if Path(d).is_dir():
            for p in sorted(Path(d).glob("*.toml")):
                names.setdefault(p.stem, None)
    return sorted(names)


def load_workload(name_or_path: str, search_dirs: Sequence[Path]) -> Workload:
    """Load a workload by name (``chat`` -> first ``<dir>/chat.toml``) or a ``.toml`` path."""
    if name_or_path.endswith(".toml"):
        path = Path(name_or_path)
        why = input_problem(path)
        if why is not None and why != "no such file":
            raise WorkloadError(why, source=name_or_path)
        if why is not None:
            known = ", ".join(_available(search_dirs)) or "(none)"
            raise WorkloadError(f"no such workload file; named workloads: {known}", source=name_or_path)
        return _read(path)
    if _NAME_RE.fullmatch(name_or_path):
        for d in search_dirs:
            candidate = Path(d) / f"{name_or_path}.toml"
            if candidate.is_file():
                return _read(candidate)
    names = _available(search_dirs)
    where = ", ".join(str(d) for d in search_dirs) or "(no folders)"
    raise WorkloadError(
        f"unknown workload {name_or_path!r}; available: {', '.join(names) or '(none)'} "
        f"(searched {where}; or give a path ending in .toml)",
        key="workload",
    )


def _from_flag(text: str, name: str) -> Distribution:
    """A length distribution given on the command line; an error is on the field ``name``,
    which the CLI names as its flag."""
    try:
        return parse_distribution(text, source="command line", key=name)
    except WorkloadError as exc:
        if exc.key != name:
            raise
        raise WorkloadError(exc.message, source=exc.source, field=name) from None


def workload_from_flags(prompt_tokens: str, output_tokens: str, name: str = "cli") -> Workload:
    """A one-class workload (class ``default``) from ``--prompt-tokens``/``--output-tokens``."""
    cls = RequestClass(
        name="default",
        weight=1.0,
        prompt_tokens=_from_flag(prompt_tokens, "prompt_tokens"),
        output_tokens=_from_flag(output_tokens, "output_tokens"),
    )
    return Workload(
        name=name,
        description=f"prompt {cls.prompt_tokens.describe()}, output {cls.output_tokens.describe()}",
        classes=[cls],
        source="command line",
    )


def list_workloads(search_dirs: Sequence[Path]) -> list[tuple[str, str]]:
    """``(name, description)`` of every ``*.toml`` in the search dirs (first dir wins), by name.

    A file that does not parse is listed with ``(invalid: ...)`` as its description.
    """
    found: dict[str, Path] = {}
    for d in search_dirs:
        if Path(d).is_dir():
            for p in sorted(Path(d).glob("*.toml")):
                found.setdefault(p.stem, p)
    out = []
    for name in sorted(found):
        try:
            desc = _read(found[name]).description
        except WorkloadError as exc:
            desc = f"(invalid: {exc})"
        out.append((name, desc))
    return out
