"""The counter directory: which counters have buckets on which UTC day. No I/O.

Listing the counters that start with a prefix must not Scan anything. So for
every counter a commit writes on a day, the handler puts one small item into
the counts table, in a partition of its own per day:

    pk = "#counters#2026-11-23"    sk = the counter name    ttl = day end + hour retention

A put of the same item again changes nothing, so retries, replays and several
shards writing the same entry are harmless: the directory is a set, and "at
least once" is exactly once for it. One entry per counter and day (not per
hour) keeps its cost a few writes per counter a day; a listing of a window
reads one Query per day and counts the candidates it finds there, keeping
those that counted something in the window.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from tally.core.buckets import Bucket
from tally.core.settings import DAY_MS, Settings
from tally.core.tables import COUNTS_TABLE, TTL_ATTRIBUTE

DIRECTORY_PREFIX = "#counters#"
RESERVED_PREFIX = "#"

Entry = tuple[int, str]  # (day since the epoch, counter)


def day_partition(day: int) -> str:
    """The directory partition of one UTC day: ``#counters#YYYY-MM-DD``."""
    return DIRECTORY_PREFIX + datetime.fromtimestamp(day * DAY_MS // 1000, UTC).strftime("%Y-%m-%d")


def entries_of(items: Iterable[tuple[str, Bucket]]) -> set[Entry]:
    """The (day, counter) entries of some bucket items; tally's own reserved counters are left out."""
    return {
        (bucket.start_ms // DAY_MS, counter) for counter, bucket in items if not counter.startswith(RESERVED_PREFIX)
    }


def entry_item(entry: Entry, settings: Settings) -> dict[str, dict[str, str]]:
    """The item of one entry: it lives as long as the last hour bucket of its day may be read."""
    day, counter = entry
    expires_s = ((day + 1) * DAY_MS + settings.hour_retention_ms) // 1000
    return {
        COUNTS_TABLE.partition_key: {"S": day_partition(day)},
        COUNTS_TABLE.sort_key: {"S": counter},
        TTL_ATTRIBUTE: {"N": str(expires_s)},
    }


def days_between(start_ms: int, end_ms: int) -> range:
    """The UTC days holding any instant of [start_ms, end_ms)."""
    return range(start_ms // DAY_MS, (end_ms - 1) // DAY_MS + 1)
