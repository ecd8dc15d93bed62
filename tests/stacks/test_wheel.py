"""The package as a CDK app installs it: a wheel built from this checkout, installed (not editable) in a fresh
virtualenv outside it, synthesizes the README's own-app example with the function's code taken from the
installed package, the runtime alone, and a template as clean as the repository's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from test_cfn_lint import findings
from test_own_app import NOT_IN_A_USERS_APP, app_folder
from uv import find_uv_bin

import tally

pytestmark = pytest.mark.cdk

REPO_ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
# What the app needs besides the wheel: the CDK, as pinned for the construct.
CDK = [requirement for requirement in PROJECT["optional-dependencies"]["cdk"] if "cfn-lint" not in requirement]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """``python -m build`` of this checkout (its dashboard page built first, as `make test` does): the sdist, and
    the wheel built from it, which leaves nothing behind in the checkout and proves the sdist whole."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(out), str(REPO_ROOT)],
        capture_output=True, text=True, timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    assert list(out.glob("*.tar.gz")), "an sdist beside the wheel"
    return wheel


@pytest.fixture(scope="module")
def shop(wheel, tmp_path_factory) -> tuple[dict, Path]:
    """The README's own-app example in a fresh virtualenv holding the wheel and the CDK, synthesized there."""
    root = tmp_path_factory.mktemp("own-app")
    # uv installs into it (no pip of its own to set up), without compiling the CDK's 300 MB ahead: what the app
    # imports is compiled as it is imported, as in any venv. The same wheels as pip's, in a quarter of the time.
    venv.EnvBuilder(with_pip=False).create(root / "venv")
    python = root / "venv" / "bin" / "python"
    installed = subprocess.run(
        [find_uv_bin(), "pip", "install", "--quiet", "--python", str(python), str(wheel), *CDK],
        capture_output=True, text=True, timeout=900,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    folder, outdir = app_folder(root / "shop"), root / "cdk.out"
    env = {key: value for key, value in os.environ.items() if key not in NOT_IN_A_USERS_APP}
    env |= {"CDK_OUTDIR": str(outdir), "CDK_DISABLE_CLI_TELEMETRY": "true"}
    finished = subprocess.run([str(python), "app.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return json.loads((outdir / "Shop.template.json").read_text()), outdir


def test_the_wheel_carries_both_import_packages_and_the_dashboard_page_at_this_version(wheel):
    assert wheel.name.startswith(f"tally_dynamodb-{tally.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tally/functions/stream_handler.py" in names and "tally_cdk/construct.py" in names and "tally/dashboard.html" in names
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Name: tally-dynamodb" in metadata and f"Version: {tally.__version__}" in metadata


def test_the_installed_wheel_synthesizes_the_readme_example_with_the_runtime_alone(shop):
    template, outdir = shop
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    keys = {function["Properties"]["Code"]["S3Key"] for function in functions}
    assets = json.loads((outdir / "Shop.assets.json").read_text())["files"].values()
    (asset,) = [a for a in assets if any(d["objectKey"] in keys for d in a["destinations"].values())]
    folder = outdir / asset["source"]["path"]
    shipped = {path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()}
    assert "tally/functions/stream_handler.py" in shipped and "tally/functions/read_api.py" in shipped
    assert not [path for path in shipped if path.startswith("tally/local/") or "__pycache__" in path]
    assert {path.split("/")[0] for path in shipped} == {"tally"}  # nothing of the venv, no tally_cdk


def test_the_installed_wheels_template_is_as_clean_as_the_repositorys(shop):
    template, _ = shop
    assert findings(template) == []
