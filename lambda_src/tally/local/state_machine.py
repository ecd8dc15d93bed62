"""The in-account state machines, run here: the same steps, the same handlers, worker processes for children.

``tally.parallel_backfill.STAGES`` is what the construct renders as Step
Functions states; this runs them the way Step Functions does: a stage once,
with the fields of the state it selects, or a map of children, each given its
item and those fields, at most ``workers`` at a time (here: processes), each
child tried again on failure. Against moto's server, or real AWS.
``run_close`` runs the close of days and months the same way, from
``tally.closing.CLOSE_STEPS``.

``ExecutionFollower`` follows the real one: the execution's status, its map
runs' counts and the summaries its children leave in S3.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import tally.parallel_backfill as parallel_backfill
from tally.backfill import rules_digest
from tally.closing import CLOSE_STEPS, MAX_PARTS_AT_ONCE, CloseRefused
from tally.parallel_backfill import STAGES, Stage

CHILD_ATTEMPTS = 3  # a child that fails is tried again, as the map's retrier does


def _set_environment(environment: Mapping[str, str]) -> None:
    os.environ.update(environment)


def _run_child(
    handler_path: str, event: dict[str, Any], refusals: tuple[type[Exception], ...] = parallel_backfill.REFUSALS
) -> Any:
    """One child, in a worker process: the Lambda handler, tried up to CHILD_ATTEMPTS times (a refusal once)."""
    module, _, name = handler_path.rpartition(".")
    handler = getattr(importlib.import_module(module), name)
    attempt = 1
    while True:
        try:
            return handler(event)
        except refusals:
            raise
        except Exception:
            if attempt == CHILD_ATTEMPTS:
                raise
            attempt += 1


def backfill_environment(bucket: str, prefix: str, ranges: int) -> dict[str, str]:
    """This process's environment with what the stack gives the backfill's functions: where exports lie, the
    counter ranges, and metrics off (they are CloudWatch's)."""
    return {
        **os.environ,
        parallel_backfill.ENV_BUCKET: bucket,
        parallel_backfill.ENV_PREFIX: prefix,
        parallel_backfill.ENV_RANGES: str(ranges),
        "POWERTOOLS_METRICS_DISABLED": "true",
    }


def run_backfill(
    export_arn: str, rules: str, *, s3: Any, workers: int, environment: Mapping[str, str], say: Callable[[str], None]
) -> dict[str, Any]:
    """The backfill's stages for an export (``rules``: those whose history alone is counted, "" for the table),
    as the stack's state machine runs them; each stage is said with its number of children. The final state."""
    return run(
        {"exportArn": export_arn, "rules": rules},
        s3=s3,
        workers=workers,
        environment=environment,
        on_stage=lambda stage, total: say(f"   {stage.name}: {total:,} {'child' if total == 1 else 'children'}"),
    )


def items_of(stage: Stage, state: Mapping[str, Any], s3: Any) -> list[Any]:
    """What a map stage maps over: the plan's list of files in S3 (the ItemReader), or a list in the state."""
    if stage.over == "files":
        return json.loads(s3.get_object(Bucket=state["bucket"], Key=state["filesKey"])["Body"].read())
    return list(state[stage.over])  # type: ignore[index]


def run(
    execution_input: Mapping[str, Any],
    *,
    s3: Any,
    workers: int,
    environment: Mapping[str, str],
    stages: tuple[Stage, ...] = STAGES,
    on_stage: Callable[[Stage, int], None] = lambda stage, total: None,
    on_child: Callable[[Stage], None] = lambda stage: None,
) -> dict[str, Any]:
    """Every stage in order, from the execution's input ({"exportArn"} for the backfill); the final state."""
    state: dict[str, Any] = dict(execution_input)
    with ProcessPoolExecutor(workers, initializer=_set_environment, initargs=(dict(environment),)) as pool:
        for stage in stages:
            selected = {field: state[field] for field in stage.selects}
            if stage.over is None:
                on_stage(stage, 1)
                answer = pool.submit(_run_child, stage.handler_path, selected).result()
                on_child(stage)
                if stage.result:
                    state[stage.result] = answer
                else:
                    state = answer
                continue
            items = items_of(stage, state, s3)
            on_stage(stage, len(items))
            children: list[Future[Any]] = [
                pool.submit(_run_child, stage.handler_path, {**selected, stage.item: item})  # type: ignore[dict-item]
                for item in items
            ]
            for child in as_completed(children):
                child.result()
                on_child(stage)
    return state


def run_close(
    execution_input: Mapping[str, Any] | None = None,
    *,
    environment: Mapping[str, str],
    workers: int = MAX_PARTS_AT_ONCE,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """The close's state machine (``CLOSE_STEPS``) as the construct renders it: the plan given the execution's
    input (``{}``: the clock's now), each map's children given their item whole, ``workers`` at a time, their
    answers in the items' order, then the finish given the periods and those answers. Its answer: the
    execution's output. ``environment``: the functions' (COUNTS_TABLE and the counting settings)."""
    state: dict[str, Any] = {}
    with ProcessPoolExecutor(workers, initializer=_set_environment, initargs=(dict(environment),)) as pool:
        for step in CLOSE_STEPS:
            if step.over is not None:
                items = list(state[step.over])
                say(f"   {step.name}: {len(items):,} {'part' if len(items) == 1 else 'parts'}")
                children = [pool.submit(_run_child, step.handler_path, item, (CloseRefused,)) for item in items]
                state[step.result] = [child.result() for child in children]  # type: ignore[index]
                continue
            if step.name == "plan":
                event: dict[str, Any] = dict(execution_input or {})
            else:
                event = {
                    "periods": state["finish"],
                    "closed": {s.over: state[s.result] for s in CLOSE_STEPS if s.over is not None},  # type: ignore[index, misc]
                }
            answer = pool.submit(_run_child, step.handler_path, event, (CloseRefused,)).result()
            if step.name == "plan":
                state = answer
                say(f"   plan: {len(answer['finish']):,} periods due at {answer['now']}")
            else:
                return answer
    return state


# Following an execution on AWS (scripts/backfill.py --stack).

FAILED_STATUSES = ("FAILED", "TIMED_OUT", "ABORTED")


@dataclass
class Snapshot:
    """How far an execution got: from its map runs' counts and the summaries its children left in S3."""

    status: str
    files: int | None = None  # None until the plan is done
    files_done: int = 0
    items: int | None = None
    items_folded: int = 0
    ranges: int | None = None
    ranges_done: int = 0
    bucket_updates: int = 0  # applied, or found applied by an earlier run


class ExecutionFollower:
    """Polls one execution: its status, its plan's output, its map runs, and the work folder's summaries.

    Each fold summary is read once; the committers' progress files are read
    each poll (one per range). Costs a few requests a poll, nothing per item.
    """

    def __init__(self, sfn: Any, s3: Any, execution_arn: str) -> None:
        self.sfn, self.s3, self.execution_arn = sfn, s3, execution_arn
        self.plan: dict[str, Any] | None = None
        self._folded: dict[str, int] = {}

    def poll(self) -> Snapshot:
        status = self.sfn.describe_execution(executionArn=self.execution_arn)["status"]
        snapshot = Snapshot(status)
        if self.plan is None:
            self.plan = self._plan_output()
        if self.plan is None:
            return snapshot
        snapshot.files, snapshot.items, snapshot.ranges = self.plan["files"], self.plan["items"], len(self.plan["ranges"])
        for label, counts in self._map_runs().items():
            if label == "fold":
                snapshot.files_done = counts.get("succeeded", 0)
            elif label == "commit":
                snapshot.ranges_done = counts.get("succeeded", 0)
        snapshot.items_folded = self._items_folded()
        snapshot.bucket_updates = self._bucket_updates()
        return snapshot

    def output(self) -> dict[str, Any]:
        """The finished execution's state: the plan, and the summary under "summary"."""
        return json.loads(self.sfn.describe_execution(executionArn=self.execution_arn)["output"])

    def failure(self) -> str:
        described = self.sfn.describe_execution(executionArn=self.execution_arn)
        return f"{described['status']}: {described.get('error', '')} {described.get('cause', '')}".strip()[:400]

    def _plan_output(self) -> dict[str, Any] | None:
        pages = self.sfn.get_paginator("get_execution_history").paginate(executionArn=self.execution_arn)
        for page in pages:
            for event in page["events"]:
                exited = event.get("stateExitedEventDetails")
                if exited and exited["name"] == "PlanStep":
                    return json.loads(exited["output"])
        return None

    def _map_runs(self) -> dict[str, dict[str, int]]:
        """Item counts of each map run, by its label (the stage's name, the last part of the run's name)."""
        runs = {}
        for run in self.sfn.list_map_runs(executionArn=self.execution_arn)["mapRuns"]:
            label = run["mapRunArn"].split(":mapRun:", 1)[1].split("/", 1)[1].rsplit(":", 1)[0]
            runs[label] = self.sfn.describe_map_run(mapRunArn=run["mapRunArn"])["itemCounts"]
        return runs

    def _keys(self, folder: str) -> list[str]:
        assert self.plan is not None
        prefix = f"{self.plan['work']}/{folder}/"
        return [
            entry["Key"]
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.plan["bucket"], Prefix=prefix)
            for entry in page.get("Contents", [])
        ]

    def _read(self, key: str) -> dict[str, Any]:
        assert self.plan is not None
        return json.loads(self.s3.get_object(Bucket=self.plan["bucket"], Key=key)["Body"].read())

    def _items_folded(self) -> int:
        for key in self._keys("folded"):
            if key not in self._folded:
                self._folded[key] = self._read(key)["items"]
        return sum(self._folded.values())

    def _bucket_updates(self) -> int:
        done = (self._read(key) for key in self._keys("committed"))
        return sum(entry["bucket_updates"] + entry["updates_already_applied"] for entry in done)


def execution_name(export_arn: str, scope: str = "") -> str:
    """One execution per export and scope (``HistoryScope.text``: "" for the table, rules' names, or calendar
    prefixes): starting it again while it runs finds it, and a failed one is redriven."""
    name = "backfill-" + export_arn.rsplit("/", 1)[-1][:60]
    names = tuple(filter(None, scope.split(",")))
    return f"{name}-{rules_digest(names)}" if names else name


def start_or_resume(sfn: Any, state_machine_arn: str, export_arn: str, scope: str = "") -> tuple[str, str]:
    """(execution ARN, what happened): started; already running; redriven after a failure; already done."""
    name = execution_name(export_arn, scope)
    execution_input = json.dumps({"exportArn": export_arn, "rules": scope})
    try:
        started = sfn.start_execution(stateMachineArn=state_machine_arn, name=name, input=execution_input)
        return started["executionArn"], "started"
    except sfn.exceptions.ExecutionAlreadyExists:
        pass
    execution_arn = state_machine_arn.replace(":stateMachine:", ":execution:", 1) + ":" + name
    status = sfn.describe_execution(executionArn=execution_arn)["status"]
    if status in FAILED_STATUSES:
        sfn.redrive_execution(executionArn=execution_arn)
        return execution_arn, "redriven"
    return execution_arn, "running" if status == "RUNNING" else "done"
