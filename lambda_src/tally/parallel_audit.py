"""The audit's Scan in the account: segments of a parallel Scan read by Lambda workers, their items gathered in S3.

A Scan reads, and bills, the whole events table; from a laptop it also
pulls every page across the internet. ``AUDIT_STAGES`` is one Distributed
Map over the Scan's segments (``Segment``/``TotalSegments``): each worker
(``tally.functions.audit_stages``) Scans its segment with the audit's filter
and projection (the audit builds them) and writes the items that pass to S3.
``scripts/audit.py`` then reads those items, a window's worth, and recounts
them with its own code: the workers only read, they judge nothing, so the
recount stays independent of tally's parsing.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Mapping
from typing import Any

from tally.parallel_backfill import WORK_FOLDER, BackfillConfig, Stage

# The Scan's Lambda function (named here, never imported: it imports this module).
STAGES_MODULE = "tally.functions.audit_stages"
AUDIT_STAGES = (
    Stage("scan", "scan_segment", ("work", "request", "total"), over="segments", item="segment", module=STAGES_MODULE),
)


def audit_work_prefix(config: BackfillConfig, audit_id: str) -> str:
    """Beside the backfill's work: the same folder the workers may write, one sub-folder per audit."""
    return "/".join(filter(None, (config.prefix, WORK_FOLDER, "audits", audit_id)))


def segment_key(work: str, segment: int) -> str:
    return f"{work}/{segment:05d}.json.gz"


def scan_segment_items(dynamodb: Any, table: str, request: Mapping[str, Any], segment: int, total: int) -> Iterator[dict[str, Any]]:
    """Every item of one segment the filter lets through, strongly consistent, page after page."""
    if not 0 <= segment < total:
        raise ValueError(f"segment {segment} of {total} does not exist")
    page_request = {**request, "TableName": table, "Segment": segment, "TotalSegments": total, "ConsistentRead": True}
    while True:
        page = dynamodb.scan(**page_request)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        page_request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def scan_to_s3(dynamodb: Any, s3: Any, table: str, bucket: str, work: str, request: Mapping[str, Any], segment: int, total: int) -> dict[str, Any]:
    """Scan one segment into one gzip'd file of JSON lines (DynamoDB JSON); written even when empty."""
    items = list(scan_segment_items(dynamodb, table, request, segment, total))
    body = gzip.compress("".join(json.dumps(item) + "\n" for item in items).encode(), compresslevel=5)
    s3.put_object(Bucket=bucket, Key=segment_key(work, segment), Body=body)
    return {"segment": segment, "items": len(items)}


def gathered_items(s3: Any, bucket: str, work: str, total: int) -> Iterator[dict[str, Any]]:
    """The items every segment's worker wrote, segment after segment."""
    for segment in range(total):
        body = s3.get_object(Bucket=bucket, Key=segment_key(work, segment))["Body"].read()
        for line in gzip.decompress(body).decode("utf-8").splitlines():
            if line:
                yield json.loads(line)

