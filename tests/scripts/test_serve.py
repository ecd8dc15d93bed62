"""`make serve` as a user runs it: a process that serves the API live, the README's examples against it, Ctrl-C.

One serve process per module (a little history, a live workload); the
Ctrl-C test starts its own, with the blog's rules, so it can end it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from documents import code_block
from script_support import SCRIPTS

pytestmark = pytest.mark.server

REPO = SCRIPTS.parent
START_SECONDS = 120


class Serving:
    """A running scripts/serve.py: its process, the lines it printed, the URLs and environment it announced."""

    def __init__(self, *args: str, backend: str = "moto", environment: dict[str, str] | None = None) -> None:
        env = {name: value for name, value in os.environ.items() if not name.startswith(("AWS_ENDPOINT", "COUNTS_", "EVENTS_"))}
        env["TALLY_LOCAL_BACKEND"] = self.backend = backend
        env.update(environment or {})
        self.process = subprocess.Popen(
            [sys.executable, str(SCRIPTS / "serve.py"), "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=REPO,
            start_new_session=True,  # its own process group: the test can tell whether anything of it is left
        )
        self.lines: list[str] = []
        self.api = self.dashboard = ""
        self.environment: dict[str, str] = {}

    def wait_for(self, prefix: str) -> str:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"serve.py ended before printing {prefix!r}:\n" + "".join(self.lines))
            self.lines.append(line)
            if line.startswith("API: "):
                self.api = line.removeprefix("API: ").strip()
            elif line.startswith("Dashboard: "):
                self.dashboard = line.removeprefix("Dashboard: ").strip()
            elif line.startswith("export "):
                self.environment = dict(word.split("=", 1) for word in shlex.split(line.removeprefix("export ")))
            if line.startswith(prefix):
                return line
        raise AssertionError(f"serve.py printed no {prefix!r} in {START_SECONDS} s:\n" + "".join(self.lines))

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        try:
            rest, _ = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self.lines.extend(rest.splitlines(keepends=True))
        return self.process.returncode

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@pytest.fixture(scope="module", params=["moto", pytest.param("dynamodb-local", marks=pytest.mark.dynamodb_local)])
def serving(request):
    """make serve on either backend: the same API, dashboard and README examples over moto or DynamoDB Local."""
    serve = Serving("--hours", "2", "--rate", "5", "--window-seconds", "2", backend=request.param)
    try:
        serve.wait_for("live: ")
        yield serve
    finally:
        if serve.process.poll() is None:
            serve.interrupt()


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=15) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def json_documents(text: str) -> list[dict]:
    decoder, documents, position = json.JSONDecoder(), [], 0
    while position < len(text.rstrip()):
        document, position = decoder.raw_decode(text, position)
        documents.append(document)
        while position < len(text) and text[position].isspace():
            position += 1
    return documents


def test_it_announces_the_api_and_the_dashboard_on_loopback(serving):
    backend = {"moto": "moto's server", "dynamodb-local": "DynamoDB Local"}[serving.backend]
    assert f"tables: {backend} at {serving.environment['AWS_ENDPOINT_URL']}\n" in serving.lines
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", serving.api)
    assert serving.dashboard.startswith(f"{serving.api}/?counter=page-views")
    with urllib.request.urlopen(serving.dashboard, timeout=15) as page:
        assert page.headers["Content-Type"].startswith("text/html") and b"uPlot" in page.read()


def answered_and_printed(serve: Serving, counter: str) -> tuple[int, dict, dict]:
    """The API's answer and query_window --json's line for one counter over 24 h ending at the hour's start:
    before every live event, so no bucket the live workload writes is read."""
    at = time.strftime("%Y-%m-%dT%H:00Z", time.gmtime())
    status, body = fetch(f"{serve.api}/counts?counter={counter}&window=24h&at={at}")
    cli = subprocess.run(
        [sys.executable, str(SCRIPTS / "query_window.py"), counter, "--window", "24h", "--at", at, "--json"],
        capture_output=True, text=True, env={**os.environ, **serve.environment}, timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    (printed,) = [json.loads(line) for line in cli.stdout.splitlines()]
    (answered,) = body["counts"] if status == 200 else [body]
    return status, answered, printed


def test_the_api_answers_the_cli_total_for_the_same_instant(serving):
    status, answered, printed = answered_and_printed(serving, "page-views")

    assert status == 200
    assert answered == printed
    assert answered["total"] > 0


def test_the_live_workload_keeps_counting(serving):
    """Read over 24 h, which holds the 2 h of history whole: no event leaves the window while the test waits, so
    the total only grows by what the live workload adds (over 10 minutes, history leaving could outweigh it)."""
    def total() -> int:
        counts = fetch(f"{serving.api}/counts?counter=page-views&counter=sign-ups&counter=checkouts&window=24h")[1]
        return sum(count["total"] for count in counts["counts"])

    before = total()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and total() <= before:
        time.sleep(1)
    assert total() > before


def test_the_readme_command_line_example_prints_the_count_as_the_api_answers_it(serving):
    block = code_block("## Read counts from your code", "bash")
    assert "scripts/query_window.py page-views" in block
    run = subprocess.run(
        ["bash", "-e", "-c", block], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, **serving.environment},
    )
    assert run.returncode == 0, run.stderr
    (printed,) = [json.loads(line) for line in run.stdout.splitlines()]
    assert printed["counter"] == "page-views" and printed["total"] > 0
    assert set(printed) >= {"start", "end", "plan", "keys"}


def test_the_readme_curl_examples_run_against_it(serving):
    block = code_block("### From the command line (curl)", "bash")
    script = re.sub(r"^API=\S+$", f"API={serving.api}", block, flags=re.M)
    assert script != block, "the example names the API it calls in an API= line"

    run = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True, timeout=60)

    answers = json_documents(run.stdout)  # curl prints each body as it is, without a newline between them
    assert run.returncode == 0 and len(answers) == block.count("curl ")
    counts, several, listed, refused, described = answers
    assert counts["counts"][0]["counter"] == "page-views" and counts["counts"][0]["total"] > 0
    assert [c["counter"] for c in several["counts"]] == ["page-views", "sign-ups"] and several["counts"][0]["plan"] == "range"
    assert [c["counter"] for c in listed["counters"]] == ["sign-ups"]
    assert refused["parameter"] == "window" and "\n" not in json.dumps(refused)
    assert described["openapi"].startswith("3.") and {"/counts", "/counters"} <= set(described["paths"])


def test_the_readme_python_example_signs_and_the_local_adapter_verifies(serving, tmp_path):
    example = tmp_path / "read_counts.py"
    example.write_text(code_block("### From Python, signed with your AWS credentials", "python"))
    base = {**os.environ, **serving.environment, "TALLY_API": serving.api}
    base.pop("AWS_ENDPOINT_URL", None)  # the example talks to the API alone

    signed = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, env=base, timeout=60)
    forged = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=60,
        env={**base, "AWS_SECRET_ACCESS_KEY": "not-the-secret"},
    )
    at_hand = fetch(f"{serving.api}/counts?counter=page-views&counter=sign-ups&window=24h")[1]["counts"]

    assert signed.returncode == 0, signed.stderr
    printed = dict(line.split() for line in signed.stdout.splitlines())
    assert list(printed) == ["page-views", "sign-ups"]
    for count in at_hand:  # the live workload may have added a few events between the two reads
        assert 0 < int(printed[count["counter"]]) <= count["total"]
    assert forged.returncode != 0 and "403" in forged.stderr


def signed_get(url: str, environment: dict[str, str]) -> tuple[int, dict]:
    request = AWSRequest(method="GET", url=url)
    credentials = Credentials(environment["AWS_ACCESS_KEY_ID"], environment["AWS_SECRET_ACCESS_KEY"])
    SigV4Auth(credentials, "execute-api", environment["AWS_REGION"]).add_auth(request)
    return fetch(url, dict(request.headers))


@pytest.mark.node_clock
def test_the_readme_javascript_example_signs_with_aws4fetch_and_the_signed_server_checks_it(tmp_path):
    """Node runs the README's block as written (aws4fetch from package-lock.json) against `serve.py --signed`,
    which refuses unsigned requests as API Gateway does."""
    example = tmp_path / "read_counts.mjs"
    example.write_text(code_block("### From JavaScript, with a SigV4 signer", "javascript"))
    (tmp_path / "node_modules").symlink_to(REPO / "node_modules")  # where Node resolves the example's import
    serve = Serving("--hours", "1", "--rate", "5", "--window-seconds", "2", "--signed")
    try:
        serve.wait_for("live: ")
        environment = {**os.environ, **serve.environment, "TALLY_API": serve.api}
        environment.pop("AWS_SESSION_TOKEN", None)
        node = ["node", str(example)]
        signed = subprocess.run(node, capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=60)
        forged = subprocess.run(
            node, capture_output=True, text=True, cwd=tmp_path, timeout=60,
            env={**environment, "AWS_SECRET_ACCESS_KEY": "not-the-secret"},
        )
        unsigned, refusal = fetch(f"{serve.api}/counts?counter=page-views")
        status, at_hand = signed_get(f"{serve.api}/counts?counter=page-views&window=24h", environment)
    finally:
        serve.interrupt()

    assert signed.returncode == 0, signed.stderr
    ((counter, total),) = [line.split() for line in signed.stdout.splitlines()]
    assert counter == "page-views" and 0 < int(total) <= at_hand["counts"][0]["total"] and status == 200
    assert forged.returncode != 0 and "signature we calculated does not match" in forged.stderr
    assert (unsigned, refusal) == (403, {"message": "Missing Authentication Token"})


def test_ctrl_c_stops_everything_and_leaves_no_process_behind():
    # Two hours of history: the page's window ends at the top of this hour, so it holds at least one of them.
    serve = Serving("--hours", "2", "--rate", "5", "--window-seconds", "2", "--shape", "blog")
    try:
        serve.wait_for("live: ")
        status, body = fetch(f"{serve.api}/counts?counter=views/all&window=2h")
        ports = [int(serve.api.rsplit(":", 1)[1]), int(serve.environment["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])]
        page_status, page, printed = answered_and_printed(serve, "views/posts/hello-world")

        assert status == 200 and body["counts"][0]["total"] > 0  # the shaped workload, counted by the blog's rules
        # The blog's views rule counts distinct clientIds: the API answers them as query_window --json prints them.
        assert page_status == 200 and page == printed
        assert 0 < page["distinct"] <= page["total"] and page["distinct_exact"] is True
        assert sum(page["distinct_by_hour"].values()) >= page["distinct"]
        assert serve.interrupt() == 0, "".join(serve.lines)
    finally:
        serve.kill()
    assert any(line.startswith("stopped: ") for line in serve.lines)
    with pytest.raises(ProcessLookupError):
        os.killpg(serve.process.pid, 0)  # nothing of its process group is left
    for port in ports:
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
            pass


def test_a_port_in_use_is_one_line_and_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run(
            [sys.executable, str(SCRIPTS / "serve.py"), "--port", str(port), "--hours", "0"],
            capture_output=True, text=True, timeout=60, cwd=REPO,
        )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [f"serve.py: error: port {port} on 127.0.0.1 is in use: choose another with --port (0: any free one)"]


def test_serve_prints_alert_events_as_they_come_from_its_local_sink():
    rules = '[{"name": "all", "counter": "{counter}", "alerts": [{"name": "any-event", "window": "5m", "above": 0}]}]'
    serve = Serving("--hours", "0", "--rate", "5", "--window-seconds", "2", "--counters", "alpha", environment={"TALLY_RULES": rules})
    try:
        serve.wait_for("alerts: delivered to moto's EventBridge")
        line = serve.wait_for("alert: ALARM any-event alpha: ")
        assert re.fullmatch(r"alert: ALARM any-event alpha: \d+ in \[\S+Z, \S+Z\) \(threshold 0\)\n", line)
    finally:
        assert serve.interrupt() == 0
    assert sum(line.startswith("alert: ALARM any-event alpha") for line in serve.lines) == 1
