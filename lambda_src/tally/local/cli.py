"""The edge every script shares: one-line errors for infrastructure mistakes, and output fit for pipes.

Wrap a script's ``main(argv) -> int`` in ``entry_point``. A missing table, an
endpoint nobody answers at, or that answers with server errors or with
something that is not an AWS response, missing or refused credentials, a bad
setting or an unknown stack then end in one line on stderr that names the
problem and the fix, with exit status 2, instead of a traceback. Anything
else is a bug and still raises.

``require_table`` names the table a script needs, and ``preflight`` (run by
``tally.local.aws.client``) finds an unreachable endpoint or absent
credentials before boto3 spends its retries on them. Against a loopback
endpoint (moto's server, DynamoDB Local), which accepts any credentials, it
signs with dummy ones when none are configured.
"""

from __future__ import annotations

import functools
import importlib.util
import ipaddress
import os
import re
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
)
from botocore.parsers import ResponseParserError
from rich.console import Console

from tally.core.commit import RetriesExhausted
from tally.core.settings import SettingsError
from tally.core.windows import QueryError
from tally.local.delivery import DeliveryFailed
from tally.stack_outputs import StackOutputsError

EXIT_USAGE = 2
DEFAULT_REGION = "us-east-1"
LOCAL_SERVER_FIX = (
    "for moto's server on this machine, start `.venv/bin/python scripts/local_pipeline.py --keep-running` "
    "and run the export line it prints"
)
REFUSED_CREDENTIAL_CODES = {
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "ExpiredTokenException",
    "AccessDeniedException",
}
# moto's server and DynamoDB Local accept any credentials; these only keep boto3 from looking for real ones.
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
# Piped output is read by programs and pasted by people: lines as long as they are.
PIPE_WIDTH = 10_000

_reachable: set[str] = set()


class ScriptError(Exception):
    """A mistake in the script's surroundings, reported in one line with exit status 2."""


class ServerFailed(ScriptError):
    """The endpoint failed a request, or answered with something that is not an AWS response.

    Reported like a ScriptError, but a later retry may succeed, so a stream
    runner retries the invocation rather than stop.
    """


def entry_point(main: Callable[..., int]) -> Callable[..., int]:
    """``main(argv, ...)``, with the mistakes ``explain`` knows turned into one line on stderr and exit status 2."""

    @functools.wraps(main)
    def run(argv: list[str] | None = None, **options: Any) -> int:
        try:
            return main(argv, **options)
        except Exception as error:
            message = explain(error)
            if message is None:
                raise
            print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
            return EXIT_USAGE

    return run


def explain(error: BaseException) -> str | None:
    """One line naming the problem and its fix, or None for an error that is a bug."""
    while isinstance(error, DeliveryFailed) and error.__cause__ is not None:
        error = error.__cause__
    server_failure = server_failed(error)
    if server_failure is not None:
        return str(server_failure)
    if isinstance(error, ScriptError | SettingsError | StackOutputsError | QueryError):
        return str(error)
    if isinstance(error, ConnectionError | ConnectionClosedError):
        return unreachable(str(error))
    if isinstance(error, NoCredentialsError | PartialCredentialsError):
        return no_credentials()
    if isinstance(error, ProfileNotFound):
        return f"AWS_PROFILE={os.environ.get('AWS_PROFILE', '')}: {error}: name a profile of `aws configure list-profiles`, or unset it"
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        detail = error.response.get("Error", {}).get("Message", "") or code
        if is_missing_table(error):
            return f"{detail} at {where()}: check the table names (flags, EVENTS_TABLE/COUNTS_TABLE or --stack); {LOCAL_SERVER_FIX}"
        if code in REFUSED_CREDENTIAL_CODES:
            return f"{where()} refused the credentials ({code}: {detail}): check AWS_PROFILE or `aws configure`"
    return None


def server_failed(error: BaseException) -> ServerFailed | None:
    """The endpoint's failure as one line, or None: server errors after every retry, answers that are not AWS's, time-outs.

    botocore retries 5xx answers itself (8 tries), so one that reaches a
    script has failed every time; an answer it cannot parse (an HTML error
    page, say) is not retried at all.
    """
    if isinstance(error, ServerFailed):
        return error
    if isinstance(error, ResponseParserError):
        return ServerFailed(f"{where()} answered with something that is not an AWS response ({_gist(str(error))}): {_server_fix()}")
    if isinstance(error, ReadTimeoutError):
        return ServerFailed(f"{where()} did not answer in time ({error}): {_server_fix()}")
    if isinstance(error, RetriesExhausted):
        return ServerFailed(f"{where()} kept throttling or leaving requests unprocessed ({error}): try again in a while")
    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if status >= 500:
            code = error.response.get("Error", {}).get("Code", "")
            detail = _gist(error.response.get("Error", {}).get("Message", ""))
            said = ": ".join(part for part in (code, detail) if part and part != str(status))
            return ServerFailed(
                f"{where()} failed {error.operation_name} with HTTP {status}{f' ({said})' if said else ''} "
                f"every time it was tried: {_server_fix()}"
            )
    return None


def _server_fix() -> str:
    if os.environ.get("AWS_ENDPOINT_URL"):
        return (
            "is AWS_ENDPOINT_URL the server you meant? moto's server logs the cause of its failures; "
            f"{LOCAL_SERVER_FIX}, or unset AWS_ENDPOINT_URL to use AWS"
        )
    return "try again in a while, or check the AWS Health Dashboard for the region"


def _gist(text: str) -> str:
    """An error page or message reduced to a short line: its HTML title when it has one."""
    title = re.search(r"<title>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    if title:
        text = title.group(1)
    text = " ".join(re.sub(r"<[^>]+>|b'|\\n", " ", text).split())
    return text if len(text) <= 120 else text[:117] + "..."


def is_permanent(error: BaseException) -> bool:
    """Whether retrying cannot help: the table, endpoint or credentials are wrong, not busy or failing for now."""
    return server_failed(error) is None and explain(error) is not None


def region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


def where() -> str:
    """The endpoint the scripts talk to, as the user would recognize it."""
    return os.environ.get("AWS_ENDPOINT_URL") or f"AWS ({region()})"


def unreachable(reason: str) -> str:
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        return f"nothing answers at AWS_ENDPOINT_URL={endpoint} ({reason}): {LOCAL_SERVER_FIX}, or unset AWS_ENDPOINT_URL to use AWS"
    return f"cannot reach {where()} ({reason}): check the network and AWS_REGION"


def no_credentials(endpoint_url: str | None = None) -> str:
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        return (
            f"no AWS credentials for AWS_ENDPOINT_URL={endpoint}, which is not on this machine: "
            "set AWS_PROFILE or run `aws configure` for the account it serves; "
            "a local server (moto's, DynamoDB Local) needs none when AWS_ENDPOINT_URL names it by a loopback address"
        )
    return f"no AWS credentials and no AWS_ENDPOINT_URL: for AWS set AWS_PROFILE or run `aws configure`; {LOCAL_SERVER_FIX}"


def is_loopback(endpoint_url: str) -> bool:
    """Whether the endpoint is on this machine: localhost, 127.0.0.0/8 or ::1."""
    host = urlsplit(endpoint_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def preflight(endpoint_url: str | None = None) -> None:
    """Raise ScriptError now if nothing listens at the endpoint, or no credentials exist where they are needed.

    Otherwise boto3 retries a refused connection for the better part of a minute
    and ends in a traceback. A reachable endpoint is checked once per process.
    A loopback endpoint without credentials gets dummy ones (in the environment,
    so the in-process handler's own client finds them too): servers on this
    machine accept any.
    """
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    if boto3.Session().get_credentials() is None:
        if not endpoint or not is_loopback(endpoint):
            raise ScriptError(no_credentials(endpoint))
        os.environ.update(DUMMY_CREDENTIALS)
    if not endpoint or endpoint in _reachable:
        return
    parts = urlsplit(endpoint)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as error:
        raise ScriptError(f"AWS_ENDPOINT_URL={endpoint} is not a URL ({error}): write it as http://HOST:PORT") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ScriptError(f"AWS_ENDPOINT_URL={endpoint} is not a URL: write it as http://HOST:PORT")
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout=3):
            pass
    except OSError as error:
        raise ScriptError(unreachable(error.strerror or type(error).__name__)) from None
    _reachable.add(endpoint)


def require_table(dynamodb_client: Any, name: str, flag: str) -> dict[str, Any]:
    """The table's description, or ScriptError naming the table, where it was looked for, and how to fix it."""
    try:
        return dynamodb_client.describe_table(TableName=name)["Table"]
    except ClientError as error:
        if not is_missing_table(error):
            raise
    raise missing_table(name, flag)


def is_missing_table(error: BaseException) -> bool:
    return isinstance(error, ClientError) and error.response.get("Error", {}).get("Code") == "ResourceNotFoundException"


def missing_table(name: str, flag: str) -> ScriptError:
    """The error for a table that is not there: ``flag`` says how the script is told the name."""
    return ScriptError(f"no table {name!r} at {where()}: name it with {flag} or --stack; {LOCAL_SERVER_FIX}")


def console(*, stderr: bool = False) -> Console:
    """A rich Console; when piped it wraps nothing, so commands and ARNs survive copying."""
    probe = Console(stderr=stderr)
    if probe.is_terminal:
        return probe
    return Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True)


SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"


def load_script(name: str) -> ModuleType:
    """A script of this checkout as a module, so a demo or a test can call its main(argv)."""
    spec = importlib.util.spec_from_file_location(f"tally_script_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
