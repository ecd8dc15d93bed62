"""The HTTP read API's function: counts and counters through the same Reader the CLI uses.

    GET /counts?counter=A&counter=B&window=24h&at=…&series=minute|hour&plan=batch|range&quantiles=0.5,0.99
        [&allow_transient=true: fewer keys, but a read during a commit may answer a count never held]
        -> {"counts": [<what query_window.py --json prints for A>, …], "notes": […]}
    GET /counters?prefix=views/&window=24h
        -> {"counters": [<the same object for each listed counter>], "notes": […]}
    GET /alerts?alert=burst&state=ALARM&prefix=logins/
        -> {"alerts": [{alert, rule, counter, state, since, window, start, end, total, threshold, transitions}, …]}
    GET /public/counts, GET /public/counters: the same, anonymous, for public counters only
    GET /: the dashboard page, when enabled

API Gateway (HTTP API, payload 2.0) calls ``handler``; locally the adapter of
`tally.local.http_adapter` calls the very same function. Query parameters are
read from the raw query string (API Gateway joins repeated parameters with
commas, which counter names may contain) and parsed by ``tally.read_options``,
the CLI's parser. A bad parameter is a 400 whose one-line JSON body names the
parameter and the fix; an unknown counter is an empty count; no request can
produce a traceback in a response.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from tally.core.api_access import (
    ALERTS_PATH,
    COUNTERS_PATH,
    COUNTS_PATH,
    DASHBOARD_PATH,
    PUBLIC_COUNTERS_PATH,
    PUBLIC_COUNTS_PATH,
    PUBLIC_PREFIX_PATH,
    ApiSettings,
)
from tally import __version__
from tally.query import validate_query_counter
from tally.reader import QueryError, Reader, ReadOptions, WindowCount, read_options

OPTIONS = ("window", "at", "series", "plan", "align", "consistent", "quantiles", "allow_transient")
COUNT_PARAMETERS = ("counter", *OPTIONS)
LIST_PARAMETERS = ("prefix", *OPTIONS)
ALERT_PARAMETERS = ("alert", "state", "prefix")
# Bounds that keep one answer inside Lambda's 6 MB response and a few seconds of reads.
MAX_COUNTERS = 100
MAX_ENTRIES = 40_000  # hours of by_hour plus series points (times the quantiles asked), over all counters of one answer
MAX_QUERY_FIELDS = 200
THROTTLING_CODES = {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}
PRIVATE = "no-store"
VERSION_HEADER = "X-Tally-Version"
# A hand-typed offset (at=…T10:00+01:00) arrives as a space: '+' means space in a query string.
PLUS_HINT = " (a '+' in a URL stands for a space: write the offset as %2B01:00, or give the time in UTC with Z)"

logger = Logger(service="tally-api")
app = APIGatewayHttpResolver()


class BadRequest(Exception):
    """A request tally cannot answer as sent: 400 (or ``status``), the message saying the fix, in one line."""

    def __init__(self, parameter: str | None, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.status = status


@dataclass(frozen=True)
class Query:
    """The parameters of one request, in order, as sent."""

    pairs: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, raw: str, allowed: Sequence[str], path: str) -> Query:
        try:
            pairs = tuple(parse_qsl(raw, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS))
        except ValueError:
            raise BadRequest(None, f"more than {MAX_QUERY_FIELDS} query parameters: ask fewer at a time") from None
        for name, _ in pairs:
            if name not in allowed:
                raise BadRequest(name, f"unknown parameter {name!r}: {path} takes {', '.join(allowed)}")
        return cls(pairs)

    def all(self, name: str) -> list[str]:
        return [value for key, value in self.pairs if key == name]

    def one(self, name: str) -> str | None:
        values = self.all(name)
        if len(values) > 1:
            raise BadRequest(name, f"{name} is given {len(values)} times: give it once")
        return values[0] if values else None


@cache
def reader() -> Reader:
    """Created once per execution environment: the counts table and settings from the environment."""
    return Reader()


@cache
def api_settings() -> ApiSettings:
    return ApiSettings.from_env()


@app.get(COUNTS_PATH)
def counts() -> Response:
    return _counts(public=False)


@app.get(PUBLIC_COUNTS_PATH)
def public_counts() -> Response:
    return _counts(public=True)


@app.get(COUNTERS_PATH)
def counters() -> Response:
    return _counters(public=False)


@app.get(PUBLIC_COUNTERS_PATH)
def public_counters() -> Response:
    return _counters(public=True)


@app.get(ALERTS_PATH)
def alerts() -> Response:
    """Alert states: signed requests only, like /counts (a counter in alarm says something about it)."""
    query = _query(ALERT_PARAMETERS, ALERTS_PATH)
    alert, state, prefix = query.one("alert"), query.one("state"), query.one("prefix") or ""
    try:
        found = reader().alerts(alert or None, state=state or None, prefix=prefix)
    except QueryError as error:
        raise BadRequest("alert" if str(error).startswith("no alert") else "state", str(error)) from None
    return _json(200, {"alerts": [status.as_json() for status in found]})


@app.get(DASHBOARD_PATH)
def dashboard() -> Response:
    settings = api_settings()
    page = dashboard_page()
    if not settings.dashboard or page is None:
        return _json(404, {"message": "no dashboard here: it is turned off (apiDashboard) or its page was not built"})
    read_base = PUBLIC_PREFIX_PATH if settings.public_read else ""
    config = {"readBase": read_base, "prefixes": list(settings.public_prefixes)}
    html = page.html.replace(CONFIG_PLACEHOLDER, json.dumps(config).replace("<", "\\u003c"), 1)
    return Response(
        status_code=200,
        content_type="text/html; charset=utf-8",
        body=html,
        headers={"Cache-Control": "no-cache", "Content-Security-Policy": page.content_security_policy},
    )


def _counts(*, public: bool) -> Response:
    query = _query(COUNT_PARAMETERS, PUBLIC_COUNTS_PATH if public else COUNTS_PATH)
    names = query.all("counter")
    if not names:
        raise BadRequest("counter", "counter is missing: name one or more, e.g. ?counter=page-views&counter=sign-ups")
    names = list(dict.fromkeys(names))
    if len(names) > MAX_COUNTERS:
        raise BadRequest("counter", f"{len(names)} counters: at most {MAX_COUNTERS} per request, ask the rest apart")
    for name in names:
        _check_counter(name)
        if public:
            _check_public(name, "counter")
    options = _options(query)
    _check_size(len(names), options)
    try:
        results = reader().count_many(names, **options.as_kwargs())
    except QueryError as error:
        raise BadRequest(_culprit(error, query), str(error)) from None
    return _answer("counts", results, public)


def _counters(*, public: bool) -> Response:
    query = _query(LIST_PARAMETERS, PUBLIC_COUNTERS_PATH if public else COUNTERS_PATH)
    prefix = query.one("prefix") or ""
    if public:
        _check_public(prefix, "prefix")
    options = _options(query)
    _check_size(1, options)
    limit = min(MAX_COUNTERS, MAX_ENTRIES // _entries_per_counter(options))  # refused before counting beyond it
    try:
        results = reader().list_counters(prefix, limit=limit, **options.as_kwargs())
    except QueryError as error:
        raise BadRequest(_culprit(error, query, default="prefix"), str(error)) from None
    return _answer("counters", results, public)


def _query(allowed: Sequence[str], path: str) -> Query:
    return Query.parse(app.current_event.raw_query_string or "", allowed, path)


def _options(query: Query) -> ReadOptions:
    """The options as text, parsed by the CLI's own parser; a refusal names its parameter."""
    texts = {name: value for name in OPTIONS if (value := query.one(name)) is not None}
    try:
        return read_options(**texts)
    except QueryError as error:
        parameter = _parameter_at_fault(error, texts)
        hint = PLUS_HINT if parameter == "at" and " " in texts.get("at", "") else ""
        raise BadRequest(parameter, f"{error}{hint}") from None


def _parameter_at_fault(error: QueryError, texts: dict[str, str]) -> str | None:
    """The parameter the parser refused: named by the error, else found by parsing one option at a time."""
    named = getattr(error, "parameter", None)
    if named:
        return named
    for name, text in texts.items():
        try:
            read_options(**{name: text})
        except QueryError:
            return name
    return next(iter(texts), None)


def _culprit(error: QueryError, query: Query, default: str = "window") -> str:
    """A refusal of the read itself: a window past the minute retention is fixed by its end (an explicit
    ``at`` on a whole hour, or align=true), anything else concerns the window."""
    named = getattr(error, "parameter", None)
    if named:
        return named
    return "at" if query.one("at") is not None and "align" in str(error) else default


def _check_counter(name: str) -> None:
    """The Reader's own check of a name, ahead of the read, so the refusal can name the parameter."""
    try:
        validate_query_counter(name)
    except ValueError as error:
        raise BadRequest("counter", f"counter {name!r}: {error}") from None


def _check_public(name: str, parameter: str) -> None:
    settings = api_settings()
    if not settings.public_read:
        raise BadRequest(None, "public read is off here: sign the request (IAM) and use /counts or /counters", 404)
    if not settings.is_public(name):
        prefixes = ", ".join(repr(prefix) for prefix in settings.public_prefixes)
        raise BadRequest(
            parameter,
            f"{parameter} {name!r} is not public: anonymous reads cover counters starting with {prefixes}; "
            "sign the request (IAM) to read others at /counts",
            403,
        )


def _entries_per_counter(options: ReadOptions) -> int:
    """by_hour's hours (every hour the window touches) plus the series' points; a histogram counter answers
    each quantile asked for each of them too."""
    minutes = int(options.window.total_seconds() // 60)
    hours = -(-minutes // 60) + 1
    points = 0 if options.series is None else minutes if options.series.value == "minute" else hours
    return (hours + points) * (1 + len(options.quantiles))


def _check_size(counters: int, options: ReadOptions) -> None:
    per_counter = _entries_per_counter(options)
    if counters * per_counter > MAX_ENTRIES:
        fewer_quantiles = ", fewer quantiles" if options.quantiles else ""
        raise BadRequest(
            "series" if options.series is not None else "window",
            f"{counters} counters of {per_counter:,} entries each exceed {MAX_ENTRIES:,} per answer: "
            f"ask fewer counters{fewer_quantiles}, a shorter window, or series=hour",
        )


def _answer(key: str, results: list[WindowCount], public: bool) -> Response:
    body = {key: [result.as_json() for result in results], "notes": reader().notes(results)}
    cache_control = api_settings().public_cache_control if public else PRIVATE
    return _json(200, body, cache_control)


def _json(status: int, body: dict[str, Any], cache_control: str = PRIVATE) -> Response:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(body, ensure_ascii=False, separators=(",", ":")),
        headers={"Cache-Control": cache_control},
    )


@app.exception_handler(BadRequest)
def bad_request(error: BadRequest) -> Response:
    body = {"message": _one_line(str(error))}
    if error.parameter is not None:
        body["parameter"] = _one_line(error.parameter)
    return _json(error.status, body)


@app.exception_handler(ClientError)
def dynamodb_refused(error: ClientError) -> Response:
    code = error.response.get("Error", {}).get("Code", "")
    if code in THROTTLING_CODES:
        logger.warning("counts table throttled reads after every retry", extra={"code": code})
        return Response(
            status_code=503,
            content_type=content_types.APPLICATION_JSON,
            body=json.dumps({"message": "the counts table is busy: retry in a second"}),
            headers={"Cache-Control": PRIVATE, "Retry-After": "1"},
        )
    return server_error(error)


@app.exception_handler(Exception)
def server_error(error: Exception) -> Response:
    """tally's fault, not the client's: logged in full, answered in one line without a traceback."""
    logger.exception("read failed")
    request_id = app.current_event.request_context.request_id if app.current_event else None
    return _json(500, {"message": f"tally could not read its counts table (request {request_id}); see its log"})


@app.not_found
def not_found(_: Exception) -> Response:
    return _json(404, {"message": f"no route {app.current_event.path!r}: tally answers GET /counts, GET /counters and GET /alerts"})


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- the dashboard page: built by `make dashboard` into the package, served with a strict policy ---

DASHBOARD_FILE = "dashboard.html"
CONFIG_PLACEHOLDER = "__TALLY_CONFIG__"
_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


@dataclass(frozen=True)
class DashboardPage:
    html: str

    @property
    def content_security_policy(self) -> str:
        """Only the page's own inline scripts run, and they may only call this API."""
        hashes = " ".join(
            f"'sha256-{base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()}'"
            for script in _SCRIPT.findall(self.html)
        )
        return (
            f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; connect-src 'self'; "
            "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )


@cache
def dashboard_page() -> DashboardPage | None:
    page = resources.files("tally").joinpath(DASHBOARD_FILE)
    return DashboardPage(page.read_text(encoding="utf-8")) if page.is_file() else None


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Every answer, errors included, names the release that gave it (X-Tally-Version)."""
    response = app.resolve(event, context)
    response.setdefault("headers", {})[VERSION_HEADER] = __version__
    return response

