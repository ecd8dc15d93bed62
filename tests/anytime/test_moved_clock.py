"""`make test-anytime`'s clock: every process moves by the same offset, and the instants tried change from day to day."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
import time_machine

import choose_clock
import tally_test_clock

HERE = Path(__file__).resolve().parent
NOW = datetime(2026, 11, 25, 3, 40, tzinfo=timezone.utc)


def test_a_clock_setting_reads_as_the_moved_instant_and_the_real_one():
    moved, real = tally_test_clock.parse("2027-12-31T23:59:59Z@1795000000.5")
    assert moved == datetime(2027, 12, 31, 23, 59, 59, tzinfo=timezone.utc) and real == 1795000000.5


@pytest.mark.parametrize("value", ["2027-12-31T23:59:59Z", "2027-12-31T23:59:59@1795000000"])
def test_a_clock_setting_without_its_real_instant_or_offset_is_refused(value):
    with pytest.raises(ValueError, match="TALLY_TEST_CLOCK"):
        tally_test_clock.parse(value)


def test_a_process_started_with_the_setting_runs_at_the_moved_instant():
    # The real clock, also while this run's own is moved.
    real_clock = time_machine.escape_hatch.time.time if time_machine.escape_hatch.is_travelling() else time.time
    real_start = real_clock()
    environment = {**os.environ, "PYTHONPATH": str(HERE), "TALLY_TEST_CLOCK": f"2028-02-29T23:59:30Z@{real_start}"}
    program = "import tally_test_clock, time; from datetime import datetime; print(time.time(), datetime.now().year)"
    run = subprocess.run([sys.executable, "-c", program], env=environment, capture_output=True, text=True, timeout=60)
    seconds, year = run.stdout.split()
    elapsed = real_clock() - real_start
    moved = datetime(2028, 2, 29, 23, 59, 30, tzinfo=timezone.utc).timestamp()
    assert moved <= float(seconds) <= moved + elapsed + 1
    assert year == "2028"


def test_each_kind_of_instant_is_where_dates_break():
    kinds = choose_clock.candidates(NOW, NOW.date())
    assert kinds["two-days"] - NOW == timedelta(days=2) and kinds["400-days"] - NOW == timedelta(days=400)
    assert kinds["year-end"] == datetime(2026, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
    assert kinds["leap-day"] == datetime(2028, 2, 29, 23, 59, 30, tzinfo=timezone.utc)
    assert kinds["far"] > NOW + timedelta(days=2)


def test_a_leap_day_after_the_last_one_of_its_year_is_four_years_on():
    after = datetime(2028, 3, 1, tzinfo=timezone.utc)
    assert choose_clock.next_leap_day(after) == datetime(2032, 2, 29, 23, 59, 30, tzinfo=timezone.utc)


def test_successive_days_try_different_far_instants_and_a_day_repeats_its_own():
    days = [date(2026, 11, 25) + timedelta(days=n) for n in range(30)]
    offsets = {choose_clock.candidates(NOW, day)["far"] for day in days}
    assert len(offsets) == 30
    assert choose_clock.candidates(NOW, days[0])["far"] == choose_clock.candidates(NOW, days[0])["far"]


@pytest.mark.parametrize("argv", [["--at", "tomorrow"], ["--at", "2028-02-29T23:59:30"], ["--kind", "someday"]])
def test_a_bad_choice_is_refused_naming_it_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        choose_clock.main(argv)
    assert exited.value.code == 2
    assert f"error: {argv[0]} {argv[1]}:" in capsys.readouterr().err


def test_a_named_instant_is_the_one_set(capsys):
    assert choose_clock.main(["--at", "2028-02-29T23:59:30+00:00"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("2028-02-29T23:59:30Z@")
    assert "make test-anytime CLOCK=2028-02-29T23:59:30Z" in captured.err
