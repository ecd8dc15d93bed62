"""The local pipeline end to end: its verdict, its honesty about late events, and its clean exit."""

from __future__ import annotations

import re
import threading
import time

import pytest
from script_support import load_script

from tally.local.aws import local_handler

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("fresh_handler_cache")]

local_pipeline = load_script("local_pipeline")

# 25 hours reach past the 23 h an event may be older than its arrival: some are late by design.
SMALL = ["--hours", "25", "--rate", "3", "6", "--counters", "alpha", "beta"]


def threads_settle(before: set[threading.Thread], timeout: float = 5.0) -> set[threading.Thread]:
    deadline = time.monotonic() + timeout
    while (left := set(threading.enumerate()) - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_the_pipeline_matches_brute_force_and_reports_late_events(capsys):
    before = set(threading.enumerate())
    assert local_pipeline.main(SMALL) == 0
    out = capsys.readouterr().out
    assert "VERDICT: MATCH" in out and "MISMATCH" not in out
    assert "rejected as late" in out
    assert threads_settle(before) == set()  # the server stopped with the pipeline


def test_a_lost_record_is_a_mismatch_and_exit_status_1(capsys):
    def losing_one_record(counts_table):
        handler = local_handler(counts_table, "ERROR")
        lost = []

        def handle(event, context):
            records = event["Records"]
            if not lost and records:  # the middle of 25 time-ordered hours: in the window, not late
                lost.append(records[len(records) // 2])
                event = {**event, "Records": [r for r in records if r is not lost[0]]}
            return handler(event, context)

        return handle

    assert local_pipeline.main(SMALL, handler_factory=losing_one_record) == 1
    assert "VERDICT: MISMATCH" in capsys.readouterr().out


@pytest.mark.parametrize(
    "setting",
    ["TALLY_MINUTE_RETENTION_HOURS=72", "TALLY_MAX_CLOCK_SKEW_SECONDS=60", "TALLY_COUNTER_ATTRIBUTE=name"],
)
def test_the_pipeline_checks_the_settings_it_is_given(setting, monkeypatch, capsys):
    # The handler reads its settings from the environment; so must the generator and the brute force.
    name, value = setting.split("=")
    monkeypatch.setenv(name, value)
    assert local_pipeline.main(SMALL) == 0
    out = capsys.readouterr().out
    assert "VERDICT: MATCH" in out and "MISMATCH" not in out
    if name == "TALLY_MINUTE_RETENTION_HOURS":
        # 25 hours are within the 47 h a 72 h retention accepts: only the injected bad record is late.
        assert re.search(r"(?<![\d,])1 events were rejected as late: stamped more than 47 h", out)


def test_piped_output_keeps_long_lines_whole(capsys):
    assert local_pipeline.main([*SMALL, "--hours", "2"]) == 0
    out = capsys.readouterr().out
    [explanation] = [line for line in out.splitlines() if line.lstrip().startswith("raw: events whose time")]
    assert "range plan:" in explanation and "Query per counter" in explanation


@pytest.mark.parametrize("shape", ["origin", "blog"])
def test_the_rules_demo_matches_counts_sums_and_averages(capsys, monkeypatch, shape):
    monkeypatch.setattr(local_pipeline.console, "width", 200)
    assert local_pipeline.main(["--shape", shape, "--hours", "25", "--rate", "3", "6"]) == 0
    out = capsys.readouterr().out
    assert "VERDICT: MATCH" in out and "MISMATCH" not in out
    assert ("revenue/provider-1" if shape == "origin" else "load/posts/about") in out


def test_the_rules_demo_sees_a_lost_record(capsys):
    def losing_one_record(counts_table):
        handler = local_handler(counts_table, "ERROR")

        def handle(event, context):
            records = event["Records"]
            return handler({**event, "Records": records[: len(records) // 2] + records[len(records) // 2 + 1 :]}, context)

        return handle

    args = ["--shape", "blog", "--hours", "3", "--rate", "3", "6"]
    assert local_pipeline.main(args, handler_factory=losing_one_record) == 1
    assert "VERDICT: MISMATCH" in capsys.readouterr().out
