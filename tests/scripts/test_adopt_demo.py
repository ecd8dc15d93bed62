"""The adoption demo end to end: history backfilled, live traffic streamed, the audit finds no difference."""

from __future__ import annotations

import os

import pytest
from script_support import load_script

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("fresh_handler_cache")]

adopt_demo = load_script("adopt_demo")


def test_adoption_ends_with_an_audit_that_finds_no_difference(capsys):
    environment = dict(os.environ)

    assert adopt_demo.main(["--history-hours", "4", "--rate", "5", "10"]) == 0

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
    settings_line = next(line for line in out.splitlines() if "tally's settings" in line)
    assert len(settings_line) > 80 and settings_line.endswith("deploys it")  # piped: unwrapped, as the README says
    assert dict(os.environ) == environment  # the server's environment is put back


def test_more_history_than_the_demo_writes_is_refused_up_front(capsys):
    with pytest.raises(SystemExit) as exit_info:
        adopt_demo.main(["--history-hours", str(adopt_demo.MAX_HISTORY_HOURS + 1)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
