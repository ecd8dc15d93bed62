"""The audit's Lambda function, the one stage of ``tally.parallel_audit.AUDIT_STAGES``: a segment of the Scan.

Environment: EVENTS_TABLE, the table it Scans, and the backfill's
TALLY_BACKFILL_* (``BackfillConfig``), whose work folder it writes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import boto3

from tally.core.settings import ENV_EVENTS_TABLE
from tally.parallel_audit import audit_work_prefix, scan_to_s3
from tally.parallel_backfill import BackfillConfig


def scan_segment(event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
    """Lambda: {"work", "request", "segment", "total"} -> that segment's items in S3."""
    config = BackfillConfig.from_env()
    if not event["work"].startswith(audit_work_prefix(config, "")):
        raise ValueError(f"{event['work']!r} is not an audit folder of s3://{config.bucket}/{config.prefix}")
    table = os.environ[ENV_EVENTS_TABLE]
    return scan_to_s3(
        boto3.client("dynamodb"), boto3.client("s3"), table, config.bucket, event["work"], event["request"],
        int(event["segment"]), int(event["total"]),
    )
