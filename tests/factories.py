"""Event factories: DynamoDB stream records and Lambda events shaped exactly as Lambda delivers them."""

from __future__ import annotations

import itertools
from typing import Any

from boto3.dynamodb.types import TypeSerializer

from tally.core.commit import ReadRecords
from tally.core.overlaps import RecordsAgain

STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/tally-events/stream/2026-11-22T00:00:00.000"
SHARD_ID = "shardId-00000001700000000000-aaaaaaaa"

_serializer = TypeSerializer()
_sequence = itertools.count(100_000_000_000_000_000_000)


def next_sequence() -> str:
    return str(next(_sequence))


def image(**attributes: Any) -> dict[str, Any]:
    """A NewImage in DynamoDB JSON, via boto3's own serializer."""
    return {name: _serializer.serialize(value) for name, value in attributes.items()}


TTL_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}


def stream_record(
    new_image: dict[str, Any] | None = None,
    *,
    event_name: str = "INSERT",
    arrival_s: float = 1_795_000_000.0,
    sequence: str | None = None,
    keys: dict[str, Any] | None = None,
    old_image: dict[str, Any] | None = None,
    by_ttl: bool = False,
) -> dict[str, Any]:
    """One record of a DynamoDB stream as Lambda hands it to the function.

    With ``old_image`` the stream's view is NEW_AND_OLD_IMAGES; ``by_ttl`` signs it as a TTL deletion.
    """
    dynamodb: dict[str, Any] = {
        "ApproximateCreationDateTime": arrival_s,
        "Keys": keys or {"id": {"S": sequence or "k"}},
        "SequenceNumber": sequence or next_sequence(),
        "SizeBytes": 64,
        "StreamViewType": "NEW_IMAGE" if old_image is None else "NEW_AND_OLD_IMAGES",
    }
    if new_image is not None:
        dynamodb["NewImage"] = new_image
    if old_image is not None:
        dynamodb["OldImage"] = old_image
    identity = {"userIdentity": TTL_IDENTITY} if by_ttl else {}
    return {
        "eventID": "0f0e0d0c0b0a09080706050403020100",
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": dynamodb,
        "eventSourceARN": STREAM_ARN,
        **identity,
    }


def counter_record(counter: str, ts: Any, *, arrival_s: float | None = None, **kwargs: Any) -> dict[str, Any]:
    """An INSERT of an event item; arrival defaults to the event time (epoch ms given) itself."""
    if arrival_s is None:
        arrival_s = (ts / 1000) if isinstance(ts, int | float) else 1_795_000_000.0
    return stream_record(image(id=f"e-{next_sequence()}", counter=counter, ts=ts), arrival_s=arrival_s, **kwargs)


def one_invocation_window(records: list[dict[str, Any]]) -> dict[str, Any]:
    """A tumbling window that holds one invocation: it commits its own records."""
    return window_event(records, final=True)


def window_event(
    records: list[dict[str, Any]],
    *,
    state: dict[str, Any] | None = None,
    final: bool = False,
    start: str = "2026-11-22T10:00:00Z",
    end: str = "2026-11-22T10:01:00Z",
    shard_id: str = SHARD_ID,
) -> dict[str, Any]:
    """An invocation of a tumbling window, as Lambda sends it."""
    return {
        "Records": records,
        "window": {"start": start, "end": end},
        "state": state or {},
        "shardId": shard_id,
        "eventSourceARN": STREAM_ARN,
        "isFinalInvokeForWindow": final,
        "isWindowTerminatedEarly": False,
    }


class LambdaContext:
    """The attributes Powertools reads from Lambda's context object."""

    function_name = "tally-stream-handler"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tally-stream-handler"
    memory_limit_in_mb = 256
    aws_request_id = "00000000-0000-0000-0000-000000000000"
    log_group_name = "/aws/lambda/tally-stream-handler"
    log_stream_name = "local"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 60_000


def parse_one(record: dict[str, Any], settings: Any) -> Any:
    """The single outcome of a record under the classic rule (one counter per record)."""
    from tally.core.records import parse_record

    [outcome] = parse_record(record, settings)
    return outcome


def records_again(kept: list[dict[str, Any]], step: ReadRecords) -> RecordsAgain:
    """A ReadRecords step answered from a shard's records still in the stream (``kept``, in order), as the Streams
    API answers: the range at 1,000 records a page after an iterator, or None where it starts before them."""
    through = int(step.through)
    if step.first is None:  # from the trim horizon: the first records, up to ``at_most``
        selected = [r for r in kept if int(r["dynamodb"]["SequenceNumber"]) <= through][: step.at_most]
        return RecordsAgain(selected, requests=2)
    first = int(step.first)
    if not kept or int(kept[0]["dynamodb"]["SequenceNumber"]) > first:
        return RecordsAgain(None, "TrimmedDataAccessException: the range was trimmed", 1)
    selected = [r for r in kept if first <= int(r["dynamodb"]["SequenceNumber"]) <= through]
    return RecordsAgain(selected, requests=1 + len(selected) // 1000 + 1)
