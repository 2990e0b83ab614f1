"""Where named workloads and profiles are found.

``./workloads`` and ``./profiles`` in the current directory first (the user's own
files), then the ones that ship inside the package (``loadgen/data/``, which in a
source checkout links to the top-level ``workloads/`` and ``profiles/``). A file path
under ``workloads/`` or ``profiles/`` (``workloads/samples/sharegpt.json`` in ``docs/guide.md``,
the README's ``profiles/matrix/chunking.toml``) that is not in the current directory is the
package's copy (:func:`shipped`), so the documented commands run from any folder.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA_DIR", "search_dirs", "shipped"]

DATA_DIR = Path(__file__).resolve().parent / "data"


def search_dirs(kind: str) -> list[Path]:
    """``./<kind>`` first (the user's own files), then the package's ``<kind>/``."""
    out: list[Path] = []
    for d in (Path.cwd() / kind, DATA_DIR / kind):
        if d.is_dir() and d.resolve() not in [o.resolve() for o in out]:
            out.append(d)
    return out


def shipped(path: str | Path) -> Path:
    """``path`` as given when it exists (or is not under ``workloads/`` or
    ``profiles/``); else the package's copy of it, when there is one."""
    given = Path(path)
    if given.exists() or given.is_absolute() or not given.parts or given.parts[0] not in ("workloads", "profiles"):
        return given
    packaged = DATA_DIR / given
    return packaged if packaged.exists() else given
