"""Infrastructure mistakes end in one line on stderr naming the problem and the fix, exit status 2, for every script."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import tomllib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from botocore.retries.standard import ExponentialBackoff
from script_support import SCRIPTS, load_script

from tally.local.cli import explain, is_permanent
from tally.local.delivery import DeliveryConfig, ShardDelivery

generate_events = load_script("generate_events")
query_window = load_script("query_window")
run_stream = load_script("run_stream")

REPO_ROOT = Path(__file__).resolve().parents[2]
IDLE = ["--until-idle", "--idle-polls", "1", "--poll-interval", "0", "--window-seconds", "1"]


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


@pytest.mark.parametrize(
    ("script", "argv"),
    [(query_window, ["page-views"]), (run_stream, IDLE), (generate_events, ["--hours", "1"])],
    ids=["query_window", "run_stream", "generate_events"],
)
def test_no_credentials_for_a_remote_endpoint_say_so_and_name_the_endpoint(script, argv, no_credentials, monkeypatch, capsys):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://dynamodb.internal.example:8443")
    assert script.main(argv) == 2
    error = one_line_error(capsys)
    assert "no AWS credentials for AWS_ENDPOINT_URL=https://dynamodb.internal.example:8443" in error
    assert "no AWS_ENDPOINT_URL" not in error and "AWS_PROFILE" in error


@pytest.mark.parametrize("endpoint", [None, "http://127.0.0.1:1"])
def test_a_profile_that_does_not_exist_is_one_line(endpoint, no_credentials, monkeypatch, capsys):
    if endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_PROFILE", "nosuch")
    assert query_window.main(["page-views"]) == 2
    assert "AWS_PROFILE=nosuch: The config profile (nosuch) could not be found" in one_line_error(capsys)


@pytest.mark.server
@pytest.mark.usefixtures("fresh_handler_cache")
def test_a_loopback_endpoint_needs_no_credentials(tables, no_credentials, moto_server, monkeypatch, capsys):
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint_url.replace("127.0.0.1", "localhost"))
    assert generate_events.main(["--hours", "1", "--rate", "5", "5", "--bad", "0"]) == 0
    assert run_stream.main(IDLE) == 0
    assert query_window.main(["page-views", "--json"]) == 0
    assert '"total": 5' in capsys.readouterr().out


@pytest.mark.parametrize("endpoint", ["localhost:8000", "http://", "http://127.0.0.1:notaport"])
def test_an_endpoint_that_is_not_a_url_is_one_line(endpoint, monkeypatch, capsys):
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    for name, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t"}.items():
        monkeypatch.setenv(name, value)
    assert query_window.main(["page-views"]) == 2
    assert f"AWS_ENDPOINT_URL={endpoint} is not a URL" in one_line_error(capsys)


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


audit = load_script("audit")
backfill = load_script("backfill")
# A count-from the backfill accepts on any date: it refuses one more than a day before the clock it runs on.
AN_HOUR_AGO = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
# Every script that reads a stack's outputs, with what else it needs to get that far.
STACK_READERS = {
    "query_window": (query_window, ["page-views"]),
    "generate_events": (generate_events, ["--hours", "1"]),
    "run_stream": (run_stream, IDLE),
    "audit": (audit, ["page-views"]),
    "backfill": (backfill, ["--count-from", AN_HOUR_AGO, "--export-arn", "arn:aws:dynamodb:x"]),
}
ERROR_PAGE = b"<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n<h1>Internal Server Error</h1>\n"


@pytest.fixture
def failing_server(monkeypatch):
    """An endpoint that answers every request with an HTML error page and status 500, as a broken server does."""

    class ErrorPage(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(500)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(ERROR_PAGE)))
            self.end_headers()
            self.wfile.write(ERROR_PAGE)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ErrorPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    # botocore still tries each request 8 times, without sleeping seconds between the tries.
    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    for name, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    yield endpoint
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("name", STACK_READERS)
def test_a_stack_lookup_answered_by_an_error_page_is_one_line(name, failing_server, capsys):
    script, argv = STACK_READERS[name]
    assert script.main([*argv, "--stack", "Nope"]) == 2
    error = one_line_error(capsys)
    assert f"{failing_server} answered with something that is not an AWS response (500 Internal Server Error)" in error
    assert "local_pipeline.py --keep-running" in error


def test_a_server_error_on_every_try_is_one_line_naming_the_operation_and_status(failing_server, capsys):
    assert query_window.main(["page-views", "--table", "t"]) == 2
    error = one_line_error(capsys)
    assert f"{failing_server} failed BatchGetItem with HTTP 500 (500 Internal Server Error) every time it was tried" in error


def test_the_stream_runner_retries_an_invocation_a_server_error_failed():
    failed = ClientError(
        {"Error": {"Code": "InternalServerError", "Message": "oops"}, "ResponseMetadata": {"HTTPStatusCode": 500}},
        "TransactWriteItems",
    )
    assert explain(failed) is not None and not is_permanent(failed)
    assert is_permanent(not_found())


@pytest.mark.server
@pytest.mark.parametrize("name", STACK_READERS)
def test_a_missing_stack_on_moto_is_named_with_the_tables_to_use_instead(name, server_env, capsys):
    script, argv = STACK_READERS[name]
    assert script.main([*argv, "--stack", "Nope"]) == 2
    error = one_line_error(capsys)
    assert f"stack 'Nope' not found at {server_env.endpoint_url}" in error and "EVENTS_TABLE/COUNTS_TABLE" in error


@pytest.mark.server
def test_the_demo_install_answers_a_stack_lookup(tmp_path):
    """With only what `make demo` installs (the scripts extra), moto's server answers CloudFormation, not a 500."""
    finished = subprocess.run(
        [sys.executable, "-c", DEMO_INSTALL_ONLY + STACK_LOOKUP],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "lambda_src")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 2, finished.stderr
    assert finished.stderr.count("\n") == 1 and "stack 'Nope' not found at http://127.0.0.1:" in finished.stderr


# Imports of distributions outside the scripts extra fail, as they do in the virtualenv `make demo` creates.
# This checkout's distribution, as pyproject.toml names it ("tally" on PyPI is another project).
DISTRIBUTION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["name"]
DEMO_INSTALL_ONLY = f"DISTRIBUTION = {DISTRIBUTION!r}\n" + """
import importlib.abc, importlib.metadata as metadata, sys
from packaging.requirements import Requirement

def closure(name, extras, seen):
    key = name.lower().replace("_", "-")
    if (key, extras) in seen:
        return
    seen.add((key, extras))
    for text in metadata.requires(name) or []:
        requirement = Requirement(text)
        wanted = extras or ("",)
        if requirement.marker is None or any(requirement.marker.evaluate({"extra": extra}) for extra in wanted):
            closure(requirement.name, tuple(sorted(requirement.extras)), seen)

seen = set()
closure(DISTRIBUTION, ("scripts",), seen)
installed = {name.lower().replace("_", "-") for name, _ in seen}
blocked = {
    module for module, distributions in metadata.packages_distributions().items()
    if not any(d.lower().replace("_", "-") in installed for d in distributions)
}
blocked -= set(sys.stdlib_module_names) | set(sys.modules)

class DemoInstall(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the scripts extra)")
        return None

sys.meta_path.insert(0, DemoInstall())
"""
STACK_LOOKUP = """
import os
from tally.local.aws import MotoServer
from tally.local.cli import load_script
with MotoServer() as server:
    os.environ.update(server.environment())
    sys.exit(load_script("query_window").main(["page-views", "--stack", "Nope"]))
"""
