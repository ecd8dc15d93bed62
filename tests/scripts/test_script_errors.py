"""Infrastructure mistakes end in one line on stderr naming the problem and the fix, exit status 2, for every script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from script_support import SCRIPTS, load_script

from tally.local.delivery import DeliveryConfig, ShardDelivery

generate_events = load_script("generate_events")
query_window = load_script("query_window")
run_stream = load_script("run_stream")

REPO_ROOT = Path(__file__).resolve().parents[2]
IDLE = ["--until-idle", "--idle-polls", "1", "--poll-interval", "0"]


def one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and ": error: " in captured.err, captured.err
    assert "Traceback" not in captured.err
    return captured.err


@pytest.mark.parametrize("script", ["query_window.py page-views", "run_stream.py --until-idle", "generate_events.py"])
def test_an_unreachable_endpoint_is_at_most_two_lines_and_status_2(script, tmp_path):
    env = {**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:1", "PYTHONPATH": str(REPO_ROOT / "lambda_src")}
    name, *args = script.split()
    finished = subprocess.run(
        [sys.executable, str(SCRIPTS / name), *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 2
    assert len(finished.stderr.splitlines()) <= 2 and "Traceback" not in finished.stderr
    assert "AWS_ENDPOINT_URL=http://127.0.0.1:1" in finished.stderr and "local_pipeline.py --keep-running" in finished.stderr
    assert finished.stdout == ""


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """No endpoint and nothing in boto3's credential chain (no metadata service either)."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "absent"))


@pytest.mark.parametrize(
    ("script", "argv"),
    [(query_window, ["page-views"]), (run_stream, IDLE), (generate_events, ["--hours", "1"])],
    ids=["query_window", "run_stream", "generate_events"],
)
def test_no_credentials_and_no_endpoint_say_what_to_set(script, argv, no_credentials, capsys):
    assert script.main(argv) == 2
    error = one_line_error(capsys)
    assert "no AWS credentials and no AWS_ENDPOINT_URL" in error and "AWS_PROFILE" in error


@pytest.mark.server
@pytest.mark.usefixtures("fresh_handler_cache")
@pytest.mark.parametrize(
    ("script", "argv"),
    [
        (query_window, ["page-views", "--table", "nosuch"]),
        (run_stream, [*IDLE, "--table", "nosuch"]),
        (run_stream, [*IDLE, "--counts-table", "nosuch"]),
        (generate_events, ["--hours", "1", "--table", "nosuch"]),
    ],
    ids=["query_window", "run_stream events", "run_stream counts", "generate_events"],
)
def test_a_missing_table_is_named_with_the_endpoint_and_the_fix(script, argv, tables, capsys):
    assert script.main(argv) == 2
    error = one_line_error(capsys)
    assert f"no table 'nosuch' at {os.environ['AWS_ENDPOINT_URL']}" in error
    assert "local_pipeline.py --keep-running" in error


@pytest.mark.parametrize(
    ("script", "argv"),
    [(query_window, ["page-views"]), (run_stream, IDLE), (generate_events, ["--hours", "1"])],
    ids=["query_window", "run_stream", "generate_events"],
)
def test_a_bad_setting_is_one_line_naming_the_variable(script, argv, monkeypatch, capsys):
    monkeypatch.setenv("TALLY_MINUTE_RETENTION_HOURS", "23")
    assert script.main(argv) == 2
    assert "TALLY_MINUTE_RETENTION_HOURS='23'" in one_line_error(capsys)


def not_found() -> ClientError:
    return ClientError({"Error": {"Code": "ResourceNotFoundException", "Message": "no such table"}}, "TransactWriteItems")


def throttled() -> ClientError:
    return ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "TransactWriteItems")


@pytest.mark.parametrize(("error", "calls"), [(not_found, 1), (throttled, 3)], ids=["not found", "throttled"])
def test_the_stream_runner_retries_what_a_retry_can_heal_and_nothing_else(error, calls, capsys):
    invoked = []

    def handler(event, context):
        invoked.append(event)
        raise error()

    config = DeliveryConfig(batch_size=10, window_seconds=1, max_attempts=3)
    delivery = ShardDelivery(handler, shard_id="s", stream_arn="arn", config=config, on_retry=run_stream.report_retry)
    with pytest.raises(Exception):
        delivery.deliver([{"dynamodb": {"ApproximateCreationDateTime": 1_795_000_000}}])
        delivery.close()
    assert len(invoked) == calls
