"""The stream reader against a scripted Streams API: shards, pages, iterators, order, checkpoints."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from botocore.exceptions import ClientError

from tally.local.delivery import DeliveryConfig
from tally.dynamo.stream import lambda_record
from tally.local.stream_reader import StreamReader

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/tally-events/stream/2026-11-22T00:00:00.000"
ARRIVAL = datetime(2026, 11, 22, 10, 0, 5, 250_000, tzinfo=UTC)


def boto3_record(sequence: int, arrival: datetime = ARRIVAL) -> dict:
    """A record as boto3's GetRecords returns it (arrival is a datetime, no eventSourceARN)."""
    return {
        "eventID": f"id-{sequence}",
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": arrival,
            "Keys": {"id": {"S": f"e{sequence}"}},
            "NewImage": {"id": {"S": f"e{sequence}"}, "counter": {"S": "c"}, "ts": {"N": "1"}},
            "SequenceNumber": f"{sequence:021d}",
            "SizeBytes": 40,
            "StreamViewType": "NEW_IMAGE",
        },
    }


class FakeStreams:
    """Shards with fixed records; open shards never end, closed ones do. Pages of at most ``Limit``."""

    def __init__(self, shards: dict[str, dict], describe_page: int = 100) -> None:
        self.shards = shards  # shard id -> {"parent": id|None, "records": [...], "closed": bool}
        self.describe_page = describe_page
        self.calls: list[tuple[str, dict]] = []
        self.expire_next_get = False

    def describe_stream(self, **request):
        self.calls.append(("describe_stream", request))
        ids = list(self.shards)
        start = ids.index(request["ExclusiveStartShardId"]) + 1 if "ExclusiveStartShardId" in request else 0
        page = ids[start : start + self.describe_page]
        shards = [{"ShardId": shard_id, **self._parent(shard_id)} for shard_id in page]
        description = {"StreamArn": request["StreamArn"], "Shards": shards}
        if start + self.describe_page < len(ids):
            description["LastEvaluatedShardId"] = page[-1]
        return {"StreamDescription": description}

    def _parent(self, shard_id: str) -> dict:
        parent = self.shards[shard_id]["parent"]
        return {"ParentShardId": parent} if parent else {}

    def get_shard_iterator(self, **request):
        self.calls.append(("get_shard_iterator", request))
        records = self.shards[request["ShardId"]]["records"]
        if request["ShardIteratorType"] == "TRIM_HORIZON":
            position = 0
        else:
            sequences = [r["dynamodb"]["SequenceNumber"] for r in records]
            position = sequences.index(request["SequenceNumber"]) + 1
        return {"ShardIterator": f"{request['ShardId']}|{position}"}

    def get_records(self, ShardIterator, Limit):
        self.calls.append(("get_records", {"ShardIterator": ShardIterator, "Limit": Limit}))
        if self.expire_next_get:
            self.expire_next_get = False
            raise ClientError({"Error": {"Code": "ExpiredIteratorException", "Message": "expired"}}, "GetRecords")
        shard_id, position = ShardIterator.split("|")
        shard = self.shards[shard_id]
        page = shard["records"][int(position) : int(position) + Limit]
        response = {"Records": page}
        end = int(position) + len(page)
        if not (shard["closed"] and end == len(shard["records"])):
            response["NextShardIterator"] = f"{shard_id}|{end}"
        return response


class Handler:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def __call__(self, event, context):
        self.events.append(event)
        return {}

    def sequences(self) -> list[int]:
        return [int(r["dynamodb"]["SequenceNumber"]) for e in self.events for r in e["Records"]]


def reader(streams, handler, **options) -> StreamReader:
    options.setdefault("config", DeliveryConfig(batch_size=100, window_seconds=1))
    return StreamReader(streams, ARN, handler, clock=lambda: ARRIVAL.timestamp(), **options)


def test_boto3_records_become_lambda_records():
    record = lambda_record(boto3_record(7), ARN)
    assert record["dynamodb"]["ApproximateCreationDateTime"] == pytest.approx(1795341605.25)
    assert record["eventSourceARN"] == ARN
    assert record["dynamodb"]["Keys"] == {"id": {"S": "e7"}}
    assert record["eventName"] == "INSERT"
    assert isinstance(boto3_record(7)["dynamodb"]["ApproximateCreationDateTime"], datetime)


def test_a_ttl_deletion_keeps_its_user_identity_spelt_as_lambda_spells_it():
    # GetRecords names the fields PrincipalId and Type; Lambda hands them over as principalId and type.
    removal = {**boto3_record(8), "eventName": "REMOVE"}
    removal["userIdentity"] = {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"}
    record = lambda_record(removal, ARN)
    assert record["userIdentity"] == {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    assert "userIdentity" not in lambda_record(boto3_record(9), ARN)


def test_pages_of_records_are_followed_through_next_shard_iterator():
    streams = FakeStreams({"s1": {"parent": None, "records": [boto3_record(i) for i in range(10)], "closed": False}})
    handler = Handler()
    shard_reader = reader(streams, handler, limit=3)
    shard_reader.run(until_idle=True, idle_polls=1, poll_interval=0)
    assert handler.sequences() == list(range(10))
    limits = {call[1]["Limit"] for call in streams.calls if call[0] == "get_records"}
    assert limits == {3}
    assert sum(1 for call in streams.calls if call[0] == "get_records") >= 4
    assert shard_reader.stats.records == 10


def test_parents_are_read_to_their_end_before_children_start():
    streams = FakeStreams(
        {
            "child": {"parent": "parent", "records": [boto3_record(i) for i in range(20, 25)], "closed": False},
            "parent": {"parent": None, "records": [boto3_record(i) for i in range(10)], "closed": True},
        },
        describe_page=1,  # forces DescribeStream pagination with ExclusiveStartShardId
    )
    handler = Handler()
    reader(streams, handler, limit=4).run(until_idle=True, idle_polls=1, poll_interval=0)
    assert handler.sequences() == [*range(10), *range(20, 25)]
    describes = [call[1] for call in streams.calls if call[0] == "describe_stream"]
    assert {"StreamArn": ARN, "ExclusiveStartShardId": "child"} in describes
    first_child_read = next(i for i, c in enumerate(streams.calls) if c[1].get("ShardId") == "child")
    last_parent_read = max(i for i, c in enumerate(streams.calls) if "parent|" in c[1].get("ShardIterator", ""))
    assert last_parent_read < first_child_read


def test_a_child_of_a_trimmed_parent_is_read_at_once():
    streams = FakeStreams({"child": {"parent": "gone", "records": [boto3_record(1)], "closed": False}})
    handler = Handler()
    reader(streams, handler).run(until_idle=True, idle_polls=1, poll_interval=0)
    assert handler.sequences() == [1]


def test_an_expired_iterator_resumes_after_the_last_record_read():
    streams = FakeStreams({"s1": {"parent": None, "records": [boto3_record(i) for i in range(6)], "closed": False}})
    handler = Handler()
    shard_reader = reader(streams, handler, limit=3)
    shard_reader.poll()
    streams.shards["s1"]["records"].extend(boto3_record(i) for i in range(6, 9))
    streams.expire_next_get = True
    shard_reader.run(until_idle=True, idle_polls=1, poll_interval=0)
    assert handler.sequences() == list(range(9))
    after = [c[1] for c in streams.calls if c[0] == "get_shard_iterator"][-1]
    assert after["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"
    assert after["SequenceNumber"] == f"{5:021d}"


def test_checkpoints_advance_on_final_invocations_and_a_new_reader_resumes_after_them():
    records = [boto3_record(i, ARRIVAL.replace(second=i)) for i in range(8)]
    streams = FakeStreams({"s1": {"parent": None, "records": records, "closed": False}})
    handler = Handler()
    first = reader(streams, handler, config=DeliveryConfig(batch_size=3, window_seconds=5))
    first.poll()  # window [0,5) is closed by the record at second 5; [5,10) is still open
    assert first.checkpoints == {"s1": f"{4:021d}"}
    first.close()
    assert first.checkpoints == {"s1": f"{7:021d}"}

    streams.shards["s1"]["records"].append(boto3_record(8, ARRIVAL.replace(second=12)))
    resumed_handler = Handler()
    reader(streams, resumed_handler, checkpoints=first.checkpoints).run(until_idle=True, idle_polls=1, poll_interval=0)
    assert resumed_handler.sequences() == [8]


def test_a_window_whose_end_has_passed_is_closed_without_waiting_for_records():
    streams = FakeStreams({"s1": {"parent": None, "records": [boto3_record(1)], "closed": False}})
    handler = Handler()
    now = [ARRIVAL.timestamp()]
    shard_reader = StreamReader(
        streams, ARN, handler, config=DeliveryConfig(window_seconds=60), clock=lambda: now[0]
    )
    shard_reader.poll()
    assert handler.events == []
    now[0] += 60
    shard_reader.poll()
    assert [e["isFinalInvokeForWindow"] for e in handler.events] == [True]


def test_stop_ends_a_following_reader_and_leaves_its_open_window_for_the_next_run():
    class StopsDuringTheFirstRead(FakeStreams):
        def get_records(self, **request):
            shard_reader.stop.set()  # as Ctrl-C would, while a read is under way
            return super().get_records(**request)

    streams = StopsDuringTheFirstRead({"s1": {"parent": None, "records": [boto3_record(1)], "closed": False}})
    handler = Handler()
    shard_reader = reader(streams, handler, config=DeliveryConfig(window_seconds=60))
    shard_reader.run(until_idle=False, poll_interval=0)
    assert handler.events == [] and shard_reader.open_records == 1 and shard_reader.checkpoints == {}


def test_a_drained_reader_waits_for_the_open_window_to_end_and_commits_it_then():
    records = [boto3_record(i, ARRIVAL.replace(second=i)) for i in range(3)]
    streams = FakeStreams({"s1": {"parent": None, "records": records, "closed": False}})
    handler = Handler()
    now = [ARRIVAL.replace(second=2, microsecond=500_000).timestamp()]
    waits = []

    def wait_and_see(seconds):
        waits.append(seconds)
        assert handler.events == []  # nothing committed before the window's end
        now[0] = ARRIVAL.replace(second=5).timestamp()  # the clock reaches the window's end while it waits

    shard_reader = StreamReader(streams, ARN, handler, config=DeliveryConfig(window_seconds=5), clock=lambda: now[0])
    shard_reader.run(until_idle=True, idle_polls=1, poll_interval=0.01, on_wait=wait_and_see)
    assert waits == [pytest.approx(2.5)]
    assert [e["isFinalInvokeForWindow"] for e in handler.events] == [True] and handler.sequences() == [0, 1, 2]
    assert shard_reader.checkpoints == {"s1": f"{2:021d}"}


def test_a_wait_lasts_at_most_one_window_length_whatever_the_clock_says():
    """A clock that does not move (or runs behind the stream's stamps) cannot hold the reader longer."""
    streams = FakeStreams({"s1": {"parent": None, "records": [boto3_record(1)], "closed": False}})
    handler = Handler()
    frozen = ARRIVAL.timestamp() - 86_400
    shard_reader = StreamReader(streams, ARN, handler, config=DeliveryConfig(window_seconds=1), clock=lambda: frozen)
    waits = []
    shard_reader.run(until_idle=True, idle_polls=1, poll_interval=0, on_wait=waits.append)
    assert waits == [1.0] and handler.sequences() == [1]
