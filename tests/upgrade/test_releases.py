"""The harness finds a release by its tag or by the commit its CHANGELOG heading names."""

from __future__ import annotations

import subprocess

from .releases import PREVIOUS_RELEASE, ROOT, changelog_commit, release_commit


def test_a_changelog_heading_names_its_releases_commit():
    text = "## [Unreleased]\n\n## [0.3.0] - 2026-12-01 (commit abc1234)\n\n## [0.2.0] - 2026-11-25\n"
    assert changelog_commit("0.3.0", text) == "abc1234"
    assert changelog_commit("0.2.0", text) is None and changelog_commit("0.1.0", text) is None


def test_the_previous_release_is_found_without_tags():
    named = changelog_commit(PREVIOUS_RELEASE, (ROOT / "CHANGELOG.md").read_text())
    assert named is not None, f"CHANGELOG.md names no commit for {PREVIOUS_RELEASE}"
    full = release_commit(PREVIOUS_RELEASE)
    assert full.startswith(named) and len(full) == 40
    version = subprocess.run(
        ["git", "show", f"{full}:lambda_src/tally/__init__.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    assert f'__version__ = "{PREVIOUS_RELEASE}"' in version
