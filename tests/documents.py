"""The documents users read (README.md and the docs site's pages), and the examples in them that tests run.

An example is found by the heading it sits under, in whichever document holds
that heading, so a section can move between the README and the site without
its test losing it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def section(heading: str) -> str:
    """The text from ``heading`` (the start of a heading line, as written) to the end of its document."""
    holding = [(document, text) for document in DOCUMENTS if (text := document.read_text()) and _at(text, heading) >= 0]
    assert len(holding) == 1, f"{heading!r} heads a section of {[d.name for d, _ in holding]}: exactly one expected"
    text = holding[0][1]
    return text[_at(text, heading) :]


def code_block(heading: str, language: str) -> str:
    """The first ``language`` code block under ``heading``, as written."""
    found = re.search(rf"```{language}\n(.*?)```", section(heading), re.S)
    assert found, f"no {language} block under {heading!r}"
    return found.group(1)


def _at(text: str, heading: str) -> int:
    found = re.search(rf"^{re.escape(heading)}", text, re.M)
    return found.start() if found else -1
