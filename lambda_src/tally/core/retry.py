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

    def pauses(self) -> Iterator[int]:
        """Yield the attempt number (0-based), sleeping before every attempt but the first."""
        for attempt in range(self.attempts):
            if attempt:
                self.sleep(self.rng.uniform(0, min(self.cap_seconds, self.base_seconds * 2 ** (attempt - 1))))
            yield attempt
