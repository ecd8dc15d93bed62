"""A shard's records read again through the DynamoDB Streams API, in the shape Lambda hands them over.

The commit reads a range again only to split an overlap (core/overlaps.py): the
records a tumbling window carried as sums, from the segment's first record
through its last carried one. ``GetShardIterator`` at the first record, then
``GetRecords`` until the range's last record: the function's role already reads
the stream for its event source mapping. A range no longer in the stream
(``TrimmedDataAccessException``, a shard or stream gone, records that start past
the first asked for, numbers that are no sequence numbers) answers None with the reason, so that the item is left
unresolved and the shard moves on; anything else (throttling past the client's
retries, a network failure) is raised, and the invocation is tried again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError, ParamValidationError

from tally.core.commit import ReadRecords
from tally.core.overlaps import RecordsAgain
from tally.dynamo.calls import describe, error_code

logger = logging.getLogger(__name__)

GET_RECORDS_LIMIT = 1000  # the Streams API maximum
# Records that are gone for good: the range cannot be read again, whatever the tries.
GONE_CODES = frozenset({"TrimmedDataAccessException", "ResourceNotFoundException"})
# GetRecords calls one range may take: an open shard answers empty pages now and then; a window's
# records fit in far fewer (a 900 s window of 1,000 records a second is 900 pages).
MAX_READ_REQUESTS = 2_000
# Requests a read of a shard's first records (from its trim horizon) may take before it answers with what it has.
MAX_START_REQUESTS = 20


def lambda_record(record: Mapping[str, Any], stream_arn: str) -> dict[str, Any]:
    """boto3's stream record -> Lambda's: arrival as epoch seconds, the stream's ARN on the record,
    the user identity of a TTL deletion spelt as Lambda spells it (``type``, ``principalId``)."""
    stream = dict(record["dynamodb"])
    arrival = stream.get("ApproximateCreationDateTime")
    if isinstance(arrival, datetime):
        stream["ApproximateCreationDateTime"] = arrival.timestamp()
    converted = {key: value for key, value in record.items() if key != "dynamodb"}
    converted["dynamodb"] = stream
    converted["eventSourceARN"] = stream_arn
    identity = record.get("userIdentity")
    if isinstance(identity, dict):
        converted["userIdentity"] = {"type": identity.get("Type"), "principalId": identity.get("PrincipalId")}
    return converted


class ShardRecords:
    """Reads ranges of a shard again, over a boto3 ``dynamodbstreams`` client (standard retries: it retries
    the Streams API's LimitExceededException, which the mapping's own poller shares)."""

    def __init__(self, client: Any, limit: int = GET_RECORDS_LIMIT) -> None:
        self.client = client
        self.limit = limit

    def read(self, step: ReadRecords) -> RecordsAgain:
        """The writer's records from ``step.first`` through ``step.through``, or None with the reason."""
        stream_arn, shard_id = step.writer.stream_arn, step.writer.shard_id
        if not stream_arn or not shard_id:
            return RecordsAgain(None, "the event names no stream to read again")
        if step.first is None:
            return self.read_start(step, stream_arn, shard_id)
        first, through = int(step.first), int(step.through)
        records: list[dict[str, Any]] = []
        requests = 0
        position = ("AT_SEQUENCE_NUMBER", step.first)
        try:
            iterator: str | None = None
            while requests < MAX_READ_REQUESTS:
                if iterator is None:
                    kind, sequence = position
                    requests += 1
                    response = self.client.get_shard_iterator(
                        StreamArn=stream_arn, ShardId=shard_id, ShardIteratorType=kind, SequenceNumber=sequence
                    )
                    iterator = response["ShardIterator"]
                requests += 1
                try:
                    page = self.client.get_records(ShardIterator=iterator, Limit=self.limit)
                except ClientError as error:
                    if error_code(error) != "ExpiredIteratorException":
                        raise
                    iterator = None  # again after the last record read
                    continue
                for record in page.get("Records", []):
                    sequence = int(record["dynamodb"]["SequenceNumber"])
                    if not records and sequence != first:
                        return RecordsAgain(None, f"the shard's first record at or after {first} is {sequence}: "
                                            "the range was trimmed", requests)
                    if sequence > through:
                        return RecordsAgain(records, requests=requests)
                    records.append(lambda_record(record, stream_arn))
                    position = ("AFTER_SEQUENCE_NUMBER", str(sequence))
                if records and int(records[-1]["dynamodb"]["SequenceNumber"]) == through:
                    return RecordsAgain(records, requests=requests)
                iterator = page.get("NextShardIterator")
                if iterator is None:
                    return RecordsAgain(None, f"shard {shard_id} ended before record {through}", requests)
        except ParamValidationError as error:  # not sequence numbers the Streams API takes: no such records
            return RecordsAgain(None, str(error).replace("\n", " "), requests)
        except ClientError as error:
            if error_code(error) not in GONE_CODES:
                raise
            logger.warning("records %s..%s of %s cannot be read again: %s", first, through, shard_id, describe(error))
            return RecordsAgain(None, describe(error), requests)
        return RecordsAgain(None, f"{MAX_READ_REQUESTS} requests did not reach record {through}", requests)

    def read_start(self, step: ReadRecords, stream_arn: str, shard_id: str) -> RecordsAgain:
        """The shard's first records, from its trim horizon through ``step.through``: ``step.at_most`` of them at
        most, and what MAX_START_REQUESTS requests give (an open shard may answer empty pages first)."""
        through, at_most = int(step.through), step.at_most or self.limit
        records: list[dict[str, Any]] = []
        requests = 1
        try:
            response = self.client.get_shard_iterator(StreamArn=stream_arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
            iterator: str | None = response["ShardIterator"]
            while iterator is not None and requests < MAX_START_REQUESTS and len(records) < at_most:
                requests += 1
                page = self.client.get_records(ShardIterator=iterator, Limit=min(self.limit, at_most - len(records)))
                for record in page.get("Records", []):
                    if int(record["dynamodb"]["SequenceNumber"]) > through:
                        return RecordsAgain(records, requests=requests)
                    records.append(lambda_record(record, stream_arn))
                iterator = page.get("NextShardIterator")
        except ClientError as error:
            if error_code(error) not in GONE_CODES:
                raise
            return RecordsAgain(None, describe(error), requests)
        return RecordsAgain(records, requests=requests)
