"""tally: exact rolling-window counters from DynamoDB Streams.

Read counts with ``from tally import Reader`` (see ``tally.reader``).

Layout (the Lambda asset ships everything but ``local``):

- ``core/``: pure rules. Write path: stream record -> event (records) -> segment
  (segments) -> commit items (commit). Read path: window (windows) -> plan
  (plans) -> sum (sums); calendar periods in a zone (calendar) -> windows.
- ``dynamo/``: the one package that talks to DynamoDB, a module for each thing it serves (commit,
  fetch, directory, ranking, settings, backfill, tables).
- ``functions/``: every Lambda function's entry point, a module each, wiring the rest to AWS.
- ``invocation``: the Lambda edge, one event in, commits out; ``query``: window -> plan -> fetch -> sum;
  ``reader``: the public read API over it.
- ``local/``: the local toolkit (moto server, stream runner, workload), not deployed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tally.version import __version__  # the release (see tally.version)

if TYPE_CHECKING:
    from tally.core.calendar import Period
    from tally.core.plans import PlanKind, Series
    from tally.core.windows import QueryError
    from tally.query import CalendarPoint, CalendarSeries, SeriesPoint, WindowCount
    from tally.reader import Reader, ReadOptions, read_options

# The public read API, imported on first use: the pure core and the Lambda handler do not pay for it.
_PUBLIC = {
    "Reader": "tally.reader",
    "ReadOptions": "tally.reader",
    "read_options": "tally.reader",
    "QueryError": "tally.core.windows",
    "WindowCount": "tally.query",
    "SeriesPoint": "tally.query",
    "CalendarSeries": "tally.query",
    "CalendarPoint": "tally.query",
    "Period": "tally.core.calendar",
    "Series": "tally.core.plans",
    "PlanKind": "tally.core.plans",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'tally' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_PUBLIC[name]), name)
