"""Sweeps: one check repeated over every member of a list (fault kinds, bench workloads, settings, seeds).

``@pytest.mark.parametrize("kind", sweep(KINDS))`` leaves the first member as it is and marks the others
``sweep``: ``make test`` runs each such test once, on its first member, and ``make test-sweeps`` runs the
rest (CI runs both; ``make test-anytime`` runs everything). The tests that run a previous release
(tests/upgrade/) are sweeps whole: building that release's venv takes a minute.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest


def sweep(members: Iterable) -> list:
    """``members`` as parametrize values, every one after the first marked ``sweep``. A tuple is the values of
    several argument names."""
    values = []
    for index, member in enumerate(members):
        if index == 0:
            values.append(member)
        elif isinstance(member, tuple):
            values.append(pytest.param(*member, marks=pytest.mark.sweep))
        else:
            values.append(pytest.param(member, marks=pytest.mark.sweep))
    return values
