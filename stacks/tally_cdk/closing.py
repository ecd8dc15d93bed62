"""The close of days and months in the account: a Step Functions state machine, started once a day.

Only where ``calendarPrefixes`` names counters that keep days and months (a
table that asks for none pays nothing: no function, no state machine, no
schedule). The state machine renders ``tally.closing.CLOSE_STEPS``, each step
a function of ``tally.functions.close_stages``: a plan (what is due, from each
kept zone's progress item), a Map over the days' parts (each run of
consecutive days of a zone, once per counter-directory partition, 16 at a
time), a Map over the months' parts the same way, and a finish that moves
each zone's progress on. An EventBridge rule starts it every day at 03:15
UTC, when the day that ended two days and an hour before (in every kept zone
up to UTC-22) can be closed; starting it by hand at any time is as safe: every
step may run again, and an execution racing another writes nothing twice
(``tally.closing``). A part that fails (a throttled function, a timeout) is
tried again with backoff; a refusal (a period not due by the clock) is final.

Least privilege: the plan may read the progress items (``#calendar``) and
nothing else; the finish may read and write them only. A part reads the
counter directory's partitions (``#counters#...``), its counters' hours and
days, their late marks (``#late#<counter>``) and sketches
(``#sketches#<lane>#<counter>``) with Query, and writes day and month items
with UpdateItem. Bucket items are keyed by counter names, which no policy can
list: Query and UpdateItem name the counts table without a LeadingKeys
condition, and a Deny keeps UpdateItem off every partition tally reserves
(``#...``) but the sketches'. Its BatchGetItem (the sketches a merge starts
from) is held to ``#sketches#*`` and its GetItem (the lanes' history) to
``#settings#``.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as events_targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from tally.closing import CLOSE_STEPS, MAX_PARTS_AT_ONCE, STEPS_MODULE, CloseRefused, CloseStep
from tally.core.buckets import SKETCH_PREFIX
from tally.dynamo.closing import PROGRESS_PARTITION
from tally.dynamo.settings import SETTINGS_KEY
from tally_cdk.roles import LOG_RETENTION, acknowledge_wildcards, stage_function

# 03:15 UTC: a day closes two days and an hour after it ends (core/ladder.CLOSE_AFTER_MS), so the run of day D+3
# closes day D in UTC and in every zone behind UTC by up to 22 hours; a zone ahead of UTC closes its day too.
SCHEDULE_HOUR, SCHEDULE_MINUTE = 3, 15
# A part reads 32 counters at once and commits 32 updates at once; 1,024 MB gives it more than half a vCPU for
# the reads' parsing and the sums. Lambda's longest run: a part of a catch-up run (a month of days) at a million
# counters a day takes minutes (bench/close_scale.py).
PART_MEMORY_MB = 1024
PART_TIMEOUT = Duration.minutes(15)
# The plan reads a progress item per kept zone, the finish writes two: seconds.
STEP_MEMORY_MB = 256
STEP_TIMEOUT = Duration.minutes(1)
# A part that failed (a throttled Lambda, a timeout, a throttled table past the client's retries) is tried again.
PART_RETRIES = 4
# Well before the next day's run, and past the longest a run's parts take with every retry (16 at a time, each
# at most five tries of 15 minutes): an execution ends failed, which the alarm sees, rather than timed out.
EXECUTION_TIMEOUT = Duration.hours(12)
# A scheduled start that failed (Step Functions throttled) is tried again for an hour.
SCHEDULE_RETRIES = 3
SCHEDULE_EVENT_AGE = Duration.hours(1)
ALARM_PERIOD = Duration.minutes(5)
COMMENT = "tally: close the kept days and months once each, from their hours and days less their late marks"
WILDCARD_REASON = (
    "The close's state machine invokes the versions of its own three functions (CDK grants <function>:*, named "
    "at deploy time), and X-Ray tracing and log delivery take no resource; every table permission names the "
    "counts table."
)
FUNCTION_NAMES = {"plan": "PlanFunction", "close_part": "PartFunction", "finish": "FinishFunction"}
PURPOSES = {
    "plan": "plan the close of the days and months due, from each kept zone's progress",
    "close_part": "close one run of days or months for one counter-directory partition",
    "finish": "move each kept zone's close progress on",
}


class AccountClose(Construct):
    """The close's state machine, its three functions (each with a role of its own), its schedule and alarm."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        counts_table: dynamodb.ITable,
        code: lambda_.Code,
        runtime: lambda_.Runtime,
        layers: list[lambda_.ILayerVersion],
        environment: dict[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.counts_table = counts_table
        self._code, self._runtime, self._layers, self._environment = code, runtime, layers, environment
        self.functions = {handler: self._function(handler) for handler in FUNCTION_NAMES}
        self.state_machine = self._state_machine()
        self.schedule = events.Rule(
            self,
            "Schedule",
            description="Starts tally's close of days and months once a day",
            schedule=events.Schedule.cron(minute=str(SCHEDULE_MINUTE), hour=str(SCHEDULE_HOUR)),
            targets=[
                events_targets.SfnStateMachine(
                    self.state_machine,
                    input=events.RuleTargetInput.from_object({}),  # the plan takes the clock's now
                    retry_attempts=SCHEDULE_RETRIES,
                    max_event_age=SCHEDULE_EVENT_AGE,
                )
            ],
        )
        acknowledge_wildcards(self, WILDCARD_REASON)

    def _function(self, handler: str) -> lambda_.Function:
        part = handler == "close_part"
        return stage_function(
            self,
            FUNCTION_NAMES[handler],
            description=f"tally close: {PURPOSES[handler]}",
            role_description=f"tally close {handler}: {PURPOSES[handler]}",
            statements=self._statements(handler),
            handler=f"{STEPS_MODULE}.{handler}",
            memory_size=PART_MEMORY_MB if part else STEP_MEMORY_MB,
            timeout=PART_TIMEOUT if part else STEP_TIMEOUT,
            code=self._code,
            runtime=self._runtime,
            layers=self._layers,
            environment=self._environment,
        )

    def _statements(self, handler: str) -> list[iam.PolicyStatement]:
        table = self.counts_table.table_arn
        progress = {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [PROGRESS_PARTITION]}}
        if handler == "plan":
            return [iam.PolicyStatement(actions=["dynamodb:GetItem"], resources=[table], conditions=progress)]
        if handler == "finish":
            return [
                iam.PolicyStatement(actions=["dynamodb:GetItem", "dynamodb:UpdateItem"], resources=[table], conditions=progress)
            ]
        return [
            # Counter partitions have any name: the directory's, the counters', their marks' and sketches' Queries,
            # and the day and month items' updates, name the table.
            iam.PolicyStatement(actions=["dynamodb:Query", "dynamodb:UpdateItem"], resources=[table]),
            # ... but no update reaches a partition tally reserves, the sketches' aside.
            iam.PolicyStatement(
                effect=iam.Effect.DENY,
                actions=["dynamodb:UpdateItem"],
                resources=[table],
                conditions={
                    "ForAnyValue:StringLike": {"dynamodb:LeadingKeys": ["#*"]},
                    "ForAnyValue:StringNotLike": {"dynamodb:LeadingKeys": [SKETCH_PREFIX + "*"]},
                },
            ),
            iam.PolicyStatement(
                actions=["dynamodb:BatchGetItem"],
                resources=[table],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [SKETCH_PREFIX + "*"]}},
            ),
            iam.PolicyStatement(
                actions=["dynamodb:GetItem"],
                resources=[table],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [SETTINGS_KEY[0]]}},
            ),
        ]

    def _invoke(self, step: CloseStep, state_id: str, payload: sfn.TaskInput | None = None) -> tasks.LambdaInvoke:
        """The step's function, given ``payload`` (None: the state's input whole)."""
        task = tasks.LambdaInvoke(
            self,
            state_id,
            lambda_function=self.functions[step.handler],
            payload=payload,
            payload_response_only=True,
            retry_on_service_exceptions=False,
        )
        # A refusal (a period not due by the clock, a malformed event) is final; anything else is tried again.
        task.add_retry(errors=[CloseRefused.__name__], max_attempts=0)
        task.add_retry(errors=["States.ALL"], max_attempts=PART_RETRIES, backoff_rate=2, interval=Duration.seconds(5))
        return task

    def _state(self, step: CloseStep) -> sfn.IChainable:
        title = step.name.capitalize()
        if step.over is not None:
            mapped = sfn.Map(
                self,
                f"{title}Map",
                comment=f"Each run of {step.name} of a zone, once per counter-directory partition",
                items_path=f"$.{step.over}",
                max_concurrency=MAX_PARTS_AT_ONCE,
                result_path=f"$.{step.result}",
            )
            # Each child is given its item whole: {"periods": [...], "part": n}.
            mapped.item_processor(self._invoke(step, f"{title}PartStep"))
            return mapped
        if step.name == "plan":  # the execution's input: {} or {"now": ...}; its answer is the state
            return self._invoke(step, "PlanStep")
        maps = [s for s in CLOSE_STEPS if s.over is not None]
        return self._invoke(
            step,
            f"{title}Step",
            sfn.TaskInput.from_object({
                "periods": sfn.JsonPath.list_at("$.finish"),
                "closed": {s.over: sfn.JsonPath.list_at(f"$.{s.result}") for s in maps},
            }),
        )

    def _state_machine(self) -> sfn.StateMachine:
        chain: sfn.IChainable | None = None
        for step in CLOSE_STEPS:
            state = self._state(step)
            chain = state if chain is None else chain.next(state)  # type: ignore[attr-defined]
        log_group = logs.LogGroup(self, "StateMachineLogs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY)
        return sfn.StateMachine(
            self,
            "StateMachine",
            comment=COMMENT,
            definition_body=sfn.DefinitionBody.from_chainable(chain),  # type: ignore[arg-type]
            timeout=EXECUTION_TIMEOUT,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=False),
        )

    def alarms(self) -> list[tuple[str, str, cloudwatch.IMetric, float]]:
        """(id, description, metric, threshold) of each alarm, raised by `Tally` beside its own."""
        return [
            (
                "CloseFailedAlarm",
                "The close of days and months failed: the days and months it was to close stay open (each zone's "
                "progress item stays where it was). The failed state's error says why (a refusal, or a part that "
                "failed every retry); once mended, start the state machine again by hand (it writes nothing twice) "
                "or let the next day's run catch up, a month of days per run, before the hours they are closed from "
                "expire (hourRetentionDays)",
                self.state_machine.metric_failed(statistic="Sum", period=ALARM_PERIOD),
                0,  # an execution failed: ExecutionsFailed >= 1
            )
        ]

    def widgets(self) -> list[cloudwatch.IWidget]:
        """The dashboard row of the close."""
        return [
            cloudwatch.GraphWidget(
                title="Close executions",
                left=[
                    self.state_machine.metric_started(statistic="Sum", period=Duration.hours(1)),
                    self.state_machine.metric_succeeded(statistic="Sum", period=Duration.hours(1)),
                    self.state_machine.metric_failed(statistic="Sum", period=Duration.hours(1)),
                ],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Close parts: longest run (ms; the timeout is 900,000) and errors",
                left=[self.functions["close_part"].metric_duration(statistic="Maximum", period=Duration.hours(1))],
                right=[self.functions["close_part"].metric_errors(statistic="Sum", period=Duration.hours(1))],
                width=8,
            ),
        ]
