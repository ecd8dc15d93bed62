"""The rules demo end to end: a rule added to a live table, its history backfilled alone, the audit finds no difference."""

from __future__ import annotations

import os
from collections import Counter
from decimal import Decimal

import pytest
from script_support import load_script

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("fresh_handler_cache")]

rules_demo = load_script("rules_demo")


def refunds(items) -> tuple[Counter, dict]:
    """Brute force: each shop's refunds among the items, and the sum of their amounts."""
    counts, sums = Counter(), {}
    for item in items:
        if item["kind"] == "refund":
            counter = f"refunds/{item['shop']}"
            counts[counter] += 1
            sums[counter] = sums.get(counter, Decimal(0)) + item["amount"]
    return counts, sums


def test_a_rule_added_later_counts_its_whole_history_once_and_the_audit_finds_no_difference(capsys):
    environment = dict(os.environ)

    demo = rules_demo.run(["--history-hours", "4", "--rate", "5", "10"])

    out = capsys.readouterr().out
    assert demo.status == 0 and "VERDICT: NO DIFFERENCE" in out
    counters = [f"refunds/{shop}" for shop in rules_demo.SHOPS]
    whole, whole_sums = refunds(demo.all_items())
    assert sum(whole.values()) > 0

    # The audit of the new rule alone: one EQUAL row per shop, and tally's total is the brute force's.
    audit = out[out.index("scripts/audit.py --rules refunds"):]
    rows = [line for line in audit.splitlines() if line.rstrip().endswith("EQUAL │")]
    assert len(rows) == len(counters)
    for row in rows:
        counter, total, recount = (cell.strip() for cell in row.split("│")[1:4])
        assert counter in counters and int(total) == int(recount) == whole[counter]

    # Before its countFrom the rule counted nothing; before the backfill, what arrived since; after it, everything.
    since, since_sums = refunds(demo.items["since countFrom"])
    after_start = [item for step, items in demo.items.items() if step in ("history", "before countFrom") for item in items]
    history, _ = refunds(after_start)
    for counter in counters:
        assert demo.readings["before countFrom"][counter].count == 0
        before = demo.readings["before the backfill"][counter]
        assert before.count == since[counter] and (before.sum or 0) == since_sums.get(counter, 0)
        after = demo.readings["after the backfill"][counter]
        assert after.count == whole[counter] and (after.sum or 0) == whole_sums.get(counter, 0)

    # The backfill counted the rule's history (what the table held at its countFrom) and wrote no other counter.
    assert demo.backfill.counted == +history
    assert demo.first_rules_before and demo.first_rules_after == demo.first_rules_before
    assert {counter for counter, _ in demo.first_rules_before} == {*(f"orders/{s}" for s in rules_demo.SHOPS), "all"}
    assert "(plan → fold → commit → summary)" in out and f"commit: {rules_demo.DEMO_RANGES} children" in out
    assert '{"rules": "refunds"}' in out
    assert dict(os.environ) == environment  # the server's environment and the rules are put back


def test_more_history_than_the_24_hours_it_reads_is_refused_up_front(capsys):
    with pytest.raises(SystemExit) as exit_info:
        rules_demo.main(["--history-hours", str(rules_demo.MAX_HISTORY_HOURS + 1)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
