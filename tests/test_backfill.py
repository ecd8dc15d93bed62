"""Backfill pieces: exported items through the handler's parsing, the write-rate limit, export layouts."""

from __future__ import annotations

import gzip
import json

import boto3
import pytest
from moto import mock_aws

from factories import image
from tally.backfill import BackfillSummary, WriteRateLimit, backfill_file, chunks, fold_chunk, write_units
from tally.core.records import CounterEvent, Reason
from tally.core.settings import HOUR_MS, Settings
from tally.dynamo import CommitResult
from tally.local import exports

COUNT_FROM = 1_795_000_000_000


def test_exported_items_are_judged_as_stream_records_arriving_at_count_from():
    settings = Settings(counter_attribute="kind", time_attribute="at", count_from_ms=COUNT_FROM)
    images = [
        image(id="a", kind="orders", at="2026-11-18T10:00:00+00:00"),  # ISO time, 66 minutes before
        image(id="b", kind="orders", at=COUNT_FROM - 30 * HOUR_MS),  # too old at count-from
        image(id="c", kind="orders", at=COUNT_FROM + 10 * 60_000),  # ten minutes after count-from
        image(id="d", at=COUNT_FROM),  # no counter
    ]
    segments, outcomes = fold_chunk(images, 500, COUNT_FROM, settings)

    assert outcomes[0] == CounterEvent("orders", 1_794_996_000_000, "500", COUNT_FROM)
    assert [o.reason for o in outcomes[1:]] == [Reason.LATE_EVENT, Reason.FUTURE_TIME, Reason.MISSING_COUNTER]
    (segment,) = segments
    assert segment.first_sequence == "500"  # the marker key follows the item's position in its file
    assert sum(delta for (counter, _), delta in segment.deltas.items() if counter == "orders") == 2


def test_a_chunk_folds_the_same_way_every_time():
    images = [image(id=str(n), counter=f"c{n % 70}", ts=COUNT_FROM - n * 61_000) for n in range(300)]
    first, _ = fold_chunk(images, 0, COUNT_FROM, Settings())
    again, _ = fold_chunk(images, 0, COUNT_FROM, Settings())
    assert [s.to_state() for s in first] == [s.to_state() for s in again]
    assert sum(len(s.parts()) for s in first) > 1


def test_chunks_number_items_by_their_position():
    assert [(first, len(items)) for first, items in chunks(iter(range(7)), 3)] == [(0, 3), (3, 3), (6, 1)]


def test_the_rate_limit_spreads_writes_over_time():
    clock = [0.0]
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    limit = WriteRateLimit(100, clock=lambda: clock[0], sleep=sleep)
    for _ in range(5):
        limit.spend(100)  # a second of burst, then one second per 100 units
    assert clock[0] == pytest.approx(4.0)
    assert limit.spent == 500

    with pytest.raises(ValueError):
        WriteRateLimit(0)


def test_a_file_is_committed_segment_by_segment_and_summarized():
    committed = []

    def commit(segment, source):
        committed.append((segment.first_sequence, source))
        return CommitResult(transactions=len(segment.parts()), duplicates=0, retries=0)

    images = [image(id=str(n), counter="orders", ts=COUNT_FROM - n * 60_000) for n in range(5)]
    images.append(image(id="bad", counter="#x", ts=COUNT_FROM))
    summary = BackfillSummary()
    seen = []
    backfill_file(
        "arn:export", "data/1.json.gz", images, count_from_ms=COUNT_FROM, settings=Settings(),
        commit=commit, limit=WriteRateLimit(1e9), summary=summary, on_items=seen.append,
    )
    assert summary.items == 6 and summary.counted == {"orders": 5}
    assert summary.rejected == {Reason.INVALID_COUNTER: 1}
    assert [first for first, _ in committed] == ["0"]
    # 5 minutes and 1 hour of orders, a minute and an hour of the rejection, one marker: 9 items, 2 WCU each.
    assert summary.write_units == 18
    assert seen == [6]


def test_write_units_count_every_bucket_and_marker_twice():
    segments, _ = fold_chunk([image(id="1", counter="a", ts=COUNT_FROM)], 0, COUNT_FROM, Settings())
    assert write_units(segments[0]) == 2 * 3  # minute, hour, marker


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="exports")
        yield client


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
