"""Shared fixtures: moto's in-process DynamoDB with both tally tables, and the two loopback servers.

Tests that use the ``dynamodb_local`` fixture (directly or through a ``backend``
parameter from backends.py) form the ``dynamodb_local`` tier: they are marked
so, and ``pytest -m dynamodb_local`` runs them alone (``-m "not dynamodb_local"``
everything else). DynamoDB Local starts once per test process (each xdist
worker has its own) and needs Java and ``npm ci``.
"""

from __future__ import annotations

import functools
import gc
import os
from pathlib import Path

import boto3
import botocore.loaders
import botocore.session
import freezegun
import hypothesis
import pytest
from moto import mock_aws

from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.local.aws import OFFLINE_ENVIRONMENT, MotoServer
from tally.local.cli import ScriptError
from tally.local.dynamodb_local import DynamoDBLocalServer
from tally.core.settings import Settings

from moto_tables import COUNTS, EVENTS, no_sleep_backoff



# Property tests judge answers, never speed (the bench measures that): no example fails for taking longer than
# Hypothesis's default 200 ms, which a first example's imports or a loaded machine can exceed.
hypothesis.settings.register_profile("tally", deadline=None)
hypothesis.settings.load_profile("tally")

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
    # moto gives boto3 a new default session on each mock, and each new session parsed botocore's JSON
    # models again (about 90 ms per client made in a fresh mock): the sessions share one loader instead,
    # which reads each file once, as one session's clients always do.
    botocore.session.create_loader = functools.lru_cache(maxsize=None)(botocore.loaders.create_loader)
    # The suite allocates millions of short-lived objects (moto's items and parse trees, botocore's requests)
    # beside a large long-lived heap (the CDK's jsii bindings, botocore's models): at Python's default
    # thresholds the collector spent about a twelfth of a worker's time rescanning that heap. Collecting
    # the young generation every 10,000 allocations instead of 700 and the old ones rarer frees the same
    # cycles, later.
    gc.set_threshold(10_000, 20, 20)
    # freeze_time patches every loaded module that holds a clock function, and looks at each module's names to
    # know whether it changed since: the CDK's 1,400 lazily loaded modules answer differently every time, so
    # once a stack test had loaded them, each freeze in that worker took 0.1 to 0.5 s (and the first 3 s).
    # These libraries read no clock a test moves; moto, botocore and tally are still patched.
    freezegun.configure(extend_ignore_list=[
        "aws_cdk", "constructs", "cdk_nag", "jsii", "publication", "sympy", "networkx", "mpmath",
    ])


# The test files that take longest, longest first. `make test` hands whole files to its workers
# (--dist loadfile --no-loadscope-reorder) in collection order: started first, they no longer leave one
# worker running a long file alone at the end. The order changes only how long the suite takes. The first two
# are long in `make test-sweeps` (the closing test's years, minutes each, go out apart: APART below; the rule
# changes on DynamoDB Local wait for whole minutes) and short in `make test`; the stack tests, run together, are
# make test's longest.
LONGEST_FILES_FIRST = (
    "test_closing.py",
    "faults/test_rule_changes.py",
    # The previous release against this one, in make test-sweeps only: minutes each, its venv built first.
    "upgrade/test_rollback.py",
    "upgrade/test_upgrade.py",
    "upgrade/test_two_readers.py",
    "stacks/test_wheel.py",
    "faults/test_exact_counts.py",
    "bench/test_bench_stored.py",
    "scripts/test_run_stream.py",
    "scripts/test_local_pipeline.py",
    "faults/test_read_isolation.py",
    "scripts/test_serve.py",
    "test_top.py",
    "scripts/test_deploy_local.py",
    "faults/test_reread.py",
    "dashboard/test_dashboard_aggregates.py",
    "bench/test_bench_cost.py",
    "local/test_close_machine.py",
    "test_reader.py",
    "scripts/test_query_window.py",
    "scripts/test_script_errors.py",
    "scripts/test_backfill_command.py",
    "test_adopt_days.py",
    "test_reader_calendar_long.py",
    "test_reader_calendar.py",
    "scripts/test_rules_demo.py",
    "dashboard/test_dashboard_page.py",
)


# Folders whose files share a process's costly session fixture, so that one worker runs them all.
TOGETHER = (
    "tests/stacks/",  # the session's syntheses (tests/stacks/conftest.py) and the CDK's Node process: about 10 s of CPU
    "tests/dashboard/",  # one headless Chromium and its driver (tests/dashboard/conftest.py): seconds to start
)


# Sweep members of a file that build a module fixture of their own, minutes long: each goes to a worker as if it
# were a file of its own (its test ids begin with the fixture's), so that `make test-sweeps` builds the year on
# moto and on DynamoDB Local at once, not one after the other in a single worker while the other has finished.
APART = {
    "tests/test_closing.py": ("moto-year", "dynamodb-local-year"),
}


def pytest_xdist_make_scheduler(config, log):
    """Whole files to each worker (--dist loadfile), every file of a TOGETHER folder to one: a second worker
    would start its session fixture again. The APART members of a file go out on their own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FoldersTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            ids = nodeid.partition("[")[2]
            for member in APART.get(scope, ()):
                if ids.startswith((f"{member}-", f"{member}]")):
                    return f"{scope}[{member}]"
            return next((folder for folder in TOGETHER if scope.startswith(folder)), scope)

    return FoldersTogether(config, log)


def longest_files_first(items: list[pytest.Item]) -> None:
    """Put the tests of LONGEST_FILES_FIRST first, in its order, each file's tests kept in theirs."""
    here = Path(__file__).parent
    missing = [name for name in LONGEST_FILES_FIRST if not (here / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FILES_FIRST names files that are gone: {missing}")
    rank = {str(here / name): place for place, name in enumerate(LONGEST_FILES_FIRST)}
    order = {id(item): index for index, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(str(item.path), len(rank)), order[id(item)]))


def pytest_collection_modifyitems(config, items):
    """The longest test files first (LONGEST_FILES_FIRST). Every test that runs on DynamoDB Local is in the
    dynamodb_local tier, however it reaches the server.

    Under `make test-anytime` the DynamoDB Local tier is skipped: DynamoDB Local stamps stream records with its
    own Java clock, which the moved clock does not reach (libfaketime, the one way to move it, sets Java spinning);
    the same code runs under the moved clock on moto."""
    longest_files_first(items)
    for item in items:
        if "dynamodb_local" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.dynamodb_local)
    if not os.environ.get("TALLY_TEST_CLOCK"):
        return
    skip = pytest.mark.skip(reason="DynamoDB Local keeps the real clock under make test-anytime")
    # Node signs with its own clock, which the moved clock does not reach: the Python server checking the
    # signature would find it two days (or years) old. The Python client's signing runs moved.
    skip_node = pytest.mark.skip(reason="Node keeps the real clock under make test-anytime")
    for item in items:
        if "dynamodb_local" in item.keywords:
            item.add_marker(skip)
        elif "node_clock" in item.keywords:
            item.add_marker(skip_node)


@pytest.fixture(scope="session")
def dynamodb_local():
    """Amazon's DynamoDB Local on a free loopback port, once per test process; tables persist across tests."""
    try:
        server = DynamoDBLocalServer().start()
    except ScriptError as error:  # no Java, or no `npm ci`: one line saying which
        pytest.fail(str(error), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def shared_moto_server():
    """moto's server on a free loopback port, once per test process (moto keeps its tables per process)."""
    with MotoServer() as server:
        yield server


@pytest.fixture
def local_server(request):
    """The running server a ``backend`` parameter (``BACKENDS``) names."""
    name = request.getfixturevalue("backend")
    return request.getfixturevalue("dynamodb_local" if name == "dynamodb-local" else "shared_moto_server")


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


@pytest.fixture
def s3():
    """moto's S3 with the bucket exports are written to (the backfill's stages and export reading)."""
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="exports")
        yield client
