"""Where moto and DynamoDB Local disagree, which one does what DynamoDB documents, pinned.

Each test runs the same requests on both servers (moto's with
``tally.local.moto_fixes`` installed, as every tally tool runs it) and states
what DynamoDB's documentation says; where one server departs from it, the test
pins that departure too, so a server release that changes it shows up here.
docs/design.md ("Running locally") lists these differences and what tally
does about each.
"""

from __future__ import annotations

import time
import uuid
from decimal import Decimal

import pytest
from backends import BACKENDS
from botocore.exceptions import ClientError

from tally.core.records import CounterEvent, Reason, Rejection, parse_record
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.dynamo.tables import create_tables
from tally import exports
from tally.local.dynamodb_local import DynamoDBLocalServer
from tally.dynamo.stream import lambda_record

pytestmark = [pytest.mark.server, pytest.mark.parametrize("backend", BACKENDS)]

NEW_AND_OLD = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}


def clients(server) -> tuple:
    return server.client("dynamodb"), server.client("dynamodbstreams")


def new_table(dynamodb, *, stream: bool = False, range_key: bool = False) -> str:
    name = f"probe-{uuid.uuid4().hex[:10]}"
    keys = [("pk", "HASH")] + ([("sk", "RANGE")] if range_key else [])
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": a, "KeyType": k} for a, k in keys],
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a, _ in keys],
        BillingMode="PAY_PER_REQUEST",
        **({"StreamSpecification": NEW_AND_OLD} if stream else {}),
    )
    return name


def stream_records(dynamodb, streams, table: str) -> list[dict]:
    arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    records = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")
        iterator = iterator["ShardIterator"]
        while iterator:
            page = streams.get_records(ShardIterator=iterator, Limit=1000)
            records += page["Records"]
            iterator = page.get("NextShardIterator") if page["Records"] else None
    return records


def key(name: str) -> dict:
    return {"pk": {"S": name}}


def add(dynamodb, table: str, item: str, amount: str, **extra) -> dict:
    return dynamodb.update_item(
        TableName=table, Key=key(item), UpdateExpression="ADD n :a",
        ExpressionAttributeValues={":a": {"N": amount}}, ReturnValues="UPDATED_NEW", **extra,
    )


# --- Conditional writes: what tally's exactly-once commit reads -------------------------------------------


def test_a_failed_condition_returns_the_item_as_it_was(backend, local_server):
    """Documented (UpdateItem, ReturnValuesOnConditionCheckFailure=ALL_OLD): the item comes back with the
    ConditionalCheckFailedException; none for a missing item. Both servers do so; tally's commit relies on it."""
    dynamodb, _ = clients(local_server)
    table = new_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={**key("a"), "w": {"B": b"\x80\x00"}})
    later_watermark = {"TableName": table, "UpdateExpression": "SET w = :p", "ConditionExpression": "w < :p",
                       "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    with pytest.raises(ClientError) as refused:  # binary compares as unsigned bytes: 0x80 > 0x7f
        dynamodb.update_item(Key=key("a"), ExpressionAttributeValues={":p": {"B": b"\x7f\xff"}}, **later_watermark)
    assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert refused.value.response["Item"] == {**key("a"), "w": {"B": b"\x80\x00"}}
    dynamodb.update_item(Key=key("a"), ExpressionAttributeValues={":p": {"B": b"\x80\x00\x00"}}, **later_watermark)
    with pytest.raises(ClientError) as missing:
        dynamodb.update_item(Key=key("none"), ExpressionAttributeValues={":p": {"B": b"\x01"}},
                             **{**later_watermark, "ConditionExpression": "attribute_exists(w)"})
    assert "Item" not in missing.value.response


def test_a_cancelled_transaction_names_each_reason_with_the_item(backend, local_server):
    """Documented (TransactWriteItems): CancellationReasons, one per action in order, ``None`` for the ones
    that did not fail, the item for a failed condition that asked for ALL_OLD."""
    dynamodb, _ = clients(local_server)
    table = new_table(dynamodb)
    dynamodb.put_item(TableName=table, Item={**key("a"), "n": {"N": "1"}})
    with pytest.raises(ClientError) as cancelled:
        dynamodb.transact_write_items(TransactItems=[
            {"Update": {"TableName": table, "Key": key("a"), "UpdateExpression": "ADD n :one",
                        "ConditionExpression": "attribute_not_exists(n)", "ExpressionAttributeValues": {":one": {"N": "1"}},
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
            {"Put": {"TableName": table, "Item": {**key("b"), "n": {"N": "1"}}}},
        ])
    reasons = cancelled.value.response["CancellationReasons"]
    assert [reason["Code"] for reason in reasons] == ["ConditionalCheckFailed", "None"]
    assert reasons[0]["Item"] == {**key("a"), "n": {"N": "1"}}
    assert dynamodb.get_item(TableName=table, Key=key("b")).get("Item") is None


# --- Numbers: 38 significant digits, magnitudes 1E-130 to 9.99...E+125 ------------------------------------


def test_sums_are_exact_to_38_digits_and_refused_beyond(backend, local_server):
    """Documented (Naming rules and data types): up to 38 digits of precision, exceeding this is an exception;
    a result that drops only trailing zeros (99...9 + 1 = 1E+38) is exact. moto adds in 28 digits and cannot
    read "1E-8": moto_fixes adds as DynamoDB does. Both refuse with a ValidationException; the messages differ
    (DynamoDB itself says "Number overflow" for an inexact sum, DynamoDB Local "precision up to 38 digits")."""
    dynamodb, _ = clients(local_server)
    table = new_table(dynamodb)
    big = "1234567890123456789012345678.9012345678"
    assert add(dynamodb, table, "exact", big)["Attributes"]["n"] == {"N": big}
    assert add(dynamodb, table, "exact", "0.0000000001")["Attributes"]["n"] == {"N": big[:-1] + "9"}
    assert Decimal(add(dynamodb, table, "exponent", "1E-8")["Attributes"]["n"]["N"]) == Decimal("0.00000001")
    assert Decimal(add(dynamodb, table, "exponent", "1E+2")["Attributes"]["n"]["N"]) == Decimal("100.00000001")
    add(dynamodb, table, "nines", "9" * 38)
    assert add(dynamodb, table, "nines", "1")["Attributes"]["n"] == {"N": "1" + "0" * 38}
    top = "9.9999999999999999999999999999999999999E+125"
    assert Decimal(add(dynamodb, table, "top", top)["Attributes"]["n"]["N"]) == Decimal(top)
    for item, amount in (("nines", "1"), ("exact", "0.00000000001"), ("top", "1E+125"), ("tiny", "1E-131")):
        with pytest.raises(ClientError) as refused:
            add(dynamodb, table, item, amount)
        assert refused.value.response["Error"]["Code"] == "ValidationException", (item, amount)
    with pytest.raises(ClientError) as inexact:
        add(dynamodb, table, "exact", "0.00000000001")
    expected = "only supports precision up to 38 digits" if backend == "dynamodb-local" else "Number overflow"
    assert expected in inexact.value.response["Error"]["Message"]


def test_a_number_of_more_than_38_digits_is_refused_by_dynamodb_local_only(backend, local_server):
    """Documented: exceeding 38 digits is an exception. moto stores the value whole (tally never writes one:
    amounts.py accepts 26 digits, and a bucket's sum of them stays within 38)."""
    dynamodb, _ = clients(local_server)
    table = new_table(dynamodb)
    put = {"TableName": table, "Item": {**key("long"), "n": {"N": "1" * 40}}}
    if backend == "dynamodb-local":
        with pytest.raises(ClientError, match="precision up to 38 digits"):
            dynamodb.put_item(**put)
    else:
        dynamodb.put_item(**put)
        assert dynamodb.get_item(TableName=table, Key=key("long"))["Item"]["n"] == {"N": "1" * 40}


def test_updated_new_returns_only_the_updated_attributes(backend, local_server):
    """Documented (ReturnValues=UPDATED_NEW): only the updated attributes. moto adds the key attributes
    when the update creates the item. tally asks for no return values."""
    dynamodb, _ = clients(local_server)
    table = new_table(dynamodb)
    returned = add(dynamodb, table, "new", "1")["Attributes"]
    assert returned == ({"n": {"N": "1"}} if backend == "dynamodb-local" else {**key("new"), "n": {"N": "1"}})
    assert add(dynamodb, table, "new", "1")["Attributes"] == {"n": {"N": "2"}}


# --- Batches ------------------------------------------------------------------------------------------


def test_a_batch_writing_one_item_twice_is_refused_by_dynamodb_local_only(backend, local_server):
    """Documented (BatchWriteItem): a ValidationException when a batch holds several operations on one
    item. moto applies both. tally's writers put each item once per batch (write_histories writes an
    item's k-th change in the k-th round), which the jobs demo on DynamoDB Local checks."""
    dynamodb, _ = clients(local_server)
    table = new_table(dynamodb)
    puts = [{"PutRequest": {"Item": {**key("twice"), "v": {"N": v}}}} for v in ("1", "2")]
    if backend == "dynamodb-local":
        with pytest.raises(ClientError, match="duplicates"):
            dynamodb.batch_write_item(RequestItems={table: puts})
    else:
        dynamodb.batch_write_item(RequestItems={table: puts})
        assert dynamodb.get_item(TableName=table, Key=key("twice"))["Item"]["v"] == {"N": "2"}


def test_a_query_page_holds_about_a_megabyte_and_paging_reads_every_item(backend, local_server):
    """Documented (Paginating query results): pages of 1 MB or less, LastEvaluatedKey until the end. moto
    stops before the item that would cross 1 MB; DynamoDB Local includes it (a page of 1.03 MB). tally's
    range plan follows LastEvaluatedKey, so both answer every item."""
    dynamodb, _ = clients(local_server)
    table = new_table(dynamodb, range_key=True)
    for index in range(5):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": "p"}, "sk": {"S": f"{index:02d}"}, "b": {"S": "y" * 350 * 1024}})
    query = {"TableName": table, "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "p"}}}
    first = dynamodb.query(**query)
    assert first["Count"] == (3 if backend == "dynamodb-local" else 2) and "LastEvaluatedKey" in first
    pages = list(dynamodb.get_paginator("query").paginate(**query))
    assert [item["sk"]["S"] for page in pages for item in page["Items"]] == ["00", "01", "02", "03", "04"]


# --- Capacity: the bench counts by DynamoDB's rules --------------------------------------------------------


def test_consumed_capacity_follows_dynamodbs_rules_on_dynamodb_local_but_for_transactions_of_several_items(
    backend, local_server
):
    """Documented (capacity units): a write costs a unit per started KB of the larger of the item before
    and after, twice inside a transaction, for every item of it; a strongly consistent read a unit per
    started 4 KB, an eventually consistent one half. DynamoDB Local charges so, except that a transaction
    of several items of the same cost is charged as one (three small items: 2 units, not 6); moto's figures
    follow other rules. So the bench meters requests itself (bench/cost.py) and checks its meter against
    DynamoDB Local where it is right (tests/bench/test_bench_stored.py)."""
    from bench.cost import item_size, write_units

    dynamodb, _ = clients(local_server)
    table = new_table(dynamodb)
    item = {**key("kb3"), "big": {"S": "x" * 3000}}
    dynamodb.put_item(TableName=table, Item=item)

    def units(call, **request) -> float:
        consumed = call(TableName=table, ReturnConsumedCapacity="TOTAL", **request)["ConsumedCapacity"]
        return consumed["CapacityUnits"]

    def transaction_units(*actions) -> list[float]:
        response = dynamodb.transact_write_items(TransactItems=list(actions), ReturnConsumedCapacity="TOTAL")
        return [entry["CapacityUnits"] for entry in response["ConsumedCapacity"]]

    update = {"Key": key("kb3"), "UpdateExpression": "ADD c :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}
    figures = (
        units(dynamodb.update_item, **update),
        units(dynamodb.get_item, Key=key("kb3"), ConsistentRead=True),
        units(dynamodb.get_item, Key=key("kb3")),
    )
    one_item = transaction_units({"Update": {"TableName": table, **update}})
    small = [{"Put": {"TableName": table, "Item": key(name)}} for name in ("a", "b", "c")]
    three_items = transaction_units(*small)
    rules = (write_units(item_size(item)), 1.0, 0.5)
    documented = [3 * write_units(item_size(key("a")), transactional=True)]
    assert documented == [6]
    if backend == "dynamodb-local":
        assert figures == rules == (3, 1.0, 0.5)
        assert one_item == [write_units(item_size(item), transactional=True)]
        assert three_items == [2.0]
    else:
        assert figures != rules and one_item == three_items == []


def test_a_bucket_updates_units_measure_its_watermarks_on_dynamodb_local_and_are_half_a_unit_on_moto(
    backend, local_server
):
    """tally's bucket updates ask for the units they consumed (ReturnConsumedCapacity=TOTAL) to tell how large
    the items grow with the shards that write them (tally.core.item_growth). Documented: a unit per started KB
    of the larger of the item before and after. DynamoDB Local answers so: an hour item costs a unit more every
    51 shards that wrote it (a watermark of 20 bytes each), 5 units (past ITEM_GROWTH_KB) from 204 shards on.
    moto answers every update 0.5."""
    from bench.cost import item_size, write_units
    from moto_tables import no_sleep_backoff

    from tally.core.buckets import Bucket
    from tally.core.commit import Writer
    from tally.core.segments import Segment
    from tally.dynamo.counts_table import CountsTable

    dynamodb, _ = clients(local_server)
    suffix = uuid.uuid4().hex[:8]
    create_tables(dynamodb, f"events-{suffix}", f"counts-{suffix}")
    table = CountsTable(dynamodb, f"counts-{suffix}", Settings(counts_table=f"counts-{suffix}"), backoff=no_sleep_backoff)
    hour = Bucket.of_hour(int(time.time()) // 3600)  # DynamoDB Local's TTL process deletes buckets of the past
    measured = {}
    for shard in range(1, 301):
        first = f"{100_000_000_000_000_000_000 + shard:021d}"
        segment = Segment(first, int(time.time() * 1000), first, 1, {("c", hour): 1})
        measured[shard] = table.commit(segment, Writer.of_shard("arn:stream", f"shardId-{shard:08d}")).write_units
    stored = dynamodb.get_item(TableName=f"counts-{suffix}", Key={"pk": {"S": "c"}, "sk": {"S": hour.sort_key}})["Item"]
    assert sum(name.startswith("~") for name in stored) == 300
    if backend == "dynamodb-local":
        steps = {shards: units for shards, units in measured.items() if measured.get(shards - 1) != units}
        assert steps == {1: 1.0, 50: 2.0, 101: 3.0, 152: 4.0, 204: 5.0, 255: 6.0}
        assert measured[300] == write_units(item_size(stored))
    else:
        assert set(measured.values()) == {0.5}


# --- Streams -------------------------------------------------------------------------------------------


def test_a_write_that_changes_nothing_streams_nothing_on_dynamodb_local_only(backend, local_server):
    """Documented (Change data capture for DynamoDB Streams): a record only when the item changes, one
    INSERT for an UpdateItem that creates the item. moto streams a MODIFY for an identical re-put, two
    INSERTs for an UpdateItem on a new key and a MODIFY for an update that changes nothing; tally's
    generator only puts, and a put of a new image is a real change."""
    dynamodb, streams = clients(local_server)
    table = new_table(dynamodb, stream=True)
    for _ in range(2):
        dynamodb.put_item(TableName=table, Item={**key("reput"), "v": {"N": "1"}})
    add(dynamodb, table, "updated", "1")
    dynamodb.update_item(TableName=table, Key=key("updated"), UpdateExpression="SET n = n")
    kinds = [(record["eventName"], record["dynamodb"]["Keys"]["pk"]["S"]) for record in stream_records(dynamodb, streams, table)]
    documented = [("INSERT", "reput"), ("INSERT", "updated")]
    moto = [("INSERT", "reput"), ("MODIFY", "reput"), ("INSERT", "updated"), ("INSERT", "updated"), ("MODIFY", "updated")]
    assert kinds == (documented if backend == "dynamodb-local" else moto)


def test_stream_records_carry_what_tally_reads(backend, local_server):
    """Documented (StreamRecord): ApproximateCreationDateTime in epoch seconds, rounded down to the second;
    sequence numbers that order a shard's records. DynamoDB Local rounds arrivals down to the minute, moto
    keeps milliseconds: tally reads either (windows and the late rule floor them). Region and account in
    the ARN are DynamoDB Local's own (ddblocal, 000000000000)."""
    dynamodb, streams = clients(local_server)
    table = new_table(dynamodb, stream=True)
    for index in range(5):
        dynamodb.put_item(TableName=table, Item={**key(f"r{index}"), "v": {"N": str(index)}})
    records = stream_records(dynamodb, streams, table)
    arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    converted = [lambda_record(record, arn) for record in records]
    arrivals = [record["dynamodb"]["ApproximateCreationDateTime"] for record in converted]
    sequence_numbers = [int(record["dynamodb"]["SequenceNumber"]) for record in converted]
    assert sequence_numbers == sorted(set(sequence_numbers)) and len(records) == 5
    assert all(abs(arrival - time.time()) < 120 for arrival in arrivals)
    assert {record["eventName"] for record in converted} == {"INSERT"}
    if backend == "dynamodb-local":
        assert all(arrival % 60 == 0 for arrival in arrivals)
        assert arn.startswith("arn:aws:dynamodb:ddblocal:000000000000:table/")
    else:
        assert any(arrival % 1 for arrival in arrivals)  # milliseconds
        assert arn.startswith(f"arn:aws:dynamodb:us-east-1:123456789012:table/{table}/stream/")


@pytest.fixture
def fresh_server(backend, request):
    """A server of the backend with no tables of other tests: DynamoDB Local's TTL process takes minutes
    to reach a table once a few dozen tables have TTL on, so the TTL test gets one of its own."""
    if backend == "moto":
        yield request.getfixturevalue("shared_moto_server")
        return
    with DynamoDBLocalServer() as server:
        yield server


def test_ttl_deletions_are_signed_as_documented_by_neither_server(backend, fresh_server):
    """Documented (TTL and DynamoDB Streams): the TTL process deletes expired items and streams each as a
    REMOVE whose userIdentity is the service dynamodb.amazonaws.com. moto has no TTL process (moto_fixes
    plays it for the jobs demo and the tests); DynamoDB Local's deletes within seconds (on a server with few tables) but streams the
    deletion as eventName UNKNOWN_TO_SDK_VERSION, without userIdentity: tally skips such a record as a kind
    no rule counts, so a "deletedBy": "ttl" rule cannot count it there."""
    dynamodb, streams = clients(fresh_server)
    table = new_table(dynamodb, stream=True)
    dynamodb.update_time_to_live(TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiresAt"})
    now = int(time.time())
    dynamodb.put_item(TableName=table, Item={**key("due"), "status": {"S": "placed"}, "expiresAt": {"N": str(now - 60)}})
    dynamodb.put_item(TableName=table, Item={**key("later"), "expiresAt": {"N": str(now + 3600)}})
    deadline = time.monotonic() + (60 if backend == "dynamodb-local" else 1)
    while dynamodb.get_item(TableName=table, Key=key("due"), ConsistentRead=True).get("Item") and time.monotonic() < deadline:
        time.sleep(0.5)
    left = {item["pk"]["S"] for item in dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]}
    removals = [record for record in stream_records(dynamodb, streams, table) if record["dynamodb"]["Keys"] == key("due")][1:]
    if backend == "moto":
        assert left == {"due", "later"} and removals == []
        return
    assert left == {"later"}
    [removal] = removals
    assert removal["eventName"] == "UNKNOWN_TO_SDK_VERSION" and "userIdentity" not in removal
    assert removal["dynamodb"]["OldImage"]["status"] == {"S": "placed"}
    rules = parse_rules('[{"name": "expired", "counter": "expired/{status}", "on": "REMOVE", "deletedBy": "ttl", "time": "@arrival"}]')
    arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    [outcome] = parse_record(lambda_record(removal, arn), Settings(rules=rules))
    assert not isinstance(outcome, CounterEvent)
    assert isinstance(outcome, Rejection) and outcome.reason is Reason.NOT_INSERT


# --- Operations DynamoDB Local does not have -----------------------------------------------------------


def test_backups_and_exports_to_s3_are_moto_only(backend, local_server):
    """DynamoDB has point-in-time recovery and exports to S3; DynamoDB Local has neither (UnknownOperation).
    tally's tables are created either way (create_tables goes without PITR there); the adoption demo,
    which backfills from an export, runs on moto only."""
    dynamodb, _ = clients(local_server)
    suffix = uuid.uuid4().hex[:8]
    create_tables(dynamodb, f"events-{suffix}", f"counts-{suffix}")
    arn = dynamodb.describe_table(TableName=f"events-{suffix}")["Table"]["TableArn"]
    if backend == "moto":
        status = dynamodb.describe_continuous_backups(TableName=f"events-{suffix}")["ContinuousBackupsDescription"]
        assert status["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
        return
    with pytest.raises(ClientError, match="UnknownOperation"):
        dynamodb.describe_continuous_backups(TableName=f"events-{suffix}")
    with pytest.raises(ClientError, match="UnknownOperation"):
        exports.start_export(dynamodb, arn, "bucket", "prefix", int(time.time() * 1000))


def test_an_iterator_for_a_shard_the_stream_lacks_is_refused_as_not_found_by_dynamodb_local_only(backend, local_server):
    """Documented (GetShardIterator): ResourceNotFoundException for a shard that does not exist (one gone with its
    records). moto's server fails the request with an internal error instead, which botocore retries and then
    raises: reading again from a shard gone would fail the invocation there instead of leaving its items
    unresolved (dynamo/stream.py)."""
    dynamodb, streams = clients(local_server)
    table = new_table(dynamodb, stream=True)
    arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    request = {"StreamArn": arn, "ShardId": "shardId-00000001700000000000-00000000",
               "ShardIteratorType": "AT_SEQUENCE_NUMBER", "SequenceNumber": "1" * 21}
    with pytest.raises(ClientError) as refused:
        streams.get_shard_iterator(**request)
    code = refused.value.response["Error"]["Code"]
    assert code == ("ResourceNotFoundException" if backend == "dynamodb-local" else "500")
