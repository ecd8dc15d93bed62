"""`cdk bootstrap` and `cdk deploy` of this app into moto's server, then tally run on the deployed stack (`make deploy-local`).

    .venv/bin/python scripts/deploy_local.py                  # deploy, check, stop
    .venv/bin/python scripts/deploy_local.py --keep-running   # deploy, check, keep the server up until Ctrl-C
    .venv/bin/python scripts/deploy_local.py --port 4566      # on this loopback port (default: a free one)

moto's server on a loopback port plays AWS (`tally.local.moto_deploy` fills
what its CloudFormation lacks, each gap named with the AWS behaviour it
reproduces). The CDK CLI pinned in package.json bootstraps the account and
deploys the stack of cdk.json into it, as `make deploy` does into AWS. Then,
finding everything through the stack's outputs (--stack):

1. `local_pipeline.py --stack` writes the demo's workload into the deployed
   events table, runs the stream runner on its stream into the deployed counts
   table and checks both query plans against brute force: the demo's verdict;
2. `run_stream.py --stack --until-idle` reads the whole stream again from its
   start: exactly-once, so no count may change (`query_window.py --stack`
   before and after);
3. the read API's handler behind the local HTTP adapter, over the counts table
   the outputs name, answers a signed `GET /counts` with what
   `query_window.py --stack` prints, and `GET /openapi.json`.

Exit status 0 when all of it holds, 1 when a check fails, 2 when a step cannot
run (its output's last lines say why).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tally.core.api_access import ApiSettings
from tally.core.windows import now_ms
from tally.local import moto_deploy
from tally.local.aws import ArgumentParser, MotoServer, client, region
from tally.local.cli import DUMMY_CREDENTIALS, ScriptError, entry_point
from tally.local.delivery import MAX_WINDOW_SECONDS, MIN_WINDOW_SECONDS
from tally.local.workload import DEFAULT_RATE, DEMO_WINDOW_SECONDS
from tally.local.cli import console as make_console
from tally.local.http_adapter import LocalApi
from tally.stack_outputs import table_names_from_stack

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
CDK = ["npx", "--no-install", "cdk"]
CDK_FLAGS = ["--no-notices", "--no-version-reporting"]
COUNTERS = ("page-views", "sign-ups", "checkouts")  # the demo's workload
STEP_TIMEOUT_SECONDS = 900
# A profile makes the CLI's AWS SDK skip the credentials in the environment, which are the server's.
SHADOWING = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN")
SHOWN_FAILURE_LINES = 25

console = make_console()


def parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep-running", action="store_true", help="keep moto's server (and the stack) up until Ctrl-C")
    parser.add_argument("--port", type=loopback_port, default=0, help="moto's server's loopback port (default: a free one)")
    parser.add_argument(
        "--window-seconds",
        type=window_seconds,
        default=DEMO_WINDOW_SECONDS,
        help=f"tumbling window of both readers of the stream, 1-900 s (default {DEMO_WINDOW_SECONDS})",
    )
    parser.add_argument(
        "--rate",
        nargs=2,
        type=events_per_hour,
        default=list(DEFAULT_RATE),
        metavar=("LOW", "HIGH"),
        help=f"the demo's events per hour per counter (default {DEFAULT_RATE[0]} {DEFAULT_RATE[1]})",
    )
    return parser


@entry_point
def main(argv: list[str] | None = None) -> int:
    command = parser()
    args = command.parse_args(argv)
    if args.rate[0] > args.rate[1]:
        command.error(f"argument --rate: LOW must not be above HIGH, not {args.rate[0]} {args.rate[1]}")
    stack = json.loads((REPO / "cdk.json").read_text())["context"].get("stackName", "Tally")
    started = time.monotonic()
    moto_deploy.install()
    server = MotoServer(args.port).start()
    saved_environment = dict(os.environ)
    try:
        os.environ.update(server.environment())
        for name in SHADOWING:
            os.environ.pop(name, None)
        environment = {**os.environ, "CDK_DISABLE_CLI_TELEMETRY": "true", "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
        console.print(f"[bold]tally deploy-local[/] — moto's server at {server.endpoint_url}")
        account = client("sts").get_caller_identity()["Account"]
        with tempfile.TemporaryDirectory(prefix="tally-cdk-out-") as assembly:
            step("1/5 cdk bootstrap", [*CDK, "bootstrap", f"aws://{account}/{region()}", *CDK_FLAGS, "--output", assembly], environment)
            # The bootstrap synthesized the app into the assembly: the deploy reads it there instead of again.
            deploy = [*CDK, "deploy", stack, "--app", assembly, "--require-approval", "never", *CDK_FLAGS]
            step(f"2/5 cdk deploy {stack}", deploy, environment)
        tables = table_names_from_stack(stack, client("cloudformation"))
        console.print(f"   outputs: {', '.join(f'{key}={value}' for key, value in tables.items())}")

        console.print(f"3/5 the demo on stack {stack} (local_pipeline.py --stack {stack}):")
        window = ["--window-seconds", str(args.window_seconds)]  # the same windows for both readers of the stream
        rate = ["--rate", *map(str, args.rate)]
        matched = script(["local_pipeline.py", "--stack", stack, *window, *rate], environment, show=True).returncode == 0
        at = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(now_ms() // 60_000 * 60))
        before = counts(stack, at, environment)
        script(["run_stream.py", "--stack", stack, "--until-idle", "--idle-polls", "2", "--poll-interval", "0.2", *window], environment)
        after = counts(stack, at, environment)
        unchanged = before == after
        matched &= unchanged
        console.print(
            f"4/5 run_stream.py --stack {stack} read the stream again from its start: totals "
            + ", ".join(f"{count['counter']} {count['total']:,}" for count in after)
            + (" [green]unchanged, nothing counted twice" if unchanged else f" [red]CHANGED from {before}")
        )
        matched &= read_api_agrees(tables["CountsTableName"], after, at)
        console.print(f"{'VERDICT: MATCH' if matched else 'VERDICT: MISMATCH'} — finished in {time.monotonic() - started:.0f} s")
        if args.keep_running:
            keep_running(server, stack)
        return 0 if matched else 1
    finally:
        server.stop()
        os.environ.clear()
        os.environ.update(saved_environment)


def loopback_port(text: str) -> int:
    port = int(text) if text.isdigit() else -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 1 to 65535, not {text!r}")
    return port


def window_seconds(text: str) -> int:
    seconds = int(text) if text.isdigit() else -1
    if not MIN_WINDOW_SECONDS <= seconds <= MAX_WINDOW_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected a tumbling window of {MIN_WINDOW_SECONDS} to {MAX_WINDOW_SECONDS} seconds, not {text!r}"
        )
    return seconds


def events_per_hour(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of events per hour from 1, not {text!r}")
    return int(text)


def step(title: str, command: list[str], environment: dict[str, str]) -> None:
    """A CDK CLI command, its chatter kept back unless it fails."""
    started = time.monotonic()
    finished = subprocess.run(
        command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=STEP_TIMEOUT_SECONDS
    )
    if finished.returncode != 0:
        tail = "\n".join((finished.stdout + finished.stderr).splitlines()[-SHOWN_FAILURE_LINES:])
        raise ScriptError(f"{title} failed (exit {finished.returncode}):\n{tail}")
    console.print(f"{title}: done in {time.monotonic() - started:.0f} s")


def script(arguments: list[str], environment: dict[str, str], *, show: bool = False) -> subprocess.CompletedProcess:
    """One of tally's scripts against the server; its output shown (``show``) or kept back unless it fails."""
    command = [sys.executable, str(SCRIPTS / arguments[0]), *arguments[1:]]
    if show:
        return subprocess.run(command, cwd=REPO, env=environment, timeout=STEP_TIMEOUT_SECONDS)
    finished = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=STEP_TIMEOUT_SECONDS)
    if finished.returncode != 0:
        tail = "\n".join((finished.stdout + finished.stderr).splitlines()[-SHOWN_FAILURE_LINES:])
        raise ScriptError(f"{arguments[0]} failed (exit {finished.returncode}):\n{tail}")
    return finished


def counts(stack: str, at: str, environment: dict[str, str]) -> list[dict]:
    """What query_window.py --stack prints for the demo's counters over the 24 h ending ``at``."""
    printed = script(["query_window.py", *COUNTERS, "--stack", stack, "--at", at, "--json"], environment).stdout
    return [json.loads(line) for line in printed.splitlines()]


def read_api_agrees(counts_table: str, printed: list[dict], at: str) -> bool:
    """The read API's handler, behind the local adapter over the stack's counts table, answers a signed request
    as query_window.py printed, and describes itself."""
    from tally import http_api
    from tally.functions import read_api

    os.environ["COUNTS_TABLE"] = counts_table
    http_api.reader.cache_clear()
    http_api.api_settings.cache_clear()
    credentials = Credentials(DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"], DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    query = "&".join(f"counter={counter}" for counter in COUNTERS) + f"&at={at}"
    with LocalApi(read_api.handler, credentials=credentials, settings=ApiSettings(), require_signature=True) as api:
        answered = signed_get(f"{api.url}/counts?{query}", credentials)["counts"]
        described = signed_get(f"{api.url}/openapi.json", credentials)
    agrees = answered == printed and "/counts" in described["paths"]
    console.print(
        f"5/5 the read API (local adapter, signed) over {counts_table}: GET /counts "
        + ("[green]equals query_window.py --stack" if agrees else "[red]differs from query_window.py --stack")
        + f", GET /openapi.json describes {len(described['paths'])} routes"
    )
    return agrees


def signed_get(url: str, credentials: Credentials) -> dict:
    request = AWSRequest(method="GET", url=url)
    SigV4Auth(credentials, "execute-api", region()).add_auth(request)
    with urllib.request.urlopen(urllib.request.Request(url, headers=dict(request.headers)), timeout=60) as response:
        return json.loads(response.read())


def keep_running(server: MotoServer, stack: str) -> None:
    console.print("\nThe server keeps running with the stack deployed. In another shell:")
    print("export " + " ".join(f"{name}={value}" for name, value in server.environment().items()), flush=True)
    console.print(
        f"then e.g. [bold].venv/bin/python scripts/query_window.py page-views --stack {stack}[/] or "
        f"[bold]npx cdk deploy[/] again. Ctrl-C to stop."
    )
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    stop.wait()


if __name__ == "__main__":
    sys.exit(main())
