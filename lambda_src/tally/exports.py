"""DynamoDB point-in-time exports in S3: start one, wait for it, list its data files, read its items.

An export in DynamoDB JSON format (what tally reads) lies under
``<prefix>/AWSDynamoDB/<export id>/``: ``manifest-summary.json`` names
``manifest-files.json``, one JSON object per line per data file
(``dataFileS3Key``, ``itemCount``), and each data file is gzip'd lines of
``{"Item": {...DynamoDB JSON...}}``. DescribeExport gives the summary's key as
``ExportManifest``.

moto (5.x) writes one data file, ``<prefix>/AWSDynamoDB/<uuid>/data/<uuid>.gz``,
and no manifest, names no ExportManifest or ExportTime, and exports the table as
it is when asked, whatever ExportTime says. Without a manifest the data files
are found by listing the prefix, which is only unambiguous when the prefix holds
one export: each export needs a prefix of its own.
"""

from __future__ import annotations

import gzip
import io
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

EXPORT_ROOT = "AWSDynamoDB/"


class ExportError(RuntimeError):
    """An export tally cannot read: failed, unfinished, ambiguous or malformed."""


@dataclass(frozen=True)
class Export:
    arn: str
    table_arn: str
    status: str
    bucket: str
    prefix: str
    manifest_key: str | None  # manifest-summary.json; None where moto writes none
    export_time_ms: int | None  # None where moto names none
    item_count: int | None
    billed_bytes: int | None
    failure: str | None = None

    @classmethod
    def from_description(cls, description: dict[str, Any]) -> Export:
        export_time = description.get("ExportTime")
        return cls(
            arn=description["ExportArn"],
            table_arn=description.get("TableArn", ""),
            status=description.get("ExportStatus", ""),
            bucket=description.get("S3Bucket", ""),
            prefix=(description.get("S3Prefix") or "").strip("/"),
            manifest_key=description.get("ExportManifest"),
            export_time_ms=int(export_time.timestamp() * 1000) if isinstance(export_time, datetime) else None,
            item_count=description.get("ItemCount"),
            billed_bytes=description.get("BilledSizeBytes"),
            failure=" ".join(filter(None, (description.get("FailureCode"), description.get("FailureMessage")))) or None,
        )


@dataclass(frozen=True)
class DataFile:
    key: str
    item_count: int | None


def start_export(dynamodb: Any, table_arn: str, bucket: str, prefix: str, export_time_ms: int) -> Export:
    """ExportTableToPointInTime as of ``export_time_ms`` (the table needs point-in-time recovery)."""
    response = dynamodb.export_table_to_point_in_time(
        TableArn=table_arn,
        ExportTime=datetime.fromtimestamp(export_time_ms / 1000, UTC),
        S3Bucket=bucket,
        S3Prefix=prefix,
        ExportFormat="DYNAMODB_JSON",
    )
    return Export.from_description(response["ExportDescription"])


def describe(dynamodb: Any, export_arn: str) -> Export:
    return Export.from_description(dynamodb.describe_export(ExportArn=export_arn)["ExportDescription"])


def wait_until_done(
    dynamodb: Any,
    export_arn: str,
    *,
    poll_seconds: float = 10.0,
    timeout_seconds: float = 6 * 3600,
    on_poll: Callable[[Export], None] = lambda export: None,
    sleep: Callable[[float], None] = time.sleep,
) -> Export:
    """Poll DescribeExport until the export completed; raise ExportError if it failed or took too long."""
    waited = 0.0
    while True:
        export = describe(dynamodb, export_arn)
        on_poll(export)
        if export.status == "COMPLETED":
            return export
        if export.status == "FAILED":
            raise ExportError(f"export {export_arn} failed: {export.failure or 'no reason given'}")
        if waited >= timeout_seconds:
            raise ExportError(f"export {export_arn} still {export.status} after {waited:.0f} s")
        sleep(poll_seconds)
        waited += poll_seconds


def data_files(s3: Any, export: Export) -> list[DataFile]:
    """The export's data files: from its manifest when it has one, else by listing its prefix."""
    if export.manifest_key:
        summary = json.loads(_read(s3, export.bucket, export.manifest_key))
        files_key = summary.get("manifestFilesS3Key")
        if not files_key:
            raise ExportError(f"{export.manifest_key} names no manifestFilesS3Key")
        files = []
        for line in _read(s3, export.bucket, files_key).decode("utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                files.append(DataFile(entry["dataFileS3Key"], entry.get("itemCount")))
        return files
    root = f"{export.prefix}/{EXPORT_ROOT}" if export.prefix else EXPORT_ROOT
    keys = [
        item["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=export.bucket, Prefix=root)
        for item in page.get("Contents", [])
        if "/data/" in item["Key"] and item["Key"].endswith(".gz")
    ]
    folders = {key[len(root) :].split("/", 1)[0] for key in keys}
    if len(folders) > 1:
        raise ExportError(
            f"s3://{export.bucket}/{root} holds {len(folders)} exports and no manifest tells which is "
            f"{export.arn}: give every export a prefix of its own"
        )
    return [DataFile(key, None) for key in sorted(keys)]


def items(s3: Any, bucket: str, key: str) -> Iterator[dict[str, Any]]:
    """The DynamoDB JSON image of every item in one gzip'd data file, in file order, streamed."""
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    with io.TextIOWrapper(gzip.GzipFile(fileobj=body), encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)["Item"]
            except (ValueError, KeyError, TypeError):
                raise ExportError(f"s3://{bucket}/{key} line {number} is not an exported DynamoDB item") from None
            if not isinstance(item, dict):
                raise ExportError(f"s3://{bucket}/{key} line {number} is not an exported DynamoDB item")
            yield item


def _read(s3: Any, bucket: str, key: str) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
