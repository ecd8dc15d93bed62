"""What bucket updates cost, what that tells about the items' size, and the lanes that would keep them small. No I/O.

Every shard that writes a bucket item leaves its watermark on it (commit.py),
and DynamoDB charges an update one write unit per started KB of the larger of
the item before and after it. So the units an update consumed
(``ReturnConsumedCapacity=TOTAL``, free) measure the item it wrote, and an
item written by many shards grows with them: at 1,000 shards a popular
bucket item holds 1,000 watermarks (about 17 KB), each update costs 17 units,
the item's 1,000 units a second pass about 60 updates, and windows stop
being committed (docs/performance.md, Scale). ``bucketLanes`` bounds the
watermarks an item holds to its lane's shards; this module turns what an
invocation measured into the warning that says how many lanes to set, before
the backlog grows.

The estimate: the largest update's units, times a KB, over the bytes of one
watermark (its 9-character name and its position, as this writer writes
them: a stream's shards write positions of the same length), is about the
watermarks on that item, the shards of its lane; times the lanes, about the
shards of the stream; one lane per SHARDS_PER_LANE of them. It errs high by
at most a KB's worth of watermarks (units round the size up, and the item's
own count, sums and bins count as watermarks), which raises the lanes a
little more, never less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tally.core.settings import MAX_BUCKET_LANES

WRITE_UNIT_BYTES = 1024
# The design's lane: about this many shards' watermarks on an item keep it near 1 KB (one write unit, about
# 20 bytes a watermark), as docs/deploy.md recommends (16 lanes for 1,000 shards).
SHARDS_PER_LANE = 64
# Beyond this many KB (more than 4 write units an update), a bucket item holds more than about 200 watermarks:
# three times the design's lane, and more than a full lane and a histogram's 256 bins take together (about
# 3 KB). The warning and the stack's ItemGrowthAlarm start there, at less than half the shards at which the
# scale model's commits start failing on one lane (between 500 and 700), while raising bucketLanes is a
# setting, not an incident.
ITEM_GROWTH_KB = 4


@dataclass(frozen=True)
class ItemGrowth:
    """The largest bucket item an invocation wrote, and the lanes that would keep it near 1 KB."""

    largest_kb: float  # the largest update's write units: the item's size, in started KB
    watermarks: int  # about how many writers' watermarks that item holds: the shards of its lane
    bucket_lanes: int  # the lanes the function counts with now
    recommended_bucket_lanes: int

    def as_log_fields(self) -> dict[str, Any]:
        return {
            "largest_bucket_item_kb": self.largest_kb,
            "watermarks_on_item": self.watermarks,
            "bucket_lanes": self.bucket_lanes,
            "recommended_bucket_lanes": self.recommended_bucket_lanes,
            "bucket_lanes_at_maximum": self.recommended_bucket_lanes >= MAX_BUCKET_LANES,
        }


def watermarks_in(units: float, watermark_bytes: int) -> int:
    """About how many watermarks of ``watermark_bytes`` each an item that cost ``units`` write units holds."""
    if watermark_bytes <= 0:
        raise ValueError(f"a watermark takes some bytes, not {watermark_bytes}")
    return math.ceil(units * WRITE_UNIT_BYTES / watermark_bytes)


def recommended_bucket_lanes(watermarks: int, bucket_lanes: int) -> int:
    """The lanes for about SHARDS_PER_LANE shards a lane, when an item of one lane holds ``watermarks`` with
    ``bucket_lanes`` lanes: never fewer than now (lowering lanes loses buckets), at most MAX_BUCKET_LANES."""
    shards = watermarks * bucket_lanes
    return min(MAX_BUCKET_LANES, max(bucket_lanes, math.ceil(shards / SHARDS_PER_LANE)))


def item_growth(largest_units: float, watermark_bytes: int, bucket_lanes: int) -> ItemGrowth | None:
    """What to tell the operator when the largest update of an invocation cost more than ITEM_GROWTH_KB units;
    None when it did not (or nothing was measured)."""
    if largest_units <= ITEM_GROWTH_KB or watermark_bytes <= 0:
        return None
    watermarks = watermarks_in(largest_units, watermark_bytes)
    return ItemGrowth(largest_units, watermarks, bucket_lanes, recommended_bucket_lanes(watermarks, bucket_lanes))
