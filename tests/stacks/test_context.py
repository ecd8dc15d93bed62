"""Context values are validated before anything is synthesized, with the key in the message."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest

from stacks import TallyStack
from tally_cdk.context import DEFAULT_CONTEXT, ContextError, StackSettings, stack_name_from_context
from tally.core.units import DAY_MS, HOUR_MS


def settings_with(**overrides: Any) -> StackSettings:
    return StackSettings.from_context({**DEFAULT_CONTEXT, **overrides}.get)


def test_defaults_apply_when_context_is_empty():
    settings = StackSettings.from_context({}.get)

    assert (settings.tumbling_window_seconds, settings.batch_size, settings.max_batching_window_seconds) == (60, 1000, 10)
    assert (settings.events_table_removal_policy, settings.counts_table_removal_policy) == ("retain", "destroy")
    assert settings.handler_settings.minute_retention_ms == 48 * HOUR_MS
    assert settings.alarm_topic_arn == ""


def test_command_line_strings_are_read_as_numbers_and_choices():
    settings = settings_with(tumblingWindowSeconds="900", batchSize=" 10000", eventsTableRemovalPolicy="DESTROY")

    assert (settings.tumbling_window_seconds, settings.batch_size) == (900, 10000)
    assert settings.events_table_removal_policy == "destroy"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("tumblingWindowSeconds", 901, "between 1 and 900"),
        ("tumblingWindowSeconds", 0, "between 1 and 900"),  # no window, no shard to key writes on
        ("tumblingWindowSeconds", "sixty", "whole number"),
        ("tumblingWindowSeconds", True, "whole number"),
        ("tumblingWindowSeconds", 1.5, "whole number"),
        ("batchSize", 0, "between 1 and 10000"),
        ("bucketLanes", 33, "between 1 and 32"),
        ("batchSize", "10001", "between 1 and 10000"),
        ("maxBatchingWindowSeconds", 301, "between 0 and 300"),
        ("powertoolsLayerVersion", 0, "at least 1"),
        ("eventsTableRemovalPolicy", "snapshot", "one of retain, destroy"),
        ("countsTableRemovalPolicy", 1, "one of retain, destroy"),
        ("counterAttribute", "", "non-empty string"),
        ("alarmTopicArn", "tally-alarms", "an sns ARN"),
        ("alarmTopicArn", "arn:aws:sqs:eu-west-1:123456789012:q", "an sns ARN"),
    ],
)
def test_bad_values_name_their_key(key: str, value: Any, message: str):
    with pytest.raises(ContextError, match=rf"context {key} must .*{message}"):
        settings_with(**{key: value})


def test_ranked_prefixes_are_a_list_from_cdk_json_or_the_command_line():
    assert StackSettings.from_context({}.get).handler_settings.ranked_prefixes == ()
    assert settings_with(rankedPrefixes=["views/", "jobs/"]).handler_settings.ranked_prefixes == ("views/", "jobs/")
    assert settings_with(rankedPrefixes="views/,jobs/").handler_settings.ranked_prefixes == ("views/", "jobs/")
    with pytest.raises(ContextError, match=r"context rankedPrefixes=.*must not start with '#'"):
        settings_with(rankedPrefixes=["#rejected#"])
    with pytest.raises(ContextError, match="context rankedPrefixes must be a list of strings"):
        settings_with(rankedPrefixes=[1])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"minuteRetentionHours": 23}, "minute retention must be at least 24 hours"),
        ({"minuteRetentionHours": 100, "hourRetentionDays": 3}, "hour retention must be at least"),
        ({"maxClockSkewSeconds": 3601}, "max clock skew"),
        ({"valueAttribute": "counter"}, "distinct names"),
    ],
)
def test_handler_settings_are_checked_by_the_handler_rules(overrides: dict[str, Any], message: str):
    with pytest.raises(ContextError, match=message):
        settings_with(**overrides)


@pytest.mark.parametrize("name", ["1Tally", "tally_prod", "", "a" * 129])
def test_stack_name_must_be_a_cloudformation_name(name: str):
    with pytest.raises(ContextError, match="stackName"):
        stack_name_from_context({"stackName": name}.get)


def test_stack_name_defaults_to_tally():
    assert stack_name_from_context({}.get) == "Tally"


def test_the_stack_refuses_bad_context_before_building_anything():
    app = cdk.App(context={"tumblingWindowSeconds": "3600"})

    with pytest.raises(ContextError, match="tumblingWindowSeconds"):
        TallyStack(app, "Tally")


ORDERS_STREAM = "arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-11-01T00:00:00.000"


def test_an_existing_events_table_is_named_with_its_stream():
    settings = settings_with(eventsTableName=" orders ", eventsStreamArn=ORDERS_STREAM, countFrom="1795428000")

    assert (settings.events_table_name, settings.events_stream_arn) == ("orders", ORDERS_STREAM)
    assert settings.handler_settings.count_from_ms == 1_795_428_000_000
    assert settings_with().handler_settings.count_from_ms is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"eventsTableName": "orders"}, "give both or neither"),
        ({"eventsStreamArn": ORDERS_STREAM}, "give both or neither"),
        ({"eventsTableName": "orders", "eventsStreamArn": "arn:aws:dynamodb:eu-west-1:123456789012:table/orders"}, "stream ARN"),
        ({"eventsTableName": "jobs", "eventsStreamArn": ORDERS_STREAM}, "belongs to table 'orders'"),
        ({"eventsTableName": "a b", "eventsStreamArn": ORDERS_STREAM}, "not a DynamoDB table name"),
        ({"countFrom": "2026-11-23T10:00:00.250Z"}, "countFrom must be a whole second"),
        ({"countFrom": "tomorrow"}, "countFrom must be epoch seconds"),
        (
            {"countFrom": "1795428000", "rules": [{"name": "r", "counter": "x", "countFrom": "1795427000"}]},
            "countFrom=1795428000: rule 'r' counts from before the deployment's countFrom",
        ),
        ({"rules": [{"name": "r", "counter": "x", "retiredAt": "soon"}]}, "rules: rule 1 \\('r'\\): field 'retiredAt'"),
    ],
)
def test_bad_adoption_context_names_the_key(overrides, message):
    with pytest.raises(ContextError, match=message):
        settings_with(**overrides)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"minuteRetentionHours": "23"}, "minuteRetentionHours=23"),
        ({"hourRetentionDays": "1"}, "hourRetentionDays=1"),
        ({"maxClockSkewSeconds": "3601"}, "maxClockSkewSeconds=3601"),
        ({"timeAttribute": "counter"}, "timeAttribute=counter"),
    ],
)
def test_a_handler_rule_names_the_context_key_that_broke_it(overrides: dict[str, Any], named: str):
    with pytest.raises(ContextError) as raised:
        settings_with(**overrides)
    message = str(raised.value)
    assert message.startswith("context ") and named in message.split(": ")[0]


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ('[{"counter": "jobs/{providerId"}]', "context rules: rule 1: field 'counter': unclosed"),
        ([{"name": "r", "counter": "x", "sum": 3}], "context rules: rule 1 ('r'): field 'sum'"),
        ({"counter": "x"}, "context rules must be a JSON list of counter rules"),
        ([{"counter": f"c{i}/{{a}}", "when": {"s": {"oneOf": ["v" * 90] * 3}}} for i in range(12)], "3000 bytes"),
    ],
)
def test_bad_rules_stop_the_synth_with_the_rule_and_field_named(rules, message):
    with pytest.raises(ContextError) as caught:
        settings_with(rules=rules)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_rules_from_cdk_json_and_the_command_line_reach_the_handler_settings():
    listed = settings_with(rules=[{"counter": "views/{url}"}, {"counter": "views/all", "when": {"n": {"equals": 1.5}}}])
    typed = settings_with(rules='[{"counter": "views/{url}"}]')
    assert [rule.counter.text for rule in listed.handler_settings.counter_rules.rules] == ["views/{url}", "views/all"]
    assert str(listed.handler_settings.counter_rules.rules[1].when[0].values[0]) == "1.5"
    assert typed.rules_json == '[{"counter": "views/{url}"}]'
    assert settings_with(rules=[]).rules_json == "" and settings_with(rules="").handler_settings.counter_rules.classic


def test_read_api_keys_come_as_json_from_cdk_json_and_as_text_from_the_command_line():
    typed = settings_with(apiPublicPrefixes=" views/ , load/", apiCorsOrigins='["https://blog.example.com"]',
                          apiDashboard="TRUE", apiPublicRateLimit="5")
    listed = settings_with(apiPublicPrefixes=["views/"], apiDashboard=True)

    assert typed.read_api.public_prefixes == ("views/", "load/")
    assert typed.read_api.cors_origins == ("https://blog.example.com",)
    assert (typed.read_api.dashboard, typed.read_api.public_rate_limit) == (True, 5)
    assert listed.read_api.public_prefixes == ("views/",) and listed.read_api.enabled
    assert settings_with().read_api.public_prefixes == () and not settings_with(readApi="false").read_api.enabled


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"readApi": "maybe"}, "context readApi must be true or false, got 'maybe'"),
        ({"apiPublicPrefixes": '["views/", 3]'}, "context apiPublicPrefixes must be a list of strings"),
        ({"apiPublicPrefixes": "#rejected#"}, "context apiPublicPrefixes=#rejected#: public prefix '#rejected#' cannot"),
        ({"apiCorsOrigins": "blog.example.com"}, "context apiCorsOrigins=blog.example.com: 'blog.example.com' is not an origin"),
        ({"apiDashboard": True}, "context apiDashboard=True, apiPublicPrefixes=[]: the dashboard page reads anonymously"),
        ({"apiPublicCacheSeconds": "90000"}, "context apiPublicCacheSeconds=90000: public cache lifetime must be"),
        ({"apiPublicBurstLimit": "5001"}, "context apiPublicBurstLimit=5001: must be a whole number from 1 to 5000"),
        ({"readApi": False, "apiCorsOrigins": "*"}, "context readApi=False: the read API is off"),
    ],
)
def test_bad_read_api_keys_name_the_key_in_one_line(overrides, message):
    with pytest.raises(ContextError) as refused:
        settings_with(**overrides)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_calendar_keys_reach_the_handler_settings_from_cdk_json_or_the_command_line():
    listed = settings_with(calendarPrefixes=["orders/", "signups"], calendarZones=["Europe/Berlin"], dayRetentionDays=500,
                           monthRetentionMonths=120)
    typed = settings_with(calendarPrefixes="orders/,signups,orders/", calendarZones='["Europe/Berlin"]',
                          dayRetentionDays="500", monthRetentionMonths="120")
    for settings in (listed, typed):
        handler = settings.handler_settings
        assert handler.calendar_prefixes == ("orders/", "signups") and handler.kept_zones == ("UTC", "Europe/Berlin")
        assert (handler.day_retention_ms, handler.month_retention_months) == (500 * DAY_MS, 120)
    defaults = StackSettings.from_context({}.get).handler_settings
    assert (defaults.calendar_prefixes, defaults.calendar_zones) == ((), ())
    assert (defaults.day_retention_ms, defaults.month_retention_months, defaults.kept_zones) == (400 * DAY_MS, 84, ())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"calendarPrefixes": ["orders/"], "calendarZones": ["Mars/Olympus"]},
         "context calendarZones=['Mars/Olympus']: unknown time zone 'Mars/Olympus'"),
        ({"calendarPrefixes": "orders/", "calendarZones": "Asia/Kolkata"},
         "context calendarZones=Asia/Kolkata: time zone Asia/Kolkata: its offset from UTC is not a whole number of hours"),
        ({"calendarPrefixes": "orders/", "hourRetentionDays": "5"},
         "context hourRetentionDays=5, calendarPrefixes=orders/: hour retention must be at least 7 days"),
        ({"calendarPrefixes": '["orders/", 3]'}, "context calendarPrefixes must be a list of strings"),
        ({"calendarZones": {"Europe/Berlin": 1}}, "context calendarZones must be a list of strings"),
        ({"calendarPrefixes": "[orders/"}, "context calendarPrefixes must be a JSON list of strings"),
        ({"calendarZones": ["Europe/Berlin"]},
         "context calendarZones=['Europe/Berlin'], calendarPrefixes=[]: calendar zones need calendar prefixes"),
        ({"calendarPrefixes": ["#late#"]}, "context calendarPrefixes=['#late#']: calendar prefixes must not start with '#'"),
        ({"dayRetentionDays": "30"},
         "context dayRetentionDays=30, hourRetentionDays=90: day retention must be at least the hour retention"),
        ({"monthRetentionMonths": "3"},
         "context monthRetentionMonths=3, dayRetentionDays=400: month retention must cover the day retention"),
        ({"monthRetentionMonths": 0}, "context monthRetentionMonths must be at least 1"),
        ({"dayRetentionDays": "forever"}, "context dayRetentionDays must be a whole number"),
    ],
)
def test_bad_calendar_keys_stop_the_synth_naming_the_key_in_one_line(overrides, message):
    with pytest.raises(ContextError) as refused:
        settings_with(**overrides)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
