"""Where named workloads and profiles are found."""

from __future__ import annotations

from pathlib import Path

__all__ = ["REPO_ROOT", "search_dirs"]

REPO_ROOT = Path(__file__).resolve().parent.parent


def search_dirs(kind: str) -> list[Path]:
    """``./<kind>`` first (the user's own files), then the project's ``<kind>/`` folder."""
    out: list[Path] = []
    for d in (Path.cwd() / kind, REPO_ROOT / kind):
        if d.is_dir() and d.resolve() not in [o.resolve() for o in out]:
            out.append(d)
    return out
