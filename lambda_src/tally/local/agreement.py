"""Whether the pipeline counting into a counts table counts the items a producer is about to write.

The pipeline publishes the settings it counts with in the counts table
(``CountsTable.publish_settings``, at every cold start of the handler). A
producer judges each item it means to write with those settings, through
tally's own parsing, as a record arriving now would be judged: items the
pipeline would reject or skip would otherwise be lost while every command
exits 0. Only the judging is here; reading and writing are the callers'.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tally.core.records import CounterEvent, Reason, parse_image
from tally.core.settings import Settings
from tally.local.aws import serialize

# Refused for their time, not their shape: the pipeline counts such items when written at another moment.
TIME_REASONS = frozenset({Reason.LATE_EVENT, Reason.FUTURE_TIME})


@dataclass
class Judgement:
    """What a pipeline with given settings makes of some items."""

    items: int = 0
    counted: int = 0  # items at least one rule counts
    spoiled: int = 0  # items some rule refuses for their shape (not their time), or no rule counts
    refused: Counter[Reason] = field(default_factory=Counter)  # items some rule refuses (or no rule counts), by reason
    details: dict[Reason, str] = field(default_factory=dict)  # the first refusal of each reason, as the log would say

    @property
    def lost(self) -> int:
        """Items no rule counts at all."""
        return self.items - self.counted

    def reasons(self, time_only: bool) -> Counter[Reason]:
        return Counter({reason: n for reason, n in self.refused.items() if (reason in TIME_REASONS) == time_only})

    def describe(self, reasons: Counter[Reason]) -> str:
        return ", ".join(f"{reason.value} {n:,} ({self.details[reason]})" for reason, n in reasons.most_common())


def judge(items: Iterable[Mapping[str, Any]], settings: Settings, arrival_ms: int) -> Judgement:
    """Each item as the INSERT record the stream would deliver, arriving at ``arrival_ms``, through every rule."""
    judgement = Judgement()
    for item in items:
        outcomes = parse_image(serialize(item), arrival_ms, "1", settings)
        judgement.items += 1
        refusals = [outcome for outcome in outcomes if type(outcome) is not CounterEvent]
        judgement.counted += len(refusals) < len(outcomes)
        reasons = {outcome.reason for outcome in refusals}
        judgement.refused.update(reasons)
        judgement.spoiled += bool(reasons - TIME_REASONS)
        for outcome in refusals:
            judgement.details.setdefault(outcome.reason, outcome.detail)
    return judgement


def differences(published: Mapping[str, str], needed: Mapping[str, str]) -> dict[str, str]:
    """The variables whose published value is not what the items need ('' where the pipeline has none)."""
    return {name: value for name, value in needed.items() if published.get(name, "") != value}
