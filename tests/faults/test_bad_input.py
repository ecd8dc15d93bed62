"""Bad input: whatever a stream record holds, the handler neither crashes nor fails the batch.

Fuzzed records: missing images and sections, wrong attribute types, huge,
tiny and non-finite numbers, strings where numbers belong, long and
non-UTF-8-safe names, names aimed at bookkeeping keys, times far away,
MODIFY and REMOVE (TTL deletions by the service included), non-dict records.
Checked: nothing is counted that an independent reading of the record would
not count, every rejection has a reason and a detail, and the counts table
holds exactly what the parsed outcomes say.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from unittest import mock

import boto3
import pytest
from factories import LambdaContext
from hypothesis import example, given
from hypothesis import strategies as st
from moto import mock_aws
from tally.functions import stream_handler
from tally.core.commit import WATERMARK_PREFIX, Writer
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.invocation import WindowRequired, process
from tally.core.records import MAX_COUNTER_LENGTH, CounterEvent, Rejection, parse_record
from tally.core.segments import REJECTED_COUNTER_PREFIX
from tally.core.settings import Settings

from . import profiles
from .checks import table_buckets
from .harness import STATS, quick_backoff
from .streams import STREAM_ARN, TTL_DELETION_IDENTITY, Expected

EVENTS_TABLE = "tally-events"
COUNTS_TABLE = "tally-counts"
SETTINGS = Settings(counts_table=COUNTS_TABLE, events_table=EVENTS_TABLE)
ARRIVAL_S = 1_774_742_430  # 2026-03-29T00:00:30Z

any_text = st.text(st.characters(exclude_categories=()), max_size=40)  # lone surrogates included
number_strings = st.one_of(
    st.sampled_from(
        [
            "NaN",
            "-NaN",
            "sNaN",
            "Infinity",
            "-Infinity",
            "inf",
            "1e400",
            "-1e400",
            "1e-400",
            "-0",
            "",
            " 7",
            "1_000",
            "0x10",
            "9" * 60,
        ]
    ),
    st.integers().map(str),
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
    st.floats().map(repr),
    st.integers(ARRIVAL_S * 1000 - 3 * 86_400_000, ARRIVAL_S * 1000 + 3_600_000).map(str),
)
iso_times = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.one_of(st.none(), st.timezones())
).map(lambda moment: moment.isoformat())
near_iso_times = st.integers(-3 * 86_400, 3_600).map(
    lambda offset: (
        datetime.fromtimestamp(ARRIVAL_S + offset, UTC).astimezone(timezone(timedelta(hours=5, minutes=45)))
    ).isoformat()
)
leaf_values = st.one_of(
    st.builds(lambda text: {"S": text}, any_text),
    st.builds(lambda text: {"N": text}, number_strings),
    st.builds(lambda value: {"BOOL": value}, st.booleans()),
    st.just({"NULL": True}),
    st.builds(lambda data: {"B": data}, st.binary(max_size=8)),
    st.builds(lambda texts: {"SS": texts}, st.lists(any_text, max_size=3)),
    st.builds(lambda texts: {"NS": texts}, st.lists(number_strings, max_size=3)),
)
attribute_values = st.one_of(
    leaf_values,
    st.builds(lambda values: {"L": values}, st.lists(leaf_values, max_size=3)),
    st.builds(lambda values: {"M": values}, st.dictionaries(any_text, leaf_values, max_size=3)),
    st.builds(lambda value: {"S": value}, st.integers()),  # right tag, wrong Python type
    st.dictionaries(st.sampled_from(["S", "N", "X"]), st.text(max_size=3), min_size=2, max_size=3),  # two tags
    st.none(),
    st.integers(),
    any_text,
)
counter_values = st.one_of(
    attribute_values,
    st.builds(
        lambda name: {"S": name},
        st.one_of(
            st.sampled_from(["page-views", "ünï", "😀", "a#b"]),
            st.sampled_from(
                ["#", "#segment#1", "#segment#100000000000000000001", "#rejected#late_event", "#rejected#"]
            ),
            st.integers(MAX_COUNTER_LENGTH - 1, MAX_COUNTER_LENGTH + 2).map(lambda n: "x" * n),
            st.just("x" * 5000),
            any_text,
        ),
    ),
)
time_values = st.one_of(
    attribute_values,
    st.builds(lambda text: {"N": text}, number_strings),
    st.builds(lambda text: {"S": text}, st.one_of(iso_times, near_iso_times, any_text)),
)
arrivals = st.one_of(
    st.integers(ARRIVAL_S - 60, ARRIVAL_S + 60),
    st.integers(-10, 2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.datetimes(timezones=st.one_of(st.none(), st.just(UTC))),
    any_text,
    st.none(),
    st.booleans(),
)
sequences = st.one_of(
    st.integers(10**20, 10**21).map(str),
    st.integers(10**20, 10**21),
    st.just(""),
    st.just("9" * 3000),
    any_text,
    st.none(),
)


@st.composite
def records(draw) -> Any:
    """A stream record, mostly well-shaped, with any part of it possibly wrong or missing."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.one_of(st.none(), st.integers(), any_text, st.lists(st.integers(), max_size=2)))
    image: dict[str, Any] = {"id": {"S": "e"}}
    for name, values in ((SETTINGS.counter_attribute, counter_values), (SETTINGS.time_attribute, time_values)):
        if draw(st.integers(0, 9)):
            image[name] = draw(values)
    image.update(draw(st.dictionaries(any_text, attribute_values, max_size=2)))
    stream: dict[str, Any] = {"Keys": {"id": {"S": "e"}}, "StreamViewType": "NEW_IMAGE", "SizeBytes": 10}
    if draw(st.integers(0, 9)):
        stream["SequenceNumber"] = draw(sequences)
    if draw(st.integers(0, 9)):
        stream["ApproximateCreationDateTime"] = draw(arrivals)
    if draw(st.integers(0, 5)):
        stream["NewImage"] = (
            draw(st.one_of(st.just(image), st.none(), any_text)) if draw(st.integers(0, 9)) == 0 else image
        )
    name = draw(st.one_of(st.sampled_from(["INSERT", "INSERT", "MODIFY", "REMOVE"]), any_text, st.none()))
    record: dict[str, Any] = {"eventName": name, "eventSource": "aws:dynamodb", "eventSourceARN": STREAM_ARN}
    if name == "REMOVE" and draw(st.booleans()):
        record["userIdentity"] = TTL_DELETION_IDENTITY
    if draw(st.integers(0, 14)):
        record["dynamodb"] = stream if draw(st.integers(0, 14)) else draw(st.one_of(st.none(), any_text, st.just([])))
    return record


def independently_countable(record: Any, event: CounterEvent, settings: Settings) -> str | None:
    """Why ``record`` must not have been counted as ``event``, or None. Written from the spec, not the code."""
    stream = record["dynamodb"]
    if record.get("eventName") != "INSERT":
        return "not an INSERT"
    counter = stream["NewImage"].get(settings.counter_attribute)
    if counter != {"S": event.counter}:
        return f"counter attribute {counter!r} is not the string {event.counter!r}"
    name = event.counter
    if not name or len(name) > MAX_COUNTER_LENGTH or name.startswith("#"):
        return f"counter name {name!r} is not allowed"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "counter name is not UTF-8"
    if event.sequence != stream.get("SequenceNumber"):
        return "sequence number differs from the record's"
    raw_time = stream["NewImage"].get(settings.time_attribute)
    if not isinstance(raw_time, dict) or len(raw_time) != 1:
        return f"time attribute {raw_time!r} is not an attribute value"
    if "N" in raw_time:
        expected_ms = int(Decimal(raw_time["N"]).to_integral_value(rounding="ROUND_FLOOR"))
    elif "S" in raw_time:
        moment = datetime.fromisoformat(raw_time["S"].strip())
        if moment.tzinfo is None:
            return "time without an offset"
        expected_ms = int((moment - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1))
    else:
        return f"time attribute {raw_time!r} is neither a number nor a string"
    if event.event_ms != expected_ms:
        return f"event time {event.event_ms} is not the record's {expected_ms}"
    if event.event_ms > event.arrival_ms + settings.max_clock_skew_ms:
        return "event time further ahead of arrival than the clock skew"
    hour_end = (event.event_ms // 3_600_000 + 1) * 3_600_000
    minute_end = (event.event_ms // 60_000 + 1) * 60_000
    if hour_end + settings.hour_retention_ms <= event.arrival_ms:
        return "its hour was past the hour retention at arrival"
    kinds = "MH" if minute_end + settings.minute_retention_ms > event.arrival_ms else "H"
    if ("H" if event.hour_only else "MH") != kinds:
        return f"counted hour_only={event.hour_only}, not in the {kinds!r} buckets its arrival allows"
    return None


def expected_from(outcomes: list[CounterEvent | Rejection]) -> Expected:
    expected = Expected()
    for outcome in outcomes:
        if isinstance(outcome, CounterEvent):
            expected.events.append((outcome.counter, outcome.event_ms, outcome.arrival_ms))
        elif outcome.reason.is_rejection and outcome.arrival_ms is not None:
            expected.rejections.append((outcome.reason, outcome.arrival_ms))
    return expected


SHARD_ID = "shardId-1"


def windowed_event(batch: list[Any]) -> dict[str, Any]:
    """The final invocation of a one-batch tumbling window, as Lambda shapes it."""
    return {
        "Records": batch,
        "window": {"start": "2026-03-29T00:00:00Z", "end": "2026-03-29T00:01:00Z"},
        "state": {},
        "shardId": SHARD_ID,
        "eventSourceARN": STREAM_ARN,
        "isFinalInvokeForWindow": True,
        "isWindowTerminatedEarly": False,
    }


def assert_handled(batch: list[Any], windowed: bool, client: Any) -> None:
    STATS.add("fuzzed_records", len(batch))
    per_record = [parse_record(record, SETTINGS) for record in batch]
    assert all(len(record_outcomes) == 1 for record_outcomes in per_record)  # the classic rule: one each
    outcomes = [outcome for record_outcomes in per_record for outcome in record_outcomes]
    for record, outcome in zip(batch, outcomes, strict=True):
        if isinstance(outcome, CounterEvent):
            assert independently_countable(record, outcome, SETTINGS) is None, (
                record,
                outcome,
                independently_countable(record, outcome, SETTINGS),
            )
        else:
            assert outcome.detail and isinstance(outcome.detail, str), (record, outcome)

    table = CountsTable(client, COUNTS_TABLE, SETTINGS, backoff=quick_backoff(0))
    if not windowed:  # an event source mapping without a tumbling window: refused before any work
        with pytest.raises(WindowRequired, match="TumblingWindowInSeconds"):
            process({"Records": batch}, table.commit, SETTINGS)
        assert client.scan(TableName=COUNTS_TABLE)["Count"] == 0
        return
    response, summary = process(windowed_event(batch), table.commit, SETTINGS)

    assert summary.records == len(batch)
    assert summary.counted + summary.skipped + summary.rejected_total == len(batch)
    assert summary.counted == sum(isinstance(outcome, CounterEvent) for outcome in outcomes)
    assert all(rejection.reason.is_rejection and rejection.detail for rejection in summary.rejections)
    assert len(summary.rejections) == summary.rejected_total
    assert response == {"state": {}}

    actual = table_buckets(client, COUNTS_TABLE)
    expected = expected_from(outcomes)
    assert actual == expected.buckets(SETTINGS)
    counted_names = {name for name, _, _ in expected.events}
    assert all(pk in counted_names or pk.startswith(REJECTED_COUNTER_PREFIX) for pk, _ in actual)


@profiles.for_test(weight=1.5)
@given(batch=st.lists(records(), max_size=12), windowed=st.booleans())
# Found by this test: an arrival after the year 9999 crashed the fold (no bucket key for its rejection).
@example(
    batch=[
        {
            "eventName": "INSERT",
            "dynamodb": {
                "SequenceNumber": "100000000000000000001",
                "ApproximateCreationDateTime": 10**12,
                "NewImage": {"counter": {"S": "c"}, "ts": {"N": "5"}},
            },
        }
    ],
    windowed=True,
)
# Found by this test: a 3000-digit sequence number made a marker key DynamoDB refuses, failing the batch for good.
@example(
    batch=[
        {"eventName": "INSERT", "dynamodb": {"SequenceNumber": "9" * 3000, "ApproximateCreationDateTime": ARRIVAL_S}}
    ],
    windowed=True,
)
def test_no_record_crashes_the_handler_or_is_miscounted(batch: list[Any], windowed: bool) -> None:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS_TABLE, COUNTS_TABLE)
        assert_handled(batch, windowed, client)
        tag = Writer.of_shard(STREAM_ARN, SHARD_ID).tag
        for item in client.scan(TableName=COUNTS_TABLE)["Items"]:  # the shard's watermark, and nothing else
            assert [name for name in item if name.startswith(WATERMARK_PREFIX)] == [tag], item


@profiles.for_test(weight=0.5)
@given(batch=st.lists(records(), max_size=8))
def test_the_lambda_entry_point_survives_any_record(batch: list[Any]) -> None:
    """Through tally.functions.stream_handler.handler itself: logging and metrics of odd rejections must not raise either."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS_TABLE, COUNTS_TABLE)
        table = CountsTable(client, COUNTS_TABLE, SETTINGS, backoff=quick_backoff(0))
        with mock.patch.object(stream_handler, "counts_table", lambda: table):
            response = stream_handler.handler(windowed_event(batch), LambdaContext())
        assert response == {"state": {}}
        STATS.add("fuzzed_records", len(batch))
