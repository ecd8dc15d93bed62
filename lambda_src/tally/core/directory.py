"""The counter directory: which counters have buckets on which UTC day, spread over partitions. No I/O.

Listing the counters that start with a prefix must not Scan anything. So the
counts table keeps one small item per counter and UTC day it has buckets on,
in one of ``DIRECTORY_PARTITIONS`` partitions of that day, picked by a hash of
the name:

    pk = "#counters#2026-11-23#07"    sk = the counter name    ttl = day end + hour retention

**Written when a bucket item is born.** Every event counts in its hour, so a
counter has buckets on a day exactly when one of its hour items (of any lane)
was created that day, and the writer that created it is the one to say so:
the bucket's update returns its count, and a count equal to what the update
added means the item is new (``commit.py``). A retry cannot tell whether its
lost first try created the item, so an hour item found already applied puts
its entry too. So the directory's writes grow with the hour items created
(at most one per counter, hour and lane), not with the shards that write
them, and a function remembers what it put, so a counter whose items it
creates all day costs it one put. A put of the same item again changes
nothing: the directory is a set, and "at least once" is exactly once for it.

**Spread.** Each partition key takes at most 1,000 write units a second; a
day's first windows create the hour items of every counter at once, so the
entries of a day go to ``DIRECTORY_PARTITIONS`` keys. A listing reads every
partition of every day of its window and merges them in name order; a page
ends at a name, and the next page starts after it (``cursor_of``).

**The previous release** put one entry per counter and day from every
function, all in ``#counters#YYYY-MM-DD`` (``legacy_partition``). Listings
read that partition too, so a day counted partly by each release lists all of
its counters; its entries expire with the day's hours.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime

from tally.core.buckets import Bucket
from tally.core.settings import Settings
from tally.core.units import DAY_MS
from tally.core.tables import COUNTS_TABLE, TTL_ATTRIBUTE
from tally.core.windows import QueryError

DIRECTORY_PREFIX = "#counters#"
RESERVED_PREFIX = "#"
# Partition keys per day: 16 x 1,000 entries a second, and a listing reads 16 Queries a day (plus the
# previous release's partition). Part of the table's layout: a reader with another number misses entries.
DIRECTORY_PARTITIONS = 16

Entry = tuple[int, str]  # (day since the epoch, counter)


class InvalidCursor(QueryError):
    """A listing's cursor that no listing handed out."""

    parameter = "cursor"


def legacy_partition(day: int) -> str:
    """The previous release's one partition of a UTC day: ``#counters#YYYY-MM-DD``."""
    return DIRECTORY_PREFIX + datetime.fromtimestamp(day * DAY_MS // 1000, UTC).strftime("%Y-%m-%d")


def partition_of(day: int, counter: str) -> str:
    """The partition of a counter's entry on a day: ``#counters#YYYY-MM-DD#07``, by a hash of the name."""
    digest = hashlib.sha256(counter.encode("utf-8")).digest()
    return f"{legacy_partition(day)}#{int.from_bytes(digest[:4], 'big') % DIRECTORY_PARTITIONS:02d}"


def day_partitions(day: int) -> list[str]:
    """Every partition a listing of a day reads: this release's, then the previous release's."""
    return [f"{legacy_partition(day)}#{n:02d}" for n in range(DIRECTORY_PARTITIONS)] + [legacy_partition(day)]


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
        COUNTS_TABLE.partition_key: {"S": partition_of(day, counter)},
        COUNTS_TABLE.sort_key: {"S": counter},
        TTL_ATTRIBUTE: {"N": str(expires_s)},
    }


def days_between(start_ms: int, end_ms: int) -> range:
    """The UTC days holding any instant of [start_ms, end_ms)."""
    return range(start_ms // DAY_MS, (end_ms - 1) // DAY_MS + 1)


def cursor_of(counter: str) -> str:
    """The cursor of a page that ended at ``counter``: the next page lists the names after it."""
    return base64.urlsafe_b64encode(counter.encode("utf-8")).decode("ascii").rstrip("=")


def after_cursor(cursor: str) -> str:
    """The name a cursor ends at; InvalidCursor for text no listing handed out."""
    try:
        name = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        name = ""
    if not name or cursor_of(name) != cursor:
        raise InvalidCursor(f"cursor {cursor!r} is not one a listing handed out: start without it")
    return name
