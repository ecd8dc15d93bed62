"""The close's state machine run here (``state_machine.run_close``) against moto's server: its steps, in worker
processes as Step Functions runs them, write exactly the items ``Closer.close_due`` writes, and an execution
started again writes nothing."""

from __future__ import annotations

import uuid

from closing_support import ZONE, calendar_environment, calendar_settings, copy_table, count_a_month, long_items

from tally.closing import Closer
from tally.core.windows import now_ms
from tally.dynamo.closing import PROGRESS_PARTITION
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.local.state_machine import run_close


def test_the_machines_steps_close_what_close_due_closes_and_a_second_execution_writes_nothing(shared_moto_server):
    client = shared_moto_server.client("dynamodb")
    suffix = uuid.uuid4().hex[:8]
    mine, twin = f"counts-{suffix}", f"counts-twin-{suffix}"
    now = now_ms()
    for table in (mine, twin):
        create_tables(client, f"events-{table}", table)
    count_a_month(client, calendar_settings(mine), now)
    copy_table(client, mine, twin)
    environment = {**shared_moto_server.environment(), **calendar_environment(mine)}
    said: list[str] = []

    output = run_close({}, environment=environment, workers=4, say=said.append)
    expected = Closer(CountsTable(client, twin, calendar_settings(twin), previous_release_until_ms=0)).close_due(now_ms())

    assert sorted(output["periods"]) == sorted(expected.periods)
    assert output["closed"]["written"] == expected.written > 50
    assert output["closed"]["already_closed"] == 0 and output["closed"]["counters"] > expected.counters  # runs of a week
    assert long_items(client, mine) == long_items(client, twin)
    assert set(output["progress"]) == {"UTC", ZONE}
    assert said[0].startswith("   plan: ") and said[1].startswith("   days: ") and said[2].startswith("   months: ")

    # An execution whose finish never ran: the same periods planned again, every part found closed.
    before = long_items(client, mine)
    for zone in ("UTC", ZONE):
        client.delete_item(TableName=mine, Key={"pk": {"S": PROGRESS_PARTITION}, "sk": {"S": zone}})
    again = run_close({}, environment=environment, workers=4)
    assert sorted(again["periods"]) == sorted(output["periods"])
    assert (again["closed"]["written"], again["closed"]["already_closed"]) == (0, expected.written)
    assert long_items(client, mine) == before
