"""The in-account backfill's Lambda functions, one per stage of ``tally.parallel_backfill.STAGES``.

Each hands its event to ``Backfill`` on boto3's clients, with the settings
of the environment: the counting function's (see core/settings.py) and the
backfill's TALLY_BACKFILL_* (``BackfillConfig``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import boto3

from tally.core.settings import Settings
from tally.parallel_backfill import Backfill, BackfillConfig


def _backfill() -> Backfill:
    return Backfill(boto3.client("dynamodb"), boto3.client("s3"), Settings.from_env(), BackfillConfig.from_env())


def plan(event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
    """Lambda: {"exportArn", "rules"} -> the plan the maps read."""
    return _backfill().plan(event["exportArn"], event.get("rules") or "")


def fold_file(event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
    """Lambda: {"work", "rules", "file": {"key", "index", "days"}} -> that file's partials in S3 ("days": a calendar
    backfill's, as its plan listed them)."""
    file = event["file"]
    return _backfill().fold_file(event["work"], file["key"], int(file["index"]), event.get("rules") or "", file.get("days"))


def commit_range(event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
    """Lambda: {"work", "exportArn", "rules", "range"} -> that range committed."""
    return _backfill().commit_range(event["work"], event["exportArn"], int(event["range"]), event.get("rules") or "")


def summarize(event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
    """Lambda: {"work", "rules"} -> the backfill's summary (and, for the whole table, the days it made complete)."""
    return _backfill().summarize(event["work"], event.get("rules") or "")
