"""The import graph of ``loadgen/`` read from the source with :mod:`ast`, and its circles.

Every ``import`` counts: at module level, inside a function and under ``TYPE_CHECKING``
alike, since each still ties the two modules together. ``from loadgen.a import b`` is an
edge to ``loadgen.a.b`` when ``b`` is a module, else to ``loadgen.a``. An edge to the
module's own package or an ancestor (``from loadgen import __version__``) is left out: Python
has imported that package before the module. A circle is a strongly connected component of
more than one module.

    python tests/import_graph.py      # prints the root modules and every circle
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "loadgen"


def module_name(path: Path, pkg: Path = PKG) -> str:
    parts = [pkg.name, *path.relative_to(pkg).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def graph(pkg: Path = PKG) -> dict[str, set[str]]:
    """Module -> the loadgen modules it imports."""
    paths = {module_name(p, pkg): p for p in sorted(pkg.rglob("*.py"))}
    out: dict[str, set[str]] = {}
    for name, path in paths.items():
        is_pkg = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in paths)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if sub in paths:
                        edges.add(sub)
                    elif base in paths:
                        edges.add(base)
        # a package is imported before any of its modules, so an edge to an ancestor ties nothing
        out[name] = {e for e in edges if not (name == e or name.startswith(e + "."))}
    return out


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def root_modules(pkg: Path = PKG) -> list[str]:
    """The modules at the package's root (its face)."""
    return sorted(p.stem for p in pkg.glob("*.py"))


if __name__ == "__main__":
    roots = root_modules()
    print(f"{len(roots)} modules at loadgen/'s root: {', '.join(roots)}")
    found = circles(graph())
    print(f"{len(found)} import circles")
    for comp in found:
        print(f"  {len(comp)}: {' '.join(comp)}")
