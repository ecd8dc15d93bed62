"""The in-account backfill's state machine, run here: the same stages, the same handlers, worker processes for children.

``tally.parallel_backfill.STAGES`` is what the construct renders as Step
Functions states; this runs them the way Step Functions does: a stage once,
with the fields of the state it selects, or a map of children, each given its
item and those fields, at most ``workers`` at a time (here: processes), each
child tried again on failure. Against moto's server, or real AWS.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any

from tally import parallel_backfill
from tally.parallel_backfill import STAGES, Stage

CHILD_ATTEMPTS = 3  # a child that fails is tried again, as the map's retrier does


def _set_environment(environment: Mapping[str, str]) -> None:
    os.environ.update(environment)


def _run_child(handler: str, event: dict[str, Any]) -> Any:
    """One child, in a worker process: the Lambda handler, tried up to CHILD_ATTEMPTS times."""
    for attempt in range(CHILD_ATTEMPTS):
        try:
            return getattr(parallel_backfill, handler)(event)
        except parallel_backfill.PlanRefused:
            raise
        except Exception:
            if attempt == CHILD_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def items_of(stage: Stage, state: Mapping[str, Any], s3: Any) -> list[Any]:
    """What a map stage maps over: the plan's list of files in S3 (the ItemReader), or a list in the state."""
    if stage.over == "files":
        return json.loads(s3.get_object(Bucket=state["bucket"], Key=state["filesKey"])["Body"].read())
    return list(state[stage.over])  # type: ignore[index]


def run(
    export_arn: str,
    *,
    s3: Any,
    workers: int,
    environment: Mapping[str, str],
    on_stage: Callable[[Stage, int], None] = lambda stage, total: None,
    on_child: Callable[[Stage], None] = lambda stage: None,
) -> dict[str, Any]:
    """Every stage in order, from the execution input {"exportArn"}; the final state (plan and summary)."""
    state: dict[str, Any] = {"exportArn": export_arn}
    with ProcessPoolExecutor(workers, initializer=_set_environment, initargs=(dict(environment),)) as pool:
        for stage in STAGES:
            selected = {field: state[field] for field in stage.selects}
            if stage.over is None:
                on_stage(stage, 1)
                answer = pool.submit(_run_child, stage.handler, selected).result()
                on_child(stage)
                if stage.result:
                    state[stage.result] = answer
                else:
                    state = answer
                continue
            items = items_of(stage, state, s3)
            on_stage(stage, len(items))
            children: list[Future[Any]] = [
                pool.submit(_run_child, stage.handler, {**selected, stage.item: item})  # type: ignore[dict-item]
                for item in items
            ]
            for child in as_completed(children):
                child.result()
                on_child(stage)
    return state
