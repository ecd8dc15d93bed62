"""Hypothesis settings for the fault suite: a quick ``ci`` profile by default, a long ``hunt`` on request.

Hunting is chosen by ``TALLY_HUNT=1`` or ``--hypothesis-profile=hunt`` (see
conftest.py). The tests take their settings from ``for_test`` instead of the
global default, so loading these profiles never changes the examples other
suites run.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = {
    "deadline": None,
    "database": None,  # failures are reproduced from the printed seeds, not from a local cache
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
}

CI = settings(max_examples=20, **_COMMON)
HUNT = settings(max_examples=int(os.environ.get("TALLY_HUNT_EXAMPLES", "600")), **_COMMON)

hunting = os.environ.get("TALLY_HUNT") == "1"


def for_test(weight: float = 1.0) -> settings:
    """The active profile, with examples scaled by ``weight`` (slow tests take fewer)."""
    base = HUNT if hunting else CI
    return settings(base, max_examples=max(1, round(base.max_examples * weight)))
