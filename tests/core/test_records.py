import json
from pathlib import Path

import pytest

from factories import counter_record, image, parse_one, stream_record
from tally.core.records import CounterEvent, Reason, Rejection, parse_record, validate_counter
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS

ARRIVAL_MS = 1_795_000_000_000
SETTINGS = Settings()
EVENTS = Path(__file__).resolve().parents[1] / "events"


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


# --- transitions, deletions and per-rule time --------------------------------------------------

JOB_RULES = json.dumps(
    [
        {"name": "placed", "counter": "placed/{providerId}"},
        {"name": "done", "counter": "done/{providerId}", "becomes": {"status": {"equals": "done"}}, "time": "doneAt"},
        {
            "name": "done-big",
            "counter": "done-big",
            "when": {"size": {"equals": "big"}},
            "becomes": {"status": {"equals": "done"}},
            "time": "@arrival",
        },
        {"name": "deleted", "counter": "deleted/{status}", "on": "REMOVE", "deletedBy": "user", "sum": "amount"},
        {"name": "expired", "counter": "expired", "on": "REMOVE", "deletedBy": "ttl", "time": "@arrival"},
        {"name": "removed", "counter": "removed", "on": "REMOVE", "time": "@arrival"},
    ]
)
JOBS = Settings(time_attribute="placedAt", rules=parse_rules(JOB_RULES))
PLACED_MS, DONE_MS = ARRIVAL_MS - 30 * MINUTE_MS, ARRIVAL_MS - 2 * MINUTE_MS


def job(status="placed", **extra):
    attributes = {"id": "j1", "providerId": "p1", "placedAt": PLACED_MS, "status": status, "amount": 12, **extra}
    if status == "done":
        attributes.setdefault("doneAt", DONE_MS)
    return image(**attributes)


def change(new=None, old=None, event_name="MODIFY", by_ttl=False, sequence="900"):
    record = stream_record(new, old_image=old, event_name=event_name, by_ttl=by_ttl, arrival_s=ARRIVAL_MS / 1000, sequence=sequence)
    return parse_record(record, JOBS)


def counted(outcomes):
    return sorted((o.counter, o.event_ms) for o in outcomes if isinstance(o, CounterEvent))


def test_an_item_inserted_already_done_counts_once_at_its_own_time():
    outcomes = change(job("done"), event_name="INSERT")
    assert counted(outcomes) == [("done/p1", DONE_MS), ("placed/p1", PLACED_MS)]


def test_placed_to_done_counts_once_and_done_to_done_not_again():
    assert counted(change(job("done"), job("placed"))) == [("done/p1", DONE_MS)]
    [skipped] = change(job("done", note="edited"), job("done"))
    assert skipped.reason is Reason.NO_RULE_MATCHED and not skipped.reason.is_rejection


def test_done_placed_done_counts_twice():
    history = [job("placed"), job("done"), job("placed"), job("done", doneAt=DONE_MS + 1000)]
    counts = [counted(change(new, old)) for old, new in zip(history, history[1:])]
    assert counts == [[("done/p1", DONE_MS)], [], [("done/p1", DONE_MS + 1000)]]


def test_when_holds_on_the_new_image_and_becomes_is_judged_against_the_old():
    # Growing big while done is no transition to done; becoming done while big is.
    assert counted(change(job("done", size="big"), job("done", size="small"))) == []
    assert counted(change(job("done", size="big"), job("placed", size="big"))) == [
        ("done-big", ARRIVAL_MS),
        ("done/p1", DONE_MS),
    ]


def test_a_change_without_its_old_image_is_a_counted_rejection_naming_the_rule():
    outcomes = change(job("done", size="big"))
    assert {(o.reason, o.rule) for o in outcomes} == {
        (Reason.MISSING_OLD_IMAGE, "done"),
        (Reason.MISSING_OLD_IMAGE, "done-big"),
    }
    assert all(o.reason.is_rejection and "NEW_AND_OLD_IMAGES" in o.detail and o.arrival_ms == ARRIVAL_MS for o in outcomes)
    # A change that could not have been a transition needs no old image.
    [skipped] = change(job("placed"))
    assert skipped.reason is Reason.NO_RULE_MATCHED


def test_a_change_without_its_new_image_is_missing_image():
    [outcome] = change(None, job("placed"))
    assert outcome.reason is Reason.MISSING_IMAGE and "MODIFY without NewImage" in outcome.detail


def test_deletions_are_judged_on_the_old_image_and_told_apart_by_who_made_them():
    by_user = change(None, job("cancelled"), event_name="REMOVE")
    assert counted(by_user) == [("deleted/cancelled", PLACED_MS), ("removed", ARRIVAL_MS)]
    assert [o.units for o in by_user if o.counter == "deleted/cancelled"] == [1_200_000_000]
    by_ttl = change(None, job("done"), event_name="REMOVE", by_ttl=True)
    assert counted(by_ttl) == [("expired", ARRIVAL_MS), ("removed", ARRIVAL_MS)]


def test_a_deletion_without_its_old_image_is_rejected_once_per_rule_that_would_judge_it():
    outcomes = change(None, None, event_name="REMOVE", by_ttl=True)
    assert sorted((o.reason.value, o.rule) for o in outcomes) == [
        ("missing_old_image", "expired"),
        ("missing_old_image", "removed"),
    ]


def test_only_the_service_identity_marks_a_ttl_deletion():
    record = stream_record(None, old_image=job(), event_name="REMOVE", arrival_s=ARRIVAL_MS / 1000)
    record["userIdentity"] = {"type": "AssumedRole", "principalId": "AIDAEXAMPLE:ops"}
    assert "expired" not in [o.counter for o in parse_record(record, JOBS) if isinstance(o, CounterEvent)]


def test_a_rule_of_its_own_time_is_rejected_apart_from_the_table_wide_time():
    no_placed_at = job("done")
    del no_placed_at["placedAt"]
    outcomes = change(no_placed_at, event_name="INSERT")
    assert counted(outcomes) == [("done/p1", DONE_MS)]
    [rejection] = [o for o in outcomes if isinstance(o, Rejection)]
    assert (rejection.reason, rejection.rule) == (Reason.MISSING_TIME, None)
    late = change(job("done", doneAt=ARRIVAL_MS - 100 * DAY_MS), job("placed"))
    assert [(o.reason, o.rule) for o in late] == [(Reason.LATE_EVENT, "done")]
    in_seconds = change(job("done", doneAt=DONE_MS // 1000), job("placed"))
    assert "doneAt looks like epoch seconds" in in_seconds[0].detail


def test_arrival_time_is_never_late_or_in_the_future():
    outcomes = change(None, job("done", placedAt=0), event_name="REMOVE", by_ttl=True)
    assert counted(outcomes) == [("expired", ARRIVAL_MS), ("removed", ARRIVAL_MS)]


def test_a_modify_rule_without_becomes_counts_every_change_that_meets_when():
    settings = Settings(rules=parse_rules('[{"name": "edits", "counter": "edits/{counter}", "on": "MODIFY"}]'))
    record = stream_record(image(counter="c", ts=ARRIVAL_MS), event_name="MODIFY", arrival_s=ARRIVAL_MS / 1000)
    assert [o.counter for o in parse_record(record, settings)] == ["edits/c"]
    insert = stream_record(image(counter="c", ts=ARRIVAL_MS), arrival_s=ARRIVAL_MS / 1000)
    assert parse_one(insert, settings).reason is Reason.NOT_INSERT


def test_the_recorded_shapes_of_changes_and_deletions_count_as_their_rules_say():
    # INSERT, MODIFY with both images, a deletion by a request and one by TTL, as DynamoDB Streams delivers them.
    event = json.loads((EVENTS / "dynamodb_stream_transitions.json").read_text())
    outcomes = [parse_record(record, JOBS) for record in event["Records"]]
    kinds = [record["eventName"] for record in event["Records"]]
    assert kinds == ["INSERT", "MODIFY", "MODIFY", "REMOVE", "REMOVE"]
    names = [sorted(o.counter for o in record if isinstance(o, CounterEvent)) for record in outcomes]
    assert names == [
        ["placed/provider-7"],
        ["done/provider-7"],
        [],  # done -> done with a note: no second transition
        ["deleted/placed", "removed"],
        ["expired", "removed"],
    ]
    assert all(isinstance(o, CounterEvent) or not o.reason.is_rejection for record in outcomes for o in record)
