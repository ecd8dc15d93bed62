"""The alert function's entry point on moto: the once-a-minute evaluation after the stream function's commits."""

from datetime import UTC, datetime

import pytest
from factories import LambdaContext, image, stream_record, window_event
from freezegun import freeze_time
from moto_tables import COUNTS

from tally.core.windows import now_ms
from tally.functions import alert_schedule, stream_handler


@pytest.fixture
def scheduled(alert_sink):
    alert_schedule.scheduled_table.cache_clear()
    yield alert_schedule.scheduled
    alert_schedule.scheduled_table.cache_clear()


def test_the_scheduled_entry_clears_alarms_and_says_what_it_did(scheduled, alert_sink, monkeypatch, dynamodb):
    monkeypatch.setenv("COUNTS_TABLE", COUNTS)
    now = now_ms()
    records = [stream_record(image(id=str(n), ts=now, ip="a"), arrival_s=now / 1000) for n in range(3)]
    stream_handler.handler(window_event(records, final=True), LambdaContext())
    assert [e["state"] for e in alert_sink.drain()] == ["ALARM"]
    with freeze_time(datetime.fromtimestamp((now + 11 * 60_000) / 1000, UTC)):
        done = scheduled({"id": "tick-1", "source": "aws.events"}, LambdaContext())
    assert done["crossings"] == 1 and done["delivered"] == 1
    [cleared] = alert_sink.drain()
    assert (cleared["state"], cleared["total"]) == ("OK", 0)
    stream_handler.counts_table.cache_clear()
