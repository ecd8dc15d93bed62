"""Delivery replays Lambda's event source mapping: batches, tumbling windows, state, retries."""

from __future__ import annotations

import pytest

from factories import SHARD_ID, STREAM_ARN, LambdaContext, counter_record, stream_record
from moto_tables import COUNTS, read_counts
from tally.local.delivery import DeliveryConfig, DeliveryFailed, ShardDelivery, cut_invocations

T0 = 1_795_000_040  # epoch seconds: 2026-11-18T11:07:20Z


def arriving(*seconds: float) -> list[dict]:
    return [stream_record(arrival_s=s) for s in seconds]


def cut(records, **config) -> list[dict]:
    return cut_invocations(records, shard_id=SHARD_ID, stream_arn=STREAM_ARN, config=DeliveryConfig(**config))


class Recorder:
    """A handler that remembers every event and returns a state counting the window's records."""

    def __init__(self, fail_on: dict[int, int] | None = None) -> None:
        self.events: list[dict] = []
        self.input_states: list[dict] = []
        self.fail_on = dict(fail_on or {})  # call number -> how many times it still fails

    def __call__(self, event: dict, context) -> dict:
        self.events.append(event)
        self.input_states.append(dict(event.get("state", {})))
        call = len({id(e) for e in self.events})
        if self.fail_on.get(call, 0) > 0:
            self.fail_on[call] -= 1
            raise RuntimeError(f"injected failure of call {call}")
        if "window" not in event:
            return {}
        seen = event["state"].get("seen", 0) + len(event["Records"])
        return {"state": {"seen": seen}}


def test_windows_follow_arrival_and_the_last_batch_of_each_window_is_final():
    records = arriving(T0, T0 + 1, T0 + 2, T0 + 40, T0 + 41)  # minute of T0, then the next minute
    events = cut(records, batch_size=2, window_seconds=60)
    assert [len(e["Records"]) for e in events] == [2, 1, 2]
    assert [e["isFinalInvokeForWindow"] for e in events] == [False, True, True]
    assert [e["window"] for e in events] == [
        {"start": "2026-11-18T11:07:00Z", "end": "2026-11-18T11:08:00Z"},
        {"start": "2026-11-18T11:07:00Z", "end": "2026-11-18T11:08:00Z"},
        {"start": "2026-11-18T11:08:00Z", "end": "2026-11-18T11:09:00Z"},
    ]
    for event in events:
        assert event["shardId"] == SHARD_ID
        assert event["eventSourceARN"] == STREAM_ARN
        assert event["state"] == {}
        assert event["isWindowTerminatedEarly"] is False


def test_a_window_filling_its_batches_exactly_still_ends_with_a_final_batch():
    events = cut(arriving(T0, T0 + 1, T0 + 2, T0 + 3), batch_size=2, window_seconds=60)
    assert [(len(e["Records"]), e["isFinalInvokeForWindow"]) for e in events] == [(2, False), (2, True)]


def test_a_record_stamped_before_the_open_window_joins_it():
    records = arriving(T0 + 45, T0 + 30)  # second arrival is 15 s earlier, still stream order
    records.append(stream_record(arrival_s=T0 + 46))
    events = cut(records, batch_size=10, window_seconds=15)
    assert [len(e["Records"]) for e in events] == [3]


def test_arrival_may_be_a_datetime_as_boto3_returns_it():
    from datetime import UTC, datetime

    records = arriving(T0)
    records[0]["dynamodb"]["ApproximateCreationDateTime"] = datetime.fromtimestamp(T0 + 60, UTC)
    [event] = cut(records, window_seconds=60)
    assert event["window"]["start"] == "2026-11-18T11:08:00Z"


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 100])
@pytest.mark.parametrize("window_seconds", [1, 30])
def test_delivery_in_any_chunks_invokes_the_events_cut_from_all_records(chunk, window_seconds):
    records = arriving(*[T0 + i * 4 for i in range(25)])  # 100 s of records: several windows
    recorder = Recorder()
    delivery = ShardDelivery(
        recorder, shard_id=SHARD_ID, stream_arn=STREAM_ARN, config=DeliveryConfig(3, window_seconds)
    )
    for start in range(0, len(records), chunk):
        delivery.deliver(records[start : start + chunk])
    delivery.close()

    expected = cut(records, batch_size=3, window_seconds=window_seconds)
    strip = lambda event: {k: v for k, v in event.items() if k != "state"}  # noqa: E731
    assert [strip(e) for e in recorder.events] == [strip(e) for e in expected]
    assert delivery.invocations == delivery.attempts == len(expected)


def test_state_travels_within_a_window_and_starts_empty_in_the_next():
    records = arriving(*[T0 + i for i in range(7)], *[T0 + 60 + i for i in range(2)])
    recorder = Recorder()
    delivery = ShardDelivery(recorder, shard_id=SHARD_ID, stream_arn=STREAM_ARN, config=DeliveryConfig(3, 60))
    delivery.deliver(records)
    delivery.close()
    assert recorder.input_states == [{}, {"seen": 3}, {"seen": 6}, {}]
    assert [e["isFinalInvokeForWindow"] for e in recorder.events] == [False, False, True, True]


def test_a_window_stays_open_until_a_later_record_or_close():
    recorder = Recorder()
    delivery = ShardDelivery(recorder, shard_id=SHARD_ID, stream_arn=STREAM_ARN, config=DeliveryConfig(2, 60))
    delivery.deliver(arriving(T0, T0 + 1))
    assert recorder.events == []  # a full batch waits: it may or may not end the window
    assert delivery.open_window_end == (T0 // 60 + 1) * 60
    delivery.deliver(arriving(T0 + 2))
    assert [e["isFinalInvokeForWindow"] for e in recorder.events] == [False]
    delivery.close()
    assert [e["isFinalInvokeForWindow"] for e in recorder.events] == [False, True]
    assert delivery.open_window_end is None


def test_a_failed_invocation_is_retried_with_the_very_same_event():
    recorder = Recorder(fail_on={2: 2})
    retries = []
    delivery = ShardDelivery(
        recorder,
        shard_id=SHARD_ID,
        stream_arn=STREAM_ARN,
        config=DeliveryConfig(2, 60),
        on_retry=lambda event, error, attempt: retries.append((event, str(error), attempt)),
    )
    delivery.deliver(arriving(*range(T0, T0 + 5)))
    delivery.close()

    second = recorder.events[1]
    assert recorder.events[2] is second and recorder.events[3] is second
    assert recorder.input_states[1:4] == [{"seen": 2}] * 3
    assert [(event is second, attempt) for event, _, attempt in retries] == [(True, 1), (True, 2)]
    assert retries[0][1] == "injected failure of call 2"
    assert recorder.input_states[4] == {"seen": 4}  # the retried call's state reached the next one
    assert (delivery.invocations, delivery.attempts) == (3, 5)


def test_delivery_gives_up_after_max_attempts():
    recorder = Recorder(fail_on={1: 99})
    delivery = ShardDelivery(
        recorder, shard_id=SHARD_ID, stream_arn=STREAM_ARN, config=DeliveryConfig(1, 60, max_attempts=3)
    )
    with pytest.raises(DeliveryFailed, match="failed 3 times") as failure:
        delivery.deliver(arriving(T0))
        delivery.close()
    assert failure.value.attempts == 3
    assert failure.value.event is recorder.events[0]
    assert (delivery.invocations, delivery.attempts) == (0, 3)


@pytest.mark.parametrize(
    "bad", [dict(batch_size=0), dict(window_seconds=-1), dict(window_seconds=901), dict(max_attempts=0)]
)
def test_config_refuses_values_lambda_could_not_have(bad):
    with pytest.raises(ValueError):
        DeliveryConfig(**bad)


def test_config_refuses_to_run_tally_without_a_tumbling_window():
    with pytest.raises(ValueError, match="between 1 and 900, got 0: tally counts through a tumbling window"):
        DeliveryConfig(window_seconds=0)


@pytest.fixture
def real_handler(dynamodb, monkeypatch):
    """The stream function's handler on moto, its cached client rebuilt for this test."""
    from tally.functions import stream_handler

    monkeypatch.setenv("COUNTS_TABLE", COUNTS)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    stream_handler.counts_table.cache_clear()
    yield stream_handler.handler
    stream_handler.counts_table.cache_clear()
    # Disabled metrics are collected but never flushed: drop them, or the next test's handler emits them.
    stream_handler.metrics.clear_metrics()


@pytest.mark.parametrize("window_seconds", [1, 60])
def test_the_real_handler_counts_exactly_once_through_a_retry_after_commit(real_handler, dynamodb, window_seconds):
    base_ms = T0 * 1000
    records = [counter_record("clicks", base_ms + i * 5_000) for i in range(30)]  # 150 s: three minutes
    failed = []

    def fail_once_after_commit(event, context):
        response = real_handler(event, context)
        if not failed and event.get("isFinalInvokeForWindow"):
            failed.append(event)
            raise TimeoutError("invocation timed out after its commit")
        return response

    delivery = ShardDelivery(
        fail_once_after_commit,
        shard_id=SHARD_ID,
        stream_arn=STREAM_ARN,
        config=DeliveryConfig(batch_size=4, window_seconds=window_seconds),
        context=LambdaContext(),
    )
    delivery.deliver(records)
    delivery.close()

    assert failed and delivery.attempts == delivery.invocations + 1
    counts = read_counts(dynamodb, "clicks")
    minutes = {sk: n for sk, n in counts.items() if sk.startswith("M#")}
    assert minutes == {"M#2026-11-18T11:07": 8, "M#2026-11-18T11:08": 12, "M#2026-11-18T11:09": 10}
    assert counts["H#2026-11-18T11"] == 30
