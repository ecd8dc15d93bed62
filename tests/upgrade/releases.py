"""A past release of tally, installed as a user installed it: its tree at its commit, in an environment of its own.

A release is found by its git tag (``v0.2.0`` or ``0.2.0``) or, where tags did not travel with the clone, by the
commit its CHANGELOG heading names: ``## [0.2.0] - 2026-11-25 (commit 1e32c73)``. Its tree comes out of git
(``git archive``) and is installed with ``pip install '<tree>[scripts]'`` into a venv of its own, under
``.releases/`` in the checkout (git ignores it): built once per release, Python and clock, then reused.

Under ``make test-anytime`` (``TALLY_TEST_CLOCK`` set) the release's venv gets the same moved clock as every
other process of the run (tests/anytime: time-machine and a .pth importing the clock module), so its handler
and reader agree with this release's on "now".
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".releases"
AGENT = Path(__file__).resolve().with_name("release_agent.py")
ANYTIME = ROOT / "tests" / "anytime"
CLOCK_VARIABLE = "TALLY_TEST_CLOCK"

# The release this one replaces: the upgrade and rollback tests run it. The next release changes this name.
PREVIOUS_RELEASE = "0.2.0"


class ReleaseNotFound(LookupError):
    """Neither a tag nor the CHANGELOG names the release's commit."""


def changelog_commit(version: str, changelog: str) -> str | None:
    """The commit a CHANGELOG heading names for ``version``: ``## [0.2.0] - 2026-11-25 (commit 1e32c73)``."""
    heading = re.search(
        rf"^## \[{re.escape(version)}\][^\n]*\(commit ([0-9a-f]{{7,40}})\)\s*$", changelog, flags=re.MULTILINE
    )
    return heading.group(1) if heading else None


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def release_commit(version: str) -> str:
    """The full commit of ``version``: its tag if the clone has one, else the commit its CHANGELOG heading names."""
    for tag in (f"v{version}", version):
        found = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}"],
            cwd=ROOT, capture_output=True, text=True,
        )
        if found.returncode == 0:
            return found.stdout.strip()
    named = changelog_commit(version, (ROOT / "CHANGELOG.md").read_text())
    if named is None:
        raise ReleaseNotFound(
            f"release {version}: no tag v{version} or {version}, and no CHANGELOG heading "
            f"'## [{version}] - DATE (commit SHA)'"
        )
    return _git("rev-parse", "--verify", f"{named}^{{commit}}")


@dataclass(frozen=True)
class Release:
    """An installed release: its version, its commit, its tree (scripts and all) and its venv's Python."""

    version: str
    commit: str
    tree: Path
    python: Path

    def agent(self, command: str, job: dict[str, Any], env: dict[str, str], timeout: float = 300) -> dict[str, Any]:
        """Run the release agent (release_agent.py) with this release's Python: its own code, not this release's."""
        done = subprocess.run(
            [str(self.python), str(AGENT), command],
            input=json.dumps(job), capture_output=True, text=True, env=self.environment(env), timeout=timeout,
        )
        if done.returncode != 0:
            raise AssertionError(f"{self.version} {command} failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return json.loads(done.stdout)

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` without this checkout on the path: the release imports its own tally, not the one under test."""
        clean = {name: value for name, value in env.items() if name not in ("PYTHONPATH", "VIRTUAL_ENV")}
        clean["PYTHONDONTWRITEBYTECODE"] = "1"
        return clean


def current_release(python: str = sys.executable) -> Release:
    """This checkout, run by the test's own Python, through the same agent."""
    return Release("this release", _git("rev-parse", "HEAD"), ROOT, Path(python))


def install(version: str = PREVIOUS_RELEASE) -> Release:
    """The release built from its commit into ``.releases/`` (reused when built before), clock shim and all."""
    commit = release_commit(version)
    python_tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    home = CACHE / f"{version}-{commit[:12]}-{python_tag}"
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:  # xdist workers may build it at once: one builds, the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "installed").exists():
            _build(commit, home)
        release = Release(version, commit, home / "tree", home / "venv" / "bin" / "python")
        if os.environ.get(CLOCK_VARIABLE):
            _install_clock(release)
    return release


def _build(commit: str, home: Path) -> None:
    shutil.rmtree(home, ignore_errors=True)
    tree = home / "tree"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
    pip = [str(home / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"{tree}[scripts]"], check=True, capture_output=True, text=True)
    (home / "installed").write_text(commit + "\n")


def _install_clock(release: Release) -> None:
    """time-machine and the .pth that imports tests/anytime's clock, in the release's venv (once)."""
    purelib = subprocess.run(
        [str(release.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    pth = Path(purelib) / "tally_test_clock.pth"
    if pth.exists():
        return
    version = _installed_version("time-machine") or "time-machine"
    pin = f"time-machine=={version}" if version != "time-machine" else version
    subprocess.run(
        [str(release.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", pin],
        check=True, capture_output=True, text=True,
    )
    pth.write_text(f"{ANYTIME}\nimport tally_test_clock\n")


def _installed_version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None

