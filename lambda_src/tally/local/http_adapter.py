"""The HTTP read API on a loopback port: each request becomes API Gateway's event, given to the same handler.

API Gateway (HTTP API, payload format 2.0) turns a request into an event and
the read function's ``tally.functions.read_api.handler`` answers it. ``LocalApi`` does
the same on 127.0.0.1, so `make serve`, the dashboard test and the bench reach
the very code the stack deploys over real sockets.

Routes are the stack's (``ApiSettings.paths``): ``GET /counts``, ``GET /counters``
and ``GET /openapi.json``; ``/public/…`` only when public prefixes are set, ``/``
only when the dashboard is on (the same ``ApiSettings`` the function reads). Anything else gets API Gateway's own
``404 {"message":"Not Found"}``.

Signatures: a request that carries a SigV4 ``Authorization`` header is
verified as API Gateway would, against the credentials this process holds
(moto's dummy keys under `make serve`), and refused with 403 when it does not
match, is scoped to another service or is more than 15 minutes off. An
unsigned request is answered too: on loopback every route is open, which is
what lets `curl` read locally; ``require_signature`` refuses it on the signed
routes as API Gateway does (403 ``Missing Authentication Token``), for a
client's signing to be checked end to end.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import re
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from botocore.auth import SIGV4_TIMESTAMP, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tally.core.api_access import SIGNED_PATHS, ApiSettings
from tally.local.aws import LocalContext

logger = logging.getLogger(__name__)

LOCAL_ACCOUNT = "000000000000"
SERVICE = "execute-api"
MAX_CLOCK_SKEW_SECONDS = 15 * 60  # API Gateway refuses signatures further off than this
_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/,\s]+)/(?P<service>[^/,\s]+)"
    r"/aws4_request,\s*SignedHeaders=(?P<signed>[a-z0-9;-]+),\s*Signature=(?P<signature>[0-9a-f]{64})"
)

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


def route_keys(settings: ApiSettings) -> set[str]:
    """The routes the stack creates for these settings."""
    return {f"GET {path}" for path in settings.paths}


def http_api_event(
    method: str, target: str, headers: list[tuple[str, str]], *, source_ip: str = "127.0.0.1", route_key: str = "$default"
) -> dict[str, Any]:
    """The event API Gateway's HTTP API sends a Lambda integration (payload format 2.0) for this request."""
    parts = urlsplit(target)
    joined: dict[str, str] = {}
    for name, value in headers:
        name = name.lower()
        joined[name] = f"{joined[name]},{value}" if name in joined else value
    now = time.time()
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": parts.path,
        "rawQueryString": parts.query,
        "headers": joined,
        "requestContext": {
            "accountId": LOCAL_ACCOUNT,
            "apiId": "local",
            "domainName": joined.get("host", "127.0.0.1"),
            "domainPrefix": "local",
            "http": {
                "method": method,
                "path": parts.path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": joined.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": route_key,
            "stage": "$default",
            "time": datetime.fromtimestamp(now, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": False,
    }
    if parts.query:
        # API Gateway decodes the parameters and joins repeated ones with commas.
        parameters: dict[str, str] = {}
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            parameters[name] = f"{parameters[name]},{value}" if name in parameters else value
        event["queryStringParameters"] = parameters
    if "cookie" in joined:
        event["cookies"] = [cookie.strip() for cookie in joined["cookie"].split(";")]
    return event


def signature_refusal(method: str, url: str, headers: dict[str, str], credentials: Credentials) -> str | None:
    """Why API Gateway would refuse this SigV4 signature, or None when it holds (or the request is unsigned)."""
    authorization = headers.get("authorization")
    if authorization is None:
        return None
    match = _AUTHORIZATION.fullmatch(authorization.strip())
    if not match:
        return "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' (AWS4-HMAC-SHA256)"
    if match["key"] != credentials.access_key:
        return "The security token included in the request is invalid."
    if match["service"] != SERVICE:
        return f"Credential should be scoped to correct service: '{SERVICE}'."
    stamp = headers.get("x-amz-date", "")
    try:
        signed_at = datetime.strptime(stamp, SIGV4_TIMESTAMP).replace(tzinfo=UTC)
    except ValueError:
        return "Authorization requires an X-Amz-Date header (YYYYMMDDTHHMMSSZ)"
    if abs(time.time() - signed_at.timestamp()) > MAX_CLOCK_SKEW_SECONDS or stamp[:8] != match["date"]:
        return "Signature expired: the request's date is more than 15 minutes off or outside its credential scope"
    signed = match["signed"].split(";")
    if "host" not in signed or any(name not in headers for name in signed):
        return "SignedHeaders must include host and name only headers the request carries"
    request = AWSRequest(method=method, url=url, headers={name: headers[name] for name in signed})
    request.context["timestamp"] = stamp
    signer = SigV4Auth(credentials, match["service"], match["region"])
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if not hmac.compare_digest(expected, match["signature"]):
        return (
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method."
        )
    return None


class LocalApi:
    """The read API's handler behind a threaded HTTP server on a loopback port (0: any free one)."""

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        credentials: Credentials,
        settings: ApiSettings | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        require_signature: bool = False,
    ) -> None:
        if handler is None:
            import tally.functions.read_api as read_api

            handler = read_api.handler
        self.handler = handler
        self.credentials = credentials
        self.settings = settings or ApiSettings.from_env()
        self.routes = route_keys(self.settings)
        self.require_signature = require_signature
        self._server = ThreadingHTTPServer((host, port), self._request_handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._open: set[socket.socket] = set()  # connections kept alive between requests, closed by stop()
        self._open_lock = threading.Lock()
        # One invocation at a time, as one function instance runs them: the read function's resolver keeps the
        # request it answers on itself, so two at once would answer each other's parameters.
        self._invoke_lock = threading.Lock()
        self._stopped = False

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> LocalApi:
        self._thread = threading.Thread(target=self._server.serve_forever, name="tally-local-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close the connections kept alive and free the port (also when bound but never started).

        A stopped server accepts no connection, but each kept-alive one has its own thread, which would go on
        answering its client (a dashboard page left open) with nothing left behind the handler."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        with self._open_lock:
            self._stopped = True
            for connection in self._open:
                _end(connection)
        self._server.server_close()

    def __enter__(self) -> LocalApi:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def respond(self, method: str, target: str, headers: list[tuple[str, str]], source_ip: str) -> tuple[int, dict[str, str], bytes]:
        """What API Gateway would answer: its own 404 or 403, or the function's response."""
        path = urlsplit(target).path
        route_key = f"{method} {path}"
        if route_key not in self.routes:
            return _gateway_error(404, "Not Found")
        lowered = {name.lower(): value for name, value in headers}
        if self.require_signature and "authorization" not in lowered and path in SIGNED_PATHS:
            return _gateway_error(403, "Missing Authentication Token")
        refusal = signature_refusal(method, f"http://{lowered.get('host', '127.0.0.1')}{target}", lowered, self.credentials)
        if refusal is not None:
            return _gateway_error(403, refusal)
        event = http_api_event(method, target, headers, source_ip=source_ip, route_key=route_key)
        try:
            with self._invoke_lock:
                response = self.handler(event, LocalContext())
        except Exception:
            traceback.print_exc(file=sys.stderr)
            return _gateway_error(500, "Internal Server Error")
        body = response.get("body") or ""
        payload = base64.b64decode(body) if response.get("isBase64Encoded") else body.encode("utf-8")
        return int(response.get("statusCode", 200)), dict(response.get("headers") or {}), payload

    def _request_handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class RequestHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as API Gateway offers
            server_version = "tally-local-api"

            def handle(self) -> None:
                try:
                    super().handle()
                except ConnectionError:  # a reset or a broken pipe, at an answer or between requests:
                    pass  # the client left (a page closed mid-request), and nobody is left to answer

            def setup(self) -> None:
                super().setup()
                with api._open_lock:
                    api._open.add(self.connection)
                    if api._stopped:  # accepted just before stop(): answered by no one
                        _end(self.connection)

            def finish(self) -> None:
                with api._open_lock:
                    api._open.discard(self.connection)
                super().finish()

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                self._answer("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._answer("POST")

            def do_HEAD(self) -> None:  # noqa: N802
                self._answer("HEAD")

            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, headers, payload = api.respond(method, self.path, list(self.headers.items()), self.client_address[0])
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if method != "HEAD":
                    self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                logger.debug(format, *args)

        return RequestHandler


def _end(connection: socket.socket) -> None:
    """End a connection both ways: its handler's thread reads the end and returns."""
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # the client closed it first


def _gateway_error(status: int, message: str) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps({"message": message}).encode()
