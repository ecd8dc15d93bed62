"""Chooses the instant `make test-anytime` moves the clock to, and prints the line that sets it.

Each run tries one of the instants where dates break: days and years ahead, the last second of a UTC
year, the last half minute of a leap day, and a far instant drawn from today's date, so that successive
days try different ones. ``--at`` names an instant (to reproduce a failure); ``--kind`` names a kind.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from datetime import date, datetime, timedelta, timezone


def next_leap_day(after: datetime) -> datetime:
    year = after.year
    while True:
        try:
            leap = datetime(year, 2, 29, 23, 59, 30, tzinfo=timezone.utc)
        except ValueError:
            year += 1
            continue
        if leap > after:
            return leap
        year += 1


def candidates(now: datetime, today: date) -> dict[str, datetime]:
    drawn = random.Random(hashlib.sha256(today.isoformat().encode()).digest())
    return {
        "two-days": now + timedelta(days=2),
        "400-days": now + timedelta(days=400),
        "year-end": datetime(now.year + 1, 1, 1, tzinfo=timezone.utc) - timedelta(seconds=1),
        "leap-day": next_leap_day(now),
        "far": now + timedelta(days=drawn.randint(3, 3650), seconds=drawn.randint(0, 86_399)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", help="the instant to move to (ISO-8601 with offset)")
    parser.add_argument("--kind", help="one of: two-days, 400-days, year-end, leap-day, far")
    args = parser.parse_args(argv)
    real = time.time()
    now = datetime.fromtimestamp(real, timezone.utc)
    kinds = candidates(now, now.date())
    if args.at:
        try:
            moved = datetime.fromisoformat(args.at.replace("Z", "+00:00"))
        except ValueError:
            parser.error(f"--at {args.at}: not an ISO-8601 instant")
        if moved.tzinfo is None:
            parser.error(f"--at {args.at}: give an offset (Z or +HH:MM)")
        kind = "given"
    else:
        kind = args.kind or list(kinds)[now.date().toordinal() % len(kinds)]
        if kind not in kinds:
            parser.error(f"--kind {kind}: expected one of {', '.join(kinds)}")
        moved = kinds[kind]
    instant = moved.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"moving the clock ({kind}) to {instant}; to repeat this run: make test-anytime CLOCK={instant}", file=sys.stderr)
    print(f"{instant}@{real:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
