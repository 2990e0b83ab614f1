"""The docs/ folder stays true to the repository: generated pages are current, links resolve."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md")), *sorted((ROOT / "workloads").glob("*.md"))]


def test_every_relative_link_resolves() -> None:
    broken = []
    for page in _pages():
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_nothing_cites_a_document_the_repository_lacks() -> None:
    offenders = []
    for path in [*ROOT.glob("loadgen/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("benchmarks/*.py"), *_pages()]:
        if path.name == "test_docs.py":
            continue
        if "DESIGN" + ".md" in path.read_text():
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, offenders


CODE = re.compile(r"```.*?```|`[^`\n]+`", re.DOTALL)
NAMED = re.compile(r"--(profile|workload)[ =]([^\s`'\"|)\\]+)")


def test_every_profile_and_workload_an_example_names_exists() -> None:
    """A ``--profile NAME`` or ``--workload NAME`` in a page's code is a shipped file (or a
    path that exists), so a copied example never stops at 'unknown profile'."""
    missing = []
    for page in _pages():
        for code in CODE.findall(page.read_text()):
            for kind, name in NAMED.findall(code):
                if "<" in name or name.isupper() or name.startswith("path/to/"):
                    continue  # a placeholder: --workload NAME, --profile <str>
                shipped = ROOT / f"{kind}s" / f"{name}.toml"
                if not shipped.exists() and not (ROOT / name).is_file():
                    missing.append(f"{page.relative_to(ROOT)}: --{kind} {name}")
    assert not missing, missing


def test_the_timeline_figure_is_what_its_script_draws() -> None:
    sys.path.insert(0, str(DOCS / "figures"))
    try:
        import timeline  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    assert (DOCS / "figures" / "request-timeline.svg").read_text() == timeline.svg(), (
        "docs/figures/request-timeline.svg is stale: run python3 docs/figures/timeline.py"
    )


def test_cli_reference_is_current(tmp_path: Path) -> None:
    out = tmp_path / "cli.md"
    subprocess.run(
        [sys.executable, "-m", "typer", "loadgen.cli", "utils", "docs", "--name", "loadgen", "--output", str(out)],
        check=True,
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    assert (DOCS / "cli.md").read_text() == out.read_text(), (
        "docs/cli.md is stale: run typer loadgen.cli utils docs --name loadgen --output docs/cli.md"
    )
