"""`make deploy-local` as a user runs it: the pinned CDK CLI bootstraps and deploys the app into moto's server,
and the demo, a second stream runner and the read API hold on the deployed stack."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest
from script_support import SCRIPTS, load_script

from tally.local.aws import MotoServer


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        *((["--port", port], f"expected a port number from 1 to 65535, not '{port}'") for port in ("0", "65536", "http", "-1")),
        *((["--window-seconds", seconds], f"expected a tumbling window of 1 to 900 seconds, not '{seconds}'")
          for seconds in ("0", "901", "ten", "-5")),
        (["--rate", "0", "5"], "expected a whole number of events per hour from 1, not '0'"),
        (["--rate", "9", "x"], "expected a whole number of events per hour from 1, not 'x'"),
        (["--rate", "9", "5"], "argument --rate: LOW must not be above HIGH, not 9 5"),
    ],
)
def test_a_bad_argument_is_one_line_and_status_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        load_script("deploy_local").main(argv)  # before the server starts: nothing to stop

    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error


@pytest.mark.server
def test_the_server_listens_on_the_port_given():
    with socket.socket() as probe:  # a port free now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert load_script("deploy_local").parser().parse_args(["--port", str(port)]).port == port

    with MotoServer(port) as server:
        assert server.endpoint_url == f"http://127.0.0.1:{port}"
        # moto keeps its tables per process, so other tests' tables may be listed: that it answers is the point.
        assert isinstance(server.client("dynamodb").list_tables()["TableNames"], list)


@pytest.fixture(scope="module")
def deployed() -> subprocess.CompletedProcess:
    # 1 s windows and a twentieth of the demo's events: both readers still cut the stream alike, and every step
    # runs, in a third of the time.
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "deploy_local.py"), "--window-seconds", "1", "--rate", "1", "5"],
        capture_output=True, text=True, timeout=1500, cwd=SCRIPTS.parent,
    )


@pytest.mark.cdk
@pytest.mark.server
def test_the_cdk_cli_bootstraps_and_deploys_the_app_into_the_local_server(deployed):
    assert deployed.returncode == 0, deployed.stdout[-4000:] + deployed.stderr[-4000:]
    assert re.search(r"^1/5 cdk bootstrap: done", deployed.stdout, re.M)
    assert re.search(r"^2/5 cdk deploy Tally: done", deployed.stdout, re.M)
    outputs = dict(re.findall(r"(\w+)=(\S+?)(?:,|$)", re.search(r"outputs: (.*)", deployed.stdout).group(1)))
    assert set(outputs) == {"EventsTableName", "CountsTableName", "EventsStreamArn", "FailureQueueUrl"}
    assert outputs["EventsTableName"].startswith("Tally-EventsTable") and ":table/Tally-EventsTable" in outputs["EventsStreamArn"]


@pytest.mark.cdk
@pytest.mark.server
def test_the_demos_verdict_holds_on_the_deployed_stack(deployed):
    demo = deployed.stdout.split("3/5 the demo", 1)[1].split("4/5", 1)[0]

    assert "found Tally-EventsTable" in demo and "in the stack's outputs" in demo
    assert "VERDICT: MATCH" in demo and "MISMATCH" not in demo


@pytest.mark.cdk
@pytest.mark.server
def test_a_second_runner_counts_nothing_twice_and_the_read_api_answers_as_the_cli(deployed):
    assert "read the stream again from its start" in deployed.stdout and "unchanged, nothing counted twice" in deployed.stdout
    assert "GET /counts equals query_window.py --stack" in deployed.stdout
    assert deployed.stdout.rstrip().splitlines()[-1].startswith("VERDICT: MATCH")
