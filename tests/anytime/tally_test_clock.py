"""A moved wall clock for every Python process of a test run (`make test-anytime`).

`TALLY_TEST_CLOCK=<instant>@<epoch seconds>` says: the real instant <epoch seconds> is <instant>. Every
process that imports this module (the venv's ``tally_test_clock.pth`` imports it at start-up: pytest, its
xdist workers, moto's server, the scripts and servers the tests start) moves its wall clock by the same
offset and lets it tick, so all of them agree on "now" as they agree on the real one. Monotonic clocks and
sleeps are left alone. Without the variable, importing it does nothing.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone

VARIABLE = "TALLY_TEST_CLOCK"


def parse(value: str) -> tuple[datetime, float]:
    """``2027-12-31T23:59:59Z@1795000000.5`` → (the moved instant, the real epoch seconds it stands for)."""
    instant, _, real = value.partition("@")
    moved = datetime.fromisoformat(instant.replace("Z", "+00:00"))
    if moved.tzinfo is None or not real:
        raise ValueError(f"{VARIABLE}={value!r}: expected <ISO-8601 instant with offset>@<real epoch seconds>")
    return moved.astimezone(timezone.utc), float(real)


def install() -> None:
    value = os.environ.get(VARIABLE)
    if not value:
        return
    import time_machine

    moved, real = parse(value)
    destination = moved.timestamp() + (time.time() - real)
    time_machine.travel(destination, tick=True).start()


install()
