"""Print one of the README's two commands, as written there, for .ci/run to run verbatim.

    python3 .ci/readme_commands.py demo|test

``demo``: the code block after "Install and run the demo"; ``test``: the one after "Install
and run the tests". Exits 1 naming what it could not find, so a README edit that loses
either command fails CI instead of going unchecked.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

LEADS = {"demo": "Install and run the demo", "test": "Install and run the tests"}


def command(readme: str, which: str) -> str:
    lead = readme.find(LEADS[which])
    if lead < 0:
        raise LookupError(f"README.md has no line starting {LEADS[which]!r}")
    block = re.search(r"^```[a-z]*\n(.*?)^```", readme[lead:], re.S | re.M)
    if block is None or not block.group(1).strip():
        raise LookupError(f"README.md has no code block after {LEADS[which]!r}")
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    if len(lines) != 1:
        raise LookupError(f"the code block after {LEADS[which]!r} should be one command, not {len(lines)} lines")
    return lines[0].strip()


if __name__ == "__main__":
    try:
        print(command((Path(__file__).resolve().parent.parent / "README.md").read_text(), sys.argv[1]))
    except (LookupError, IndexError, KeyError) as exc:
        sys.exit(f"readme_commands.py: {exc or 'usage: readme_commands.py demo|test'}")
