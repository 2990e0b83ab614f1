"""The dependency rule (docs/architecture.md, "Layers"), checked on the import statements of every module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "loadgen"

# part -> the loadgen parts it may import ("" is the package root: __version__)
ALLOWED: dict[str, set[str]] = {
    "records": set(),
    "errors": set(),
    "paths": set(),
    "inputs": set(),
    "aio": set(),
    "signals": {"errors"},
    "workload": {"records", "errors", "inputs", "workload"},
    "metrics": {"records", "errors", "metrics"},
    "client": {"records", "errors", "client"},
    "load": {"records", "errors", "inputs", "load", "metrics", "aio", "signals"},
    "report": {"", "records", "errors", "report", "metrics", "runinfo"},
    "runinfo": {"errors", "load", "metrics"},
    "server": {"errors", "server", "aio"},
    "dashboard": {"", "records", "errors", "inputs", "metrics", "report", "dashboard"},
}
WIRING = {
    "cli",
    "api",
    "orchestrate",
    "run_json",
    "calibration",
    "sweep_driver",
    "runconfig",
    "runflags",
    "agent_replay",
    "recover",
    "demo",
    "matrix",
    "live_dashboard",
    "__init__",
    "__main__",
}  # may wire everything together
SERVER = PKG / "server"
# inside server/: subpackage -> the server parts it may import. The shared core knows no
# engine kind; the sim and torch engines never import each other (the config only for types).
SERVER_ALLOWED: dict[str, set[str]] = {
    "engine": {"engine"},
    "sim": {"engine", "sim", "config"},
    "torch": {"engine", "torch", "config", "tokenizer"},
}


def _part(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0].removesuffix(".py")


def _modules(path: Path) -> set[str]:
    """The absolute module names ``path`` imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for name in _modules(path):
        if name == "loadgen":
            out.add("")
        elif name.startswith("loadgen."):
            out.add(name.split(".")[1])
    return out


MODULES = sorted(p for p in PKG.rglob("*.py") if _part(p) not in WIRING)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_module_respects_the_dependency_rule(path: Path) -> None:
    part = _part(path)
    assert part in ALLOWED, f"{path}: new top-level part {part!r}: add it to the rule"
    bad = _imports(path) - ALLOWED[part]
    assert not bad, f"{path.relative_to(PKG)} ({part}) imports loadgen.{sorted(bad)}"


SERVER_MODULES = sorted(p for p in SERVER.rglob("*.py") if len(p.relative_to(SERVER).parts) > 1)


@pytest.mark.parametrize("path", SERVER_MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_server_subpackages_keep_apart(path: Path) -> None:
    part = path.relative_to(SERVER).parts[0]
    assert part in SERVER_ALLOWED, f"{path}: new server subpackage {part!r}: add it to the rule"
    used = {
        name.split(".")[2] for name in _modules(path) if name.startswith("loadgen.server.") and name.count(".") >= 2
    }
    bad = used - SERVER_ALLOWED[part]
    assert not bad, f"{path.relative_to(PKG)} (server/{part}) imports loadgen.server.{sorted(bad)}"


def test_the_rule_sees_imports() -> None:
    assert "metrics" in _imports(PKG / "load" / "sweeps.py")
    assert len(MODULES) > 40
    assert "sim" in {n.split(".")[2] for n in _modules(SERVER / "sim" / "build.py") if n.startswith("loadgen.server.")}
    assert len(SERVER_MODULES) > 20


def _metrics_names_used_by(parts: tuple[str, ...]) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for path in sorted(p for p in PKG.rglob("*.py") if _part(p) in parts):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("loadgen.metrics"):
                out.update((node.module, a.name) for a in node.names)
    return out


def test_no_untyped_dict_crosses_from_metrics_to_load_or_report() -> None:
    """``load/`` and ``report/`` read typed results: nothing they call in ``metrics/``
    returns ``dict[str, Any]`` (``summary.json`` is made by ``to_json()`` alone)."""
    import importlib
    import inspect

    used = _metrics_names_used_by(("load", "report"))
    assert len(used) >= 5
    for module, name in sorted(used):
        parent = importlib.import_module(module)
        obj = getattr(parent, name, None) or importlib.import_module(f"{module}.{name}")
        if inspect.ismodule(obj):
            continue  # a module import: the names it is used for are checked where they are defined
        if isinstance(obj, type) and hasattr(obj, "__dataclass_fields__"):
            for field_name, f in obj.__dataclass_fields__.items():
                assert "dict[str, Any]" not in str(f.type), f"{module}.{name}.{field_name}: {f.type}"
        elif callable(obj) and not isinstance(obj, type):
            ret = str(inspect.signature(obj).return_annotation)
            assert "dict[str, Any]" not in ret and "Mapping[str, Any]" not in ret, f"{module}.{name} -> {ret}"
