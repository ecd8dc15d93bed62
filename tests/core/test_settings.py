import json

import pytest

from tally.core.settings import Settings, SettingsError
from tally.core.units import DAY_MS, HOUR_MS


def test_defaults_are_documented_values():
    settings = Settings.from_env({})
    assert settings.counter_attribute == "counter"
    assert settings.time_attribute == "ts"
    assert settings.value_attribute == "value"
    assert settings.minute_retention_ms == 48 * HOUR_MS
    assert settings.hour_retention_ms == 90 * DAY_MS
    assert settings.max_clock_skew_ms == 300_000
    assert settings.ranked_prefixes == ()  # no rank record unless a table asks for top lists


def test_ranked_prefixes_are_a_json_list_and_rank_the_counters_starting_with_one():
    from tally.core.ranking import is_ranked, prefix_is_ranked

    settings = Settings.from_env({"TALLY_RANKED_PREFIXES": '["views/", "jobs/", "views/"]'})
    assert settings.ranked_prefixes == ("views/", "jobs/")
    assert is_ranked("views/p1", settings) and not is_ranked("pages/p1", settings)
    assert prefix_is_ranked("views/p", settings) and not prefix_is_ranked("", settings) and not prefix_is_ranked("v", settings)
    everything = Settings(ranked_prefixes=("",))
    assert is_ranked("anything", everything) and prefix_is_ranked("", everything)
    assert not is_ranked("#rejected#late_event", everything)  # tally's own counters never are


def test_environment_overrides_every_setting():
    settings = Settings.from_env(
        {
            "COUNTS_TABLE": "c",
            "EVENTS_TABLE": "e",
            "TALLY_COUNTER_ATTRIBUTE": "kind",
            "TALLY_TIME_ATTRIBUTE": "at",
            "TALLY_VALUE_ATTRIBUTE": "amount",
            "TALLY_MINUTE_RETENTION_HOURS": "72",
            "TALLY_HOUR_RETENTION_DAYS": "400",
            "TALLY_MAX_CLOCK_SKEW_SECONDS": "60",
            "TALLY_BUCKET_LANES": "8",
        }
    )
    assert (settings.counts_table, settings.events_table) == ("c", "e")
    assert (settings.counter_attribute, settings.time_attribute, settings.value_attribute) == ("kind", "at", "amount")
    assert settings.minute_retention_ms == 72 * HOUR_MS
    assert settings.hour_retention_ms == 400 * DAY_MS
    assert settings.max_clock_skew_ms == 60_000
    assert settings.bucket_lanes == 8


@pytest.mark.parametrize(
    "env",
    [
        {},
        {
            "TALLY_COUNTER_ATTRIBUTE": "kind",
            "TALLY_TIME_ATTRIBUTE": "at",
            "TALLY_MINUTE_RETENTION_HOURS": "72",
            "TALLY_HOUR_RETENTION_DAYS": "400",
            "TALLY_MAX_CLOCK_SKEW_SECONDS": "0",
            "TALLY_BUCKET_LANES": "8",
            "TALLY_COUNT_FROM": "2026-11-23T10:00:00Z",
            "TALLY_RULES": '[{"name": "jobs", "counter": "jobs/{providerId}", "when": {"status": {"equals": 1.50}}}]',
            "TALLY_RANKED_PREFIXES": '["jobs/", ""]',
        },
    ],
    ids=["defaults", "everything set"],
)
def test_the_counting_environment_reads_back_as_the_same_settings(env):
    settings = Settings.from_env(env)
    published = settings.counting_environment()
    assert Settings.from_env(published) == settings
    assert "COUNTS_TABLE" not in published and published.get("TALLY_RULES", "") == env.get("TALLY_RULES", "")


def test_a_minute_retention_of_one_day_answers_the_default_window():
    """The 24 h window ending now reads minutes up to 24 h old; counting needs nothing more."""
    assert Settings.from_env({"TALLY_MINUTE_RETENTION_HOURS": "24"}).minute_retention_ms == DAY_MS


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TALLY_MINUTE_RETENTION_HOURS": "two"}, "TALLY_MINUTE_RETENTION_HOURS must be a whole number"),
        ({"TALLY_MINUTE_RETENTION_HOURS": "-1"}, "must not be negative"),
        ({"TALLY_MINUTE_RETENTION_HOURS": "23"}, "minute retention must be at least 24 hours"),
        ({"TALLY_HOUR_RETENTION_DAYS": "1"}, "hour retention must be at least"),
        ({"TALLY_MAX_CLOCK_SKEW_SECONDS": "7200"}, "max clock skew"),
        ({"TALLY_TIME_ATTRIBUTE": "counter"}, "distinct names"),
        ({"TALLY_COUNTER_ATTRIBUTE": ""}, "TALLY_COUNTER_ATTRIBUTE='': attribute name must not be empty"),
        ({"TALLY_BUCKET_LANES": "0"}, "TALLY_BUCKET_LANES='0': bucket lanes must be between 1 and 32"),
        ({"TALLY_BUCKET_LANES": "33"}, "bucket lanes must be between 1 and 32"),
        ({"TALLY_RANKED_PREFIXES": "views/"}, r'TALLY_RANKED_PREFIXES must be a JSON list of strings like \["views/"\]'),
        ({"TALLY_RANKED_PREFIXES": '["#x"]'}, "TALLY_RANKED_PREFIXES='\\[\"#x\"\\]': ranked prefixes must not start with '#'"),
        ({"TALLY_RANKED_PREFIXES": "[1]"}, "must be a JSON list of strings"),
        ({"TALLY_RANKED_PREFIXES": str([f"p{n}/" for n in range(21)]).replace("'", '"')}, "at most 20 ranked prefixes"),
    ],
)
def test_bad_settings_fail_fast_with_the_variable_named(env, message):
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


@pytest.mark.parametrize(
    ("raw", "expected_ms"),
    [("1795000000", 1_795_000_000_000), ("2026-11-18T11:06:40Z", 1_795_000_000_000), ("2026-11-18T12:06:40+01:00", 1_795_000_000_000)],
)
def test_count_from_is_epoch_seconds_or_an_iso_instant(raw, expected_ms):
    assert Settings.from_env({"TALLY_COUNT_FROM": raw}).count_from_ms == expected_ms


def test_count_from_is_off_by_default():
    assert Settings.from_env({}).count_from_ms is None
    assert Settings.from_env({"TALLY_COUNT_FROM": ""}).count_from_ms is None


@pytest.mark.parametrize("raw", ["2026-11-18T11:06:40.5Z", "2026-11-18T11:06:40", "yesterday", "-5", "1.5"])
def test_count_from_must_name_a_whole_second_with_an_offset(raw):
    with pytest.raises(SettingsError, match="TALLY_COUNT_FROM"):
        Settings.from_env({"TALLY_COUNT_FROM": raw})


def test_count_from_in_milliseconds_must_be_whole_seconds():
    with pytest.raises(SettingsError, match="whole number of seconds"):
        Settings(count_from_ms=1_795_000_000_500)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TALLY_MINUTE_RETENTION_HOURS": "23"}, "TALLY_MINUTE_RETENTION_HOURS='23'"),
        ({"TALLY_HOUR_RETENTION_DAYS": "1"}, "TALLY_HOUR_RETENTION_DAYS='1'"),
        ({"TALLY_MAX_CLOCK_SKEW_SECONDS": "3601"}, "TALLY_MAX_CLOCK_SKEW_SECONDS='3601'"),
        ({"TALLY_TIME_ATTRIBUTE": "counter"}, "TALLY_TIME_ATTRIBUTE='counter'"),
    ],
)
def test_a_rule_spanning_settings_names_the_variable_that_broke_it(env, named):
    with pytest.raises(SettingsError) as raised:
        Settings.from_env(env)
    assert str(raised.value).startswith(named + ": ")


def test_calendar_settings_are_read_from_the_environment_and_refused_by_name():
    settings = Settings.from_env({
        "TALLY_CALENDAR_PREFIXES": '["orders/", "signups"]', "TALLY_CALENDAR_ZONES": '["America/New_York"]',
        "TALLY_DAY_RETENTION_DAYS": "730", "TALLY_MONTH_RETENTION_MONTHS": "120",
    })
    assert settings.kept_zones == ("UTC", "America/New_York")
    assert settings.keeps_calendar("orders/acme") and not settings.keeps_calendar("views/home")
    assert (settings.day_retention_ms, settings.month_retention_months) == (730 * DAY_MS, 120)
    assert Settings.from_env(settings.counting_environment()) == settings
    assert Settings().kept_zones == () and "TALLY_CALENDAR_PREFIXES" not in Settings().counting_environment()
    refused = {
        '{"TALLY_CALENDAR_ZONES": "[\\"Asia/Kolkata\\"]", "TALLY_CALENDAR_PREFIXES": "[\\"a\\"]"}': "whole number of hours",
        '{"TALLY_CALENDAR_ZONES": "[\\"Mars/Base\\"]", "TALLY_CALENDAR_PREFIXES": "[\\"a\\"]"}': "unknown time zone",
        '{"TALLY_CALENDAR_ZONES": "[\\"Europe/Berlin\\"]"}': "need calendar prefixes",
        '{"TALLY_CALENDAR_PREFIXES": "orders/"}': "JSON list",
        '{"TALLY_CALENDAR_PREFIXES": "[\\"#rejected#\\"]"}': "must not start with '#'",
        '{"TALLY_CALENDAR_PREFIXES": "[\\"a\\"]", "TALLY_HOUR_RETENTION_DAYS": "3"}': "at least 7 days",
        '{"TALLY_DAY_RETENTION_DAYS": "30"}': "day retention must be at least the hour retention",
    }
    for env, message in refused.items():
        with pytest.raises(SettingsError, match=message) as raised:
            Settings.from_env(json.loads(env))
        assert "TALLY_" in str(raised.value)
