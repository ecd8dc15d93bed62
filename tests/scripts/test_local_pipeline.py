"""The local pipeline end to end: its verdict, its honesty about late events, and its clean exit."""

from __future__ import annotations

import re
import threading
import time

import pytest
from script_support import load_script
from sweeps import sweep

from tally.local.aws import local_handler

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("fresh_handler_cache")]

local_pipeline = load_script("local_pipeline")

# 50 hours: the oldest events are past the 48 h minute retention when they arrive, so they count in their hour alone.
SMALL = ["--hours", "50", "--rate", "3", "6", "--counters", "alpha", "beta", "--window-seconds", "1"]


def threads_settle(before: set[threading.Thread], timeout: float = 5.0) -> set[threading.Thread]:
    deadline = time.monotonic() + timeout
    while (left := set(threading.enumerate()) - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_the_pipeline_counts_every_workload_event_and_matches_brute_force(capsys):
    before = set(threading.enumerate())
    assert local_pipeline.main(SMALL) == 0
    out = capsys.readouterr().out
    assert "VERDICT: MATCH" in out and "MISMATCH" not in out
    assert "workload events rejected as late: 0." in out
    assert "51 h window to the last whole hour" in out  # longer than the minute retention, hour-aligned
    assert threads_settle(before) == set()  # the server stopped with the pipeline


def test_a_lost_record_is_a_mismatch_and_exit_status_1(capsys):
    def losing_one_record(counts_table):
        handler = local_handler(counts_table, "ERROR")
        lost = []

        def handle(event, context):
            records = event["Records"]
            if not lost and records:  # the middle of 3 time-ordered hours: inside the window
                lost.append(records[len(records) // 2])
                event = {**event, "Records": [r for r in records if r is not lost[0]]}
            return handler(event, context)

        return handle

    assert local_pipeline.main([*SMALL, "--hours", "3"], handler_factory=losing_one_record) == 1
    assert "VERDICT: MISMATCH" in capsys.readouterr().out


@pytest.mark.parametrize(
    "setting",
    sweep(["TALLY_MINUTE_RETENTION_HOURS=24", "TALLY_MAX_CLOCK_SKEW_SECONDS=60", "TALLY_COUNTER_ATTRIBUTE=name"]),
)
def test_the_pipeline_checks_the_settings_it_is_given(setting, monkeypatch, capsys):
    # The handler reads its settings from the environment; so must the generator and the brute force.
    name, value = setting.split("=")
    monkeypatch.setenv(name, value)
    assert local_pipeline.main(SMALL) == 0
    out = capsys.readouterr().out
    assert "VERDICT: MATCH" in out and "MISMATCH" not in out
    if name == "TALLY_MINUTE_RETENTION_HOURS":
        # Half of the 50 hours are past a 24 h minute retention: counted in their hour alone, none late.
        assert "workload events rejected as late: 0." in out
        assert "51 h window to the last whole hour (minutes are kept 24 h)" in out


def test_piped_output_keeps_long_lines_whole(capsys):
    assert local_pipeline.main([*SMALL, "--hours", "2"]) == 0
    out = capsys.readouterr().out
    explanation = next(line for line in out.splitlines() if line.lstrip().startswith("batch plan:"))
    assert "range plan:" in explanation and "Query request(s) per counter" in explanation


@pytest.mark.parametrize("shape", ["origin", "blog"])
def test_the_rules_demo_matches_counts_sums_and_averages(capsys, monkeypatch, shape):
    monkeypatch.setattr(local_pipeline.console, "width", 200)
    assert local_pipeline.main(["--shape", shape, "--hours", "25", "--rate", "1", "3", "--window-seconds", "1"]) == 0
    out = capsys.readouterr().out
    assert "VERDICT: MATCH" in out and "MISMATCH" not in out
    assert ("revenue/provider-1" if shape == "origin" else "load/posts/about") in out
    assert ("quantiles in the window" in out and "p99" in out) == (shape == "blog")


def test_the_blog_demo_sees_quantiles_off_by_more_than_one_percent(capsys, monkeypatch):
    """Counts and sums stay right while every value lands two bins (4 %) too high: only the quantiles can tell."""
    from tally.core import histograms, rules

    def two_bins_high(value):
        name = histograms.bin_of(value)
        code = histograms._CODES[name[1:]] + 2
        return name[0] + histograms._NAMES[code]

    monkeypatch.setattr(rules, "bin_of", two_bins_high)
    monkeypatch.setattr(local_pipeline.console, "width", 200)
    assert local_pipeline.main(["--shape", "blog", "--hours", "3", "--rate", "3", "6", "--window-seconds", "1"]) == 1
    out = capsys.readouterr().out
    table = out[out.index("quantiles in the window") :]
    assert "MISMATCH" in table and "VERDICT: MISMATCH" in out


def test_the_rules_demo_sees_a_lost_record(capsys):
    def losing_one_record(counts_table):
        handler = local_handler(counts_table, "ERROR")

        def handle(event, context):
            records = event["Records"]
            return handler({**event, "Records": records[: len(records) // 2] + records[len(records) // 2 + 1 :]}, context)

        return handle

    args = ["--shape", "blog", "--hours", "3", "--rate", "3", "6", "--window-seconds", "1"]
    assert local_pipeline.main(args, handler_factory=losing_one_record) == 1
    assert "VERDICT: MISMATCH" in capsys.readouterr().out


def test_the_jobs_demo_matches_transitions_and_deletions(capsys, monkeypatch):
    # 26 hours: jobs placed more than a day ago expire by TTL before the stream is read.
    monkeypatch.setattr(local_pipeline.console, "width", 200)
    assert local_pipeline.main(["--shape", "jobs", "--hours", "26", "--rate", "1", "3", "--window-seconds", "1"]) == 0
    out = capsys.readouterr().out
    assert "VERDICT: MATCH" in out and "MISMATCH" not in out
    assert "stream NEW_AND_OLD_IMAGES" in out
    expired = int(re.search(r"the TTL process deleted (\d+)", out).group(1))
    assert expired > 0
    for counter in ("done/provider-1", "cancelled/provider-2", "expired/done", "deleted/all"):
        assert counter in out


def test_the_jobs_demo_sees_a_lost_update(capsys):
    def losing_one_update(counts_table):
        handler = local_handler(counts_table, "ERROR")

        def handle(event, context):
            records = event["Records"]
            updates = [record for record in records if record["eventName"] == "MODIFY"]
            kept = [record for record in records if not updates or record is not updates[0]]
            return handler({**event, "Records": kept}, context)

        return handle

    args = ["--shape", "jobs", "--hours", "3", "--rate", "3", "6", "--window-seconds", "1"]
    assert local_pipeline.main(args, handler_factory=losing_one_update) == 1
    assert "VERDICT: MISMATCH" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("endpoint", "shape", "said"),
    [
        (None, [], "point AWS_ENDPOINT_URL at a local server holding the stack (make deploy-local), not AWS"),
        ("https://dynamodb.eu-west-1.amazonaws.com", [], "not https://dynamodb.eu-west-1.amazonaws.com"),
        ("http://127.0.0.1:9", ["--shape", "jobs"], "--shape jobs needs an events table streaming NEW_AND_OLD_IMAGES"),
    ],
    ids=["aws", "remote", "jobs"],
)
def test_the_demo_on_a_stack_runs_only_against_a_local_server_and_says_why_in_one_line(
    endpoint, shape, said, monkeypatch, capsys
):
    """--stack runs the demo's handler in this process: against AWS it would count beside the stack's own function."""
    if endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    else:
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert local_pipeline.main(["--stack", "Tally", *shape]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and said in error


def test_the_logins_demo_fires_on_the_burst_and_clears_after_it(capsys):
    assert local_pipeline.main(["--shape", "logins"]) == 0
    out = capsys.readouterr().out
    burst = out.index("the burst:")
    alarm = re.search(r"ALARM login-burst logins/203\.0\.113\.66: (\d+) in", out)
    assert alarm and int(alarm.group(1)) > 20  # the first window over the threshold, with its total
    fired = alarm.start()
    cleared = out.index("OK login-burst logins/203.0.113.66: 0 in")
    assert burst < fired < out.index("after the burst") < out.index("scheduled evaluation") < cleared
    assert out.count("ALARM login-burst") == 1 and "MISMATCH" not in out
    assert "logins/203.0.113.66 crossed 20 failed logins in 10 minutes; events: 2 one ALARM and one OK each" in out


def test_the_logins_demo_sees_an_alert_event_put_twice(capsys):
    """A bus that puts every event twice: the check finds two ALARMs for one crossing."""
    from tally.alerting import EventBus

    put = EventBus.put

    def twice(self, crossings):
        put(self, crossings)
        return put(self, crossings)

    EventBus.put = twice
    try:
        assert local_pipeline.main(["--shape", "logins"]) == 1
    finally:
        EventBus.put = put
    assert "not one ALARM and one OK per crossing" in capsys.readouterr().out


def test_the_logins_demo_is_refused_in_one_line_on_dynamodb_local(dynamodb_local, capsys):
    assert local_pipeline.main(["--shape", "logins"], server=dynamodb_local) == 2
    assert "--shape logins delivers alerts through moto's EventBridge" in capsys.readouterr().err
