"""DynamoDB's capacity rules, as the benchmark charges them."""

from __future__ import annotations

import pytest

from bench.cost import (
    MeteredClient,
    batch_get_read_units,
    item_size,
    number_size,
    query_read_units,
    write_units,
)
from botocore.exceptions import ClientError

from bench.dedup import DedupHandler
from tally.core.commit import Writer, segment_updates
from tally.core.segments import Segment
from tally.core.buckets import Bucket
from tally.core.settings import Settings


@pytest.mark.parametrize(
    ("number", "size"),
    [(0, 2), (7, 2), (12, 2), (123, 3), (1000, 2), (1_795_000_000, 3), (1_795_172_800, 5), ("-12.50", 3), ("0.001", 2)],
)
def test_numbers_cost_a_byte_per_two_significant_digits_plus_one(number, size):
    assert number_size(number) == size


def test_item_size_is_names_plus_values():
    item = {"pk": {"S": "héllo"}, "count": {"N": "42"}}
    assert item_size(item) == len("pk") + len("héllo".encode()) + len("count") + 2


def test_a_write_costs_one_unit_per_started_kilobyte():
    exactly_1024 = {"a": {"S": "x" * 1023}}
    assert item_size(exactly_1024) == 1024
    assert write_units(item_size(exactly_1024)) == 1
    assert write_units(item_size({"a": {"S": "x" * 1024}})) == 2
    assert write_units(10) == 1


def test_a_transactional_write_costs_double():
    assert write_units(1024, transactional=True) == 2
    assert write_units(1025, transactional=True) == 4


def test_batch_get_rounds_every_item_up_to_4_kb_and_charges_missing_keys():
    assert batch_get_read_units([0, 100, 4096, 4097], consistent=True) == 5
    assert batch_get_read_units([0, 100, 4096, 4097], consistent=False) == 2.5


def test_query_rounds_the_summed_items_up_to_4_kb_per_request():
    assert query_read_units([2048, 2048], consistent=True) == 1
    assert query_read_units([2048, 2049], consistent=True) == 2
    assert query_read_units([], consistent=True) == 1
    assert query_read_units([2048, 2049], consistent=False) == 1


def test_an_update_is_charged_for_the_whole_item_not_the_change():
    client = MeteredClient(("id",))
    key = {"id": {"S": "k" * 1000}}
    request = {
        "Key": key,
        "UpdateExpression": "SET #count = if_not_exists(#count, :zero) + :one, #ttl = if_not_exists(#ttl, :ttl)",
        "ExpressionAttributeNames": {"#count": "count", "#ttl": "ttl"},
        "ExpressionAttributeValues": {":zero": {"N": "0"}, ":one": {"N": "1"}, ":ttl": {"N": "1"}},
    }
    client.update_item(**request)  # 2 + 1000 + 5 + 2 + 3 + 2 = 1014 bytes: one unit
    assert client.meter.units == 1
    client.transact_write_items(TransactItems=[{"Put": {"Item": {**key, "pad": {"S": "x" * 20}}}}])
    assert client.meter.units == 1 + 4  # 2 + 1000 + 3 + 20 = 1025 bytes, in a transaction
    client.update_item(**request)  # the padded item grows to 1037 bytes
    assert client.meter.units == 1 + 4 + 2
    assert client.count_of(("k" * 1000,)) == 1


def tally_updates(first: str, writer: Writer = Writer.of_shard("arn", "shardId-1")):
    segment = Segment(first, 1_795_000_000_000, first, records=1)
    segment.add(first, [(("page", Bucket.of_minute(29_916_666)), ("page", Bucket.of_hour(498_611)), 150_000_000, None, None)])
    hours, minutes = segment_updates(segment, writer, "counts", Settings())
    return hours + minutes


def test_tally_commits_are_metered_as_plain_updates_that_carry_the_writers_watermark():
    client = MeteredClient(("pk", "sk"))
    for update in tally_updates("100000000000000000100"):
        client.update_item(**update.request)
    assert (client.meter.requests, client.meter.item_writes, client.meter.units) == (2, 2, 2)
    hour = client.items[("page", Bucket.of_hour(498_611).sort_key)]
    assert hour["count"] == {"N": "1"} and hour["sum"] == {"N": "1.5"}
    writer = Writer.of_shard("arn", "shardId-1")
    assert hour[writer.tag] == {"B": writer.watermark(Segment("100000000000000000100", 0, "100000000000000000100"))}


def test_a_refused_condition_is_charged_and_writes_nothing():
    client = MeteredClient(("pk", "sk"))
    for update in tally_updates("100000000000000000100"):
        client.update_item(**update.request)
    for update in tally_updates("100000000000000000100"):  # the same segment again: its watermark refuses it
        with pytest.raises(ClientError, match="ConditionalCheckFailed") as refused:
            client.update_item(**update.request)
        assert update.tag in refused.value.response["Item"]
    assert (client.meter.item_writes, client.meter.units, client.meter.failed_conditions) == (2, 4, 2)
    assert client.count_of(("page", Bucket.of_hour(498_611).sort_key)) == 1


def test_the_deduplicating_design_writes_a_transaction_per_event_and_skips_a_retried_one():
    from bench import workloads

    client = MeteredClient(("id",))
    handler = DedupHandler(client, "dedup")
    [batch] = workloads.record_chunks([("page", 1_795_000_000_000), ("page", 1_795_000_001_000)])
    handler({"Records": batch})
    assert (client.meter.requests, client.meter.item_writes, client.meter.units) == (2, 6, 12)  # 2 WCU per item
    assert client.count_of(("page_hour_498611",)) == 2


def test_the_fan_out_workload_costs_what_moto_stores_and_writes_each_bucket_once_per_window():
    from bench import workloads, writes
    from tally.local.delivery import DeliveryConfig
    from tally.core.settings import Settings

    workload = workloads.fan_out(providers=4, per_second=2, seconds=120, histogram=True)  # bins metered too
    config = DeliveryConfig(batch_size=100, window_seconds=60)
    checked = writes.verify_against_moto(workload, Settings(), config)
    assert checked["tally_matches_moto"] and checked["origin_matches_moto"] and checked["dedup_matches_moto"]
    measured = writes.measure(workload, Settings(), config)
    assert measured["counter_events"] > 2 * measured["events"]  # three rules, the third for done jobs only
    assert measured["origin"]["item_writes"] == 2 * measured["counter_events"]
    assert measured["tally"]["bucket_writes"] == measured["floor"]["writes"]


def test_the_counter_directory_costs_one_plain_write_per_counter_and_day_in_a_container():
    from bench import workloads, writes
    from tally.local.delivery import DeliveryConfig
    from tally.core.settings import Settings

    workload = workloads.fan_out(providers=4, per_second=2, seconds=240)
    measured = writes.measure(workload, Settings(), DeliveryConfig(batch_size=100, window_seconds=60))
    counters_and_days = {(name, ms // 86_400_000) for name, ms, _arrival in workload.counted_arrivals()}
    assert measured["tally"]["directory_writes"] == len(counters_and_days)  # each once, however many windows
    assert measured["tally"]["directory_write_units"] == len(counters_and_days)  # plain puts far under 1 KB
    assert measured["tally"]["directory_requests"] >= -(-len(counters_and_days) // 25)
    # Four minutes of counts at one plain write per bucket: the day's entries are an eighth of that.
    assert 0 < measured["ratios"]["directory_units_over_counting_units"] < 0.2


def test_sketch_merges_are_metered_reads_and_conditional_writes_as_moto_stores_them():
    import boto3
    from moto import mock_aws

    from bench import aggregates, workloads, writes
    from tally.local.delivery import DeliveryConfig

    config = DeliveryConfig(batch_size=100, window_seconds=60)
    small = workloads.steady(counters=3, per_second=5, seconds=180)
    # Sketches are tally's alone: the origin designs' writes into moto (nine tenths of the time) would check nothing here.
    with mock_aws():
        checked = writes.verify_stored(
            workloads.with_distinct(small), Settings(), config, boto3.client("dynamodb", region_name="us-east-1"),
            designs=("tally",),
        )
    assert checked["tally"]["stored_matches_meter"] and set(checked) == {"workload", "tally"}

    costs = aggregates.distinct_costs(small, Settings(), config)
    without, with_rule = costs["without"], costs["with"]
    assert without["sketch_writes"] == without["read_units_per_1000_events"] == 0
    windows_and_buckets = {(ms // 60_000, counter) for counter, ms in small.counted()}
    assert with_rule["sketch_writes"] == 2 * len(windows_and_buckets)  # its minute and its hour, once per window
    assert with_rule["sketch_reads"] == 3  # one strongly consistent read of a window's sketches, each window
    assert with_rule["write_units"] == without["write_units"] + with_rule["sketch_write_units"]
    # 300 visitors an hour: dense sketches, compressed under 1 KB, one unit a write
    assert 8 * 100 < with_rule["sketch_bytes_max"] <= 1024 and with_rule["sketch_write_units"] == with_rule["sketch_writes"]
    reads = costs["reads_24h"]
    assert reads["union_plan_keys"] > reads["count_plan_keys"] and reads["union_plan_read_units"] == reads["union_plan_keys"]


def test_a_sketch_write_that_loses_its_condition_is_charged_and_answers_what_the_item_holds():
    from tally.core.sketch_writes import sketch_update

    client = MeteredClient(("pk", "sk"))
    key = ("c", "M#2026-11-23T10:00#d0")
    client.update_item(**sketch_update("counts", key, b"\x01" + b"a" * 8, None, 1))
    assert (client.meter.sketch_writes, client.meter.units) == (1, 1)
    with pytest.raises(ClientError) as lost:
        client.update_item(**sketch_update("counts", key, b"\x01" + b"b" * 8, None, 1))  # read before the first
    assert lost.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert lost.value.response["Item"]["hll"] == {"B": b"\x01" + b"a" * 8}
    assert (client.meter.sketch_writes, client.meter.units, client.meter.sketch_units) == (1, 2, 2)


def test_a_tally_update_answers_the_count_after_it_so_the_meter_sees_new_items_and_rank_levels():
    client = MeteredClient(("pk", "sk"))
    [first, second] = tally_updates("100000000000000000100")
    answer = client.update_item(**first.request)
    assert answer["Attributes"]["count"] == {"N": "1"} and set(answer["Attributes"]) >= {"count", "ttl"}
    assert "Attributes" not in client.update_item(**{k: v for k, v in second.request.items() if k != "ReturnValues"})


def test_the_per_page_fan_out_puts_rank_records_as_moto_stores_them_each_hour_item_with_its_own_level():
    import boto3
    from moto import mock_aws

    from bench import top, workloads, writes
    from tally.core.ranking import RANK_PREFIX, level_of, rank_item
    from tally.local.delivery import DeliveryConfig

    settings, config = Settings(ranked_prefixes=("",)), DeliveryConfig(batch_size=100, window_seconds=60)
    workload = workloads.fan_out_pages(providers=3, per_second=4, seconds=240)
    with mock_aws():
        checked = writes.verify_stored(
            workload, settings, config, boto3.client("dynamodb", region_name="us-east-1"), designs=("tally",)
        )
    assert checked["tally"]["stored_matches_meter"] and set(checked) == {"workload", "tally"}
    items = writes.run_tally(workload, settings, config).items
    ranks = {key for key in items if key[0].startswith(RANK_PREFIX)}
    hours = {key: int(item["count"]["N"]) for key, item in items.items() if key[1].startswith("H#")}
    own = set()
    for (counter, sort_key), count in hours.items():
        if level_of(count) is not None:  # the invariant: every hour item of 202 or more has its own level's record
            record = rank_item(counter, Bucket.from_sort_key(sort_key), 0, level_of(count), settings)
            own.add((record["pk"]["S"], record["sk"]["S"]))
    assert own and own <= ranks
    assert {key[1].split("#", 3)[3] for key in ranks} <= {counter for counter, _ in hours}
    figures = top.write_costs(settings, config, workload)
    assert figures["rank_writes"] == figures["rank_write_units"] == len(ranks)  # each put once, far under 1 KB
    assert figures["ratios"]["ranks_over_floor"] == round(len(ranks) / figures["floor_write_units"], 3)


def test_the_meter_answers_queries_and_gets_as_moto_does_and_charges_the_whole_items():
    """A close's and a reader's reads, answered from the meter's image or forwarded to moto: the same pages, the same
    items, the same units."""
    import boto3
    from moto import mock_aws

    from tally.core.tables import COUNTS_TABLE

    items = [("c", f"H#2026-11-01T{h:02d}", "x" * (h * 40)) for h in range(24)] + [("c", "M#2026-11-01T00:00", "m")]
    requests = [
        {"KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :first AND :last",
         "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
         "ExpressionAttributeValues": {":pk": {"S": "c"}, ":first": {"S": "H#2026-11-01T03"}, ":last": {"S": "H#2026-11-01T20"}}},
        {"KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)", "ProjectionExpression": "#sk",
         "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
         "ExpressionAttributeValues": {":pk": {"S": "c"}, ":prefix": {"S": "H#"}}, "Limit": 5},
        {"KeyConditionExpression": "#pk = :pk", "ExpressionAttributeNames": {"#pk": "pk"},
         "ExpressionAttributeValues": {":pk": {"S": "c"}}, "ConsistentRead": True},
    ]
    with mock_aws():
        moto = boto3.client("dynamodb", region_name="us-east-1")
        moto.create_table(**COUNTS_TABLE.create_table_request("counts"))
        meter, forwarding = MeteredClient(("pk", "sk")), MeteredClient(("pk", "sk"), forward_to=moto)
        for client in (meter, forwarding):
            client.batch_write_item(RequestItems={"counts": [
                {"PutRequest": {"Item": {"pk": {"S": pk}, "sk": {"S": sk}, "pad": {"S": pad}}}} for pk, sk, pad in items]})
        for request in requests:
            pages = []
            for client in (meter, forwarding):
                answers, cursor = [], None
                while True:
                    answer = client.query(TableName="counts", **request, **({"ExclusiveStartKey": cursor} if cursor else {}))
                    answers.append(answer["Items"])
                    cursor = answer.get("LastEvaluatedKey")
                    if not cursor:
                        break
                pages.append(answers)
            assert pages[0] == pages[1]
        key = {"pk": {"S": "c"}, "sk": {"S": "H#2026-11-01T05"}}
        assert meter.get_item(TableName="counts", Key=key)["Item"] == forwarding.get_item(TableName="counts", Key=key)["Item"]
        assert "Item" not in meter.get_item(TableName="counts", Key={**key, "sk": {"S": "none"}})
    assert (meter.meter.query_requests, meter.meter.query_read_units) == (
        forwarding.meter.query_requests, forwarding.meter.query_read_units)
    assert forwarding.meter.query_requests == 1 + 5 + 1  # a run, 24 hours in pages of 5, a partition
    # Charged by whole items, a projection or not: the run 03..20 (eventual), five pages of names, the partition.
    size = {sk: item_size({"pk": {"S": pk}, "sk": {"S": sk}, "pad": {"S": pad}}) for pk, sk, pad in items}
    hours = sorted(sk for sk in size if sk.startswith("H#"))
    expected = (query_read_units([size[sk] for sk in hours[3:21]], consistent=False)
                + sum(query_read_units([size[sk] for sk in hours[n:n + 5]], consistent=False) for n in range(0, 25, 5))
                + query_read_units(size.values(), consistent=True))
    assert meter.meter.query_read_units == expected
    assert (meter.meter.get_requests, meter.meter.get_read_units) == (2, 1.0)  # eventually consistent: half a unit each


def test_a_close_progress_moves_only_forward_and_each_try_is_charged():
    from datetime import date

    from tally.dynamo.closing import Progress, ProgressItems

    client = MeteredClient(("pk", "sk"))
    progress = ProgressItems(client, "counts")
    progress.advance("UTC", Bucket.of_day(date(2026, 11, 2), "UTC"), None)
    progress.advance("UTC", Bucket.of_day(date(2026, 11, 1), "UTC"), None)  # back: refused, as DynamoDB refuses it
    assert progress.read("UTC") == Progress(since=date(2026, 11, 2), days=date(2026, 11, 2))
    assert (client.meter.item_writes, client.meter.failed_conditions, client.meter.units) == (1, 1, 2)
    assert (client.meter.get_requests, client.meter.get_read_units) == (1, 1)  # strongly consistent, under 4 KB
