"""Where named workloads and profiles are found.

``./workloads`` and ``./profiles`` in the current directory first (the user's own
files), then the ones that ship inside the package (``loadgen/data/``, which in a
source checkout links to the top-level ``workloads/`` and ``profiles/``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA_DIR", "search_dirs"]

DATA_DIR = Path(__file__).resolve().parent / "data"


def search_dirs(kind: str) -> list[Path]:
    """``./<kind>`` first (the user's own files), then the package's ``<kind>/``."""
    out: list[Path] = []
    for d in (Path.cwd() / kind, DATA_DIR / kind):
        if d.is_dir() and d.resolve() not in [o.resolve() for o in out]:
            out.append(d)
    return out
