"""The read API's function on moto: API Gateway's events in, the CLI's objects out, and no request yields a 500.

Items of a blog (counted by the blog's counter rules, one of them summing) go
through the counting handler; requests are the events the local adapter
builds, as API Gateway's HTTP API would send them.
"""

from __future__ import annotations

import json
import string
import urllib.request
from decimal import Decimal
from urllib.parse import quote, urlencode

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from freezegun import freeze_time
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from moto import mock_aws

from factories import LambdaContext, image, stream_record, window_event
from moto_tables import COUNTS, EVENTS, no_sleep_backoff
import tally
from tally import http_api
from tally.core.api_access import ENV_DASHBOARD, ENV_PUBLIC_PREFIXES
from tally.core.rules import ENV_RULES, parse_rules
from tally.core.settings import ENV_CALENDAR_PREFIXES, ENV_CALENDAR_ZONES, ENV_TIME_ATTRIBUTE, Settings
from tally.core.units import HOUR_MS
from tally.core.windows import Window, parse_instant
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.functions import read_api
from tally.invocation import process
from tally.local.cli import load_script
from tally.local.http_adapter import LocalApi, http_api_event
from tally.local.workload import SHAPES, Workload, shaped_truth
from tally.reader import Reader

NOW = "2026-11-22T14:37:12Z"
BLOG = SHAPES["blog"]
# 30 hours of page views, one to three a minute, each counted by the blog's rules (views, readers, load times).
BLOG_WORKLOAD = Workload(counters=BLOG.keys, hours=30, rate=(1, 3), seed=3)
PUBLIC = '["views/"]'
CREDENTIALS = Credentials("testing", "testing")


@pytest.fixture(scope="module")
def blog():
    """BLOG_WORKLOAD's page views, counted by its rules through the counting handler."""
    with mock_aws(), freeze_time(NOW):
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        settings = Settings(counts_table=COUNTS, events_table=EVENTS, time_attribute="time", rules=parse_rules(BLOG.rules_json))
        table = CountsTable(client, COUNTS, settings, backoff=no_sleep_backoff)
        commit = CounterDirectory(client, COUNTS, settings).recording(table.commit)  # as the handler commits
        items = BLOG.items(BLOG_WORKLOAD, parse_instant(NOW))
        records = [stream_record(image(**item), arrival_s=parse_instant(NOW) / 1000) for item in items]
        for start in range(0, len(records), 100):
            process(window_event(records[start : start + 100], final=True), commit, settings)
        yield client, settings


def read_function_environment(monkeypatch) -> None:
    """The read function's environment as the stack writes it: public read of views/, the dashboard on."""
    for name, value in {
        "COUNTS_TABLE": COUNTS,
        ENV_RULES: BLOG.rules_json,
        ENV_TIME_ATTRIBUTE: BLOG.time_attribute,
        ENV_PUBLIC_PREFIXES: PUBLIC,
        ENV_DASHBOARD: "true",
    }.items():
        monkeypatch.setenv(name, value)
    http_api.reader.cache_clear()
    http_api.api_settings.cache_clear()


@pytest.fixture
def environment(blog, monkeypatch):
    """The read function's environment over the blog (read_function_environment)."""
    read_function_environment(monkeypatch)
    yield
    http_api.reader.cache_clear()
    http_api.api_settings.cache_clear()


def call(target: str) -> tuple[int, dict[str, str], str]:
    path = target.partition("?")[0]
    event = http_api_event("GET", target, [("host", "api.example"), ("user-agent", "tests")], route_key=f"GET {path}")
    response = read_api.handler(event, LambdaContext())
    return response["statusCode"], response.get("headers") or {}, response["body"]


def get(target: str) -> tuple[int, dict[str, str], dict]:
    status, headers, body = call(target)
    return status, headers, json.loads(body)


def test_counts_are_the_objects_query_window_prints(environment, capsys):
    counters = ["views/all", "load/posts/about", "views/posts/hello-world"]
    query = urlencode([*(("counter", c) for c in counters), ("window", "24h"), ("series", "hour"), ("at", "2026-11-22T14:00Z")])

    status, headers, body = get(f"/counts?{query}")
    cli = load_script("query_window")
    assert cli.main([*counters, "--window", "24h", "--series", "hour", "--at", "2026-11-22T14:00Z", "--json"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    assert status == 200 and headers["Cache-Control"] == "no-store"
    assert headers["X-Tally-Version"] == tally.__version__  # every answer names the release that gave it
    assert body["counts"] == printed
    assert [count["counter"] for count in body["counts"]] == counters
    about = body["counts"][1]
    assert about["total"] > 0 and "sum" in about and "average" in about  # the summing rule's counter
    assert sum(point["count"] for point in about["series"]) == about["total"]


def test_the_fast_path_is_asked_by_name_and_reads_fewer_keys_for_the_same_settled_count(environment):
    query = "counter=load/posts/about&window=24h&at=2026-11-22T14:37Z"  # views/all counts distinct readers too
    _, _, isolated = get(f"/counts?{query}")
    _, _, fast = get(f"/counts?{query}&allow_transient=true")

    assert fast["counts"][0]["total"] == isolated["counts"][0]["total"] > 0
    assert fast["counts"][0]["keys"] < isolated["counts"][0]["keys"] == 83


def test_an_unknown_counter_is_an_empty_count_with_a_note(environment):
    status, _, body = get("/counts?counter=views/posts/nobody-wrote-this")

    assert status == 200
    assert body["counts"][0]["total"] == 0
    assert any("no bucket of 'views/posts/nobody-wrote-this'" in note for note in body["notes"])


def test_listing_answers_the_counters_under_a_prefix(environment):
    status, _, body = get("/counters?prefix=load/&window=24h")
    expected = Reader(COUNTS).list_counters("load/", window="24h")

    assert status == 200
    assert body["counters"] == [result.as_json() for result in expected]
    assert {item["counter"] for item in body["counters"]} == {f"load/posts/{key}" for key in BLOG.keys}


def test_a_listing_beyond_what_one_answer_holds_pages_with_a_cursor(environment, monkeypatch):
    monkeypatch.setattr(http_api, "MAX_COUNTERS", 3)  # views/all and three posts are four candidates
    everything = [(result.counter, result.total) for result in Reader(COUNTS).list_counters("views/", window="24h")]
    status, _, first = get("/counters?prefix=views/")
    assert status == 200 and len(first["counters"]) == 3 and first["cursor"]
    status, _, rest = get(f"/counters?prefix=views/&cursor={first['cursor']}")
    assert status == 200 and rest["cursor"] is None
    paged = [(counted["counter"], counted["total"]) for counted in first["counters"] + rest["counters"]]
    assert paged == everything and len(everything) == 4
    status, _, refused = get("/counters?prefix=views/&cursor=not-one")
    assert status == 400 and refused["parameter"] == "cursor" and "not one a listing handed out" in refused["message"]


@pytest.mark.parametrize(
    ("query", "parameter", "fix"),
    [
        ("", "counter", "counter is missing"),
        ("counter=a&window=24x", "window", "24x"),
        ("counter=a&window=0m", "window", "0m"),
        ("counter=a&at=yesterday", "at", "yesterday"),
        ("counter=a&at=2026-11-22T10:00", "at", "offset"),
        ("counter=a&at=2026-11-22T10:00+01:00", "at", "write the offset as %2B01:00"),
        ("counter=a&series=second", "series", "series must be one of minute, hour"),
        ("counter=a&plan=scan", "plan", "plan must be one of batch, range"),
        ("counter=a&align=perhaps", "align", "align must be one of"),
        ("counter=a&allow_transient=often", "allow_transient", "allow_transient must be one of true, false"),
        ("counter=%23secret", "counter", "'#secret'"),
        ("counter=a&colour=red", "colour", "unknown parameter 'colour': /counts takes counter, window"),
        ("counter=a&window=1h&window=2h", "window", "window is given 2 times"),
        ("counter=a&window=30d&at=2026-11-22T10:30Z", "at", "align"),
        ("&".join(f"counter=c{i}" for i in range(101)), "counter", "at most 100 per request"),
        ("&".join(f"counter=c{i}" for i in range(30)) + "&series=minute", "series", "series=hour"),
        ("counter=a&quantiles=0.5,1.5", "quantiles", "quantile '1.5' is not from 0 to 1: write quantiles like 0.5"),
        ("counter=a&quantiles=p99", "quantiles", "quantile 'p99' is not a number"),
        ("counter=a&quantiles=0.5&quantiles=0.9", "quantiles", "quantiles is given 2 times"),
        ("&".join(f"counter=c{i}" for i in range(20)) + "&window=30d&quantiles=0.5,0.9,0.99", "window", "fewer quantiles"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it_and_the_fix_in_one_line(environment, query, parameter, fix):
    status, headers, raw = call(f"/counts?{query}")
    body = json.loads(raw)

    assert status == 400, body
    assert "\n" not in raw and "Traceback" not in raw
    assert body["parameter"] == parameter
    assert fix in body["message"]
    assert headers["Cache-Control"] == "no-store"
    assert headers["X-Tally-Version"] == tally.__version__


def test_public_routes_answer_public_counters_only_and_may_be_cached(environment):
    status, headers, body = get("/public/counts?counter=views/all&window=24h")
    refused, _, refusal = get("/public/counts?counter=views/all&counter=load/posts/about")
    listing, _, listed = get("/public/counters?prefix=views/posts/")
    hidden, _, _ = get("/public/counters?prefix=load/")

    assert (status, headers["Cache-Control"]) == (200, "public, max-age=60")
    assert body["counts"][0]["total"] > 0
    assert refused == 403 and refusal["parameter"] == "counter"
    assert "'load/posts/about' is not public" in refusal["message"] and "'views/'" in refusal["message"]
    assert listing == 200 and {c["counter"] for c in listed["counters"]} == {f"views/posts/{k}" for k in BLOG.keys}
    assert hidden == 403


def test_public_routes_are_closed_when_no_prefix_is_public(environment, monkeypatch):
    monkeypatch.delenv(ENV_PUBLIC_PREFIXES)
    http_api.api_settings.cache_clear()

    status, _, body = get("/public/counts?counter=views/all")

    assert status == 404 and "public read is off" in body["message"]


def test_the_dashboard_page_is_served_with_its_config_and_a_policy_that_runs_only_its_own_script(environment):
    page = http_api.dashboard_page()
    if page is None:
        pytest.fail("the dashboard page is not built: run `make dashboard` (make test does)")
    status, headers, html = call("/")
    config = json.loads(html.split('<script id="tally-config" type="application/json">')[1].split("</script>")[0])
    policy = headers["Content-Security-Policy"]

    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert config == {"readBase": "/public", "prefixes": ["views/"]}
    assert "script-src 'sha256-" in policy and "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    assert "connect-src 'self'" in policy and "default-src 'none'" in policy


def test_the_dashboards_config_names_the_kept_zones_where_the_table_keeps_days_and_months(environment, monkeypatch):
    """The page offers the last 12 months then: closed months are read past the hour retention."""
    monkeypatch.setenv(ENV_CALENDAR_PREFIXES, '["views/"]')
    monkeypatch.setenv(ENV_CALENDAR_ZONES, '["Europe/Paris"]')
    http_api.reader.cache_clear()
    _, _, html = call("/")
    config = json.loads(html.split('<script id="tally-config" type="application/json">')[1].split("</script>")[0])

    assert config == {"readBase": "/public", "prefixes": ["views/"], "calendarZones": ["UTC", "Europe/Paris"]}


def test_the_dashboard_is_absent_unless_enabled(environment, monkeypatch):
    monkeypatch.setenv(ENV_DASHBOARD, "false")
    http_api.api_settings.cache_clear()

    assert call("/")[0] == 404


def throttled(*args, **kwargs):
    """The counts table refusing a read, as DynamoDB does once the retries are spent."""
    raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "BatchGetItem")


def broken(*args, **kwargs):
    raise KeyError("a bug")


@pytest.mark.parametrize(("failure", "status", "message"), [(throttled, 503, "busy"), (broken, 500, "could not read")])
def test_failures_of_tally_itself_are_one_line_without_a_traceback(environment, monkeypatch, failure, status, message):
    monkeypatch.setattr(Reader, "count_many", failure)

    answered, headers, raw = call("/counts?counter=views/all")

    assert answered == status and message in json.loads(raw)["message"]
    assert "\n" not in raw and "Traceback" not in raw and "a bug" not in raw
    assert status != 503 or headers["Retry-After"] == "1"


NAMES = ["counter", "window", "at", "series", "plan", "align", "consistent", "quantiles", "prefix", "x", "", "counter[]",
         "tz", "from", "to", "period", "week_start"]
VALUES = st.one_of(
    st.sampled_from(["24h", "90m", "7d", "0m", "-1h", "now", "2026-11-22T10:00Z", "2026-11-22T10:00", "minute", "hour",
                     "batch", "range", "true", "auto", "views/all", "load/posts/about", "0.5,0.99", "1e-1", "NaN",
                     "#rejected#late_event", "#x", "", "9" * 40, "month-to-date", "America/New_York", "Asia/Kolkata",
                     "2026-11-20", "2026-11-23", "day", "week", "month", "sunday"]),
    st.text(alphabet=string.printable + "é€\u0000\ud7ff", max_size=40),
)


@given(
    path=st.sampled_from(["/counts", "/counters", "/calendar", "/public/counts", "/public/counters", "/public/calendar"]),
    pairs=st.lists(st.tuples(st.sampled_from(NAMES), VALUES), max_size=6),
    raw_tail=st.text(alphabet="%&=+;#?/ a1", max_size=12),
)
@hypothesis_settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_no_query_string_yields_a_server_error_or_a_traceback(environment, path, pairs, raw_tail):
    query = "&".join(f"{quote(name)}={quote(value, safe='')}" for name, value in pairs) + raw_tail

    status, headers, raw = call(f"{path}?{query}")
    body = json.loads(raw)

    assert status in (200, 400, 403, 404), (status, body)
    assert "Traceback" not in raw and "\n" not in raw
    if status != 200:
        assert body["message"] and "\n" not in body["message"]
    else:
        assert sum(answer in body for answer in ("counts", "counters", "series")) == 1


def test_the_window_answered_is_the_one_asked(environment):
    status, _, body = get("/counts?counter=views/all&window=1h&at=2026-11-22T14:00Z&series=minute")
    count = body["counts"][0]

    assert status == 200
    assert (count["start"], count["end"]) == ("2026-11-22T13:00Z", "2026-11-22T14:00Z")
    assert len(count["series"]) == HOUR_MS // 60_000



def test_quantiles_travel_over_a_real_socket_as_the_cli_prints_them_within_one_percent(environment, capsys):
    """A signed GET to the function behind the local adapter: the histogram counter answers the quantiles asked,
    as written, exactly as query_window --quantiles --json prints them, and within 1 % of the window's values."""
    at, counters = "2026-11-22T14:00Z", ["load/posts/about", "views/all"]
    query = urlencode([*(("counter", c) for c in counters), ("window", "24h"), ("at", at), ("quantiles", "0.5,0.99")])
    with LocalApi(read_api.handler, credentials=CREDENTIALS) as api:
        url = f"{api.url}/counts?{query}"
        request = AWSRequest(method="GET", url=url)
        SigV4Auth(CREDENTIALS, "execute-api", "us-east-1").add_auth(request)
        with urllib.request.urlopen(urllib.request.Request(url, headers=dict(request.headers)), timeout=30) as response:
            status, body = response.status, json.loads(response.read())
    cli = load_script("query_window")
    assert cli.main([*counters, "--window", "24h", "--at", at, "--quantiles", "0.5,0.99", "--json"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    items = BLOG.items(BLOG_WORKLOAD, parse_instant(NOW))
    truth = shaped_truth(
        BLOG, [(parse_instant(item["time"]), item) for item in items], Window.ending(parse_instant(at), 24 * HOUR_MS),
        {str(item["id"]): parse_instant(NOW) for item in items}, Settings(),
    )

    assert status == 200 and body["counts"] == printed
    load, views = body["counts"]
    assert list(load["quantiles"]) == ["0.5", "0.99"] and "quantiles" not in views
    assert list(load["quantiles_by_hour"]) == list(load["by_hour"])
    for q, text in load["quantiles"].items():
        exact = truth.quantile("load/posts/about", Decimal(q))
        assert abs(Decimal(text) - exact) <= exact / 100, q


def test_top_ranks_a_prefix_as_its_listing_counts_it_and_as_the_cli_prints_it(environment, capsys):
    at = "2026-11-22T14:00Z"
    status, headers, body = get(f"/top?prefix=views/posts/&n=3&window=24h&at={at}")
    listed = Reader(COUNTS).list_counters("views/posts/", window="24h", at=at)
    brute = sorted(((r.counter, r.total) for r in listed if r.total > 0), key=lambda e: (-e[1], e[0]))
    cli = load_script("query_window")
    assert cli.main(["--top", "3", "--prefix", "views/posts/", "--window", "24h", "--at", at, "--json"]) == 0

    assert status == 200 and headers["Cache-Control"] == "no-store"
    assert body == json.loads(capsys.readouterr().out)
    assert body["exact"] is True and body["bound"] is None
    assert [(e["counter"], e["total"]) for e in body["top"]] == brute[:3]
    rising, _, trend = get(f"/top?prefix=views/posts/&n=2&window=3h&at={at}&rising=1")
    assert rising == 200 and all(e["increase"] == e["total"] - e["previous"] for e in trend["top"])


def signed_get(api: LocalApi, target: str) -> tuple[int, dict]:
    """A GET signed as a principal allowed to invoke the API would sign it, over the adapter's socket."""
    url = f"{api.url}{target}"
    request = AWSRequest(method="GET", url=url)
    SigV4Auth(CREDENTIALS, "execute-api", "us-east-1").add_auth(request)
    with urllib.request.urlopen(urllib.request.Request(url, headers=dict(request.headers)), timeout=30) as response:
        return response.status, json.loads(response.read())


def test_counts_listings_and_top_lists_say_which_counters_are_retired_over_a_real_socket(environment, monkeypatch, capsys):
    """An hour after the rule writing each post's views retired, with the load-time rule retiring an hour later:
    the posts' views are retired; views/all is not (a live rule writes it too), nor are load times (not yet)."""
    rules = json.loads(BLOG.rules_json)
    retiring = {"views": "2026-11-22T15:00:00Z", "load-time": "2026-11-22T17:00:00Z"}
    for rule in rules:
        rule.update({"retiredAt": retiring[rule["name"]]} if rule["name"] in retiring else {})
    monkeypatch.setenv(ENV_RULES, json.dumps(rules))
    http_api.reader.cache_clear()
    at, post = "2026-11-22T14:00Z", "views/posts/hello-world"
    counters = [post, "views/all", "load/posts/about"]
    query = urlencode([*(("counter", c) for c in counters), ("window", "24h"), ("at", at)])
    with freeze_time("2026-11-22T16:00:00Z"), LocalApi(read_api.handler, credentials=CREDENTIALS) as api:
        status, body = signed_get(api, f"/counts?{query}")
        listed_status, listed = signed_get(api, f"/counters?prefix=views/&window=24h&at={at}")
        top_status, top = signed_get(api, f"/top?prefix=views/&n=10&window=24h&at={at}")
        assert load_script("query_window").main([*counters, "--window", "24h", "--at", at, "--json"]) == 0
    printed = capsys.readouterr()

    assert status == listed_status == top_status == 200
    assert [(c["counter"], c["retired"]) for c in body["counts"]] == [
        (post, "2026-11-22T15:00:00Z"), ("views/all", None), ("load/posts/about", None)
    ]
    assert body["counts"][0]["total"] > 0  # still readable
    assert body["counts"] == [json.loads(line) for line in printed.out.splitlines()]  # as the CLI prints them
    note = f"counter '{post}' stopped counting at 2026-11-22T15:00:00Z: its rule 'views' is retired; no more events will come"
    assert note in body["notes"] and f"note: {note}" in printed.err
    assert {c["counter"]: c["retired"] for c in listed["counters"]} == {
        c: None if c == "views/all" else "2026-11-22T15:00:00Z" for c in (c["counter"] for c in listed["counters"])
    }
    assert len(listed["counters"]) > 2
    assert {e["counter"]: e.get("retired") for e in top["top"]} == {c["counter"]: c["retired"] for c in listed["counters"]}


@pytest.mark.parametrize(
    ("query", "parameter", "fix"),
    [
        ("prefix=views/&n=0", "n", "n must be a whole number from 1 to 1000"),
        ("prefix=views/&n=1001", "n", "from 1 to 1000"),
        ("prefix=%23segment%23&n=5", "prefix", "not starting with '#'"),
        ("n=5", "prefix", "prefix is missing"),
        ("prefix=views/&rising=maybe", "rising", "rising must be one of"),
        ("prefix=views/&window=30d&at=2026-11-22T10:30Z", "at", "align"),
        ("prefix=views/&series=hour", "series", "unknown parameter 'series'"),
    ],
)
def test_a_bad_top_is_a_400_naming_its_parameter(environment, query, parameter, fix):
    status, _, raw = call(f"/top?{query}")
    body = json.loads(raw)
    assert status == 400 and "\n" not in raw
    assert body["parameter"] == parameter and fix in body["message"]


def test_a_top_of_a_prefix_that_is_not_ranked_and_too_crowded_to_count_whole_is_a_400_and_one_cli_line(
    environment, monkeypatch, capsys
):
    from tally import reader as reader_module
    from tally.core.ranking import TopBudget

    monkeypatch.setattr(reader_module, "TopBudget", lambda: TopBudget(directory_names=2))  # "crowded" from 3 names
    http_api.reader.cache_clear()
    status, _, raw = call("/top?prefix=views/&n=3")
    body = json.loads(raw)
    assert status == 400 and "\n" not in raw and body["parameter"] == "prefix"
    assert body["message"].startswith("prefix 'views/' is not ranked and names more than 2 counters")
    assert "rankedPrefixes" in body["message"]
    assert load_script("query_window").main(["--top", "3", "--prefix", "views/"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "TALLY_RANKED_PREFIXES" in captured.err


def test_public_top_answers_under_a_public_prefix_only(environment):
    status, headers, body = get("/public/top?prefix=views/posts/&n=2")
    hidden, _, refusal = get("/public/top?prefix=load/&n=2")

    assert status == 200 and headers["Cache-Control"] == "public, max-age=60" and len(body["top"]) == 2
    assert hidden == 403 and refusal["parameter"] == "prefix"


def test_alerts_answer_the_states_reader_alerts_gives_and_refuse_bad_parameters(environment, blog, monkeypatch):
    from alert_support import ALERT_RULES, cross
    from tally.core.windows import now_ms

    client, _ = blog
    monkeypatch.setenv(ENV_RULES, ALERT_RULES)
    http_api.reader.cache_clear()
    settings = Settings(counts_table=COUNTS, events_table=EVENTS, rules=parse_rules(ALERT_RULES))
    cross(client, settings, now_ms() // 60_000 * 60_000, {"logins/a": 3, "signups/pro": 9})

    status, headers, body = get("/alerts?state=ALARM")
    expected = Reader(COUNTS, client=client, settings=settings).alerts(state="ALARM")
    assert status == 200 and headers["Cache-Control"] == "no-store"
    assert body == {"alerts": [status.as_json() for status in expected]}
    assert [(a["alert"], a["counter"]) for a in body["alerts"]] == [("burst", "logins/a"), ("signup-rush", "signups/pro")]
    from tally.api_schema import AlertsAnswer

    AlertsAnswer.model_validate(body)  # the answer is the one /openapi.json describes (closed objects)
    described = get("/openapi.json")[2]["paths"]["/alerts"]["get"]
    assert {parameter["name"] for parameter in described["parameters"]} == {"alert", "state", "prefix"}
    assert [a["counter"] for a in get("/alerts?alert=burst")[2]["alerts"]] == ["logins/a"]
    assert get("/alerts?prefix=signups/")[2]["alerts"][0]["counter"] == "signups/pro"
    status, _, refused = get("/alerts?alert=nope")
    assert status == 400 and refused["parameter"] == "alert"
    assert get("/alerts?state=red")[2] == {"message": "state must be one of ALARM, OK, got 'red'", "parameter": "state"}
    assert get("/alerts?color=red")[2]["parameter"] == "color"


CALENDAR = [("from", "2026-11-20"), ("to", "2026-11-23"), ("tz", "America/New_York")]


@pytest.mark.parametrize("period", ["day", "week", "month"])
def test_calendar_series_over_a_real_socket_are_the_readers_for_the_same_table(environment, period):
    """Signed, as /counts: each series is what Reader.calendar answers, New York's days (or the week and the
    month holding them, cut to the range) with their offsets, summing and distinct counters keeping theirs."""
    counters = ["views/all", "load/posts/about"]
    query = urlencode([*(("counter", c) for c in counters), ("period", period), *CALENDAR, ("quantiles", "0.5")])
    with freeze_time(NOW), LocalApi(read_api.handler, credentials=CREDENTIALS) as api:
        status, body = signed_get(api, f"/calendar?{query}")
        expected = Reader(COUNTS).calendar(
            counters, period, tz="America/New_York", start="2026-11-20", end="2026-11-23", quantiles="0.5"
        )
        _, _, counted = get("/counts?counter=views/all&counter=load/posts/about&window=30h&at=2026-11-22T14:37Z")

    assert status == 200
    assert body == {"series": [series.as_json() for series in expected], "notes": Reader(COUNTS).calendar_notes(expected)}
    views, load = body["series"]
    assert (views["counter"], views["period"], views["tz"]) == ("views/all", period, "America/New_York")
    assert (views["start"], views["end"]) == ("2026-11-20T00:00:00-05:00", "2026-11-23T00:00:00-05:00")
    assert [point["start"][:10] for point in views["points"]] == {  # the week and the month cut to the range
        "day": ["2026-11-20", "2026-11-21", "2026-11-22"], "week": ["2026-11-20"], "month": ["2026-11-20"],
    }[period]
    # The blog's 30 hours all fall in the range: each series holds the window's whole count.
    assert [series["total"] for series in body["series"]] == [count["total"] for count in counted["counts"]]
    assert all("distinct" in point for point in views["points"])
    assert all("sum" in point and "quantiles" in point for point in load["points"] if point["count"])


def test_month_to_date_on_counts_is_the_readers_this_month_so_far_in_the_zone_asked(environment):
    with freeze_time(NOW):
        status, headers, body = get("/counts?counter=views/all&counter=load/posts/about&window=month-to-date&tz=America/New_York")
        expected = Reader(COUNTS).month_to_date(["views/all", "load/posts/about"], tz="America/New_York")
        _, _, series = get(f"/calendar?counter=views/all&counter=load/posts/about&{urlencode(CALENDAR[2:])}"
                           "&from=2026-11-01&to=2026-11-23")

    assert status == 200 and headers["Cache-Control"] == "no-store"
    assert body["counts"] == [count.as_json() for count in expected]
    assert body["counts"][0]["start"] == "2026-11-01T04:00Z"  # New York's first of November, in UTC
    assert [count["total"] for count in body["counts"]] == [s["total"] for s in series["series"]]
    assert body["counts"][0]["total"] > 0


@pytest.mark.parametrize(
    ("query", "parameter", "fix"),
    [
        ("counter=views/all&from=2026-11-01&to=2026-11-02&tz=Mars/Base", "tz", "unknown time zone 'Mars/Base'"),
        ("counter=views/all&from=2026-11-01&to=2026-11-02&tz=Asia/Kolkata", "tz", "not on a whole hour"),
        ("counter=views/all&from=2026-06-01&to=2026-07-01", "from", "past the hour retention (90 days"),
        ("counter=views/all&from=2026-11-01&to=2026-11-20&period=week&week_start=funday", "week_start", "a week starts on"),
        ("counter=views/all&from=2026-11-01&to=2026-11-20&week_start=sunday", "week_start", "a week start goes with"),
        ("counter=views/all&from=2026-11-01&to=2026-11-20&period=year", "period", "period must be one of day, week, month"),
        ("counter=views/all&from=2026-11-01", "to", "a calendar read needs its first day"),
        ("counter=views/all&to=2026-11-01", "from", "a calendar read needs its first day"),
        ("counter=views/all&from=2026-11-31&to=2026-12-01", "from", "from must be a date"),
        ("counter=views/all&from=2026-11-10&to=2026-11-01", "to", "must be after"),
        ("counter=views/all&from=2026-11-01&to=2026-11-02&quantiles=2", "quantiles", "quantile"),
        ("from=2026-11-01&to=2026-11-02", "counter", "counter is missing"),
        ("counter=views/all&from=2026-11-01&to=2026-11-02&window=24h", "window", "unknown parameter 'window'"),
        ("&".join(f"counter=c{i}" for i in range(50)) + "&from=2026-09-01&to=2026-11-23&quantiles="
         + ",".join(f"0.{n}" for n in range(1, 10)), "period",
         "a shorter range or longer periods"),
    ],
)
def test_a_bad_calendar_is_a_400_naming_its_parameter_and_the_fix_in_one_line(environment, query, parameter, fix):
    with freeze_time(NOW):
        status, headers, raw = call(f"/calendar?{query}")
    body = json.loads(raw)

    assert status == 400, body
    assert "\n" not in raw and "Traceback" not in raw
    assert body["parameter"] == parameter and fix in body["message"]
    assert headers["X-Tally-Version"] == tally.__version__


@pytest.mark.parametrize(
    ("query", "parameter", "fix"),
    [
        ("window=month-to-date&tz=Asia/Kolkata", "tz", "not on a whole hour"),
        ("window=month-to-date&tz=Mars/Base", "tz", "unknown time zone"),
        ("window=month-to-date&at=2026-11-22T10:00Z", "at", "it takes no at"),
        ("window=month-to-date&align=true", "align", "it takes no align"),
        ("window=month-to-date&series=fortnight", "series", "series"),
        ("window=24h&tz=Europe/Paris", "tz", "tz goes with window=month-to-date"),
    ],
)
def test_a_bad_month_to_date_is_a_400_naming_its_parameter(environment, query, parameter, fix):
    with freeze_time(NOW):
        status, _, raw = call(f"/counts?counter=views/all&{query}")
    body = json.loads(raw)

    assert status == 400 and "\n" not in raw, body
    assert body["parameter"] == parameter and fix in body["message"]


def test_public_calendar_answers_public_counters_only(environment):
    query = "from=2026-11-20&to=2026-11-23&period=day"
    with freeze_time(NOW):
        status, headers, body = get(f"/public/calendar?counter=views/all&{query}")
        hidden, _, refusal = get(f"/public/calendar?counter=load/posts/about&{query}")
        month, _, so_far = get("/public/counts?counter=views/all&window=month-to-date")

    assert (status, headers["Cache-Control"]) == (200, "public, max-age=60") and body["series"][0]["total"] > 0
    assert hidden == 403 and refusal["parameter"] == "counter"
    assert month == 200 and so_far["counts"][0]["start"] == "2026-11-01T00:00Z"
