"""Point-in-time exports in S3 as AWS lays them out (manifests) and as moto does (none)."""

from __future__ import annotations

import gzip
import json

import pytest

from tally import exports

COUNT_FROM = 1_795_000_000_000


def put_gzip_lines(s3, key: str, lines: list[str]) -> None:
    s3.put_object(Bucket="exports", Key=key, Body=gzip.compress("".join(line + "\n" for line in lines).encode()))


def aws_export(**overrides) -> exports.Export:
    fields = dict(
        arn="arn:aws:dynamodb:us-east-1:123456789012:table/orders/export/01700000000000-abcd1234",
        table_arn="arn:aws:dynamodb:us-east-1:123456789012:table/orders",
        status="COMPLETED",
        bucket="exports",
        prefix="tally",
        manifest_key="tally/AWSDynamoDB/01700000000000-abcd1234/manifest-summary.json",
        export_time_ms=COUNT_FROM,
        item_count=3,
        billed_bytes=300,
    )
    return exports.Export(**{**fields, **overrides})


def test_on_aws_the_manifest_lists_the_data_files(s3):
    root = "tally/AWSDynamoDB/01700000000000-abcd1234"
    s3.put_object(Bucket="exports", Key=f"{root}/manifest-summary.json", Body=json.dumps(
        {"version": "2020-06-30", "exportArn": "...", "itemCount": 3, "manifestFilesS3Key": f"{root}/manifest-files.json"}
    ))
    s3.put_object(Bucket="exports", Key=f"{root}/manifest-files.json", Body="\n".join(
        json.dumps({"itemCount": n, "md5Checksum": "x", "etag": "y", "dataFileS3Key": f"{root}/data/f{n}.json.gz"})
        for n in (1, 2)
    ))
    put_gzip_lines(s3, f"{root}/data/f1.json.gz", ['{"Item":{"id":{"S":"1"},"counter":{"S":"a"}}}'])
    put_gzip_lines(s3, f"{root}/data/f2.json.gz", ['{"Item":{"id":{"S":"2"}}}', "", '{"Item":{"id":{"S":"3"}}}'])
    put_gzip_lines(s3, f"{root}/data/stray.json.gz", ['{"Item":{"id":{"S":"4"}}}'])  # not in the manifest

    files = exports.data_files(s3, aws_export())
    assert [(f.key.rsplit("/", 1)[1], f.item_count) for f in files] == [("f1.json.gz", 1), ("f2.json.gz", 2)]
    assert [item["id"]["S"] for item in exports.items(s3, "exports", files[1].key)] == ["2", "3"]


def test_a_line_that_is_no_exported_item_stops_the_backfill(s3):
    put_gzip_lines(s3, "p/AWSDynamoDB/x/data/a.gz", ['{"Item":{"id":{"S":"1"}}}', "not json"])
    with pytest.raises(exports.ExportError, match="line 2"):
        list(exports.items(s3, "exports", "p/AWSDynamoDB/x/data/a.gz"))


def test_a_failed_export_is_reported_with_its_reason():
    class Client:
        def describe_export(self, ExportArn):
            return {"ExportDescription": {"ExportArn": ExportArn, "ExportStatus": "FAILED", "FailureCode": "S3NoSuchBucket"}}

    with pytest.raises(exports.ExportError, match="S3NoSuchBucket"):
        exports.wait_until_done(Client(), "arn:x", sleep=lambda s: None)
