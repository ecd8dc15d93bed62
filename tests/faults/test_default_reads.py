"""Reads as users make them by default, between a segment's hour items and its minutes.

A user's read names no end and no plan: ``Reader.count_many(counters,
window=...)``, a window ending now. Ten minutes into an hour, the first hour
of a two-hour window is covered from its eleventh minute on, which the hour
minus its first eleven minutes reads in fewer keys; a segment in flight
holding events of those minutes (outside the window) has added them to the
hour and not yet to the minutes. The default read must stay isolated: every
answer between the window's count before the segment and after it, never
less than an earlier answer. The fast path, asked for, may count those events
for a moment, but never less than before the segment: hour items are written
first, so an hour minus its minutes can only run ahead.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime

from freezegun import freeze_time
from moto_tables import COUNTS, no_sleep_backoff
from tally import Reader
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.windows import Window, now_ms
from tally.dynamo.counts_table import CountsTable
from tally.query import count_windows

from .test_read_isolation import COUNTERS, WRITER, PausesBeforeMinutes, segment_of, truth


def test_default_reads_between_a_segments_hours_and_minutes_stay_isolated(dynamodb, settings):
    rng = random.Random(41)
    hour = now_ms() // HOUR_MS * HOUR_MS - HOUR_MS
    now = hour + 10 * MINUTE_MS + 20_000  # 20 s into minute 10
    before = [(rng.choice(COUNTERS), now - rng.randrange(3 * HOUR_MS)) for _ in range(300)]
    first_minutes = hour - 2 * HOUR_MS  # minutes 0 to 10 of the hour the two-hour window starts in
    during = [(rng.choice(COUNTERS), first_minutes + rng.randrange(11 * MINUTE_MS)) for _ in range(30)]
    during += [(rng.choice(COUNTERS), now - rng.randrange(3 * HOUR_MS)) for _ in range(20)]
    after = before + during
    CountsTable(dynamodb, COUNTS, settings, backoff=no_sleep_backoff).commit(segment_of("100", before, now), WRITER)
    reader = Reader(COUNTS, client=dynamodb, settings=settings)
    table = CountsTable(dynamodb, COUNTS, settings, backoff=no_sleep_backoff)
    answers: dict[tuple, list[int]] = defaultdict(list)
    ahead = []

    def read_as_users_do() -> None:
        with freeze_time(datetime.fromtimestamp(now / 1000, UTC)):
            for length in ("2h", "90m", "24h"):
                for result in reader.count_many(COUNTERS, window=length):
                    window = result.window
                    low, high = truth(before, result.counter, window), truth(after, result.counter, window)
                    key = (length, result.counter)
                    assert low <= result.total <= high, (key, low, result.total, high)
                    assert result.total >= max(answers[key], default=0), (key, answers[key], result.total)
                    answers[key].append(result.total)
        window = Window.ending(now, 2 * HOUR_MS)
        for result in count_windows(table, COUNTERS, length_ms=window.length_ms, now=now, allow_transient=True):
            low = truth(before, result.counter, window)
            assert result.total >= low, ("the fast path fell below the count before", result.counter, low, result.total)
            ahead.append(result.total > truth(after, result.counter, window))

    paused = PausesBeforeMinutes(dynamodb, read_as_users_do, every=4)
    CountsTable(paused, COUNTS, settings, backoff=no_sleep_backoff, workers=1).commit(segment_of("200", during, now), WRITER)
    read_as_users_do()

    for (length, counter), seen in answers.items():
        assert seen[-1] == truth(after, counter, Window.ending(now, {"2h": 120, "90m": 90, "24h": 1440}[length] * MINUTE_MS))
    assert paused.minutes >= 3 * paused.every
    assert any(ahead), "the fast path never ran ahead: the reads missed the moment between hours and minutes"
