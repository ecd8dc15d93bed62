"""Exponential backoff with full jitter, the schedule AWS recommends for retries."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """``attempts`` tries in all; before try n+1, sleep uniformly in [0, min(cap, base * 2**n)]."""

    attempts: int = 8
    base_seconds: float = 0.05
    cap_seconds: float = 5.0
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)

    def delays(self) -> Iterator[float]:
        """The pause before each attempt, 0 before the first; the caller waits (or simulates waiting)."""
        for attempt in range(self.attempts):
            yield self.rng.uniform(0, min(self.cap_seconds, self.base_seconds * 2 ** (attempt - 1))) if attempt else 0.0

    def pauses(self) -> Iterator[int]:
        """Yield the attempt number (0-based), sleeping before every attempt but the first."""
        for attempt, delay in enumerate(self.delays()):
            if attempt:
                self.sleep(delay)
            yield attempt


def commit_backoff() -> Backoff:
    """The schedule of a commit's retries: many short pauses, at most about 20 s in all.

    Every shard commits its window at the same instant, and a bucket that many
    shards write takes one transaction at a time: a commit waits its turn in
    pauses of at most a second, and still gives up well inside the function's
    60 s timeout, so Lambda retries the invocation rather than kill it.
    """
    return Backoff(attempts=25, cap_seconds=1.0)


def sketch_backoff() -> Backoff:
    """The schedule of a segment's sketch merges: after its counts, longer pauses, at most about 40 s in all.

    A distinct counter that every shard writes takes its sketch writes one
    conditional write at a time per lane, in the partition its counts just
    filled; a merge that waits costs nothing but time, while one that gives
    up makes Lambda retry the whole invocation. The scale model (bench) runs
    1,000 shards on one hot distinct counter with no failed invocation on
    this schedule; with the commit's it had some.
    """
    return Backoff(attempts=30, cap_seconds=1.5)


def directory_backoff() -> Backoff:
    """The schedule of a commit's directory entries: the sketch merges' longer pauses, at most about 40 s.

    A day's first windows create the hour items of every counter at once, and
    at 1,000 shards and 10^6 counters the first window after midnight puts
    about 74,000 entries into the day's 16 partitions, each taking 1,000 a
    second. An entry that waits costs nothing but time; one that gives up
    makes Lambda retry the whole invocation. The scale model (bench) had 17
    failed invocations there on the plain schedule's 8 tries, none on this one.
    """
    return Backoff(attempts=30, cap_seconds=1.5)
