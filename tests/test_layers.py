"""The dependency rule (docs/architecture.md, "Layers"), checked on the import statements of every module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.import_graph import circles, graph

PKG = Path(__file__).resolve().parent.parent / "loadgen"
ARCHITECTURE = PKG.parent / "docs" / "architecture.md"

# part -> the loadgen parts it may import ("" is the package root: __version__)
ALLOWED: dict[str, set[str]] = {
    "records": set(),
    "errors": set(),
    "paths": set(),
    "inputs": set(),
    "aio": set(),
    "numfmt": set(),
    "signals": {"errors"},
    "workload": {"records", "errors", "inputs", "workload"},
    "metrics": {"records", "errors", "metrics", "numfmt"},
    "client": {"records", "errors", "client"},
    "load": {"records", "errors", "inputs", "load", "metrics", "aio", "signals", "numfmt"},
    "report": {"", "records", "errors", "report", "metrics", "runinfo", "numfmt"},
    "runinfo": {"errors", "load", "metrics"},
    "server": {"errors", "server", "aio"},
    "dashboard": {"", "records", "errors", "inputs", "metrics", "report", "dashboard", "numfmt"},
}
# may wire everything together: the wiring package and the faces that parse and call it
WIRING = {"orchestrate", "cli", "api", "__init__", "__main__"}
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


def _layers_table() -> dict[str, tuple[set[str], str]]:
    """docs/architecture.md's "Layers" table: part -> (what it may import, the row's text)."""
    text = ARCHITECTURE.read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    out: dict[str, tuple[set[str], str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        may = {"nothing": set[str](), "everything": {"*"}}.get(cells[2], {m.strip() for m in cells[2].split(",")})
        for part in re.findall(r"`([^`]+)`", cells[0]):
            out[part.removesuffix(".py").removesuffix("/")] = (may, cells[1])
    return out


def test_the_architecture_page_lists_the_layers_of_this_test() -> None:
    """One list: the page's table names each top-level part once, with what it may import."""
    table = _layers_table()
    on_disk = {_part(p) for p in PKG.rglob("*.py")}
    assert set(table) == set(ALLOWED) | WIRING == on_disk
    for part, (may, _) in table.items():
        expected = {"*"} if part in WIRING else ALLOWED[part] - {part, ""}  # itself and __version__ go unsaid
        assert may == expected, f"docs/architecture.md, Layers, {part}: {sorted(may)} != {sorted(expected)}"


def test_the_architecture_page_names_every_wiring_module() -> None:
    row = _layers_table()["orchestrate"][1]
    named = set(re.findall(r"`(\w+)\.py`", row))
    modules = {p.stem for p in (PKG / "orchestrate").glob("*.py")} - {"__init__"}
    assert named == modules, f"docs/architecture.md's orchestrate/ row: add {modules - named}, drop {named - modules}"


def test_no_import_circle_anywhere() -> None:
    """No module of loadgen imports, through any chain (TYPE_CHECKING and function-level
    imports included), a module that imports it: not the wiring, not metrics/, nowhere."""
    assert circles(graph()) == [], "import circle(s); python tests/import_graph.py lists them"


def test_the_circle_finder_sees_a_circle() -> None:
    edges = graph()
    assert "loadgen.orchestrate.config" in edges["loadgen.orchestrate.from_flags"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _from_imports(paths: list[Path]) -> list[tuple[Path, str, str]]:
    out: list[tuple[Path, str, str]] = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("loadgen.orchestrate"):
                out.extend((path, node.module, a.name) for a in node.names)
    return out


def test_the_wiring_has_one_spelling_per_name() -> None:
    """Outside ``orchestrate/`` a name its ``__init__`` exports is imported from there; inside, a
    module imports its siblings, never its own package (which would hide a circle)."""
    import importlib

    import loadgen.orchestrate as face

    root = PKG.parent
    inside = sorted((PKG / "orchestrate").glob("*.py"))
    outside = sorted(
        p
        for p in [*PKG.rglob("*.py"), *(root / "tests").rglob("*.py"), *(root / "benchmarks").rglob("*.py")]
        if p not in inside
    )
    modules = {p.stem for p in inside}
    assert not set(face.EXPORTS) & modules, "an exported name that is also a module's is shadowed by it"
    for name, module in face.EXPORTS.items():
        assert getattr(face, name) is vars(importlib.import_module(f"loadgen.orchestrate.{module}"))[name]
    assert sorted(face.__all__) == sorted(face.EXPORTS)
    for path, module, name in _from_imports(outside):
        assert module == "loadgen.orchestrate" or name not in face.EXPORTS, (
            f"{path.relative_to(root)}: from loadgen.orchestrate import {name}"
        )
    for path, module, name in _from_imports(inside):
        assert module != "loadgen.orchestrate", f"{path.relative_to(root)}: import {name} from its module"
