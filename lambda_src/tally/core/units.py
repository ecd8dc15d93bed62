"""Time units in epoch milliseconds, the one place every other module takes them from.

Nothing here depends on anything else in tally, so any module may import it: the
settings, the rules and the bucket math alike, without importing one another for a
constant.
"""

from __future__ import annotations

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
DAY_MS = 86_400_000
MINUTES_PER_HOUR = 60
