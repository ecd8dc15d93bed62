"""The in-account backfill's Lambda functions: one for each stage the state machine runs, and no other."""

from __future__ import annotations

import inspect

import pytest

from tally.functions import backfill_stages
from tally.parallel_backfill import ENV_BUCKET, STAGES, PlanRefused


def test_each_stage_runs_a_function_of_this_module_and_each_function_is_a_stage():
    assert {stage.handler_path.rpartition(".")[0] for stage in STAGES} == {backfill_stages.__name__}
    functions = {
        name for name, value in vars(backfill_stages).items()
        if inspect.isfunction(value) and value.__module__ == backfill_stages.__name__ and not name.startswith("_")
    }
    assert functions == {stage.handler for stage in STAGES}


def test_a_stage_without_the_backfills_bucket_is_refused_naming_the_setting(monkeypatch):
    monkeypatch.delenv(ENV_BUCKET, raising=False)
    with pytest.raises(PlanRefused, match=ENV_BUCKET):
        backfill_stages.plan({"exportArn": "arn:aws:dynamodb:us-east-1:123456789012:table/orders/export/01"})
