"""The two servers that play DynamoDB on this machine, as a test parameter.

``@pytest.mark.parametrize("backend", BACKENDS)`` runs a test on moto's server and
on DynamoDB Local; the ``local_server`` fixture (conftest.py) gives the running one.
"""

import uuid

import boto3
import pytest
from factories import counter_record, window_event
from tally.core.settings import Settings
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.tables import create_tables
from tally.invocation import process

BACKENDS = ["moto", pytest.param("dynamodb-local", marks=pytest.mark.dynamodb_local)]


def count_on_server(server, monkeypatch, events, arrival_ms: int, name: str) -> str:
    """Point the environment at ``server`` (a ``local_server``), make fresh tables named after ``name`` (the
    server outlives the test), commit ``events`` ((counter, event ms) pairs, arriving at ``arrival_ms``) through
    the handler's path with the directory recording, and give the counts table's name."""
    for variable, value in server.environment().items():
        monkeypatch.setenv(variable, value)
    counts = f"{name}-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("COUNTS_TABLE", counts)
    client = boto3.client("dynamodb")
    create_tables(client, f"{name}-events-{counts[-8:]}", counts)
    settings = Settings()
    table, directory = CountsTable(client, counts, settings), CounterDirectory(client, counts, settings)
    records = [counter_record(counter, ms, arrival_s=arrival_ms / 1000) for counter, ms in sorted(events, key=lambda e: e[1])]
    process(window_event(records, final=True), directory.recording(table.commit), settings)
    return counts
