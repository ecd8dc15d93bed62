"""Following the backfill's execution on AWS: start or redrive it, read its progress, stop at its end."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber

from tally.local.cli import ScriptError, load_script
from tally import parallel_backfill
from tally.functions import backfill_stages
from tally.local.state_machine import CHILD_ATTEMPTS, ExecutionFollower, _run_child, execution_name, start_or_resume

MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:TallyBackfill"
EXPORT = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/export/01795000000000-abcdef"
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:TallyBackfill:backfill-01795000000000-abcdef"
PLAN = {"exportArn": EXPORT, "bucket": "exports", "work": "orders/tally-backfill/x/4-ranges", "filesKey": "k",
        "files": 3, "items": 900, "ranges": [0, 1, 2, 3]}
NOW = datetime(2026, 11, 27, tzinfo=UTC)

backfill = load_script("backfill")


def sfn_client():
    return boto3.client("stepfunctions", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def described(status: str, **extra) -> dict:
    return {"executionArn": EXECUTION, "stateMachineArn": MACHINE, "status": status, "startDate": NOW, **extra}


def expect_poll(stubber: Stubber, status: str, fold_done: int, commit_done: int, with_history: bool) -> None:
    stubber.add_response("describe_execution", described(status), {"executionArn": EXECUTION})
    if with_history:
        stubber.add_response(
            "get_execution_history",
            {"events": [
                {"timestamp": NOW, "type": "ExecutionStarted", "id": 1},
                {"timestamp": NOW, "type": "TaskStateExited", "id": 2,
                 "stateExitedEventDetails": {"name": "PlanStep", "output": json.dumps(PLAN)}},
            ]},
            {"executionArn": EXECUTION},
        )
    runs = [f"arn:aws:states:us-east-1:123456789012:mapRun:TallyBackfill/{label}:0f9e" for label in ("fold", "commit")]
    stubber.add_response(
        "list_map_runs",
        {"mapRuns": [{"executionArn": EXECUTION, "mapRunArn": arn, "stateMachineArn": MACHINE, "startDate": NOW} for arn in runs]},
        {"executionArn": EXECUTION},
    )
    for arn, done in zip(runs, (fold_done, commit_done)):
        counts = {"pending": 0, "running": 0, "succeeded": done, "failed": 0, "timedOut": 0, "aborted": 0, "total": 4,
                  "resultsWritten": 0}
        stubber.add_response(
            "describe_map_run",
            {"mapRunArn": arn, "executionArn": EXECUTION, "status": "RUNNING", "startDate": NOW, "maxConcurrency": 10,
             "toleratedFailurePercentage": 0.0, "toleratedFailureCount": 0, "itemCounts": counts, "executionCounts": counts},
            {"mapRunArn": arn},
        )


def put_summary(s3, key: str, **fields) -> None:
    s3.put_object(Bucket="exports", Key=f"{PLAN['work']}/{key}", Body=json.dumps(fields).encode())


def test_a_poll_reads_the_plan_once_the_map_runs_and_the_childrens_summaries(s3):
    sfn = sfn_client()
    put_summary(s3, "folded/0000000.json", items=300)
    put_summary(s3, "folded/0000001.json", items=250)
    put_summary(s3, "committed/00002.json", bucket_updates=40, updates_already_applied=2)
    follower = ExecutionFollower(sfn, s3, EXECUTION)
    with Stubber(sfn) as stubber:
        expect_poll(stubber, "RUNNING", fold_done=2, commit_done=1, with_history=True)
        first = follower.poll()
        put_summary(s3, "folded/0000002.json", items=350)
        expect_poll(stubber, "RUNNING", fold_done=3, commit_done=1, with_history=False)  # the plan is not read again
        second = follower.poll()
        stubber.assert_no_pending_responses()

    assert (first.files, first.files_done, first.items, first.items_folded) == (3, 2, 900, 550)
    assert (first.ranges, first.ranges_done, first.bucket_updates) == (4, 1, 42)
    assert (second.files_done, second.items_folded) == (3, 900)


def test_following_ends_at_success_and_a_failure_is_one_line_saying_how_to_redrive(s3):
    sfn = sfn_client()
    slept = []
    with Stubber(sfn) as stubber:
        expect_poll(stubber, "RUNNING", 1, 0, with_history=True)
        expect_poll(stubber, "SUCCEEDED", 3, 4, with_history=False)
        backfill.follow(ExecutionFollower(sfn, s3, EXECUTION), 7.0, sleep=slept.append)
    assert slept == [7.0]

    with Stubber(sfn) as stubber:
        expect_poll(stubber, "FAILED", 3, 2, with_history=True)
        stubber.add_response("describe_execution", described("FAILED", error="States.TaskFailed", cause="throttled"))
        with pytest.raises(ScriptError, match=r"^the backfill's execution FAILED: States.TaskFailed throttled; run this command again to redrive"):
            backfill.follow(ExecutionFollower(sfn, s3, EXECUTION), 7.0, sleep=slept.append)


def test_an_execution_per_export_started_found_running_or_redriven():
    sfn = sfn_client()
    with Stubber(sfn) as stubber:
        stubber.add_response(
            "start_execution", {"executionArn": EXECUTION, "startDate": NOW},
            {"stateMachineArn": MACHINE, "name": execution_name(EXPORT), "input": json.dumps({"exportArn": EXPORT, "rules": ""})},
        )
        assert start_or_resume(sfn, MACHINE, EXPORT) == (EXECUTION, "started")
        for status, how in (("RUNNING", "running"), ("FAILED", "redriven"), ("SUCCEEDED", "done")):
            stubber.add_client_error("start_execution", "ExecutionAlreadyExists")
            stubber.add_response("describe_execution", described(status), {"executionArn": EXECUTION})
            if how == "redriven":
                stubber.add_response("redrive_execution", {"redriveDate": NOW}, {"executionArn": EXECUTION})
            assert start_or_resume(sfn, MACHINE, EXPORT) == (EXECUTION, how)
        stubber.assert_no_pending_responses()
    assert execution_name(EXPORT) == "backfill-01795000000000-abcdef"


def stack_with(outputs: dict[str, str]):
    cloudformation = boto3.client("cloudformation", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(cloudformation)
    stubber.add_response("describe_stacks", {"Stacks": [{
        "StackName": "Tally", "CreationTime": NOW, "StackStatus": "CREATE_COMPLETE",
        "Outputs": [{"OutputKey": key, "OutputValue": value} for key, value in outputs.items()],
    }]})
    stubber.activate()
    return cloudformation


TABLE_OUTPUTS = {"EventsTableName": "orders", "CountsTableName": "counts", "EventsStreamArn": "arn:s", "FailureQueueUrl": "q"}


def test_stack_mode_needs_the_stacks_state_machine_and_says_how_to_get_one(monkeypatch):
    monkeypatch.setattr(backfill, "client", lambda service: stack_with(TABLE_OUTPUTS))
    with pytest.raises(ScriptError, match=r"stack 'Tally' has no backfill in the account: deploy it with -c backfillExports=.*--here$"):
        backfill._state_machine("Tally")
    monkeypatch.setattr(backfill, "client", lambda service: stack_with({**TABLE_OUTPUTS, "BackfillStateMachineArn": MACHINE}))
    assert backfill._state_machine("Tally") == MACHINE


def test_a_child_run_here_is_tried_again_as_the_maps_retrier_does_but_a_refusal_is_final(monkeypatch):
    calls = []

    def flaky(event):
        calls.append(event)
        if len(calls) < CHILD_ATTEMPTS:
            raise ConnectionError("throttled")
        return {"index": event["file"]["index"]}

    monkeypatch.setattr(backfill_stages, "fold_file", flaky)
    assert _run_child("tally.functions.backfill_stages.fold_file", {"file": {"index": 3}}) == {"index": 3} and len(calls) == CHILD_ATTEMPTS

    def refused(event):
        calls.append(event)
        raise parallel_backfill.PlanRefused("export taken at another instant")

    calls.clear()
    monkeypatch.setattr(backfill_stages, "plan", refused)
    with pytest.raises(parallel_backfill.PlanRefused):
        _run_child("tally.functions.backfill_stages.plan", {"exportArn": EXPORT})
    assert len(calls) == 1
