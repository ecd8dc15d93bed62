"""The adoption demo end to end: history backfilled, live traffic streamed, the audit finds no difference in the
last 24 hours, nor in any day of the last 365 or month of the last 12, in UTC and New York, before any close."""

from __future__ import annotations

import os
import re

import pytest
from script_support import load_script

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("fresh_handler_cache")]

adopt_demo = load_script("adopt_demo")


def test_adoption_ends_with_an_audit_that_finds_no_difference(capsys):
    environment = dict(os.environ)

    assert adopt_demo.main(["--history-hours", "4", "--rate", "5", "10", "--year-rate", "0", "1"]) == 0

    out = capsys.readouterr().out
    assert "VERDICT: NO DIFFERENCE" in out
    assert out.count("EQUAL") == 3  # one row per counter
    assert "rejected: late_event" in out  # the bad history item is judged like a stream record
    # The backfill ran as the stack's state machine does: its stages in order, a child per counter range.
    assert "(plan → fold → commit → summary)" in out and f"commit: {adopt_demo.DEMO_RANGES} children" in out
    # ... and the audit's Scan as the stack's audit state machine runs it finds what the Scan from here found.
    recounted = next(line for line in out.splitlines() if "the audit's Scan as the stack runs it" in line)
    rows = [line for line in out.splitlines() if line.rstrip().endswith("EQUAL │")]
    assert len(rows) == 3
    for row in rows:
        counter, _tally, recount = (cell.strip() for cell in row.split("│")[1:4])
        assert f"{counter} {recount}" in recounted
    # Days and months of the year the export held, read at once: a table of the 12 months, and each series
    # (365 days, 12 months, in each zone) equal to the audit's recount of the raw items, period by period.
    lines = out.splitlines()
    seventh = next(index for index, line in enumerate(lines) if line.startswith("7. days and months of checkouts"))
    assert "(no close has run)" in lines[seventh] and "from their items, the days after from hours" in lines[seventh]
    assert re.search(r"the days the export made complete \(\d{4}-\d\d-\d\d \.\. \d{4}-\d\d-\d\d\) from", lines[seventh])
    months = [line for line in lines[seventh:] if line.startswith("│ 20")]
    assert len(months) == 12 and months[-1].startswith("│ ") and "(to date)" in months[-1]
    assert not any("≠" in month for month in months)  # a month that differs from the recount shows both
    monthly = [[int(cell.strip().replace(",", "")) for cell in row.split("│")[2:4]] for row in months]
    assert all(utc > 0 and york > 0 for utc, york in monthly[:-1])  # a year of history, every month of it
    series = [line.strip() for line in lines[seventh:] if line.startswith(("   365 days of", "   12 months of"))]
    assert [line.split(",")[0] for line in series] == [
        "365 days of UTC", "12 months of UTC", "365 days of America/New_York", "12 months of America/New_York"]
    assert all(line.endswith("— VERDICT: NO DIFFERENCE") for line in series)
    for zone, column in (("UTC", 0), ("America/New_York", 1)):  # the table's months are the series audited
        total = next(line for line in series if line.startswith(f"12 months of {zone},"))
        assert f"checkouts {sum(month[column] for month in monthly):,} —" in total
    assert lines[-1].startswith("VERDICT: NO DIFFERENCE") and "every day and month of the last year" in lines[-1]
    settings_line = next(line for line in out.splitlines() if "tally's settings" in line)
    assert len(settings_line) > 80 and settings_line.endswith("deploys it")  # piped: unwrapped, as the README says
    assert dict(os.environ) == environment  # the server's environment is put back


@pytest.mark.parametrize("arguments", [["--history-hours", str(adopt_demo.MAX_HISTORY_HOURS + 1)], ["--year-rate", "3", "1"]])
def test_more_history_than_the_demo_writes_is_refused_up_front(capsys, arguments):
    with pytest.raises(SystemExit) as exit_info:
        adopt_demo.main(arguments)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
