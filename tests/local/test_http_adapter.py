"""The local adapter answers over a real socket as API Gateway would: its routes, its event, its signature checks.

The handler here records the events it is given: what is under test is the
adapter's side of the contract (tests/test_http_api.py drives the real handler).
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
import threading
import time
import urllib.error
import urllib.request

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tally.core.api_access import ApiSettings
from tally.local.http_adapter import LocalApi

CREDENTIALS = Credentials("testing", "testing")


class RecordingHandler:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def __call__(self, event: dict, context: object) -> dict:
        self.events.append(event)
        if event["rawPath"] == "/counters" and "boom" in event["rawQueryString"]:
            raise RuntimeError("a bug in the function")
        return {"statusCode": 200, "headers": {"Content-Type": "application/json", "X-Seen": "yes"}, "body": '{"ok":true}'}


@pytest.fixture(scope="module")
def recorded():
    handler = RecordingHandler()
    with LocalApi(handler, credentials=CREDENTIALS, settings=ApiSettings(public_prefixes=("views/",))) as api:
        yield api, handler


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], dict]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def signed_headers(url: str, credentials: Credentials = CREDENTIALS, service: str = "execute-api") -> dict[str, str]:
    request = AWSRequest(method="GET", url=url)
    SigV4Auth(credentials, service, "us-east-1").add_auth(request)
    return dict(request.headers)


def test_the_event_is_api_gateways_payload_2_with_the_raw_query_and_joined_repeats(recorded):
    api, handler = recorded
    status, headers, body = get(f"{api.url}/counts?counter=a%2Cb&counter=c&window=24h", {"X-Custom": "1"})

    event = handler.events[-1]
    assert (status, headers["X-Seen"], body) == (200, "yes", {"ok": True})
    assert event["version"] == "2.0" and event["routeKey"] == "GET /counts"
    assert event["rawPath"] == "/counts"
    assert event["rawQueryString"] == "counter=a%2Cb&counter=c&window=24h"
    assert event["queryStringParameters"] == {"counter": "a,b,c", "window": "24h"}  # why the function reads the raw query
    assert event["headers"]["x-custom"] == "1"
    assert event["requestContext"]["http"]["method"] == "GET"
    assert event["requestContext"]["http"]["sourceIp"] == "127.0.0.1"


def test_only_the_stacks_routes_exist(recorded):
    api, handler = recorded
    seen = len(handler.events)

    assert get(f"{api.url}/public/counts?counter=views/a")[0] == 200  # public prefixes are set here
    assert get(f"{api.url}/nothing")[:3:2] == (404, {"message": "Not Found"})
    assert get(f"{api.url}/")[0] == 404  # the dashboard is off in these settings
    request = urllib.request.Request(f"{api.url}/counts", method="POST", data=b"{}")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 404
    assert len(handler.events) == seen + 1


def test_a_correct_sigv4_signature_passes(recorded):
    api, handler = recorded
    url = f"{api.url}/counts?counter=page-views&window=90m"

    status, _, _ = get(url, signed_headers(url))

    assert status == 200
    assert handler.events[-1]["headers"]["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/")


@pytest.mark.parametrize(
    ("credentials", "service", "message"),
    [
        (Credentials("testing", "wrong-secret"), "execute-api", "signature we calculated does not match"),
        (Credentials("someone-else", "testing"), "execute-api", "security token included in the request is invalid"),
        (CREDENTIALS, "dynamodb", "scoped to correct service"),
    ],
)
def test_a_wrong_signature_is_refused_with_403_before_the_function_runs(recorded, credentials, service, message):
    api, handler = recorded
    url = f"{api.url}/counts?counter=page-views"
    seen = len(handler.events)

    status, _, body = get(url, signed_headers(url, credentials, service))

    assert status == 403 and message in body["message"]
    assert len(handler.events) == seen


def test_a_signature_for_another_query_is_refused(recorded):
    api, _ = recorded
    signed_for = f"{api.url}/counts?counter=page-views"

    status, _, body = get(f"{api.url}/counts?counter=sign-ups", signed_headers(signed_for))

    assert status == 403 and "does not match" in body["message"]


def test_a_function_that_raises_is_apis_gateway_500_without_a_traceback(recorded, capsys):
    api, _ = recorded

    status, _, body = get(f"{api.url}/counters?prefix=boom")

    assert (status, body) == (500, {"message": "Internal Server Error"})
    assert "a bug in the function" in capsys.readouterr().err  # the traceback goes to the log, not the client


def test_with_signatures_required_an_unsigned_request_to_a_signed_route_is_refused_as_api_gateway_does():
    handler = RecordingHandler()
    settings = ApiSettings(public_prefixes=("views/",))
    with LocalApi(handler, credentials=CREDENTIALS, settings=settings, require_signature=True) as api:
        unsigned = [get(f"{api.url}{path}")[::2] for path in ("/counts?counter=a", "/counters", "/openapi.json")]
        public = get(f"{api.url}/public/counts?counter=views/a")[0]
        url = f"{api.url}/counts?counter=a"
        signed = get(url, signed_headers(url))[0]

    assert unsigned == [(403, {"message": "Missing Authentication Token"})] * 3
    assert (public, signed) == (200, 200)
    assert [event["rawPath"] for event in handler.events] == ["/public/counts", "/counts"]


def test_a_stopped_api_answers_nothing_more_on_a_connection_it_kept_open():
    """stop() closes the connections kept alive, as it frees the port: a dashboard page left open used to be
    answered on its kept connection after its API had stopped, its handler reading tables no longer there."""
    handler = RecordingHandler()
    api = LocalApi(handler, credentials=CREDENTIALS, settings=ApiSettings(public_prefixes=("views/",))).start()
    host, port = api.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", "/public/counts?counter=views/a")
        first = connection.getresponse()
        assert (first.status, first.read()) == (200, b'{"ok":true}')
        api.stop()
        with pytest.raises(OSError):
            connection.request("GET", "/public/counts?counter=views/b")
            connection.getresponse().read()
    finally:
        connection.close()
        api.stop()
    assert [event["rawQueryString"] for event in handler.events] == ["counter=views/a"]


def reset(client: socket.socket) -> None:
    """Close as a browser abandoning a connection does: with a reset, not an orderly end."""
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()


@pytest.mark.parametrize("when", ["before its answer", "between requests"])
def test_a_client_gone_is_no_error_on_stderr(when, capfd):
    """A browser leaving a page resets its connections, a request in flight or a kept one: nobody is left to
    answer, which is no error of the server's (it printed a traceback for it). The reset surfaces at the
    answer's write or at the read of the next request."""
    client_gone = threading.Event()

    def answer(event: dict, context: object) -> dict:
        if event["rawQueryString"] == "counter=views/slow":
            client_gone.wait(10)
        return {"statusCode": 200, "body": '{"ok":true}'}

    with LocalApi(answer, credentials=CREDENTIALS, settings=ApiSettings(public_prefixes=("views/",))) as api:
        host, port = api.url.removeprefix("http://").split(":")
        threads = threading.active_count()
        client = socket.create_connection((host, int(port)), timeout=10)
        if when == "before its answer":
            client.sendall(b"GET /public/counts?counter=views/slow HTTP/1.1\r\nHost: api\r\n\r\n")
            reset(client)
            client_gone.set()
        else:
            client.sendall(b"GET /public/counts?counter=views/a HTTP/1.1\r\nHost: api\r\n\r\n")
            assert client.recv(4096).startswith(b"HTTP/1.1 200")  # answered; the server waits for the next
            reset(client)
        deadline = time.monotonic() + 10
        while threading.active_count() > threads and time.monotonic() < deadline:  # the connection's thread ends
            time.sleep(0.01)
        assert get(f"{api.url}/public/counts?counter=views/b")[0] == 200  # it goes on serving others
    assert "Exception occurred" not in capfd.readouterr().err


class OverlapCountingHandler:
    """Records how many invocations ever ran at once: the read function's resolver keeps the current request
    on itself, as one Lambda instance may (it runs one invocation at a time)."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()

    def __call__(self, event: dict, context: object) -> dict:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.02)
        with self._lock:
            self.running -= 1
        return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": json.dumps({"query": event["rawQueryString"]})}


def test_concurrent_requests_are_handled_one_at_a_time_as_one_function_instance_handles_them():
    handler = OverlapCountingHandler()
    answers: dict[int, dict] = {}
    with LocalApi(handler, credentials=CREDENTIALS, settings=ApiSettings(public_prefixes=("views/",))) as api:

        def ask(n: int) -> None:
            answers[n] = get(f"{api.url}/public/counts?counter=views/{n}", {})[2]

        threads = [threading.Thread(target=ask, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    assert handler.most == 1
    assert answers == {n: {"query": f"counter=views/{n}"} for n in range(8)}  # each answer is its own request's
