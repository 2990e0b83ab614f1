"""metrics/ is pure: it imports only the stdlib, numpy, pandas and loadgen's core."""

from __future__ import annotations

import ast
from pathlib import Path

import loadgen.metrics

ALLOWED = {
    "__future__",
    "collections",
    "dataclasses",
    "functools",
    "itertools",
    "math",
    "operator",
    "re",
    "types",
    "typing",
    "numpy",
    "pandas",
}
ALLOWED_LOADGEN = {
    "loadgen.records",
    "loadgen.errors",
    "loadgen.numfmt",
}  # numfmt: the one number rule, standard library only


def test_metrics_imports_nothing_with_io():
    folder = Path(loadgen.metrics.__file__).parent
    files = sorted(folder.glob("*.py"))
    assert len(files) >= 6
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if name.startswith("loadgen"):
                    assert name in ALLOWED_LOADGEN or name.startswith("loadgen.metrics"), (path.name, name)
                else:
                    assert name.split(".")[0] in ALLOWED, (path.name, name)
        source = path.read_text()
        assert "print(" not in source and "open(" not in source, path.name


def test_public_names():
    for name in loadgen.metrics.__all__:
        assert hasattr(loadgen.metrics, name), name
