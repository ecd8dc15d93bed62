import pytest

from factories import counter_record, image, parse_one, stream_record
from tally.core.records import CounterEvent, Reason, Rejection, parse_record, validate_counter
from tally.core.settings import DAY_MS, HOUR_MS, MINUTE_MS, Settings

ARRIVAL_MS = 1_795_000_000_000
SETTINGS = Settings()


def parse(new_image=None, **kwargs):
    kwargs.setdefault("arrival_s", ARRIVAL_MS / 1000)
    return parse_one(stream_record(new_image, **kwargs), SETTINGS)


def test_an_insert_becomes_an_event_with_its_own_time_and_sequence():
    record = counter_record("page-views", ARRIVAL_MS - 5_000, arrival_s=ARRIVAL_MS / 1000, sequence="4242")
    assert parse_one(record, SETTINGS) == CounterEvent("page-views", ARRIVAL_MS - 5_000, "4242", ARRIVAL_MS)


def test_iso_time_with_offset_is_accepted():
    outcome = parse(image(id="1", counter="orders", ts="2026-11-18T12:06:40+01:00"))
    assert isinstance(outcome, CounterEvent)
    assert outcome.event_ms == 1_795_000_000_000


def test_attribute_names_come_from_settings():
    settings = Settings(counter_attribute="kind", time_attribute="at")
    record = stream_record(image(id="1", kind="signups", at=ARRIVAL_MS), arrival_s=ARRIVAL_MS / 1000)
    assert parse_one(record, settings).counter == "signups"
    assert parse_one(record, SETTINGS).reason is Reason.MISSING_COUNTER


@pytest.mark.parametrize("event_name", ["MODIFY", "REMOVE"])
def test_modify_and_remove_are_skipped_not_rejected(event_name):
    outcome = parse(image(id="1", counter="c", ts=ARRIVAL_MS) if event_name == "MODIFY" else None, event_name=event_name)
    assert outcome.reason is Reason.NOT_INSERT
    assert not outcome.reason.is_rejection


def test_ttl_deletion_by_the_service_is_a_skipped_remove():
    record = stream_record(None, event_name="REMOVE", arrival_s=ARRIVAL_MS / 1000)
    record["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    assert parse_one(record, SETTINGS).reason is Reason.NOT_INSERT


@pytest.mark.parametrize(
    ("new_image", "reason"),
    [
        (None, Reason.MISSING_IMAGE),
        (image(id="1", ts=ARRIVAL_MS), Reason.MISSING_COUNTER),
        (image(id="1", counter="", ts=ARRIVAL_MS), Reason.INVALID_COUNTER),
        (image(id="1", counter=7, ts=ARRIVAL_MS), Reason.INVALID_COUNTER),
        (image(id="1", counter="#segment#1", ts=ARRIVAL_MS), Reason.INVALID_COUNTER),
        (image(id="1", counter="x" * 256, ts=ARRIVAL_MS), Reason.INVALID_COUNTER),
        ({"counter": {"S": "\ud800"}, "ts": {"N": str(ARRIVAL_MS)}}, Reason.INVALID_COUNTER),
        ({"counter": {"S": "c", "N": "1"}, "ts": {"N": str(ARRIVAL_MS)}}, Reason.INVALID_COUNTER),
        (image(id="1", counter="c"), Reason.MISSING_TIME),
        (image(id="1", counter="c", ts="soon"), Reason.INVALID_TIME),
        (image(id="1", counter="c", ts="2026-11-18T20:33:20"), Reason.INVALID_TIME),
        (image(id="1", counter="c", ts=True), Reason.INVALID_TIME),
        ({"counter": {"S": "c"}, "ts": {"N": "NaN"}}, Reason.INVALID_TIME),
        ({"counter": {"S": "c"}, "ts": {"N": "Infinity"}}, Reason.INVALID_TIME),
        ({"counter": {"S": "c"}, "ts": {"N": "1e400"}}, Reason.INVALID_TIME),
        ({"counter": {"S": "c"}, "ts": {"N": "-5"}}, Reason.INVALID_TIME),
        ({"counter": {"S": "c"}, "ts": {"B": b"x"}}, Reason.INVALID_TIME),
        (image(id="1", counter="c", ts=ARRIVAL_MS + 5 * MINUTE_MS + 1), Reason.FUTURE_TIME),
        (image(id="1", counter="c", ts=ARRIVAL_MS - 91 * DAY_MS), Reason.LATE_EVENT),
    ],
)
def test_every_rejection_has_its_reason_and_keeps_the_record_identity(new_image, reason):
    outcome = parse(new_image, sequence="777")
    assert isinstance(outcome, Rejection)
    assert outcome.reason is reason
    assert outcome.reason.is_rejection
    assert outcome.detail
    assert (outcome.sequence, outcome.arrival_ms) == ("777", ARRIVAL_MS)


@pytest.mark.parametrize(
    "offset_ms", [5 * MINUTE_MS, 0, -23 * HOUR_MS, -89 * DAY_MS], ids=["skew limit", "at arrival", "a day", "89 days"]
)
def test_the_limits_themselves_are_accepted(offset_ms):
    assert isinstance(parse(image(id="1", counter="c", ts=ARRIVAL_MS + offset_ms)), CounterEvent)


@pytest.mark.parametrize(
    "record",
    [
        {},
        None,
        "INSERT",
        {"eventName": "INSERT"},
        {"eventName": "INSERT", "dynamodb": "x"},
        {"eventName": "INSERT", "dynamodb": {"NewImage": image(counter="c", ts=ARRIVAL_MS)}},
        {"eventName": "INSERT", "dynamodb": {"SequenceNumber": "1", "ApproximateCreationDateTime": "now"}},
        {"eventName": "INSERT", "dynamodb": {"SequenceNumber": "1", "ApproximateCreationDateTime": float("inf")}},
        {"eventName": "INSERT", "dynamodb": {"SequenceNumber": 1, "ApproximateCreationDateTime": 1}},
    ],
)
def test_unreadable_records_are_rejected_as_malformed_without_raising(record):
    outcome = parse_one(record, SETTINGS)
    assert outcome.reason is Reason.MALFORMED_RECORD
    assert outcome.sequence is None


def test_acceptance_depends_on_arrival_not_on_when_the_record_is_read(monkeypatch):
    # The same record must parse the same way on a retry a day later.
    record = counter_record("c", ARRIVAL_MS - 22 * HOUR_MS, arrival_s=ARRIVAL_MS / 1000)
    first = parse_one(record, SETTINGS)
    monkeypatch.setattr("time.time", lambda: ARRIVAL_MS / 1000 + 86_400)
    assert parse_one(record, SETTINGS) == first
    assert isinstance(first, CounterEvent)


@pytest.mark.parametrize("name", ["a", "page-views", "ünïcode ✓", "x" * 255, "with space", "#".join("ab")])
def test_valid_counter_names(name):
    assert validate_counter(name) == name


def test_records_that_arrived_before_count_from_are_routine_skips_and_the_cutoff_second_counts():
    settings = Settings(count_from_ms=ARRIVAL_MS)
    before = stream_record(image(id="1", counter="c", ts=ARRIVAL_MS - 5_000), arrival_s=ARRIVAL_MS / 1000 - 1)
    at = stream_record(image(id="2", counter="c", ts=ARRIVAL_MS - 5_000), arrival_s=ARRIVAL_MS / 1000)

    (skipped,) = parse_record(before, settings)
    assert skipped.reason is Reason.BEFORE_COUNT_FROM
    assert not skipped.reason.is_rejection
    (counted,) = parse_record(at, settings)
    assert isinstance(counted, CounterEvent)


@pytest.mark.parametrize("event_name", ["MODIFY", "REMOVE"])
def test_modify_and_remove_without_an_arrival_time_are_skipped_not_rejected(event_name):
    # Routine skips must not fire the rejection alarm because a field they never use is absent.
    record = stream_record(None, event_name=event_name)
    del record["dynamodb"]["ApproximateCreationDateTime"]
    outcome = parse_one(record, SETTINGS)
    assert outcome.reason is Reason.NOT_INSERT


@pytest.mark.parametrize(
    ("missing", "named"),
    [("ApproximateCreationDateTime", "ApproximateCreationDateTime"), ("SequenceNumber", "SequenceNumber")],
)
def test_a_malformed_record_names_the_field_it_lacks(missing, named):
    record = counter_record("c", ARRIVAL_MS, arrival_s=ARRIVAL_MS / 1000)
    del record["dynamodb"][missing]
    outcome = parse_one(record, SETTINGS)
    assert outcome.reason is Reason.MALFORMED_RECORD
    assert named in outcome.detail
    other = {"ApproximateCreationDateTime", "SequenceNumber"} - {named}
    assert not any(field in outcome.detail for field in other)


def test_an_event_time_in_epoch_seconds_is_called_out_in_the_rejection():
    outcome = parse(image(id="1", counter="c", ts=ARRIVAL_MS // 1000 - 100))
    assert outcome.reason is Reason.LATE_EVENT
    assert "epoch seconds" in outcome.detail and "milliseconds" in outcome.detail


def test_a_genuinely_old_millisecond_time_is_not_called_seconds():
    outcome = parse(image(id="1", counter="c", ts=ARRIVAL_MS - 100 * 24 * HOUR_MS))
    assert outcome.reason is Reason.LATE_EVENT
    assert "seconds" not in outcome.detail
