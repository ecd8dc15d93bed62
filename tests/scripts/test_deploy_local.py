"""`make deploy-local` as a user runs it: the pinned CDK CLI bootstraps and deploys the app into moto's server,
and the demo, a second stream runner and the read API hold on the deployed stack."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from script_support import SCRIPTS

pytestmark = [pytest.mark.cdk, pytest.mark.server]


@pytest.fixture(scope="module")
def deployed() -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "deploy_local.py")], capture_output=True, text=True, timeout=1500, cwd=SCRIPTS.parent
    )


def test_the_cdk_cli_bootstraps_and_deploys_the_app_into_the_local_server(deployed):
    assert deployed.returncode == 0, deployed.stdout[-4000:] + deployed.stderr[-4000:]
    assert re.search(r"^1/5 cdk bootstrap: done", deployed.stdout, re.M)
    assert re.search(r"^2/5 cdk deploy Tally: done", deployed.stdout, re.M)
    outputs = dict(re.findall(r"(\w+)=(\S+?)(?:,|$)", re.search(r"outputs: (.*)", deployed.stdout).group(1)))
    assert set(outputs) == {"EventsTableName", "CountsTableName", "EventsStreamArn", "FailureQueueUrl"}
    assert outputs["EventsTableName"].startswith("Tally-EventsTable") and ":table/Tally-EventsTable" in outputs["EventsStreamArn"]


def test_the_demos_verdict_holds_on_the_deployed_stack(deployed):
    demo = deployed.stdout.split("3/5 the demo", 1)[1].split("4/5", 1)[0]

    assert "found Tally-EventsTable" in demo and "in the stack's outputs" in demo
    assert "VERDICT: MATCH" in demo and "MISMATCH" not in demo


def test_a_second_runner_counts_nothing_twice_and_the_read_api_answers_as_the_cli(deployed):
    assert "read the stream again from its start" in deployed.stdout and "unchanged, nothing counted twice" in deployed.stdout
    assert "GET /counts equals query_window.py --stack" in deployed.stdout
    assert deployed.stdout.rstrip().splitlines()[-1].startswith("VERDICT: MATCH")
