"""The stream function's entry point on moto: environment, logs and metrics."""

import json
import time

import boto3
import pytest

from tally.core.directory import partition_of

from moto_tables import COUNTS, EVENTS, read_counts
from factories import STREAM_ARN, LambdaContext, counter_record, image, stream_record, window_event
from botocore.exceptions import ClientError

from tally.functions import stream_handler
from tally.core.tables import UNRESOLVED_PARTITION
from tally.dynamo.stream import lambda_record
from tally.dynamo.counts_table import CountsTable
from tally.core.units import HOUR_MS, MINUTE_MS

T0 = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS


def emitted(capsys):
    """The JSON lines the handler printed: Powertools log records and EMF metric blobs."""
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def test_the_handler_counts_a_window_and_returns_its_state(lambda_handler, dynamodb):
    response = lambda_handler(window_event([counter_record("c", T0)]), LambdaContext())
    assert response["state"]["segment"]["records"] == 1
    response = lambda_handler(window_event([], state=response["state"], final=True), LambdaContext())
    assert response == {"state": {}}
    assert read_counts(dynamodb, "c") == {"M#2026-11-18T11:00": 1, "H#2026-11-18T11": 1}


def test_the_handler_logs_a_summary_and_each_rejection_with_its_reason(lambda_handler, caplog):
    records = [counter_record("c", T0), stream_record(image(id="x", counter="c", ts="never"), arrival_s=T0 / 1000)]
    lambda_handler(window_event(records, final=True), LambdaContext())
    rejected = [r for r in caplog.records if r.getMessage() == "record rejected"]
    assert [(r.reason, r.levelname) for r in rejected] == [("invalid_time", "WARNING")]
    [summary] = [r for r in caplog.records if r.getMessage() == "invocation done"]
    assert (summary.counted, summary.rejected, summary.bucket_updates) == (1, 1, 4)  # c's and the rejection's minute and hour
    assert summary.rejected_by_reason == {"invalid_time": 1}


def test_the_handler_publishes_embedded_metrics_with_rejections_by_reason(lambda_handler, capsys):
    records = [stream_record(image(id="x", counter="#bad", ts=T0), arrival_s=T0 / 1000)] * 2
    lambda_handler(window_event(records, final=True), LambdaContext())
    blobs = [line for line in emitted(capsys) if "_aws" in line]
    totals = next(blob for blob in blobs if "RecordsCounted" in blob)
    assert totals["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Tally"
    assert totals["service"] == "tally"
    assert (totals["RecordsCounted"], totals["RecordsRejected"], totals["BucketUpdates"]) == ([0], [2], [2])
    by_reason = next(blob for blob in blobs if blob.get("reason") == "invalid_counter")
    assert by_reason["RecordsRejected"] == [2]
    assert by_reason["service"] == "tally"
    assert sorted(by_reason["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) == ["reason", "service"]


@pytest.mark.filterwarnings("ignore:No application metrics to publish")  # it fails before counting anything
def test_a_bad_setting_fails_the_invocation_loudly(lambda_handler, monkeypatch):
    monkeypatch.setenv("TALLY_MAX_CLOCK_SKEW_SECONDS", "soon")
    stream_handler.counts_table.cache_clear()
    with pytest.raises(ValueError, match="TALLY_MAX_CLOCK_SKEW_SECONDS"):
        lambda_handler(window_event([]), LambdaContext())


def test_disabled_metrics_print_nothing_even_for_rejections(lambda_handler, capsys, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    records = [stream_record(image(id="x", counter="#bad", ts=T0), arrival_s=T0 / 1000)]
    lambda_handler(window_event(records, final=True), LambdaContext())
    assert [line for line in emitted(capsys) if "_aws" in line] == []


def test_a_discarded_window_state_is_logged_as_an_error_and_published_as_a_metric(lambda_handler, capsys, caplog):
    stream_handler.metrics.clear_metrics()  # an earlier test with metrics disabled leaves its values behind
    state = {"segment": {"v": 99, "first": "101", "last": "109", "records": 9}}
    response = lambda_handler(window_event([counter_record("c", T0)], state=state, final=True), LambdaContext())
    assert response == {"state": {}}
    [logged] = [r for r in caplog.records if r.getMessage() == "window state discarded"]
    assert logged.levelname == "ERROR" and "9 records from sequence 101 to 109" in logged.detail
    totals = next(blob for blob in emitted(capsys) if "WindowStatesDiscarded" in blob)
    assert (totals["WindowStatesDiscarded"], totals["RecordsCounted"]) == ([1], [1])


def events_in_the_stream(dynamodb, counter: str, count: int) -> tuple[str, str, list[dict]]:
    """``count`` events of ``counter`` put into moto's events table, and the records its stream holds for them, as
    Lambda hands them over: the stream's ARN, the shard and the records."""
    for n in range(count):  # stamped at the start of this minute: moto's stream says they arrive now
        ts = int(time.time() * 1000) // MINUTE_MS * MINUTE_MS
        dynamodb.put_item(TableName=EVENTS, Item={"id": {"S": f"e{n}"}, "counter": {"S": counter}, "ts": {"N": str(ts)}})
    streams = boto3.client("dynamodbstreams", region_name="us-east-1")
    arn = dynamodb.describe_table(TableName=EVENTS)["Table"]["LatestStreamArn"]
    [shard] = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")
    records = streams.get_records(ShardIterator=iterator["ShardIterator"])["Records"]
    return arn, shard["ShardId"], [lambda_record(record, arn) for record in records]


def test_an_overlap_among_carried_records_is_split_on_the_records_read_again_from_the_stream(lambda_handler, dynamodb, caplog):
    """A reader committed the first two records as a window of their own; another carried them in its window state
    with a third: the handler reads the three again from the stream and sends each item exactly the rest."""
    arn, shard, records = events_in_the_stream(dynamodb, "c", 4)
    event = lambda batch, **kw: {**window_event(batch, **kw), "eventSourceARN": arn, "shardId": shard}  # noqa: E731
    lambda_handler(event(records[:2], final=True), LambdaContext())
    carried = lambda_handler(event(records[:3]), LambdaContext())["state"]
    lambda_handler(event(records[3:], state=carried, final=True), LambdaContext())
    counts = read_counts(dynamodb, "c")
    assert sorted(counts.values()) == [4, 4] and sorted(key[0] for key in counts) == ["H", "M"]
    done = [r for r in caplog.records if r.getMessage() == "invocation done"][-1]
    assert (done.overlaps_read, done.updates_resumed, done.unresolved) == (1, 2, 0)
    assert done.stream_requests >= 2  # GetShardIterator, then GetRecords


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_an_overlap_the_stream_no_longer_holds_is_left_unresolved_and_the_shard_moves_on(lambda_handler, dynamodb, capsys, caplog):
    """The same cuts over records no stream holds any more (trimmed): the invocation succeeds, the items get what
    they surely had not taken and a mark, the error log and the metric name them."""
    records = [counter_record("c", T0 + n) for n in range(4)]
    gone = STREAM_ARN.replace("table/tally-events/", "table/tally-events-dropped/")  # the stream is no more
    event = lambda batch, **kw: {**window_event(batch, **kw), "eventSourceARN": gone}  # noqa: E731
    lambda_handler(event(records[:2], final=True), LambdaContext())
    carried = lambda_handler(event(records[:3]), LambdaContext())["state"]
    capsys.readouterr()
    response = lambda_handler(event(records[3:], state=carried, final=True), LambdaContext())
    assert response == {"state": {}}
    # Low, never high: record 3 (held) is added, the carried record 2 cannot be placed.
    assert read_counts(dynamodb, "c") == {"M#2026-11-18T11:00": 3, "H#2026-11-18T11": 3}
    marks = dynamodb.scan(TableName=COUNTS, FilterExpression="attribute_exists(unresolved)")["Items"]
    assert sorted(item["sk"]["S"] for item in marks) == ["H#2026-11-18T11", "M#2026-11-18T11:00"]
    recorded = dynamodb.query(TableName=COUNTS, KeyConditionExpression="pk = :pk",
                              ExpressionAttributeValues={":pk": {"S": UNRESOLVED_PARTITION}})["Items"]
    first, last = records[0]["dynamodb"]["SequenceNumber"], records[3]["dynamodb"]["SequenceNumber"]
    assert {(item["counter"]["S"], item["records"]["S"]) for item in recorded} == {("c", f"{first}..{last}")}
    logged = [r for r in caplog.records if r.getMessage() == "item left unresolved"]
    assert len(logged) == 2 and all(r.levelname == "ERROR" and r.repair == "scripts/audit.py c --repair" for r in logged)
    assert all("came in the window state" in r.detail and "ResourceNotFoundException" in r.detail for r in logged)
    [blob] = [blob for blob in emitted(capsys) if "ItemsUnresolved" in blob]
    assert blob["ItemsUnresolved"] == [2] and blob["StreamReadRequests"] == [1]
    # Lambda's retry of the same batch changes nothing more.
    lambda_handler(event(records[3:], state=carried, final=True), LambdaContext())
    assert read_counts(dynamodb, "c") == {"M#2026-11-18T11:00": 3, "H#2026-11-18T11": 3}


def test_a_window_cut_elsewhere_adds_exactly_what_the_items_have_not_taken(lambda_handler, dynamodb, capsys):
    """The same records, committed by a reader that closed its window early, then read again whole."""
    records = [counter_record("c", T0 + n) for n in range(5)]
    lambda_handler(window_event(records[:2], final=True), LambdaContext())
    lambda_handler(window_event(records, final=True), LambdaContext())
    assert read_counts(dynamodb, "c") == {"M#2026-11-18T11:00": 5, "H#2026-11-18T11": 5}
    totals = next(blob for blob in emitted(capsys) if blob.get("UpdatesResumed") == [2])
    assert totals["BucketUpdates"] == [2]


RULES = (
    '[{"name": "jobs", "counter": "jobs/{providerId}"},'
    ' {"name": "revenue", "counter": "revenue/{providerId}", "when": {"status": {"equals": "done"}}, "sum": "amount"}]'
)


def test_with_rules_the_handler_fans_out_sums_and_names_the_refusing_rule(lambda_handler, monkeypatch, capsys, caplog):
    from decimal import Decimal

    monkeypatch.setenv("TALLY_RULES", RULES)
    stream_handler.counts_table.cache_clear()
    records = [
        stream_record(image(id="1", ts=T0, providerId="p", status="done", amount=Decimal("2.50")), arrival_s=T0 / 1000),
        stream_record(image(id="2", ts=T0, providerId="p", status="done", amount="a lot"), arrival_s=T0 / 1000),
    ]
    lambda_handler(window_event(records, final=True), LambdaContext())
    [rejected] = [r for r in caplog.records if r.getMessage() == "record rejected"]
    assert (rejected.reason, rejected.rule) == ("invalid_sum", "revenue")
    [summary] = [r for r in caplog.records if r.getMessage() == "invocation done"]
    assert (summary.records, summary.counted, summary.rejected) == (2, 3, 1)
    assert summary.rejected_by_rule == {"revenue": 1}
    by_rule = next(blob for blob in emitted(capsys) if blob.get("rule") == "revenue")
    assert by_rule["RecordsRejected"] == [1]
    assert sorted(by_rule["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) == ["rule", "service"]


def test_a_change_without_its_old_image_is_counted_and_logged_with_the_rules_name(lambda_handler, monkeypatch, dynamodb, caplog):
    # A table still streaming NEW_IMAGE while a becomes rule counts its transitions: nothing fails, the
    # record is a rejection counted at its arrival, named by the rule that needed the old image.
    monkeypatch.setenv("TALLY_RULES", '[{"name": "done", "counter": "done/{p}", "becomes": {"status": {"equals": "done"}}}]')
    stream_handler.counts_table.cache_clear()
    update = stream_record(image(id="1", ts=T0, p="a", status="done"), event_name="MODIFY", arrival_s=T0 / 1000)
    lambda_handler(window_event([update], final=True), LambdaContext())
    [rejected] = [r for r in caplog.records if r.getMessage() == "record rejected"]
    assert (rejected.reason, rejected.rule) == ("missing_old_image", "done")
    assert "NEW_AND_OLD_IMAGES" in rejected.detail
    assert read_counts(dynamodb, "#rejected#missing_old_image") == {"M#2026-11-18T11:00": 1, "H#2026-11-18T11": 1}


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_bad_rules_fail_the_cold_start_naming_rule_and_field(lambda_handler, monkeypatch):
    monkeypatch.setenv("TALLY_RULES", '[{"name": "jobs", "counter": "jobs/{providerId"}]')
    stream_handler.counts_table.cache_clear()
    with pytest.raises(ValueError, match=r"TALLY_RULES: rule 1 \('jobs'\): field 'counter'"):
        lambda_handler(window_event([]), LambdaContext())


def test_the_handler_publishes_its_settings_at_a_cold_start(lambda_handler, dynamodb, monkeypatch):
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "Tally-Counter")
    monkeypatch.setenv("TALLY_BUCKET_LANES", "4")
    lambda_handler(window_event([counter_record("c", T0)], final=True), LambdaContext())
    published = stream_handler.counts_table().published_settings()
    assert published.publisher == "Tally-Counter" and published.settings().bucket_lanes == 4
    assert published.environment == stream_handler.counts_table().settings.counting_environment()


def test_a_failure_to_publish_never_stops_the_counting(lambda_handler, dynamodb, monkeypatch, caplog):
    def refused(**request):
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "PutItem")

    monkeypatch.setattr(CountsTable, "publish_settings", lambda self, *args: refused())
    lambda_handler(window_event([counter_record("c", T0)], final=True), LambdaContext())
    assert read_counts(dynamodb, "c") == {"M#2026-11-18T11:00": 1, "H#2026-11-18T11": 1}
    assert [r for r in caplog.records if r.getMessage() == "settings not published"]


def test_the_handler_lists_what_it_counted_in_the_counter_directory_once_per_warm_function(lambda_handler, dynamodb):
    records = [counter_record(name, T0, arrival_s=T0 / 1000) for name in ("a", "b", "a")]
    lambda_handler(window_event(records, final=True), LambdaContext())
    written = stream_handler.counter_directory(stream_handler.counts_table()).written
    lambda_handler(window_event([counter_record("a", T0 + 1, arrival_s=T0 / 1000)], final=True), LambdaContext())
    items = dynamodb.scan(TableName=COUNTS, ConsistentRead=True)["Items"]
    entries = sorted((i["pk"]["S"], i["sk"]["S"]) for i in items if i["pk"]["S"].startswith("#counters#"))
    day = T0 // 86_400_000
    assert entries == sorted([(partition_of(day, "a"), "a"), (partition_of(day, "b"), "b")])
    assert stream_handler.counter_directory(stream_handler.counts_table()).written is written == {
        (T0 // 86_400_000, "a"),
        (T0 // 86_400_000, "b"),
    }


def test_a_window_past_an_alerts_threshold_puts_one_event_and_publishes_alert_metrics(lambda_handler, alert_sink, capsys):
    from tally.core.windows import now_ms

    now = now_ms()
    records = [stream_record(image(id=str(n), ts=now, ip="1.2.3.4"), arrival_s=now / 1000) for n in range(3)]
    event = window_event(records, final=True)
    lambda_handler(event, LambdaContext())
    lambda_handler(event, LambdaContext())  # Lambda's retry of the same window: no second event
    [alarm] = alert_sink.drain()
    assert (alarm["alert"], alarm["counter"], alarm["state"], alarm["total"]) == ("burst", "logins/1.2.3.4", "ALARM", 3)
    crossings = [blob["AlertCrossings"] for blob in emitted(capsys) if "AlertCrossings" in blob]
    assert crossings == [[1.0], [0.0]]


def test_unresolved_items_are_logged_one_by_one_up_to_twenty_then_summed_up(caplog):
    from tally.core.buckets import Bucket
    from tally.core.commit import Unresolved, Writer
    from tally.invocation import Summary

    writer = Writer.of_shard(STREAM_ARN, "shardId-1")
    summary = Summary(unresolved=[
        Unresolved((f"c{n}", Bucket.of_hour(T0 // HOUR_MS)), writer, "101", "109", 100, 3, "trimmed") for n in range(25)
    ])
    stream_handler._log(summary, window_event([]))
    assert len([r for r in caplog.records if r.getMessage() == "item left unresolved"]) == stream_handler.MAX_LOGGED_REJECTIONS
    [rest] = [r for r in caplog.records if r.getMessage() == "more items left unresolved"]
    assert rest.items == 25 - stream_handler.MAX_LOGGED_REJECTIONS and rest.levelname == "ERROR"


def test_a_cold_start_makes_the_functions_lanes_the_tables_from_a_few_minutes_on(lambda_handler, dynamodb, monkeypatch):
    from tally.core.lanes import LANES_LEAD_MS
    from tally.core.settings import Settings

    lambda_handler(window_event([counter_record("c", T0)], final=True), LambdaContext())
    table = CountsTable(dynamodb, COUNTS, Settings())
    assert table.lane_history(consistent=True)[0].changes == ((0, 1),)
    monkeypatch.setenv("TALLY_BUCKET_LANES", "4")  # deployed again with four lanes
    stream_handler.counts_table.cache_clear()
    before = int(time.time() * 1000)
    lambda_handler(window_event([counter_record("c", T0)], final=True), LambdaContext())
    (_, one), (start, four) = table.lane_history(consistent=True)[0].changes
    assert (one, four) == (1, 4) and before + LANES_LEAD_MS <= start <= int(time.time() * 1000) + LANES_LEAD_MS
