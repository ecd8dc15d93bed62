"""Fault suite setup: hypothesis profiles, the hunt switch, and the session's fault statistics.

``TALLY_HUNT=1`` or ``--hypothesis-profile=hunt`` runs the long hunt
(``TALLY_HUNT_EXAMPLES`` examples per property, 600 by default). The figures of
what was exercised are printed at the end of the run and written to
``TALLY_FAULT_STATS`` (default /tmp/tally-fault-stats.json).
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import settings

from . import profiles
from .harness import STATS

STATS_PATH = Path(os.environ.get("TALLY_FAULT_STATS", "/tmp/tally-fault-stats.json"))

for _name, _profile in (("ci", profiles.CI), ("hunt", profiles.HUNT)):
    try:
        settings.get_profile(_name)  # another suite registered it first: leave theirs alone
    except Exception:
        settings.register_profile(_name, _profile)


def pytest_configure(config) -> None:
    if config.getoption("hypothesis_profile", None) == "hunt":
        profiles.hunting = True


def pytest_runtest_logfinish(nodeid, location) -> None:
    """Keep the figures on disk as the run goes, so an interrupted hunt still reports what it did."""
    if STATS.streams or STATS.fuzzed_records:
        STATS_PATH.write_text(STATS.dumps() + "\n")


def pytest_terminal_summary(terminalreporter) -> None:
    if not STATS.streams and not STATS.fuzzed_records:
        return
    STATS_PATH.write_text(STATS.dumps() + "\n")
    terminalreporter.section("tally fault injection")
    mode = "hunt" if profiles.hunting else "ci"
    terminalreporter.write_line(f"profile {mode}; figures also in {STATS_PATH}")
    for line in STATS.dumps().splitlines():
        terminalreporter.write_line(line)
