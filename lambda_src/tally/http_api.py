"""The HTTP read API's routes: counts and counters through the same Reader the CLI uses.

    GET /counts?counter=A&counter=B&window=24h&at=…&series=minute|hour&plan=batch|range&quantiles=0.5,0.99
        [&allow_transient=true: fewer keys, but a read during a commit may answer a count never held]
        -> {"counts": [<what query_window.py --json prints for A>, …], "notes": […]}
        (each count's "retired": when every rule that can write it was retired, ISO-8601 to the second, or null)
    GET /counts?counter=A&window=month-to-date&tz=Europe/Paris
        -> the same, each count this month so far in tz (from its first local midnight), exact up to now
    GET /calendar?counter=A&period=day|week|month&tz=America/New_York&from=2026-11-01&to=2026-12-01
        [&week_start=sunday][&quantiles=…][&consistent=true]
        -> {"series": [<what query_window.py --series day|week|month --json prints for A>, …], "notes": […]}
    GET /counters?prefix=views/&window=24h[&cursor=…]
        -> {"counters": [<the same object for each listed counter>], "cursor": "…" or null, "notes": […]}
    GET /top?prefix=views/&n=10&window=24h[&at=…][&rising=1]
        -> {"prefix", "start", "end", "exact": true|false, "bound": null|int, "top": [{"rank", "counter", "total"}, …]}
        (an entry whose rules are all retired also says when: "retired": "2026-12-01T00:00:00Z")
    GET /alerts?alert=burst&state=ALARM&prefix=logins/
        -> {"alerts": [<what query_window.py --alerts --json prints for each>, …]}
    GET /public/counts, /public/counters, /public/top, /public/calendar: the same, anonymous, for public counters only
    GET /: the dashboard page, when enabled
    GET /openapi.json: this API described in OpenAPI 3, generated from the routes below
    Every answer carries ``X-Tally-Version: <the release>``.

API Gateway (HTTP API, payload 2.0) calls the read function,
``tally.functions.read_api.handler``, which has ``app`` here answer; locally
the adapter of `tally.local.http_adapter` calls the very same function. A
route is a function registered with ``@reads(path, ...)``: its keyword
arguments are its query parameters, typed with `tally.api_schema` (which
Powertools documents), read from the raw query string (API Gateway joins
repeated parameters with commas, which counter names may contain) and parsed
by ``tally.read_options``, the CLI's parser. A bad parameter is a 400 whose
one-line JSON body names the parameter and the fix; an unknown counter is an
empty count; no request can produce a traceback in a response.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import inspect
import json
import re
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from botocore.exceptions import ClientError

from tally.core.api_access import (
    ALERTS_PATH,
    CALENDAR_PATH,
    COUNTERS_PATH,
    TOP_PATH,
    COUNTS_PATH,
    DASHBOARD_PATH,
    OPENAPI_PATH,
    PUBLIC_CALENDAR_PATH,
    PUBLIC_COUNTERS_PATH,
    PUBLIC_TOP_PATH,
    PUBLIC_COUNTS_PATH,
    PUBLIC_PREFIX_PATH,
    ApiSettings,
)
from tally.version import __version__
from tally.api_schema import (
    AlertName,
    AlertsAnswer,
    AlertState,
    Align,
    AllowTransient,
    At,
    CalendarAnswer,
    Consistent,
    CountersAnswer,
    Counters,
    Cursor,
    CountsAnswer,
    DayAfter,
    FirstDay,
    MonthZone,
    PeriodOption,
    Plan,
    Prefix,
    Problem,
    Quantiles,
    Rising,
    SeriesOption,
    TopList,
    TopN,
    WeekStart,
    Window,
    Zone,
)
from tally.core.calendar import month_so_far, zone_of
from tally.core.units import MINUTE_MS
from tally.core.windows import now_ms
from tally.query import validate_query_counter
from tally.reader import QueryError, Reader, ReadOptions, WindowCount, calendar_options, read_options

# Bounds that keep one answer inside Lambda's 6 MB response and a few seconds of reads.
MAX_COUNTERS = 100
MAX_ENTRIES = 40_000  # hours of by_hour plus series points (times the quantiles asked), over all counters of one answer
MAX_QUERY_FIELDS = 200
THROTTLING_CODES = {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}
PRIVATE = "no-store"
VERSION_HEADER = "X-Tally-Version"
# A hand-typed offset (at=…T10:00+01:00) arrives as a space: '+' means space in a query string.
PLUS_HINT = " (a '+' in a URL stands for a space: write the offset as %2B01:00, or give the time in UTC with Z)"
# /counts' window that is no length: this month so far in tz (Reader.month_to_date).
MONTH_TO_DATE = "month-to-date"

logger = Logger(service="tally-api")
app = APIGatewayHttpResolver()

# --- what /openapi.json says besides the routes' own signatures ---
JSON = content_types.APPLICATION_JSON
HTML = "text/html"
SCHEMA_REFERENCE = "#/components/schemas/"
API_DESCRIPTION = (
    "Exact rolling-window counts from tally's counts table. Signed routes take AWS SigV4 (service execute-api); "
    "the public ones answer anonymously for counters under the deployment's public prefixes. Sums, averages and "
    "quantiles are decimal strings, so no JSON parser rounds them. Every answer carries an X-Tally-Version header."
)
SIGV4 = [{"sigv4": []}]
SIGV4_SCHEME = {
    "name": "Authorization",
    "description": "AWS Signature Version 4 for the service execute-api, by a principal allowed execute-api:Invoke",
    "openapi_extensions": {"x-amazon-apigateway-authtype": "awsSigv4"},
}
ERRORS = {
    400: "a parameter is wrong or missing: parameter names it, message says the fix",
    403: "the request is not signed, or not by a principal allowed to invoke the API (API Gateway)",
    500: "tally could not read its counts table: the message names the request id in the function's log",
    503: "the counts table throttled the reads after every retry: retry after Retry-After seconds",
}
PUBLIC_ERRORS = {
    **ERRORS,
    403: "a counter (or the prefix) asked is not public: sign the request and use the signed route",
    404: "public read is off in this deployment (no public prefixes)",
}




def header(description: str) -> dict[str, Any]:
    return {"description": description, "required": True, "schema": {"type": "string"}}


# The headers of every answer the function gives; API Gateway's own refusals (403 unsigned) carry none of them.
FUNCTION_HEADERS = {
    VERSION_HEADER: header("the release that gave the answer (see CHANGELOG.md)"),
    "Cache-Control": header("no-store; the public routes' answers: public, max-age (apiPublicCacheSeconds)"),
}
RETRY_AFTER = {"Retry-After": header("seconds to wait before retrying")}
GATEWAY_REFUSALS = {403}  # on a signed route, a 403 is API Gateway's, before the function runs


def problem(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "description": description,
        "headers": FUNCTION_HEADERS if headers is None else headers,
        "content": {JSON: {"model": Problem}},
    }


def answers(model: type, *errors: int, public: bool = False) -> dict[int, dict[str, Any]]:
    """The responses of a data route: its answer, and its errors, each with a ``Problem`` body and the headers it
    carries."""
    described = PUBLIC_ERRORS if public else ERRORS

    def headers(status: int) -> dict[str, Any]:
        if status in GATEWAY_REFUSALS and not public:
            return {}
        return FUNCTION_HEADERS | (RETRY_AFTER if status == 503 else {})

    answer = {"description": "the answer", "headers": FUNCTION_HEADERS, "content": {JSON: {"model": model}}}
    return {200: answer} | {status: problem(described[status], headers(status)) for status in errors}


class BadRequest(Exception):
    """A request tally cannot answer as sent: 400 (or ``status``), the message saying the fix, in one line."""

    def __init__(self, parameter: str | None, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.status = status


@dataclass(frozen=True)
class QueryString:
    """The parameters of one request, in order, as sent."""

    pairs: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, raw: str, allowed: Sequence[str], path: str) -> QueryString:
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


RouteFunction = Callable[..., Response]


def reads(path: str, *, signed: bool = True, **documentation: Any) -> Callable[[RouteFunction], RouteFunction]:
    """Registers a GET route whose query parameters are the function's keyword arguments.

    The signature is the route's contract twice: Powertools describes it in
    /openapi.json, and each request is read by it here, from the raw query
    string: a parameter it does not name is refused, a ``list`` one may repeat
    (all its values, ``[]`` when absent), any other comes at most once (``None``
    when absent). A parameter named as Python cannot name an argument (``from``)
    is the alias of its ``Query``. ``documentation``: the resolver's own
    (summary, responses, ...).
    """

    def register(function: RouteFunction) -> RouteFunction:
        arguments = tuple(inspect.signature(function).parameters)
        hints = typing.get_type_hints(function, include_extras=True)
        names = {argument: _query_name(argument, hints[argument]) for argument in arguments}
        repeated = {name for name in arguments if typing.get_origin(typing.get_args(hints[name])[0]) is list}

        @functools.wraps(function)
        def answer() -> Response:
            query = QueryString.parse(app.current_event.raw_query_string or "", tuple(names.values()), path)
            return function(**{
                argument: query.all(name) if argument in repeated else query.one(name) for argument, name in names.items()
            })

        app.get(path, security=SIGV4 if signed else None, **documentation)(answer)
        return function

    return register


def _query_name(argument: str, hint: Any) -> str:
    """The query parameter an argument reads: its ``Query``'s alias, else its own name."""
    aliases = [getattr(meta, "alias", None) for meta in typing.get_args(hint)[1:]]
    return next((alias for alias in aliases if alias), argument)


@cache
def reader() -> Reader:
    """Created once per execution environment: the counts table and settings from the environment."""
    return Reader()


@cache
def api_settings() -> ApiSettings:
    return ApiSettings.from_env()


@reads(COUNTS_PATH, summary="Counts of counters over a window", responses=answers(CountsAnswer, 400, 403, 500, 503))
def counts(
    counter: Counters,
    window: Window = None,
    at: At = None,
    series: SeriesOption = None,
    plan: Plan = None,
    align: Align = None,
    consistent: Consistent = None,
    quantiles: Quantiles = None,
    allow_transient: AllowTransient = None,
    tz: MonthZone = None,
) -> Response[CountsAnswer]:
    options = dict(
        window=window, at=at, series=series, plan=plan, align=align, consistent=consistent, quantiles=quantiles,
        allow_transient=allow_transient,
    )
    return _counts(counter, options, tz, public=False)


@reads(
    PUBLIC_COUNTS_PATH,
    signed=False,
    summary="Counts of public counters, anonymously",
    responses=answers(CountsAnswer, 400, 403, 404, 500, 503, public=True),
)
def public_counts(
    counter: Counters,
    window: Window = None,
    at: At = None,
    series: SeriesOption = None,
    plan: Plan = None,
    align: Align = None,
    consistent: Consistent = None,
    quantiles: Quantiles = None,
    allow_transient: AllowTransient = None,
    tz: MonthZone = None,
) -> Response[CountsAnswer]:
    options = dict(
        window=window, at=at, series=series, plan=plan, align=align, consistent=consistent, quantiles=quantiles,
        allow_transient=allow_transient,
    )
    return _counts(counter, options, tz, public=True)


@reads(COUNTERS_PATH, summary="The counters under a prefix, counted", responses=answers(CountersAnswer, 400, 403, 500, 503))
def counters(
    prefix: Prefix = None,
    cursor: Cursor = None,
    window: Window = None,
    at: At = None,
    series: SeriesOption = None,
    plan: Plan = None,
    align: Align = None,
    consistent: Consistent = None,
    quantiles: Quantiles = None,
    allow_transient: AllowTransient = None,
) -> Response[CountersAnswer]:
    options = dict(
        window=window, at=at, series=series, plan=plan, align=align, consistent=consistent, quantiles=quantiles,
        allow_transient=allow_transient,
    )
    return _counters(prefix, cursor, options, public=False)


@reads(
    PUBLIC_COUNTERS_PATH,
    signed=False,
    summary="The public counters under a prefix, anonymously",
    responses=answers(CountersAnswer, 400, 403, 404, 500, 503, public=True),
)
def public_counters(
    prefix: Prefix = None,
    cursor: Cursor = None,
    window: Window = None,
    at: At = None,
    series: SeriesOption = None,
    plan: Plan = None,
    align: Align = None,
    consistent: Consistent = None,
    quantiles: Quantiles = None,
    allow_transient: AllowTransient = None,
) -> Response[CountersAnswer]:
    options = dict(
        window=window, at=at, series=series, plan=plan, align=align, consistent=consistent, quantiles=quantiles,
        allow_transient=allow_transient,
    )
    return _counters(prefix, cursor, options, public=True)


@reads(TOP_PATH, summary="The top n counters of a prefix over a window, certified", responses=answers(TopList, 400, 403, 500, 503))
def top(
    prefix: Prefix = None,
    n: TopN = None,
    rising: Rising = None,
    window: Window = None,
    at: At = None,
    plan: Plan = None,
    align: Align = None,
    consistent: Consistent = None,
    allow_transient: AllowTransient = None,
) -> Response[TopList]:
    options = dict(window=window, at=at, plan=plan, align=align, consistent=consistent, allow_transient=allow_transient)
    return _top(prefix, n, rising, options, public=False)


@reads(
    PUBLIC_TOP_PATH,
    signed=False,
    summary="The top n public counters of a public prefix, anonymously",
    responses=answers(TopList, 400, 403, 404, 500, 503, public=True),
)
def public_top(
    prefix: Prefix = None,
    n: TopN = None,
    rising: Rising = None,
    window: Window = None,
    at: At = None,
    plan: Plan = None,
    align: Align = None,
    consistent: Consistent = None,
    allow_transient: AllowTransient = None,
) -> Response[TopList]:
    options = dict(window=window, at=at, plan=plan, align=align, consistent=consistent, allow_transient=allow_transient)
    return _top(prefix, n, rising, options, public=True)


@reads(
    CALENDAR_PATH,
    summary="Days, weeks or months of counters in a time zone",
    description="Every period of the local days from to to (excluded), zero where nothing was counted, in zones "
    "whose offsets are whole hours. Counters of the calendar prefixes, in UTC or a kept zone, read their closed "
    "months and days from their own items (kept dayRetentionDays and monthRetentionMonths) and the days since the "
    "last close from hours; other counters and zones read hours alone, within the hour retention. A range before "
    "what is kept is a 400 naming from.",
    responses=answers(CalendarAnswer, 400, 403, 500, 503),
)
def calendar(
    counter: Counters,
    from_: FirstDay,
    to: DayAfter,
    period: PeriodOption = None,
    tz: Zone = None,
    week_start: WeekStart = None,
    quantiles: Quantiles = None,
    consistent: Consistent = None,
) -> Response[CalendarAnswer]:
    texts = dict(period=period, tz=tz, start=from_, end=to, week_start=week_start, quantiles=quantiles, consistent=consistent)
    return _calendar(counter, texts, public=False)


@reads(
    PUBLIC_CALENDAR_PATH,
    signed=False,
    summary="Days, weeks or months of public counters, anonymously",
    responses=answers(CalendarAnswer, 400, 403, 404, 500, 503, public=True),
)
def public_calendar(
    counter: Counters,
    from_: FirstDay,
    to: DayAfter,
    period: PeriodOption = None,
    tz: Zone = None,
    week_start: WeekStart = None,
    quantiles: Quantiles = None,
    consistent: Consistent = None,
) -> Response[CalendarAnswer]:
    texts = dict(period=period, tz=tz, start=from_, end=to, week_start=week_start, quantiles=quantiles, consistent=consistent)
    return _calendar(counter, texts, public=True)


@reads(
    ALERTS_PATH,
    summary="Where the rules' alerts stand, counter by counter",
    description="Signed only, like /counts: a counter in alarm says something about it.",
    responses=answers(AlertsAnswer, 400, 403, 500, 503),
)
def alerts(alert: AlertName = None, state: AlertState = None, prefix: Prefix = None) -> Response[AlertsAnswer]:
    try:
        found = reader().alerts(alert or None, state=state or None, prefix=prefix or "")
    except QueryError as error:
        raise BadRequest("alert" if str(error).startswith("no alert") else "state", str(error)) from None
    return _json(200, {"alerts": [status.as_json() for status in found]})


# Not `reads`: the page's query string (?counter=…&window=…) is for its script, which reads it in the browser.
@app.get(
    DASHBOARD_PATH,
    summary="The dashboard page",
    description="The page reads its query string in the browser (counter, window, series) and calls the public routes.",
    responses={
        200: {
            "description": "the page, with its own scripts only",
            "headers": FUNCTION_HEADERS
            | {"Content-Security-Policy": header("only the page's own inline scripts run, calling this API only")},
            "content": {HTML: {"schema": {"type": "string"}}},
        },
        404: problem("the dashboard is turned off, or its page was not built"),
    },
)
def dashboard() -> Response[str]:
    settings = api_settings()
    page = dashboard_page()
    if not settings.dashboard or page is None:
        return _json(404, {"message": "no dashboard here: it is turned off (apiDashboard) or its page was not built"})
    read_base = PUBLIC_PREFIX_PATH if settings.public_read else ""
    config: dict[str, Any] = {"readBase": read_base, "prefixes": list(settings.public_prefixes)}
    if reader().settings.kept_zones:  # the page offers 12 months: closed months are read past the hour retention
        config["calendarZones"] = list(reader().settings.kept_zones)
    html = page.html.replace(CONFIG_PLACEHOLDER, json.dumps(config).replace("<", "\\u003c"), 1)
    return Response(
        status_code=200,
        content_type="text/html; charset=utf-8",
        body=html,
        headers={"Cache-Control": "no-cache", "Content-Security-Policy": page.content_security_policy},
    )


@reads(
    OPENAPI_PATH,
    summary="This API, described in OpenAPI 3",
    responses={
        200: {"description": "the document", "headers": FUNCTION_HEADERS, "content": {JSON: {"schema": {"type": "object"}}}},
        403: problem("the request is not signed, or not by a principal allowed to invoke the API (API Gateway)", {}),
    },
)
def openapi() -> Response[dict[str, Any]]:
    return Response(
        status_code=200,
        content_type=JSON,
        body=openapi_document(api_settings()),
        headers={"Cache-Control": PRIVATE},
    )


@cache
def openapi_document(settings: ApiSettings) -> str:
    """The resolver's description of its routes, keeping those this deployment has (``ApiSettings.paths``)
    and the schemas they use."""
    # Imported here: Powertools' OpenAPI models take 0.1 s to import, which no other request should wait for.
    from aws_lambda_powertools.event_handler.openapi.models import APIKey, APIKeyIn

    scheme = APIKey(in_=APIKeyIn.header, **SIGV4_SCHEME)
    document = json.loads(
        app.get_openapi_json_schema(
            title="tally read API", version=__version__, description=API_DESCRIPTION, security_schemes={"sigv4": scheme}
        )
    )
    document["paths"] = {path: item for path, item in document["paths"].items() if path in settings.paths}
    used = _referenced_schemas(document["paths"], document["components"]["schemas"])
    document["components"]["schemas"] = {name: schema for name, schema in document["components"]["schemas"].items() if name in used}
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def _referenced_schemas(part: object, schemas: dict[str, Any], found: set[str] | None = None) -> set[str]:
    """The component schemas ``part`` refers to, directly or through each other (Powertools adds its validation
    errors' schemas to every document; tally validates by itself, so they would describe nothing)."""
    found = set() if found is None else found
    if isinstance(part, dict):
        reference = part.get("$ref")
        if isinstance(reference, str) and reference.startswith(SCHEMA_REFERENCE):
            name = reference.removeprefix(SCHEMA_REFERENCE)
            if name not in found:
                found.add(name)
                _referenced_schemas(schemas[name], schemas, found)
        for value in part.values():
            _referenced_schemas(value, schemas, found)
    elif isinstance(part, list):
        for value in part:
            _referenced_schemas(value, schemas, found)
    return found


def _counts(names: list[str], texts: dict[str, str | None], tz: str | None, *, public: bool) -> Response:
    names = _checked_counters(names, public)
    if texts.get("window") == MONTH_TO_DATE:
        return _month_to_date(names, texts, tz, public)
    if tz is not None:
        raise BadRequest("tz", f"tz goes with window={MONTH_TO_DATE}: any other window ends at an instant (at)")
    options = _options(texts)
    _check_size(len(names), options)
    try:
        results = reader().count_many(names, **options.as_kwargs())
    except QueryError as error:
        raise BadRequest(_culprit(error, texts), str(error)) from None
    return _answer("counts", results, public)


def _checked_counters(names: list[str], public: bool) -> list[str]:
    """The counters asked, each once, in order: named, at most MAX_COUNTERS, each a name the Reader reads (and
    public, on a public route)."""
    if not names:
        raise BadRequest("counter", "counter is missing: name one or more, e.g. ?counter=page-views&counter=sign-ups")
    names = list(dict.fromkeys(names))
    if len(names) > MAX_COUNTERS:
        raise BadRequest("counter", f"{len(names)} counters: at most {MAX_COUNTERS} per request, ask the rest apart")
    for name in names:
        _check_counter(name)
        if public:
            _check_public(name, "counter")
    return names


def _month_to_date(names: list[str], texts: dict[str, str | None], tz: str | None, public: bool) -> Response:
    """This month so far in ``tz`` (``Reader.month_to_date``): the window is the month's, so no ``at`` or
    ``align``; the other options as for any window."""
    for fixed in ("at", "align"):
        if texts.get(fixed) is not None:
            raise BadRequest(
                fixed, f"window={MONTH_TO_DATE} runs from the month's first local midnight until now: it takes no {fixed}"
            )
    others = {name: value for name, value in texts.items() if name != "window" and value is not None}
    try:
        length_ms, _ = month_so_far(now_ms(), zone_of(tz))
    except QueryError as error:
        raise BadRequest("tz", str(error)) from None
    options = _options({**others, "window": f"{length_ms // MINUTE_MS}m"})  # the others checked, each named if refused
    _check_size(len(names), options)
    try:
        results = reader().month_to_date(names, tz=tz, **others)
    except QueryError as error:
        raise BadRequest(_culprit(error, others, default="tz"), str(error)) from None
    return _answer("counts", results, public)


def _calendar(names: list[str], texts: dict[str, str | None], *, public: bool) -> Response:
    """Each counter's calendar series (``Reader.calendar``); the periods are counted ahead of the read, so an
    answer too large is refused before anything is read."""
    names = _checked_counters(names, public)
    days = {name: texts[name] for name in ("period", "tz", "start", "end", "week_start")}
    try:
        periods = len(calendar_options(**days).spans)
    except QueryError as error:
        raise BadRequest(_calendar_culprit(error), str(error)) from None
    options = _options({"quantiles": texts["quantiles"], "consistent": texts["consistent"]})
    per_counter = periods * (1 + len(options.quantiles))
    if len(names) * per_counter > MAX_ENTRIES:
        raise BadRequest(
            "period",
            f"{len(names)} counters of {per_counter:,} entries each exceed {MAX_ENTRIES:,} per answer: ask fewer "
            f"counters{', fewer quantiles' if options.quantiles else ''}, a shorter range or longer periods",
        )
    try:
        found = reader().calendar(names, **{name: value for name, value in texts.items() if name != "period"},
                                  period=texts["period"] or "day")
    except QueryError as error:
        raise BadRequest(_calendar_culprit(error), str(error)) from None
    body = {"series": [series.as_json() for series in found], "notes": reader().calendar_notes(found)}
    return _json(200, body, api_settings().public_cache_control if public else PRIVATE)


def _calendar_culprit(error: QueryError) -> str | None:
    """The parameter a calendar refusal names (``CalendarError.parameter``); quantiles and consistency are
    read's own options."""
    return getattr(error, "parameter", None) or ("quantiles" if "quantile" in str(error) else None)


def _counters(prefix: str | None, cursor: str | None, texts: dict[str, str | None], *, public: bool) -> Response:
    prefix = prefix or ""
    if public:
        _check_public(prefix, "prefix")
    options = _options(texts)
    _check_size(1, options)
    limit = min(MAX_COUNTERS, MAX_ENTRIES // _entries_per_counter(options))  # refused before counting beyond it
    try:
        results = reader().list_counters(prefix, limit=limit, cursor=cursor, **options.as_kwargs())
    except QueryError as error:
        raise BadRequest(_culprit(error, texts, default="prefix"), str(error)) from None
    return _answer("counters", results, public, cursor=results.cursor)


def _top(
    prefix: str | None, n: str | None, rising: str | None, texts: dict[str, str | None], *, public: bool
) -> Response:
    """The certified top N of a prefix (``Reader.top``): one JSON object; anonymous only under a public prefix."""
    if prefix is None:
        raise BadRequest("prefix", "prefix is missing: e.g. ?prefix=views/&n=10 ('prefix=' ranks every counter)")
    if public:
        _check_public(prefix, "prefix")
    options = _options(texts)
    try:
        answer = reader().top(prefix, n or "10", rising=rising or False, **options.as_kwargs())
    except QueryError as error:
        raise BadRequest(_culprit(error, texts), str(error)) from None
    return _json(200, answer.as_json(), api_settings().public_cache_control if public else PRIVATE)


def _options(given: dict[str, str | None]) -> ReadOptions:
    """The options as text, parsed by the CLI's own parser; a refusal names its parameter."""
    texts = {name: value for name, value in given.items() if value is not None}
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


def _culprit(error: QueryError, texts: dict[str, str | None], default: str = "window") -> str:
    """A refusal of the read itself: a window past the minute retention is fixed by its end (an explicit
    ``at`` on a whole hour, or align=true), anything else concerns the window."""
    named = getattr(error, "parameter", None)
    if named:
        return named
    return "at" if texts.get("at") is not None and "align" in str(error) else default


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


def _answer(key: str, results: list[WindowCount], public: bool, **more: object) -> Response:
    body = {key: [result.as_json() for result in results], **more, "notes": reader().notes(results)}
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
    return _json(
        404,
        {"message": f"no route {app.current_event.path!r}: tally answers GET /counts, GET /counters, GET /top, GET /calendar and GET /alerts"},
    )


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

