"""The close's Lambda functions, one per kind of step of ``tally.closing.CLOSE_STEPS``: plan, close a part, finish.

Each hands its event to ``CloseStages`` over a ``Closer`` of the counts table
COUNTS_TABLE, with the settings of the environment (the counting function's:
the calendar prefixes and zones say what is closed, see core/settings.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config

from tally.closing import CLOSE_WORKERS, CloseStages, Closer
from tally.core.settings import Settings
from tally.dynamo.commit import COMMIT_WORKERS
from tally.dynamo.counts_table import CountsTable


def _stages() -> CloseStages:
    settings = Settings.from_env()
    # A part reads CLOSE_WORKERS counters at once, then commits COMMIT_WORKERS updates at once: a connection each.
    client = boto3.client("dynamodb", config=Config(retries={"mode": "standard"}, max_pool_connections=max(CLOSE_WORKERS, COMMIT_WORKERS)))
    # No segment of the close was ever committed by the release before it: no markers to read.
    table = CountsTable(client, settings.counts_table, settings, previous_release_until_ms=0)
    return CloseStages(Closer(table))


def plan(event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
    """Lambda: {} or {"now": an instant not later than the clock} -> {"now", "days": [{"periods", "part"}, ...],
    "months": [...], "finish": [every period's sort key]}."""
    return _stages().plan(event.get("now"))


def close_part(event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
    """Lambda: {"periods": [sort keys of one run], "part": n} -> what that part wrote (a CloseSummary's JSON)."""
    return _stages().close_part(event["periods"], event["part"])


def finish(event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
    """Lambda: {"periods": [...], "closed"?: {"days": [part answers], "months": [...]}} -> each zone's progress
    moved on, and what the parts did, added up."""
    return _stages().finish(event["periods"], event.get("closed"))
