"""The dependency rule of DESIGN.md, checked on the import statements of every module."""

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
    "aio": set(),
    "workload": {"records", "errors", "workload"},
    "metrics": {"records", "errors", "metrics"},
    "client": {"records", "errors", "client"},
    "load": {"records", "errors", "load", "metrics"},
    "report": {"", "records", "errors", "report", "metrics"},
    "server": {"errors", "server", "aio"},
}
WIRING = {"cli", "orchestrate", "demo", "__init__"}  # may wire everything together


def _part(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
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


def test_the_rule_sees_imports() -> None:
    assert "metrics" in _imports(PKG / "load" / "sweeps.py")
    assert len(MODULES) > 40
