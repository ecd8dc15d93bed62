"""The repository as a new user meets it: the README's commands and what each make target installs."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Infrastructure and test tooling (moto's CloudFormation pulls cfn-lint and sympy): hundreds of MB the demo never imports.
NOT_FOR_THE_DEMO = ("aws-cdk-lib", "cdk-nag", "cfn-lint", "constructs", "pytest", "hypothesis", "cloudformation", "server")


def dry_run(target: str, venv: Path) -> str:
    """What `make TARGET` would run in a fresh clone (a virtualenv that does not exist yet)."""
    finished = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return finished.stdout


def test_bare_python_appears_in_no_command_of_the_readme_or_the_scripts():
    # A bare `python` fails unless .venv is activated; `.venv/bin/python` works as written.
    texts = {"README.md": (ROOT / "README.md").read_text()}
    texts |= {f"scripts/{p.name}": p.read_text() for p in (ROOT / "scripts").glob("*.py")}
    bare = re.compile(r"(?<![\w/.-])python3?\s+(?:-m\s|scripts/|\S+\.py)")
    offenders = {name: bare.findall(text) for name, text in texts.items() if bare.search(text)}
    assert offenders == {}


def test_the_demo_installs_the_scripts_extra_only(tmp_path):
    commands = dry_run("demo", tmp_path / "venv")
    assert "'.[scripts]'" in commands and "'.[dev]'" not in commands
    assert "installing" in commands  # it says what it installs before the wait
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [(r, name) for r in extras["scripts"] for name in NOT_FOR_THE_DEMO if name in r] == []


@pytest.mark.parametrize("target", ["test", "synth", "install"])
def test_tests_and_the_cdk_app_install_the_dev_extra_even_after_the_demo(target, tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-scripts").touch()  # `make demo` ran first
    assert "'.[dev]'" in dry_run(target, venv)


def test_the_demo_after_the_dev_install_installs_nothing_more(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    for stamp in (".installed-dev", ".installed-scripts"):
        (venv / stamp).touch()
    commands = dry_run("demo", venv)
    assert "pip install" not in commands and "scripts/local_pipeline.py" in commands


def test_make_test_leaves_out_the_sweeps_which_ci_runs_and_every_sweep_keeps_its_first_member_in_make_test(tmp_path):
    """tests/sweeps.py marks a sweep's members after the first; a test marked whole would leave `make test`."""
    pytest_arguments = {  # what each target hands pytest
        target: [line.partition("-m pytest")[2] for line in dry_run(target, tmp_path / "venv").splitlines() if "-m pytest" in line]
        for target in ("test", "test-sweeps", "test-anytime")
    }
    assert [arguments.endswith('-m "not sweep"') for arguments in pytest_arguments["test"]] == [True]
    assert [arguments.endswith("-m sweep") for arguments in pytest_arguments["test-sweeps"]] == [True]
    assert [" -m " in arguments for arguments in pytest_arguments["test-anytime"]] == [False]  # sweeps included
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("make ")]
    assert {"make test", "make test-sweeps", "make test-anytime"} <= set(ci)
    decorator = re.compile(r"^\s*@pytest\.mark\.sweep\b", re.MULTILINE)
    marked_whole = [str(p) for p in (ROOT / "tests").rglob("*.py") if decorator.search(p.read_text())]
    assert marked_whole == []
    # Whole modules are sweeps only where they run a previous release: its venv takes a minute to build, and
    # make test checks the harness's lookup and the rollback check on their own (tests/upgrade/test_releases.py,
    # tests/scripts/test_rollback_check.py).
    module = re.compile(r"^pytestmark\s*=.*\bpytest\.mark\.sweep\b", re.MULTILINE)
    modules_marked = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("*.py") if module.search(p.read_text())}
    assert modules_marked == {f"tests/upgrade/test_{name}.py" for name in ("upgrade", "rollback", "two_readers")}


def test_the_release_is_named_once_and_the_changelog_says_how_to_upgrade_to_it_and_roll_back():
    import tally

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tally.version.__version__"}
    changelog = (ROOT / "CHANGELOG.md").read_text()
    release = changelog.split(f"## [{tally.__version__}]", 1)[1].split("\n## [", 1)[0]
    assert "### Upgrade from" in release and "### Rollback to" in release


RELEASE_HEADING = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d\d-\d\d)(?: \(commit ([0-9a-f]{7,40})\))?$", re.MULTILINE)
VERSION_LINE = re.compile(r"""^(?:__version__|version) = "(\d+\.\d+\.\d+)"$""", re.MULTILINE)
# Where a release's commit states its version: this layout, 0.2.0's package face, 0.1.0's pyproject.toml.
VERSION_FILES = ("lambda_src/tally/version.py", "lambda_src/tally/__init__.py", "pyproject.toml")


def test_each_release_names_the_commit_that_made_it_and_that_commit_is_that_release():
    """Tags may not travel with a clone: the changelog names each release's commit, which the upgrade tests build the
    previous release from. Only the current release's heading may still lack it (its commit names itself after)."""
    import tally

    changelog = (ROOT / "CHANGELOG.md").read_text()
    headings = RELEASE_HEADING.findall(changelog)
    assert [version for version, _, _ in headings] == re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.MULTILINE)
    assert headings[0][0] == tally.__version__
    for version, day, commit in headings:
        if not commit:
            assert version == tally.__version__, f"release {version} names no commit"
            continue
        shown = subprocess.run(["git", "show", "-s", "--format=%cs", commit], cwd=ROOT, capture_output=True, text=True)
        assert shown.returncode == 0, f"release {version}: commit {commit} is not in this clone"
        assert shown.stdout.strip() == day, f"release {version}: commit {commit} was made on another day"
        stated = set()
        for path in VERSION_FILES:
            text = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True).stdout
            stated |= set(VERSION_LINE.findall(text))
        assert stated == {version}, f"release {version}: commit {commit} states version {stated}"


def test_the_dev_extra_names_this_distribution_not_pypis_other_tally():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    own = [r for r in project["optional-dependencies"]["dev"] if r.split("[")[0] in {"tally", project["name"]}]
    assert own == [f"{project['name']}[scripts,cdk,docs]"]
