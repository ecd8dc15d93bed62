"""scripts/close_periods.py on moto's server: what is due, the close itself (the items close_due writes, nothing twice),
the settings the table's counting function published, and one line with exit status 2 for bad input."""

from __future__ import annotations

import pytest
from closing_support import ZONE, calendar_settings, copy_table, count_a_month, long_items
from script_support import load_script

from tally.closing import Closer
from tally.core.buckets import iso_second
from tally.core.settings import Settings
from tally.core.units import DAY_MS
from tally.core.windows import now_ms
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.local.aws import client

pytestmark = pytest.mark.server

close_periods = load_script("close_periods")


def count_and_publish(dynamodb, name: str, now: int) -> None:
    count_a_month(dynamodb, calendar_settings(name), now)
    CountsTable(dynamodb, name, calendar_settings(name)).publish_settings("stream runner", now)


@pytest.fixture
def counted(tables):
    """A month of events whose close is due, in the counts table and a twin, the calendar's settings published in
    both by "stream runner" (this shell's environment keeps no calendar)."""
    dynamodb, now = client("dynamodb"), now_ms()
    twin = f"{tables.counts}-twin"
    create_tables(dynamodb, f"{tables.events}-twin", twin)
    count_and_publish(dynamodb, tables.counts, now)
    copy_table(dynamodb, tables.counts, twin)
    return tables, twin


def test_a_dry_run_lists_the_due_days_and_months_of_every_kept_zone_and_writes_nothing(tables, capsys):
    count_and_publish(client("dynamodb"), tables.counts, now_ms())
    before = long_items(client("dynamodb"), tables.counts)  # late records' own additions to their days

    assert close_periods.main(["--dry-run"]) == 0

    out, err = capsys.readouterr()
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") == 4}
    assert set(rows) - {"zone"} == {"UTC", ZONE}
    assert all(" .. " in row and "(31)" in row for zone, row in rows.items() if zone != "zone")  # a month of days
    assert "settings: stream runner, published in" in err and "dry run: nothing written" in err
    assert long_items(client("dynamodb"), tables.counts) == before


def test_the_close_writes_what_close_due_writes_and_a_run_again_writes_nothing(counted, capsys):
    tables, twin = counted
    dynamodb = client("dynamodb")
    at = iso_second(now_ms())

    assert close_periods.main(["--at", at]) == 0

    out, err = capsys.readouterr()
    expected = Closer(CountsTable(dynamodb, twin, calendar_settings(twin), previous_release_until_ms=0)).close_due(now_ms())
    assert long_items(dynamodb, tables.counts) == long_items(dynamodb, twin)
    closed = out.strip().splitlines()[-1]
    assert closed.startswith("closed ") and f"{expected.written:,} items written, 0 already closed" in closed
    assert f"{expected.counters:,} counters" in closed and " of 2 zones" in closed
    assert err.count("closed UTC days ") == 1 and f"closed {ZONE} days " in err

    # A zone's first run closes at most a month of days, from its own first closable day (each zone's whole days
    # in the hours kept), and no month yet (the first closed is the first whole one): later runs close the rest and
    # the months; once all is closed, a run again writes nothing.
    twin_closer = Closer(CountsTable(dynamodb, twin, calendar_settings(twin), previous_release_until_ms=0))
    while twin_closer.close_due(now_ms()).periods:
        assert close_periods.main(["--now", at]) == 0
        capsys.readouterr()
    assert long_items(dynamodb, tables.counts) == long_items(dynamodb, twin)
    assert close_periods.main(["--now", at]) == 0
    again = capsys.readouterr()
    assert "nothing due" in again.out + again.err


def test_a_table_that_keeps_no_days_has_nothing_to_close(tables, capsys, monkeypatch):
    monkeypatch.setenv("TALLY_CALENDAR_PREFIXES", '["orders/"]')  # this shell's; the table's function keeps none
    CountsTable(client("dynamodb"), tables.counts, Settings()).publish_settings("stream runner", now_ms())

    assert close_periods.main([]) == 0

    out, err = capsys.readouterr()
    assert out == close_periods.NOTHING_KEPT + "\n" == "nothing to close: the table keeps no days or months (calendarPrefixes)\n"
    assert "the settings of stream runner" in err


def test_without_published_settings_this_shells_are_used(tables, capsys, monkeypatch):
    assert close_periods.main([]) == 0
    assert capsys.readouterr().out == close_periods.NOTHING_KEPT + "\n"

    monkeypatch.setenv("TALLY_CALENDAR_PREFIXES", '["orders/"]')
    assert close_periods.main(["--dry-run"]) == 0  # the first month whose hours are all kept: due, though empty
    out, err = capsys.readouterr()
    assert "UTC" in out and "this shell's environment" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--at", "tomorrow"], "--at must be epoch seconds or ISO-8601 with a UTC offset"),
        (["--at", str(now_ms() // 1000 + 2 * DAY_MS // 1000)], "is later than the clock"),
        (["--dry-run", "--bogus"], "unrecognized arguments: --bogus"),
        (["--endpoint", "localhost:5000"], "is not a URL"),
        (["--table", "no-such-table"], "no table 'no-such-table'"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(tables, capsys, argv, message):
    with pytest.raises(SystemExit) as exited:
        status = close_periods.main(argv)
        raise SystemExit(status)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_closes_stopped_past_the_hour_retention_end_in_one_line_naming_the_skip_that_mends_them(tables, capsys, monkeypatch):
    """The refusal is one line, exit status 2, naming --skip-missing; the skip (a dry run first) records the days
    that can no longer be closed as missing and closes the rest; reads of those days say they are missing; a
    second skip skips nothing."""
    from datetime import UTC, datetime, timedelta

    from tally.core.buckets import Bucket
    from tally.dynamo.closing import ProgressItems

    dynamodb, now = client("dynamodb"), now_ms()
    settings = calendar_settings(tables.counts, hour_retention_ms=7 * DAY_MS)  # the least a calendar allows
    CountsTable(dynamodb, tables.counts, settings).publish_settings("stream runner", now)
    today = datetime.fromtimestamp(now / 1000, UTC).date()
    progress = ProgressItems(dynamodb, tables.counts)
    for zone in ("UTC", ZONE):  # closed through a fortnight ago, then stopped
        progress.advance(zone, Bucket.of_day(today - timedelta(days=14), zone), None, Bucket.of_day(today - timedelta(days=40), zone))

    assert close_periods.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"D#UTC@{(today - timedelta(days=13)).isoformat()} can no longer be closed: its hours are past" in err
    assert "run scripts/close_periods.py --skip-missing" in err

    assert close_periods.main(["--skip-missing", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would skip UTC days {(today - timedelta(days=13)).isoformat()} .. " in out and f"would skip {ZONE} days" in out
    assert progress.read("UTC").missing == ()

    assert close_periods.main(["--skip-missing"]) == 0
    out = capsys.readouterr().out
    assert f"skipped UTC days {(today - timedelta(days=13)).isoformat()} .. " in out and f"skipped {ZONE} days" in out
    assert out.strip().splitlines()[-1].startswith("closed ")  # and the close carried on
    utc = progress.read("UTC")
    [(first, last)] = utc.missing
    assert first == today - timedelta(days=13) and last < utc.days

    assert close_periods.main(["--skip-missing"]) == 0
    again = capsys.readouterr()
    assert "nothing to skip" in again.out and "nothing due" in again.out and progress.read("UTC").missing == utc.missing

    for name, value in {"COUNTS_TABLE": tables.counts, **settings.counting_environment()}.items():
        monkeypatch.setenv(name, value)
    query_window = load_script("query_window")
    argv = ["orders/acme", "--series", "day", "--from", (first + timedelta(days=1)).isoformat(), "--to", today.isoformat()]
    assert query_window.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert f"the days of UTC from {first.isoformat()} to {last.isoformat()} are missing" in captured.err
    after = ["orders/acme", "--series", "day", "--from", (last + timedelta(days=1)).isoformat(), "--to", today.isoformat()]
    assert query_window.main(after) == 0
