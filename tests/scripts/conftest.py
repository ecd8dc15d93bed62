"""Fixtures of the script tests: moto's server on a loopback port, fresh tables, the in-process handler."""

from __future__ import annotations

import uuid

import pytest

from handler_state import handler_state_restored
from tally.dynamo.tables import create_tables
from tally.local.aws import MotoServer, Tables, client


@pytest.fixture(scope="module")
def moto_server():
    """moto's server on a free loopback port, started by the tests themselves."""
    with MotoServer() as server:
        yield server


@pytest.fixture
def server_env(moto_server, monkeypatch):
    """Point boto3 (and the scripts) at the server, the way `make demo` tells users to."""
    for name, value in moto_server.environment().items():
        monkeypatch.setenv(name, value)
    return moto_server


@pytest.fixture
def tables(server_env, monkeypatch) -> Tables:
    """Both tables under names no other test uses (the server outlives a test)."""
    suffix = uuid.uuid4().hex[:8]
    created = Tables(events=f"events-{suffix}", counts=f"counts-{suffix}")
    create_tables(client("dynamodb"), created.events, created.counts)
    monkeypatch.setenv("EVENTS_TABLE", created.events)
    monkeypatch.setenv("COUNTS_TABLE", created.counts)
    return created


@pytest.fixture
def fresh_handler_cache():
    """The in-process handler as the scripts set it up, undone afterwards."""
    with handler_state_restored():
        yield
