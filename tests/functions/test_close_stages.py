"""The close's Lambda functions: one for each kind of step the state machine runs, and what they close against moto.

Run in order as the state machine runs them (plan, every part of the days, every part of the months, finish),
they write exactly the items ``Closer.close_due`` writes into a twin table; a part run again writes nothing; and
nothing closes a period before its close time by the clock, whatever the event says.
"""

from __future__ import annotations

import inspect
from datetime import UTC, datetime

import pytest
from closing_support import ZONE, calendar_environment, calendar_settings, copy_table, count_a_month, long_items
from moto_tables import COUNTS

from tally.closing import CLOSE_STEPS, MAX_DAYS_PER_PART, CloseRefused, Closer
from tally.core.buckets import Bucket, iso_second
from tally.core.directory import DIRECTORY_PARTITIONS
from tally.core.units import DAY_MS
from tally.core.windows import now_ms
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.functions import close_stages

TWIN = "tally-counts-twin"


@pytest.fixture
def environment(dynamodb, monkeypatch):
    for name, value in calendar_environment(COUNTS).items():
        monkeypatch.setenv(name, value)
    return dynamodb


def run_steps(event: dict) -> dict:
    """The state machine's steps in order, each map's children one after the other; the finish's answer."""
    state = close_stages.plan(event)
    for step in CLOSE_STEPS[1:-1]:
        state[step.result] = [getattr(close_stages, step.handler)(item) for item in state[step.over]]
    return close_stages.finish({"periods": state["finish"], "closed": {"days": state["daysClosed"], "months": state["monthsClosed"]}})


def test_each_step_runs_a_function_of_this_module_and_each_function_is_a_step():
    assert {step.handler_path.rpartition(".")[0] for step in CLOSE_STEPS} == {close_stages.__name__}
    functions = {
        name for name, value in vars(close_stages).items()
        if inspect.isfunction(value) and value.__module__ == close_stages.__name__ and not name.startswith("_")
    }
    assert functions == {step.handler for step in CLOSE_STEPS}


def test_the_steps_write_what_close_due_writes_and_a_part_run_again_writes_nothing(environment):
    dynamodb = environment
    create_tables(dynamodb, "tally-events-twin", TWIN)
    now = now_ms()
    count_a_month(dynamodb, calendar_settings(COUNTS), now)
    copy_table(dynamodb, COUNTS, TWIN)

    plan = close_stages.plan({})
    assert plan["now"] <= iso_second(now_ms())
    runs = {tuple(item["periods"]) for item in plan["days"] + plan["months"]}
    assert len(plan["days"]) == DIRECTORY_PARTITIONS * len({run for run in runs if run[0].startswith("D#")})
    assert {Bucket.from_sort_key(run[0]).zone for run in runs} == {"UTC", ZONE}
    assert sorted(item["part"] for item in plan["days"][:DIRECTORY_PARTITIONS]) == list(range(DIRECTORY_PARTITIONS))
    assert sorted(plan["finish"]) == sorted({key for run in runs for key in run})
    assert max(len(run) for run in runs) == MAX_DAYS_PER_PART  # a month of days, cut in weeks for the parts

    finished = run_steps({"now": plan["now"]})
    expected = Closer(CountsTable(dynamodb, TWIN, calendar_settings(TWIN), previous_release_until_ms=0)).close_due(now_ms())

    assert finished["periods"] == plan["finish"] and sorted(finished["periods"]) == sorted(expected.periods)
    assert finished["closed"]["written"] == expected.written > 50 and finished["closed"]["already_closed"] == 0
    assert finished["closed"]["counters"] > expected.counters  # each counter read once a run: in weeks, not a month
    assert long_items(dynamodb, COUNTS) == long_items(dynamodb, TWIN)
    assert set(finished["progress"]) == {"UTC", ZONE} and all(p["days"] for p in finished["progress"].values())

    before = long_items(dynamodb, COUNTS)
    first_runs = {Bucket.from_sort_key(item["periods"][0]).zone: item["periods"] for item in reversed(plan["days"])}
    retried = [item for item in plan["days"] + plan["months"] if item["periods"] in first_runs.values() or
               item["periods"][0].startswith("MO#")]  # each zone's first week of days, and the months, run again
    again = [close_stages.close_part(item) for item in retried]
    assert sum(answer["written"] for answer in again) == 0 and sum(answer["already_closed"] for answer in again) > 0
    assert long_items(dynamodb, COUNTS) == before


def test_nothing_is_closed_before_its_close_time_by_the_clock(environment):
    tomorrow = iso_second(now_ms() + DAY_MS)
    with pytest.raises(CloseRefused, match="later than the clock"):
        close_stages.plan({"now": tomorrow})
    with pytest.raises(CloseRefused, match="now must be epoch seconds or ISO-8601"):
        close_stages.plan({"now": "soon"})
    yesterday = Bucket.of_day(datetime.fromtimestamp(now_ms() / 1000 - 86_400, UTC).date(), "UTC")
    with pytest.raises(CloseRefused, match="after the clock"):
        close_stages.close_part({"periods": [yesterday.sort_key], "part": 0})
    with pytest.raises(CloseRefused, match="after the clock"):
        close_stages.finish({"periods": [yesterday.sort_key]})


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"periods": ["D#UTC@2020-01-01"], "part": 16}, "part must be a directory partition, 0 to 15"),
        ({"periods": ["D#UTC@2020-01-01"], "part": "3"}, "part must be a directory partition"),
        ({"periods": ["H#2020-01-01T10"], "part": 0}, "is not a day or a month"),
        ({"periods": ["D#Europe/Berlin@2020-01-01"], "part": 0}, "zone Europe/Berlin is not kept"),
        ({"periods": ["D#UTC@2020-01-01", "D#UTC@2020-01-03"], "part": 0}, "one run of consecutive periods"),
        ({"periods": ["D#UTC@2020-01-31", "MO#UTC@2020-01"], "part": 0}, "one run of consecutive periods"),
        ({"periods": "D#UTC@2020-01-01", "part": 0}, "must be a list of day and month sort keys"),
    ],
)
def test_a_part_refuses_what_is_no_run_of_kept_periods(environment, event, message):
    with pytest.raises(CloseRefused, match=message):
        close_stages.close_part(event)


def test_a_table_that_keeps_no_days_plans_nothing(dynamodb, monkeypatch):
    monkeypatch.setenv("COUNTS_TABLE", COUNTS)
    monkeypatch.delenv("TALLY_CALENDAR_PREFIXES", raising=False)
    assert close_stages.plan({}) | {"now": ""} == {"now": "", "days": [], "months": [], "finish": []}
    assert close_stages.finish({"periods": []})["progress"] == {}


def test_a_plan_after_closes_stopped_past_the_hour_retention_fails_naming_the_mend(environment):
    """The state machine's failure (CloseRefused, never retried) says what the command says: the day, why, and
    the command that moves past the days that can no longer be closed."""
    from datetime import date, timedelta

    from tally.dynamo.closing import ProgressItems

    today = datetime.fromtimestamp(now_ms() / 1000, UTC).date()
    for zone in ("UTC", ZONE):
        ProgressItems(environment, COUNTS).advance(zone, Bucket.of_day(today - timedelta(days=100), zone), None,
                                                   Bucket.of_day(date(today.year - 1, 1, 1), zone))
    with pytest.raises(CloseRefused) as refused:
        close_stages.plan({})
    message = str(refused.value)
    assert message.startswith(f"D#UTC@{(today - timedelta(days=99)).isoformat()} can no longer be closed: ")
    assert message.endswith("run scripts/close_periods.py --skip-missing to record such days of UTC as missing and "
                            "close the days after them") and "\n" not in message
