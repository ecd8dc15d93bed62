"""The query command: JSON lines, the readable table, and one-line errors with status 2."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from freezegun import freeze_time
from handler_state import handler_state_restored
from script_support import load_script

from tally.core.buckets import iso_minute, iso_second
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.dynamo.tables import create_tables
from tally.local.aws import Tables, client, scan_items
from tally.core.windows import Window, now_ms, parse_instant
from tally.core.settings import Settings
from tally.core.sketches import STANDARD_ERROR, Sketch
from tally.local.workload import SHAPES, brute_force_counts, shaped_truth

query_window = load_script("query_window")
# A 7-day window ending inside an hour a day before the clock this runs on: past the minute retention, within the hour's.
A_DAY_AGO_INSIDE_AN_HOUR = iso_minute((now_ms() // HOUR_MS - 24) * HOUR_MS + 17 * MINUTE_MS)


def counted_world(moto_server, generate: list[str], rules_of: str | None = None) -> dict[str, str]:
    """Events generated and run through the stream into fresh tables, once for the module's tests, which only
    read them: the environment that points the query command at them."""
    suffix = uuid.uuid4().hex[:8]
    tables = Tables(events=f"events-{suffix}", counts=f"counts-{suffix}")
    environment = {**moto_server.environment(), "EVENTS_TABLE": tables.events, "COUNTS_TABLE": tables.counts}
    if rules_of is not None:
        shape = SHAPES[rules_of]
        environment |= {"TALLY_RULES": shape.rules_json, "TALLY_TIME_ATTRIBUTE": shape.time_attribute}
    with pytest.MonkeyPatch.context() as patch, handler_state_restored():
        for name, value in environment.items():
            patch.setenv(name, value)
        create_tables(client("dynamodb"), tables.events, tables.counts)
        generate_events, run_stream = load_script("generate_events"), load_script("run_stream")
        assert generate_events.main(generate) == 0
        assert run_stream.main(["--until-idle", "--idle-polls", "1", "--poll-interval", "0", "--window-seconds", "1"]) == 0
    return environment


def pointed_at(environment: dict[str, str], monkeypatch) -> Tables:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return Tables(events=environment["EVENTS_TABLE"], counts=environment["COUNTS_TABLE"])


@pytest.fixture(scope="module")
def counted_environment(moto_server):
    return counted_world(moto_server, ["--seed", "3", "--counters", "alpha", "beta", "--hours", "2"])


@pytest.fixture
def counted(counted_environment, monkeypatch):
    """A small workload, generated and run through the stream into the counts table."""
    return pointed_at(counted_environment, monkeypatch)


@pytest.mark.server
def test_json_prints_one_object_per_counter_and_both_plans_agree_with_brute_force(counted, capsys):
    items = scan_items(client("dynamodb"), counted.events)
    expected = brute_force_counts(items, ["alpha", "beta"], Window.ending(now_ms()))
    capsys.readouterr()
    for plan in ("batch", "range"):
        assert query_window.main(["alpha", "beta", "--json", "--consistent", "--plan", plan]) == 0
        lines = capsys.readouterr().out.splitlines()
        results = [json.loads(line) for line in lines]
        assert [r["counter"] for r in results] == ["alpha", "beta"]
        assert {r["counter"]: r["total"] for r in results} == {c: expected[c]["expected"] for c in ("alpha", "beta")}
        assert all(r["plan"] == plan and r["keys"] > 0 and r["requests"] > 0 for r in results)
        assert {"start", "end", "by_hour", "items_read"} <= set(results[0])
        assert sum(results[0]["by_hour"].values()) == results[0]["total"]
        assert query_window.main(["alpha", "beta", "--json", "--consistent", "--plan", plan, "--allow-transient"]) == 0
        fast = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [r["total"] for r in fast] == [r["total"] for r in results]
        assert all(f["keys"] <= r["keys"] for f, r in zip(fast, results))


@pytest.mark.server
def test_the_default_output_is_a_table_with_an_hourly_chart(counted, capsys):
    assert query_window.main(["alpha", "--window", "3h"]) == 0
    out = capsys.readouterr().out
    assert "alpha per hour" in out and "█" in out and "batch" in out


@pytest.mark.server
def test_at_takes_epoch_seconds_as_count_from_does(counted, capsys):
    at = now_ms() // 1000 - 600
    answers = []
    for text in (str(at), iso_minute(at * 1000).replace("Z", f":{at % 60:02d}Z")):
        assert query_window.main(["alpha", "--json", "--window", "2h", "--at", text]) == 0
        answers.append(json.loads(capsys.readouterr().out))
    assert answers[0] == answers[1] and answers[0]["total"] > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["alpha", "--window", "24x"], "window length must look like"),
        (["alpha", "--window", "0m"], "window length must be at least a minute, got '0m'"),
        (["alpha", "--at", "yesterday"], "not an ISO-8601 time"),
        (["alpha", "--at", "2026-11-22T10:00:00"], "without a UTC offset"),
        (["#segment#x"], "reserved"),
        (["#rejected#nonsense"], "unknown rejection counter"),
        (["alpha", "--window", "7d", "--at", A_DAY_AGO_INSIDE_AN_HOUR], "minute retention"),
        (["alpha", "--quantiles", "0.5,1.5"], "quantile '1.5' is not from 0 to 1: write quantiles like 0.5,0.9,0.99"),
        (["alpha", "--quantiles", "p99"], "quantile 'p99' is not a number"),
        (["alpha", "--quantiles", "0.5,"], "quantile '' is not a number"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_status_2(argv, message, capsys):
    assert query_window.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and ": error: " in captured.err
    assert message in captured.err


@pytest.mark.parametrize(
    "argv",
    [[], ["alpha", "--plan", "fastest"], ["alpha", "--series", "second"], ["alpha", "--bogus"], ["alpha", "--window"]],
    ids=["no counter", "bad choice", "bad series", "unknown option", "missing value"],
)
def test_argument_errors_are_one_line_too(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        query_window.main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and ": error: " in captured.err


@pytest.mark.server
def test_an_unknown_counter_says_so_instead_of_a_silent_zero(counted, capsys):
    assert query_window.main(["alpha", "Alpha", "--json"]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line)["total"] == 0 for line in captured.out.splitlines()] == [False, True]
    assert captured.err.count("\n") == 1
    assert "no bucket of 'Alpha' exists at all" in captured.err


@pytest.mark.server
def test_a_counter_with_no_events_in_this_window_gets_no_such_note(counted, capsys):
    five_days_ago = iso_minute((now_ms() - 5 * DAY_MS) // HOUR_MS * HOUR_MS)
    assert query_window.main(["alpha", "--at", five_days_ago, "--window", "2h", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["total"] == 0
    assert captured.err == ""


@pytest.mark.server
def test_a_window_entirely_in_the_future_says_so(counted, capsys):
    assert query_window.main(["alpha", "--at", "2099-01-01T00:00Z", "--window", "2h"]) == 0
    assert "lies entirely in the future" in capsys.readouterr().err


@pytest.mark.server
def test_piped_tables_are_not_wrapped_at_80_columns(counted, capsys):
    long_name = "a-counter-name-long-enough-to-push-the-table-past-eighty-columns-" + "x" * 60
    assert query_window.main([long_name, "alpha"]) == 0
    out = capsys.readouterr().out
    assert any(long_name in line for line in out.splitlines())


def truth_now(name, tables, time_of):
    """Brute force over the shape's items in the 24 h window ending now; ``time_of`` reads an item's time."""
    items = scan_items(client("dynamodb"), tables.events)
    return shaped_truth(SHAPES[name], [(time_of(i), i) for i in items], Window.ending(now_ms()), {}, Settings())


@pytest.fixture(scope="module")
def origin_environment(moto_server):
    return counted_world(moto_server, ["--seed", "5", "--shape", "origin", "--hours", "2"], rules_of="origin")


@pytest.fixture
def counted_by_rules(origin_environment, monkeypatch):
    """The origin's jobs, counted by its rules (set in the environment, as the stack does)."""
    return pointed_at(origin_environment, monkeypatch)


@pytest.mark.server
def test_json_carries_total_sum_and_average_of_summing_counters(counted_by_rules, capsys):
    truth = truth_now("origin", counted_by_rules, lambda item: int(item["insertUtcTime"]))
    capsys.readouterr()
    counters = ["revenue/provider-1", "revenue/provider-2", "jobs/all"]
    for plan in ("batch", "range"):
        assert query_window.main([*counters, "--json", "--consistent", "--plan", plan]) == 0
        results = {r["counter"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
        for counter in counters[:2]:
            assert results[counter]["total"] == truth.expected[counter] > 0
            assert Decimal(results[counter]["sum"]) == truth.sums[counter]
            assert Decimal(results[counter]["average"]) == truth.average(counter)
            assert isinstance(results[counter]["sum"], str)  # exact: no JSON parser makes it a float
            assert sum(map(Decimal, results[counter]["sum_by_hour"].values())) == truth.sums[counter]
        assert results["jobs/all"]["total"] == truth.expected["jobs/all"]
        assert "sum" not in results["jobs/all"] and "average" not in results["jobs/all"]


@pytest.mark.server
def test_the_table_shows_sum_and_average(counted_by_rules, capsys):
    assert query_window.main(["revenue/provider-1", "--window", "3h"]) == 0
    out = capsys.readouterr().out
    assert "sum" in out and "average" in out and "revenue/provider-1 per hour" in out


def test_bad_rules_in_the_environment_are_one_line_and_status_2(capsys, monkeypatch):
    monkeypatch.setenv("TALLY_RULES", '[{"name": "r", "counter": "x", "sum": 1}]')
    assert query_window.main(["alpha"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TALLY_RULES: rule 1 ('r'): field 'sum'" in err


@pytest.mark.server
def test_a_week_ending_now_is_answered_over_whole_hours_with_one_note(counted, capsys):
    # "Now" half past an hour: a week ending in an hour's last minute starts on a whole hour and needs no alignment.
    half_past = (now_ms() // HOUR_MS) * HOUR_MS - 30 * MINUTE_MS
    with freeze_time(datetime.fromtimestamp(half_past / 1000, UTC), tick=True):
        assert query_window.main(["alpha", "--window", "7d", "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["aligned"] is True and result["start"].endswith(":00Z")
    assert captured.err.count("\n") == 1 and captured.err.startswith("note: window [")
    assert "answered over whole hours there, [" + result["start"] in captured.err


@pytest.mark.server
@pytest.mark.parametrize("plan", ["batch", "range"])
def test_a_24h_minute_series_lists_1440_minutes_summing_to_the_total(counted, capsys, plan):
    assert query_window.main(["alpha", "beta", "--series", "minute", "--json", "--consistent", "--plan", plan]) == 0
    for result in map(json.loads, capsys.readouterr().out.splitlines()):
        assert len(result["series"]) == 1440 and result["total"] > 0
        assert sum(point["count"] for point in result["series"]) == result["total"]
        assert result["series"][0]["start"] == result["start"] and set(result["series"][0]) == {"start", "count"}


@pytest.mark.server
def test_the_table_shows_a_minute_series_as_one_sparkline_per_hour(counted, capsys):
    assert query_window.main(["alpha", "--series", "minute"]) == 0
    out = capsys.readouterr().out
    chart = out[out.index("alpha per minute") :].splitlines()[1:]
    assert 24 <= len(chart) <= 25  # not 1,440 lines
    assert any(set("▁▂▃▄▅▆▇█") & set(line) for line in chart)


@pytest.mark.server
def test_the_table_shows_a_week_as_a_line_a_day(counted, capsys):
    assert query_window.main(["alpha", "--window", "7d"]) == 0
    out = capsys.readouterr().out
    chart = out[out.index("alpha per hour, a line a day") :].splitlines()[1:]
    assert len(chart) == 8  # the partial first day, six whole days, today
    assert sum(int(line.split()[-1].replace(",", "")) for line in chart) == int(
        [line for line in out.splitlines() if "│ alpha" in line][0].split("│")[2].strip().replace(",", "")
    )


@pytest.mark.server
def test_prefix_lists_the_counters_that_counted_in_the_window(counted, capsys):
    assert query_window.main(["--prefix", "al", "--json"]) == 0
    assert [json.loads(line)["counter"] for line in capsys.readouterr().out.splitlines()] == ["alpha"]
    assert query_window.main(["--prefix", "", "--window", "3h"]) == 0
    out = capsys.readouterr().out
    assert "alpha" in out and "beta" in out and "per hour" not in out
    assert query_window.main(["--prefix", "zz"]) == 0
    assert capsys.readouterr().err == "note: no counter starting with 'zz' counted anything\n"


@pytest.mark.server
def test_a_counter_whose_rules_are_retired_says_when_in_json_tables_top_lists_and_a_note(counted, monkeypatch, capsys):
    """alpha's rule retired a minute ago; beta's retires in two hours, so it still counts."""
    retired_ms = (now_ms() // 1000 - 60) * 1000
    rules = [
        {"name": "alpha", "counter": "alpha", "retiredAt": retired_ms // 1000},
        {"name": "beta", "counter": "beta", "retiredAt": (retired_ms + 2 * HOUR_MS) // 1000},
    ]
    monkeypatch.setenv("TALLY_RULES", json.dumps(rules))
    capsys.readouterr()
    when = iso_second(retired_ms)

    assert query_window.main(["alpha", "beta", "--json"]) == 0
    out, err = capsys.readouterr()
    results = {r["counter"]: r for r in map(json.loads, out.splitlines())}
    assert results["alpha"]["retired"] == when and results["alpha"]["total"] > 0  # readable still
    assert results["beta"]["retired"] is None
    retired_notes = [line for line in err.splitlines() if "stopped counting" in line]
    assert retired_notes == [
        f"note: counter 'alpha' stopped counting at {when}: its rule 'alpha' is retired; no more events will come"
    ]

    assert query_window.main(["--prefix", "", "--window", "3h"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert any("retired" in line for line in rows)  # the column, there only because a listed counter is retired
    assert when in next(line for line in rows if "│ alpha" in line) and when not in next(line for line in rows if "│ beta" in line)

    assert query_window.main(["--top", "2", "--prefix", "", "--json"]) == 0
    top = {entry["counter"]: entry for entry in json.loads(capsys.readouterr().out)["top"]}
    assert top["alpha"]["retired"] == when and "retired" not in top["beta"]
    assert query_window.main(["--top", "2", "--prefix", ""]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert when in next(line for line in rows if "alpha" in line) and when not in next(line for line in rows if "beta" in line)


@pytest.mark.server
def test_a_table_of_counters_that_all_count_has_no_retired_column(counted, capsys):
    assert query_window.main(["--prefix", "", "--window", "3h"]) == 0
    assert "retired" not in capsys.readouterr().out


@pytest.mark.server
def test_an_end_on_the_hour_is_exclusive(counted, capsys):
    end = iso_minute(now_ms() // HOUR_MS * HOUR_MS)
    assert query_window.main(["alpha", "--window", "1h", "--at", end, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["end"] == end and result["start"] == iso_minute(now_ms() // HOUR_MS * HOUR_MS - HOUR_MS)
    assert list(result["by_hour"]) == [result["start"]]


def test_counters_and_prefix_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as exited:
        query_window.main(["alpha", "--prefix", "a"])
    assert exited.value.code == 2 and "not both" in capsys.readouterr().err


@pytest.fixture(scope="module")
def blog_environment(moto_server):
    return counted_world(moto_server, ["--seed", "8", "--shape", "blog", "--hours", "2"], rules_of="blog")


@pytest.fixture
def blog_views(blog_environment, monkeypatch):
    """A blog's page views, counted by its rules: load times keep a histogram."""
    return pointed_at(blog_environment, monkeypatch)


@pytest.mark.server
def test_quantiles_in_json_are_within_one_percent_of_brute_force_by_both_plans(blog_views, capsys):
    truth = truth_now("blog", blog_views, lambda item: parse_instant(item["time"]))
    capsys.readouterr()
    for plan in ("batch", "range"):
        argv = ["load/posts/about", "views/all", "--quantiles", "0.5,0.99", "--json", "--plan", plan, "--series", "hour"]
        assert query_window.main(argv) == 0
        captured = capsys.readouterr()
        load, views = map(json.loads, captured.out.splitlines())
        assert list(load["quantiles"]) == ["0.5", "0.99"]
        for q, text in load["quantiles"].items():
            exact = truth.quantile("load/posts/about", Decimal(q))
            assert abs(Decimal(text) - exact) <= exact / 100, (plan, q)
        assert Decimal(load["bounds"]["low"]) <= truth.values["load/posts/about"][0]
        assert Decimal(load["bounds"]["high"]) >= truth.values["load/posts/about"][-1]
        assert list(load["quantiles_by_hour"]) == list(load["by_hour"])
        assert all(list(point["quantiles"]) == ["0.5", "0.99"] for point in load["series"])
        assert "quantiles" not in views and "'views/all' keeps no histogram" in captured.err


@pytest.mark.server
def test_the_table_shows_the_asked_percentiles_in_total_and_per_hour(blog_views, capsys):
    assert query_window.main(["load/posts/about", "--quantiles", "0.5,0.999", "--window", "3h"]) == 0
    out = capsys.readouterr().out
    assert out.count("p50") == 2 and out.count("p99.9") == 2  # the summary and the hourly chart
    assert "low" in out and "high" in out


@pytest.mark.server
def test_distinct_values_in_json_by_both_plans_exact_while_few_per_hour_and_in_the_table(blog_views, capsys):
    truth = truth_now("blog", blog_views, lambda item: parse_instant(item["time"]))
    pages = sorted(truth.distinct)
    capsys.readouterr()
    answers = {}
    for plan in ("batch", "range"):
        assert query_window.main([*pages, "load/posts/about", "--json", "--plan", plan, "--series", "hour"]) == 0
        captured = capsys.readouterr()
        *counted, load = map(json.loads, captured.out.splitlines())
        answers[plan] = counted
        for page, answer in zip(pages, counted):
            exact = len(truth.distinct[page])
            if answer["distinct_exact"]:
                assert answer["distinct"] == exact <= 100, (plan, page)
                assert max(answer["distinct_by_hour"].values()) <= exact <= sum(answer["distinct_by_hour"].values())
            else:
                assert exact > 100 and abs(answer["distinct"] - exact) <= 3 * STANDARD_ERROR * exact, (plan, page)
            assert list(answer["distinct_by_hour"]) == list(answer["by_hour"])
            assert [point["distinct"] for point in answer["series"]] == list(answer["distinct_by_hour"].values())
        assert "distinct" not in load and "distinct_by_hour" not in load  # no distinct rule can write it
    assert [a["distinct"] for a in answers["batch"]] == [a["distinct"] for a in answers["range"]]

    # The table: a distinct column and the page's hourly chart's, none for load's; estimates marked.
    assert query_window.main(["views/posts/hello-world", "load/posts/about", "--window", "3h"]) == 0
    assert capsys.readouterr().out.count("distinct") == 2
    assert query_window.distinct_text(Sketch(range(100))) == "100"
    assert query_window.distinct_text(Sketch(range(1000))).startswith("≈")


@pytest.mark.server
def test_top_prints_one_json_object_ranked_by_the_exact_totals(counted, capsys):
    items = scan_items(client("dynamodb"), counted.events)
    expected = brute_force_counts(items, ["alpha", "beta"], Window.ending(now_ms()))
    capsys.readouterr()
    assert query_window.main(["--top", "2", "--prefix", "", "--json", "--consistent"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    answer = json.loads(lines[0])
    assert list(answer) == ["prefix", "start", "end", "exact", "bound", "top"]
    truth = sorted(((c, expected[c]["expected"]) for c in ("alpha", "beta")), key=lambda e: (-e[1], e[0]))
    assert [(e["counter"], e["total"]) for e in answer["top"]] == truth
    assert [e["rank"] for e in answer["top"]] == [1, 2] and answer["exact"] is True and answer["bound"] is None
    assert query_window.main(["--top", "1", "--prefix", "", "--rising"]) == 0
    assert "rising" in capsys.readouterr().out


def test_alerts_lists_alert_states_as_json_lines_or_a_table(tables, monkeypatch, capsys):
    from alert_support import ALERT_RULES, cross
    from tally.core.rules import parse_rules

    monkeypatch.setenv("TALLY_RULES", ALERT_RULES)
    settings = Settings(counts_table=tables.counts, events_table=tables.events, rules=parse_rules(ALERT_RULES))
    at = now_ms() // MINUTE_MS * MINUTE_MS
    cross(client("dynamodb"), settings, at, {"logins/a": 3, "signups/pro": 9}, tables.counts)
    assert query_window.main(["--alerts", "--json", "--state", "ALARM"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["alert"], line["counter"], line["state"], line["total"]) for line in lines] == [
        ("burst", "logins/a", "ALARM", 3),
        ("signup-rush", "signups/pro", "ALARM", 9),
    ]
    assert query_window.main(["--alerts", "--alert", "burst"]) == 0
    out = capsys.readouterr().out
    assert "logins/a" in out and "ALARM" in out and "signups/pro" not in out
    assert query_window.main(["--alerts", "--state", "OK"]) == 0
    assert "no counter has crossed an alert into OK" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--top", "0", "--prefix", "views/"], "n must be a whole number from 1 to 1000, got '0'"),
        (["--top", "ten", "--prefix", "views/"], "n must be a whole number from 1 to 1000"),
        (["--top", "5", "--prefix", "#segment#"], "prefix must be text not starting with '#'"),
        (["--top", "5", "--prefix", "v/", "--window", "7d", "--at", A_DAY_AGO_INSIDE_AN_HOUR], "minute retention"),
    ],
)
def test_a_bad_top_is_one_line_on_stderr_and_status_2(argv, message, capsys):
    assert query_window.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and message in captured.err


@pytest.mark.parametrize("argv", [["--rising", "--prefix", "v/"], ["--top", "5", "--prefix", "v/", "--series", "hour"]])
def test_rising_without_top_and_top_with_a_series_are_argument_errors(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        query_window.main(argv)
    assert exited.value.code == 2 and capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--alerts", "alpha"], "--alerts lists alert states: name no counters"),
        (["alpha", "--state", "ALARM"], "--alert and --state go with --alerts"),
        (["--alerts", "--top", "5"], "--alerts lists alert states: it takes no --top or --rising"),
    ],
)
def test_alert_arguments_that_do_not_fit_are_refused_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        query_window.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


# --- calendar series and month to date ----------------------------------------------------------------------


def instant_ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


@pytest.mark.server
@pytest.mark.parametrize("zone", ["America/New_York", "Europe/Berlin"])
def test_a_daily_series_in_a_zone_answers_every_day_of_the_range_as_brute_force(counted, capsys, zone):
    items = scan_items(client("dynamodb"), counted.events)
    today = datetime.now(ZoneInfo(zone)).date()
    first, end = today - timedelta(days=2), today + timedelta(days=2)
    capsys.readouterr()
    argv = ["alpha", "--series", "day", "--tz", zone, "--from", first.isoformat(), "--to", end.isoformat(), "--consistent"]
    assert query_window.main([*argv, "--json"]) == 0
    [series] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [point["start"][:10] for point in series["points"]] == [(first + timedelta(days=n)).isoformat() for n in range(4)]
    for point in series["points"]:
        window = Window.between(instant_ms(point["start"]), instant_ms(point["end"]))
        assert point["count"] == brute_force_counts(items, ["alpha"], window)["alpha"]["expected"], point
    assert series["total"] > 0 and series["tz"] == zone and series["requests"] >= 1
    assert query_window.main(argv) == 0
    shown = capsys.readouterr().out
    assert f"alpha: days in {zone}, total {series['total']:,}" in shown and first.isoformat() in shown


@pytest.mark.server
def test_this_month_so_far_counts_from_the_first_local_midnight(counted, capsys):
    items = scan_items(client("dynamodb"), counted.events)
    zone = ZoneInfo("America/Los_Angeles")
    capsys.readouterr()
    assert query_window.main(["beta", "--month-to-date", "--tz", "America/Los_Angeles", "--consistent", "--json"]) == 0
    [result] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    start = datetime.now(zone).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    assert result["start"] == iso_minute(int(start.timestamp() * 1000))
    window = Window.between(int(start.timestamp() * 1000), now_ms())
    assert result["total"] == brute_force_counts(items, ["beta"], window)["beta"]["expected"] > 0
    assert result["requests"] <= 3


@pytest.mark.parametrize(
    "argv",
    [
        ["alpha", "--tz", "UTC"],
        ["alpha", "--from", "2026-11-01"],
        ["alpha", "--month-to-date", "--window", "7d"],
        ["alpha", "--series", "day", "--window", "7d", "--from", "2026-11-01", "--to", "2026-11-02"],
        ["--top", "3", "--prefix", "a", "--month-to-date"],
    ],
    ids=["tz without a calendar read", "from without a series", "month to date with a window", "series with a window", "top of a month"],
)
def test_calendar_arguments_that_do_not_fit_are_one_line_and_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        query_window.main(argv)
    assert exited.value.code == 2 and capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["alpha", "--series", "day", "--tz", "Mars/Base", "--from", "2026-11-01", "--to", "2026-11-02"], "unknown time zone 'Mars/Base'"),
        (["alpha", "--series", "day", "--tz", "Asia/Kolkata", "--from", "2026-11-01", "--to", "2026-11-02"], "not on a whole hour"),
        (["alpha", "--series", "day", "--from", "2020-01-01", "--to", "2020-01-02"], "past the hour retention"),
        (["alpha", "--series", "day", "--from", "2026-11-31", "--to", "2026-12-02"], "from must be a date, YYYY-MM-DD"),
        (["alpha", "--series", "week", "--week-start", "funday", "--from", "2026-11-01", "--to", "2026-12-01"], "a week starts on"),
        (["alpha", "--series", "month", "--from", "2026-11-01"], "needs its first day and the day after its last"),
    ],
)
def test_bad_calendar_input_is_one_line_on_stderr_and_status_2(argv, message, capsys):
    assert query_window.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and message in captured.err
