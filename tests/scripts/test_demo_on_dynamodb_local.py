"""The demo on Amazon's DynamoDB Local (TALLY_LOCAL_BACKEND=dynamodb-local): its verdicts, and its refusals."""

from __future__ import annotations

import pytest
from script_support import load_script

from tally.local.dynamodb_local import ENV_BACKEND

pytestmark = [pytest.mark.dynamodb_local, pytest.mark.usefixtures("fresh_handler_cache")]

local_pipeline = load_script("local_pipeline")


@pytest.fixture
def on_dynamodb_local(monkeypatch):
    monkeypatch.setenv(ENV_BACKEND, "dynamodb-local")


def test_the_demo_matches_brute_force_on_dynamodb_local(on_dynamodb_local, capsys):
    # 50 hours: the oldest events are past the minute retention when they arrive, and count in their hour alone.
    argv = ["--hours", "50", "--rate", "3", "6", "--counters", "alpha", "beta", "--window-seconds", "1"]
    assert local_pipeline.main(argv) == 0  # TALLY_LOCAL_BACKEND=dynamodb-local: the demo starts its own server
    out = capsys.readouterr().out
    assert "DynamoDB Local at http://127.0.0.1:" in out
    assert "VERDICT: MATCH — both plans" in out and "MISMATCH" not in out


def test_the_blog_demo_matches_counts_sums_averages_and_quantiles_on_dynamodb_local(dynamodb_local, capsys):
    argv = ["--shape", "blog", "--hours", "26", "--rate", "3", "6", "--window-seconds", "1"]
    assert local_pipeline.main(argv, server=dynamodb_local) == 0
    out = capsys.readouterr().out
    assert f"DynamoDB Local at {dynamodb_local.endpoint_url}" in out
    assert "VERDICT: MATCH — counts, sums and averages" in out and "MISMATCH" not in out
    assert "quantiles in the window" in out


def test_the_jobs_demo_matches_on_dynamodb_local_with_ttl_off(dynamodb_local, monkeypatch, capsys):
    """DynamoDB Local streams its TTL deletions without the REMOVE event name and the service identity (pinned in
    tests/local/test_backends.py): the demo leaves TTL off there, and every other change of a job still counts."""
    monkeypatch.setattr(local_pipeline.console, "width", 200)
    argv = ["--shape", "jobs", "--hours", "26", "--rate", "3", "6", "--window-seconds", "1"]
    assert local_pipeline.main(argv, server=dynamodb_local) == 0
    out = capsys.readouterr().out
    assert f"DynamoDB Local at {dynamodb_local.endpoint_url}" in out
    assert "VERDICT: MATCH" in out and "MISMATCH" not in out
    assert "TTL is off" in out and "expired/done" not in out and "expired/placed" not in out
    for counter in ("done/provider-1", "cancelled/provider-2", "deleted/all"):
        assert counter in out
    assert dynamodb_local.client("dynamodb").list_tables()["TableNames"]  # a server it was given stays up


def test_an_unknown_backend_is_one_line_naming_the_choices(monkeypatch, capsys):
    monkeypatch.setenv(ENV_BACKEND, "mongo")
    assert local_pipeline.main([]) == 2
    assert "TALLY_LOCAL_BACKEND=mongo: expected one of moto, dynamodb-local" in capsys.readouterr().err


def test_the_adoption_demo_which_exports_to_s3_is_refused_in_one_line(on_dynamodb_local, capsys):
    adopt_demo = load_script("adopt_demo")
    with pytest.raises(SystemExit) as exited:
        adopt_demo.main([])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "exports the events table to S3, which DynamoDB Local cannot do" in error
