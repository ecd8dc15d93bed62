"""The construct in a CDK app of one's own: the README's example, in an app folder that has its own `stacks` package."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from documents import code_block, section
from cdk_synthesis import counting_part

pytestmark = pytest.mark.cdk

EOL_BANNER = "is end-of-life and not supported anymore"


def readme_example() -> str:
    """The Python block of "Your own CDK app", as written there."""
    return code_block("### Your own CDK app", "python")


def app_folder(root: Path) -> Path:
    """The usual layout of a CDK app: app.py beside a `stacks` package holding the app's stacks."""
    (root / "stacks").mkdir(parents=True)
    (root / "stacks" / "__init__.py").write_text("from stacks.shop import ShopStack\n")
    (root / "stacks" / "shop.py").write_text(readme_example())
    (root / "app.py").write_text(
        "import aws_cdk as cdk\n"
        "from stacks import ShopStack\n\n"
        "app = cdk.App()\n"
        'ShopStack(app, "Shop")\n'
        "app.synth()\n"
    )
    return root


# What the Makefile and the test session set, and a user's own app does not have.
NOT_IN_A_USERS_APP = {"PYTHONPATH", "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"}


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    """The example synthesized once as `cdk synth` runs a user's app: `python app.py` from its folder."""
    root = tmp_path_factory.mktemp("shop-app")
    folder, outdir = app_folder(root / "shop"), root / "cdk.out"
    environment = {key: value for key, value in os.environ.items() if key not in NOT_IN_A_USERS_APP}
    environment |= {"CDK_OUTDIR": str(outdir), "CDK_DISABLE_CLI_TELEMETRY": "true"}
    finished = subprocess.run(
        [sys.executable, "app.py"], cwd=folder, env=environment, capture_output=True, text=True, timeout=300
    )
    assert finished.returncode == 0, finished.stderr
    return finished, json.loads((outdir / "Shop.template.json").read_text())


def test_the_readme_example_imports_beside_the_apps_own_stacks_package(shop):
    finished, template = shop
    resources = counting_part(template)["Resources"].values()
    (function,) = [r for r in resources if r["Type"] == "AWS::Lambda::Function"]
    (mapping,) = [r for r in resources if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    assert mapping["Properties"]["EventSourceArn"].startswith("arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/")
    assert function["Properties"]["Environment"]["Variables"]["TALLY_COUNTER_ATTRIBUTE"] == "status"
    assert "CountsTableName" in template["Outputs"]
    assert not [r for r in resources if r["Type"] == "AWS::DynamoDB::Table" and "orders" in json.dumps(r)]


def test_the_node_versions_the_readme_asks_for_are_those_jsii_supports(shop):
    finished, _ = shop
    assert finished.stderr.count(EOL_BANNER) <= 1  # one Node process, one banner
    if EOL_BANNER not in finished.stderr:
        pytest.skip("this machine's Node is supported by jsii: its banner, which lists the supported ones, is not shown")
    supported = sorted(set(re.findall(r"\^(\d+)\.0\.0", finished.stderr)), key=int)
    prerequisites = section("### Prerequisites").split("\n#", 1)[0]
    claimed = re.search(r"Node\.js ([\d, or]+)", prerequisites).group(1)
    assert sorted(re.findall(r"\d+", claimed), key=int) == supported
