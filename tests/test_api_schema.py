"""/openapi.json against the routes' real answers.

The document is valid OpenAPI 3 (openapi-spec-validator), describes exactly
the routes this deployment has and the parameters each one takes, and is true
of what they answer: every answer of every route, errors included, validates
against the schema documented for its status; every field the document
describes appears in some answer; every status it documents is some request's
answer; every value it lists for a parameter is accepted and others refused.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from freezegun import freeze_time
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from alert_support import ALERT_RULES, cross
from test_http_api import (  # noqa: F401 (fixtures)
    BLOG, CREDENTIALS, NOW, blog, broken, call, environment, read_function_environment, throttled,
)

import tally
from moto_tables import COUNTS, EVENTS
from tally import http_api
from tally.functions import read_api
from tally.core.rules import ENV_RULES, parse_rules
from tally.core.settings import Settings
from tally.core.windows import parse_instant
from tally.core.api_access import ENV_DASHBOARD, ENV_PUBLIC_PREFIXES, ApiSettings
from tally.local.http_adapter import LocalApi
from tally.reader import Reader

AT = "2026-11-22T14:00Z"
JSON = "application/json"
EVERY_KIND = "counter=views/all&counter=load/posts/about&counter=views/posts/hello-world"
# (request, status) pairs that together give every documented answer of every route.
REQUESTS = [
    (f"/counts?{EVERY_KIND}&window=3h&at={AT}&series=minute&quantiles=0.5,0.99", 200),
    (f"/counts?{EVERY_KIND}&window=1h&at={AT}&series=hour&quantiles=0.9&plan=range&consistent=true", 200),
    (f"/counts?{EVERY_KIND}&window=90m&at={AT}&series=minute&allow_transient=true", 200),
    ("/counts?counter=views/nobody-wrote-this", 200),
    ("/counts?counter=views/all&counter=load/posts/about&window=month-to-date&tz=Europe/Paris&series=hour", 200),
    ("/counts?window=2h", 400),
    ("/counts?counter=views/all&colour=red", 400),
    (f"/counters?prefix=load/&window=2h&at={AT}&quantiles=0.5", 200),
    ("/counters?prefix=views/&window=7", 400),
    (f"/public/counts?counter=views/all&window=24h&at={AT}&series=hour", 200),
    ("/public/counts?counter=load/posts/about", 403),
    ("/public/counts", 400),
    (f"/public/counters?prefix=views/posts/&at={AT}", 200),
    ("/public/counters?prefix=load/", 403),
    ("/public/counters?prefix=views/&plan=fast", 400),
    (f"/top?prefix=views/&n=3&window=24h&at={AT}", 200),
    (f"/top?prefix=views/posts/&n=2&window=3h&at={AT}&rising=1", 200),
    ("/top?prefix=views/&n=0", 400),
    (f"/public/top?prefix=views/&n=2&at={AT}", 200),
    ("/public/top?prefix=load/", 403),
    ("/public/top?prefix=views/&n=ten", 400),
    (f"/calendar?{EVERY_KIND}&tz=America/New_York&from=2026-11-20&to=2026-11-23&quantiles=0.5,0.99", 200),
    ("/calendar?counter=views/all&period=week&week_start=sunday&from=2026-11-01&to=2026-12-01&consistent=true", 200),
    ("/calendar?counter=views/all&tz=Asia/Kolkata&from=2026-11-01&to=2026-11-02", 400),
    ("/public/calendar?counter=views/all&period=month&from=2026-11-01&to=2026-12-01", 200),
    ("/public/calendar?counter=load/posts/about&from=2026-11-01&to=2026-12-01", 403),
    ("/public/calendar?counter=views/all", 400),
    ("/alerts", 200),
    ("/alerts?state=red", 400),
    ("/", 200),
    ("/openapi.json", 200),
]


def document() -> dict[str, Any]:
    status, headers, body = call("/openapi.json")
    assert status == 200 and headers["Content-Type"] == JSON
    return json.loads(body)


def schema_of(spec: dict[str, Any], path: str, status: int) -> tuple[str, dict[str, Any]]:
    response = spec["paths"][path]["get"]["responses"][str(status)]
    ((media, content),) = response["content"].items()
    return media, content["schema"]


def validator(spec: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """The schema with the document's components beside it, so that its references resolve."""
    return Draft202012Validator({**schema, "components": spec["components"]})


def fields_seen(spec: dict[str, Any], schema: dict[str, Any], instance: Any, seen: set[tuple[str, str]]) -> None:
    """(schema, field) for every field of every object in ``instance``, following the schema through references."""
    schemas = spec["components"]["schemas"]
    if "$ref" in schema:
        schema = schemas[schema["$ref"].rpartition("/")[2]]
    for option in schema.get("anyOf", []):
        if validator(spec, option).is_valid(instance):
            fields_seen(spec, option, instance, seen)
    if isinstance(instance, dict) and "properties" in schema:
        for name, value in instance.items():
            seen.add((schema["title"], name))
            fields_seen(spec, schema["properties"][name], value, seen)
    elif isinstance(instance, dict) and isinstance(schema.get("additionalProperties"), dict):
        for value in instance.values():
            fields_seen(spec, schema["additionalProperties"], value, seen)
    elif isinstance(instance, list) and "items" in schema:
        for value in instance:
            fields_seen(spec, schema["items"], value, seen)


def signed_answer(api: LocalApi, target: str, credentials: Credentials) -> tuple[int, dict[str, str], dict]:
    url = f"{api.url}{target}"
    request = AWSRequest(method="GET", url=url)
    SigV4Auth(credentials, "execute-api", "us-east-1").add_auth(request)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=dict(request.headers)), timeout=30) as answer:
            return answer.status, dict(answer.headers), json.loads(answer.read())
    except urllib.error.HTTPError as refusal:
        return refusal.code, dict(refusal.headers), json.loads(refusal.read())


@contextmanager
def unresolved_bucket(client, counter: str) -> Iterator[None]:
    """The counter's newest bucket item marked as an overlap leaves one it could not split, then unmarked."""
    [item] = client.query(
        TableName=COUNTS, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": counter}},
        ScanIndexForward=False, Limit=1,
    )["Items"]
    key = {"pk": item["pk"], "sk": item["sk"]}
    mark = {":m": {"SS": ["~AAAAAAAA 100000000000000000001..100000000000000000009 <=2"]}}
    client.update_item(TableName=COUNTS, Key=key, UpdateExpression="ADD unresolved :m", ExpressionAttributeValues=mark)
    try:
        yield
    finally:
        client.update_item(TableName=COUNTS, Key=key, UpdateExpression="REMOVE unresolved")


def retired_rules(rules: str, name: str, retired_at: str) -> str:
    """``rules`` with the rule ``name`` retired at ``retired_at``."""
    return json.dumps([rule | ({"retiredAt": retired_at} if rule["name"] == name else {}) for rule in json.loads(rules)])


@pytest.fixture(scope="module")
def answers(blog) -> Iterator[tuple[dict[str, Any], list[tuple[str, int, dict[str, str], str]]]]:  # noqa: F811
    """The document, and (path, status, headers, body) of every request above and of the failures and
    refusals that need a changed world: a throttled and a broken read, a wrong signature, public read and the
    dashboard turned off (the document, fetched first, describes the routes with both on). The blog's rules
    count beside two with alerts, one of them crossed, so that /alerts answers a state.

    Asked once for the module: its tests only read what was answered (160 requests, seconds each time)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        read_function_environment(monkeypatch)
        try:
            yield collect_answers(blog, monkeypatch)
        finally:
            http_api.reader.cache_clear()
            http_api.api_settings.cache_clear()


def collect_answers(blog, monkeypatch) -> tuple[dict[str, Any], list[tuple[str, int, dict[str, str], str]]]:  # noqa: F811
    """The answers fixture's requests, under the read function's environment (``monkeypatch`` changes it)."""
    rules = json.dumps(json.loads(BLOG.rules_json) + json.loads(ALERT_RULES))
    monkeypatch.setenv(ENV_RULES, rules)
    http_api.reader.cache_clear()
    settings = Settings(counts_table=COUNTS, events_table=EVENTS, rules=parse_rules(rules))
    cross(blog[0], settings, parse_instant(NOW), {"logins/a": 3})
    spec = document()
    collected = []

    def ask(target: str) -> tuple[int, str]:
        status, headers, body = call(target)
        collected.append((target.partition("?")[0], status, headers, body))
        return status, body

    with freeze_time(NOW):
        for target, status in REQUESTS:
            assert ask(target)[0] == status, target
        with unresolved_bucket(blog[0], "views/all"):  # an overlap left one of its items unresolved
            status, body = ask("/counts?counter=views/all")
            assert status == 200 and json.loads(body)["counts"][0]["unresolved"]
            status, body = ask("/calendar?counter=views/all&from=2026-11-21&to=2026-11-23")
            assert status == 200 and json.loads(body)["series"][0]["unresolved"]
        with monkeypatch.context() as patched:  # the rule writing each post's views retired an hour ago
            patched.setenv(ENV_RULES, retired_rules(rules, "views", "2026-11-22T13:37:12Z"))
            http_api.reader.cache_clear()
            status, body = ask(f"/top?prefix=views/posts/&n=2&window=3h&at={AT}")
            assert status == 200 and all(entry["retired"] for entry in json.loads(body)["top"])
        http_api.reader.cache_clear()
        with LocalApi(read_api.handler, credentials=CREDENTIALS) as api:
            for path in ("/counts?counter=views/all", "/counters", "/top?prefix=views/", "/calendar?counter=views/all",
                         "/alerts", "/openapi.json"):
                status, headers, body = signed_answer(api, path, Credentials(CREDENTIALS.access_key, "a wrong secret"))
                assert status == 403
                collected.append((path.partition("?")[0], status, headers, json.dumps(body)))
        for failure, status in ((throttled, 503), (broken, 500)):
            with monkeypatch.context() as patched:
                patched.setattr(Reader, "count_many", failure)
                patched.setattr(Reader, "list_counters", failure)
                patched.setattr(Reader, "top", failure)
                patched.setattr(Reader, "alerts", failure)
                patched.setattr(Reader, "calendar", failure)
                calendar = "calendar?counter=views/all&from=2026-11-21&to=2026-11-23"
                for target in ("/counts?counter=views/all", "/counters", "/alerts", "/public/counts?counter=views/all",
                               "/public/counters?prefix=views/", "/top?prefix=views/", "/public/top?prefix=views/",
                               f"/{calendar}", f"/public/{calendar}"):
                    assert ask(target)[0] == status, target
        monkeypatch.setenv(ENV_DASHBOARD, "false")
        monkeypatch.delenv(ENV_PUBLIC_PREFIXES)
        http_api.api_settings.cache_clear()
        for target in ("/", "/public/counts?counter=views/all", "/public/counters?prefix=views/", "/public/top?prefix=views/",
                       "/public/calendar?counter=views/all&from=2026-11-21&to=2026-11-23"):
            assert ask(target)[0] == 404, target
    return spec, collected


def test_the_document_is_valid_openapi_3_and_describes_the_routes_this_deployment_has(environment, monkeypatch):  # noqa: F811
    spec = document()
    monkeypatch.delenv(ENV_PUBLIC_PREFIXES)
    monkeypatch.setenv(ENV_DASHBOARD, "false")
    http_api.api_settings.cache_clear()
    closed = document()

    validate(spec)
    assert spec["openapi"].startswith("3.") and spec["info"]["version"] == tally.__version__
    assert sorted(spec["paths"]) == sorted(ApiSettings(public_prefixes=("views/",), dashboard=True).paths)
    assert sorted(closed["paths"]) == ["/alerts", "/calendar", "/counters", "/counts", "/openapi.json", "/top"]
    assert {path for path, item in spec["paths"].items() if item["get"].get("security")} == {
        "/counts", "/counters", "/top", "/calendar", "/alerts", "/openapi.json"
    }
    assert spec["components"]["securitySchemes"]["sigv4"]["x-amazon-apigateway-authtype"] == "awsSigv4"


@pytest.mark.parametrize("path", ["/counts", "/counters", "/calendar", "/public/counts", "/public/counters", "/public/calendar"])
def test_each_route_takes_the_parameters_documented_and_refuses_others(environment, path):  # noqa: F811
    parameters = document()["paths"][path]["get"]["parameters"]
    status, _, body = call(f"{path}?colour=red")

    assert status == 400 and json.loads(body)["parameter"] == "colour"
    assert json.loads(body)["message"].endswith(f"takes {', '.join(p['name'] for p in parameters)}")
    assert all(p["in"] == "query" and p["description"] for p in parameters)
    required = {"counts": ["counter"], "calendar": ["counter", "from", "to"]}.get(path.rpartition("/")[2], [])
    assert [p["name"] for p in parameters if p["required"]] == required


def test_every_value_a_parameter_lists_is_accepted_and_another_is_refused_naming_it(environment):  # noqa: F811
    parameters = document()["paths"]["/counts"]["get"]["parameters"]
    listed = {p["name"]: p["schema"]["enum"] for p in parameters if "enum" in p["schema"]}

    assert set(listed) == {"series", "plan", "align", "consistent", "allow_transient"}
    with freeze_time(NOW):
        for name, values in listed.items():
            for value in values:
                assert call(f"/counts?counter=views/all&window=1h&at={AT}&{name}={value}")[0] == 200, (name, value)
            status, _, body = call(f"/counts?counter=views/all&{name}=sometimes")
            assert status == 400 and json.loads(body)["parameter"] == name


def test_every_value_a_calendar_parameter_lists_is_accepted_and_another_is_refused_naming_it(environment):  # noqa: F811
    parameters = document()["paths"]["/calendar"]["get"]["parameters"]
    listed = {p["name"]: p["schema"]["enum"] for p in parameters if "enum" in p["schema"]}
    days = "counter=views/all&from=2026-11-02&to=2026-11-23"

    assert set(listed) == {"period", "week_start", "consistent"}
    with freeze_time(NOW):
        for name, values in listed.items():
            for value in values:
                weekly = "&period=week" if name == "week_start" else ""
                assert call(f"/calendar?{days}{weekly}&{name}={value}")[0] == 200, (name, value)
            status, _, body = call(f"/calendar?{days}&period=week&{name}=sometimes")
            assert status == 400 and json.loads(body)["parameter"] == name, body


def test_every_answer_matches_its_documented_schema_and_every_documented_field_and_status_occurs(answers):
    spec, answers = answers
    seen: set[tuple[str, str]] = set()
    for path, status, headers, body in answers:
        documented_media, schema = schema_of(spec, path, status)
        assert headers["Content-Type"].partition(";")[0] == documented_media, (path, status)
        if documented_media == JSON:
            instance = json.loads(body)
            errors = [error.message for error in validator(spec, schema).iter_errors(instance)]
            assert errors == [], (path, status, body[:300])
            fields_seen(spec, schema, instance, seen)

    documented_statuses = {(path, int(status)) for path, item in spec["paths"].items() for status in item["get"]["responses"]}
    documented_fields = {
        (schema["title"], name) for schema in spec["components"]["schemas"].values() for name in schema.get("properties", {})
    }
    assert {(path, status) for path, status, _, _ in answers} == documented_statuses
    assert documented_fields - seen == set()


def test_every_answer_carries_the_headers_documented_for_it_and_no_other_of_them(answers):
    """A documented header is on every answer of its status (X-Tally-Version on each the function gives), and
    none of the documented headers is on an answer that does not document it (API Gateway's own refusals)."""
    spec, answers = answers
    responses = [response for item in spec["paths"].values() for response in item["get"]["responses"].values()]
    named = {name.lower() for response in responses for name in response.get("headers", {})}
    assert {"x-tally-version", "cache-control", "retry-after", "content-security-policy"} <= named

    for path, status, headers, _ in answers:
        documented = spec["paths"][path]["get"]["responses"][str(status)].get("headers", {})
        carried = {name.lower(): value for name, value in headers.items()}
        assert {name for name in carried if name in named} == {name.lower() for name in documented}, (path, status)
        for name, described in documented.items():
            assert described["required"] and Draft202012Validator(described["schema"]).is_valid(carried[name.lower()])
        if documented:
            assert carried["x-tally-version"] == tally.__version__, (path, status)
