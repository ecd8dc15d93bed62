"""Shared fixtures: moto's in-process DynamoDB with both tally tables."""

from __future__ import annotations

import os

import boto3
import pytest
from moto import mock_aws

from tally.dynamo import CountsTable, create_tables
from tally.local.aws import OFFLINE_ENVIRONMENT
from tally.core.settings import Settings

from moto_tables import COUNTS, EVENTS, no_sleep_backoff



TEST_ENVIRONMENT = {
    **OFFLINE_ENVIRONMENT,
    "POWERTOOLS_METRICS_NAMESPACE": "Tally",
    "POWERTOOLS_SERVICE_NAME": "tally",
}


def pytest_configure(config):
    """Dummy credentials and a region for the whole session, so nothing can reach a real account."""
    os.environ.update(TEST_ENVIRONMENT)
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        os.environ.pop(name, None)

    from tally.local import moto_fixes

    moto_fixes.install()


def pytest_collection_modifyitems(config, items):
    """Under `make test-anytime` the DynamoDB Local tier is skipped: DynamoDB Local stamps stream records with its
    own Java clock, which the moved clock does not reach (libfaketime, the one way to move it, sets Java spinning);
    the same code runs under the moved clock on moto."""
    if not os.environ.get("TALLY_TEST_CLOCK"):
        return
    skip = pytest.mark.skip(reason="DynamoDB Local keeps the real clock under make test-anytime")
    for item in items:
        if "dynamodb_local" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def settings() -> Settings:
    return Settings(counts_table=COUNTS, events_table=EVENTS)


@pytest.fixture
def dynamodb():
    """A low-level DynamoDB client on moto with both tables created."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables(client, EVENTS, COUNTS)
        yield client


@pytest.fixture
def counts_table(dynamodb, settings) -> CountsTable:
    return CountsTable(dynamodb, COUNTS, settings, backoff=no_sleep_backoff)
