"""An export as AWS lays it out in S3, and DescribeExport answering for it: for the in-account backfill's tests."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime

TABLE_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/orders"
BUCKET = "exports"
PREFIX = "orders"


class ExportsOf:
    """moto's DynamoDB, with DescribeExport answering for an export laid out in S3 as AWS lays it out."""

    def __init__(self, wrapped, description: dict) -> None:
        self._wrapped = wrapped
        self.description = description

    def describe_export(self, ExportArn: str) -> dict:  # noqa: N803 (boto3's name)
        return {"ExportDescription": {**self.description, "ExportArn": ExportArn}}

    def __getattr__(self, name):
        return getattr(self._wrapped, name)


def put_export(s3, images: list[dict], files: int, at_ms: int, prefix: str = PREFIX) -> dict:
    """An export of ``images`` in ``files`` data files, manifests and all; its DescribeExport description."""
    root = f"{prefix}/AWSDynamoDB/01795000000000-abcdef"
    entries = []
    for number in range(files):
        part = images[number::files]
        key = f"{root}/data/{number:03d}.json.gz"
        body = "".join(json.dumps({"Item": item}) + "\n" for item in part)
        s3.put_object(Bucket=BUCKET, Key=key, Body=gzip.compress(body.encode()))
        entries.append(json.dumps({"dataFileS3Key": key, "itemCount": len(part)}))
    s3.put_object(Bucket=BUCKET, Key=f"{root}/manifest-files.json", Body="\n".join(entries).encode())
    s3.put_object(Bucket=BUCKET, Key=f"{root}/manifest-summary.json", Body=json.dumps({"manifestFilesS3Key": f"{root}/manifest-files.json"}).encode())
    return {
        "TableArn": TABLE_ARN,
        "ExportStatus": "COMPLETED",
        "S3Bucket": BUCKET,
        "S3Prefix": prefix,
        "ExportManifest": f"{root}/manifest-summary.json",
        "ExportTime": datetime.fromtimestamp(at_ms / 1000, UTC),
        "ItemCount": len(images),
    }
