"""Documents cite what exists: every cited document, every path the docs name, every link and its anchor; the
README stays one page, and the documentation site builds strict."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SKIPPED_DIRS = {".git", ".venv", ".releases", "site", "node_modules", "cdk.out", "tally.egg-info", "__pycache__", ".pytest_cache", ".hypothesis"}
# Where a path the docs name may be rooted: the repository, the scripts, the asset root, the package, the CDK stacks.
PATH_ROOTS = (ROOT, ROOT / "scripts", ROOT / "lambda_src", ROOT / "lambda_src" / "tally", ROOT / "stacks")
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

CITED_DOCUMENT = re.compile(r"(?<![\w./-])([\w./-]*[A-Za-z_]\.md)\b")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
# A file path (ending in a source or document suffix, or under a top-level folder), alone or after the venv's python.
LOCAL_PATH = re.compile(
    r"^(?:\.venv/bin/python\s+(?:-m\s+)?)?"
    r"((?:lambda_src|scripts|stacks|tests|bench|docs|tally)/[\w./-]*|[\w./-]+\.(?:py|md|toml))$"
)
# Written by commands, not tracked: none (`make bench` writes the tracked bench/results.json).
GENERATED: set[str] = set()
PLACEHOLDER = re.compile(r"\b[A-Z]{2,}\b")  # scripts/NAME.py
LINK = re.compile(r"\]\(([^)\s]+)\)")


def repository_files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*"):
        if path.is_file() and not SKIPPED_DIRS & set(path.relative_to(ROOT).parts):
            if path.suffix in {".py", ".md", ".toml", ".json", ".cfg"} or path.name in {"Makefile", "run"}:
                files.append(path)
    return files


def resolves(cited: str, near: Path) -> bool:
    cited = cited.rstrip("/")
    # A snippet is shown inside the pages of docs/ that include it, so its links are theirs.
    here = ROOT / "docs" if near.parent == ROOT / "docs" / "snippets" else near.parent
    return any((root / cited).exists() for root in (here, *PATH_ROOTS))


def heading_anchors(document: Path) -> set[str]:
    """GitHub's anchors: headings lowercased, punctuation dropped, spaces as hyphens."""
    anchors = set()
    for line in document.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return anchors


def test_the_design_document_is_in_the_repository():
    assert (ROOT / "docs/design.md").is_file()


def test_every_document_a_file_cites_exists():
    missing = {}
    for path in repository_files():
        for cited in CITED_DOCUMENT.findall(path.read_text(errors="replace")):
            if not resolves(cited, path):
                missing.setdefault(str(path.relative_to(ROOT)), []).append(cited)
    assert missing == {}


def test_every_path_the_documents_name_exists():
    missing = {}
    for document in DOCUMENTS:
        for span in CODE_SPAN.findall(document.read_text()):
            match = LOCAL_PATH.match(span.strip())
            cited = match.group(1) if match else None
            if cited and cited not in GENERATED and not PLACEHOLDER.search(cited) and not resolves(cited, document):
                missing.setdefault(document.name, []).append(span)
    assert missing == {}


def test_every_link_of_the_documents_leads_somewhere():
    broken = {}
    for document in DOCUMENTS:
        for target in LINK.findall(document.read_text()):
            if "://" in target:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (document.parent / file_part) if file_part else document
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked)):
                broken.setdefault(document.name, []).append(target)
    assert broken == {}


def test_the_readme_stays_one_short_page_that_leads_into_every_page_of_the_site():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    pages = {f"docs/{path.name}" for path in (ROOT / "docs").glob("*.md")}
    linked = {target.split("#")[0] for target in LINK.findall(readme)}
    assert pages - linked == {"docs/index.md", "docs/changelog.md"} and "CHANGELOG.md" in linked


def test_every_page_is_in_the_sites_navigation():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    navigated = {page for entry in config["nav"] for page in entry.values()}
    assert navigated == {path.name for path in (ROOT / "docs").glob("*.md")}


def test_the_site_builds_with_no_warning(tmp_path):
    """What `make docs` runs: strict, so a broken link, anchor, snippet or API reference fails."""
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    assert "count_many" in reference and "StackSettings" in reference  # generated from the docstrings
    reading = (tmp_path / "site" / "reading" / "index.html").read_text()
    assert "views/posts/hello-world" in reading  # the README's example, shown by reference
