"""The backfill in the account: a Step Functions state machine that counts an export with many Lambda workers.

Switched on by ``backfillExports`` (``s3://BUCKET/PREFIX``, where the events
table's point-in-time exports go). Beside it, the audit's Scan
(``tally.parallel_audit.AUDIT_STAGES``): a Distributed Map over the Scan's
segments (``tally.functions.audit_stages``), whose workers may Scan the events table and write the work folder
only. The backfill's state machine renders
``tally.parallel_backfill.STAGES`` (each stage a function of
``tally.functions.backfill_stages``): a plan, a Distributed Map over the
export's data files (the plan's list, read by the map's ItemReader) whose
children fold one file each, a Distributed Map over the counter ranges whose
children commit one range each, and a summary. Concurrency, retries and a
failed child's redrive are Step Functions' own; every stage may run again
without counting anything twice (``tally.parallel_backfill``).

Least privilege: the fold workers read the exports' prefix and write the
work prefix beside it, nothing else; the committers read the work prefix and
write the counts table's bucket, sketch, directory and rank items, never its
claims, settings or alert states (a Deny on those partitions: bucket items
are keyed by counter names, which no policy can list). An export's prefix
is not known at synth: the grant is the configured prefix, which holds this
table's exports only.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from tally.alerting import ALERTS_PREFIX
from tally.core.directory import DIRECTORY_PREFIX
from tally.core.ranking import RANK_PREFIX
from tally.dynamo.backfill import BACKFILL_PREFIX
from tally.dynamo.closing import PROGRESS_PARTITION
from tally.dynamo.settings import SETTINGS_KEY
from tally import parallel_backfill
from tally.core.settings import ENV_EVENTS_TABLE
from tally.parallel_audit import AUDIT_STAGES
from tally.parallel_backfill import REFUSALS, STAGES, WORK_FOLDER, Stage
from tally_cdk.roles import LOG_RETENTION, acknowledge_wildcards, stage_function

# A fold worker parses a file at about one core's speed: 1,769 MB is one full vCPU. A committer drives
# 32 updates in flight; its merged range and the boto3 threads fit the same size.
WORKER_MEMORY_MB = 1769
PLAN_MEMORY_MB = 512
# Lambda's longest: a data file of a few hundred MB parses in minutes; a committer that runs out of time is
# retried by the map and resumes after its last finished chunk.
WORKER_TIMEOUT = Duration.minutes(15)
PLAN_TIMEOUT = Duration.minutes(5)
# A child that failed (a throttled Lambda, a timeout) is tried again with backoff; after that the execution
# fails and is redriven (RedriveExecution), which runs only the children that did not succeed.
CHILD_RETRIES = 4
BACKFILL_COMMENT = "tally: count a point-in-time export of the events table in parallel, exactly once"
AUDIT_COMMENT = "tally: Scan the events table in parallel segments for scripts/audit.py, which recounts what they find"
EXECUTION_TIMEOUT = Duration.hours(24)  # the backfill must finish within a day of count-from anyway
# Every wildcard the backfill's policies hold is a name made at run time: an export's files and the work beside
# them (under the configured prefix), the events table's exports, the versions of the state machine's own
# functions (CDK grants ``<function>:*``), its own map runs' executions, and X-Ray and log delivery, which take no
# resource. The stack tests list them, so a new one is a test failure until reviewed.
WILDCARD_REASON = (
    "The backfill's objects and executions are named at run time: one export's files and the work folder "
    "beside them under the configured exports prefix, the events table's exports, the versions of the state "
    "machine's own functions and its own map runs; X-Ray and log delivery take no resource."
)


@dataclass(frozen=True)
class BackfillSettings:
    """Where exports lie and how far the backfill spreads (context ``backfill*``); off without ``exports``."""

    exports: str = ""  # s3://BUCKET/PREFIX
    ranges: int = parallel_backfill.DEFAULT_RANGES
    workers: int = 100  # fold children at once
    committers: int = 10  # commit children at once
    max_wcu: int = 1000  # write units per second on the counts table, all committers together

    @property
    def enabled(self) -> bool:
        return bool(self.exports)

    @property
    def bucket(self) -> str:
        return self.exports.removeprefix("s3://").partition("/")[0]

    @property
    def prefix(self) -> str:
        return self.exports.removeprefix("s3://").partition("/")[2].strip("/")

    def environment(self) -> dict[str, str]:
        return {
            parallel_backfill.ENV_BUCKET: self.bucket,
            parallel_backfill.ENV_PREFIX: self.prefix,
            parallel_backfill.ENV_RANGES: str(self.ranges),
            parallel_backfill.ENV_MAX_WCU: str(self.max_wcu),
            parallel_backfill.ENV_COMMITTERS: str(self.committers),
        }


class AccountBackfill(Construct):
    """The backfill's state machine and the audit's, and their functions, each with a role of its own."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: BackfillSettings,
        counts_table: dynamodb.ITable,
        events_table_arn: str,
        events_table_name: str,
        code: lambda_.Code,
        runtime: lambda_.Runtime,
        layers: list[lambda_.ILayerVersion],
        environment: dict[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.settings = settings
        self.counts_table = counts_table
        self.events_table_arn = events_table_arn
        self._code, self._runtime, self._layers = code, runtime, layers
        self._environment = {**environment, **settings.environment(), ENV_EVENTS_TABLE: events_table_name}
        self.functions = {stage.name: self._function(stage) for stage in (*STAGES, *AUDIT_STAGES)}
        self.state_machine = self._state_machine("StateMachine", STAGES, BACKFILL_COMMENT)
        self.audit_state_machine = self._state_machine("AuditStateMachine", AUDIT_STAGES, AUDIT_COMMENT)
        acknowledge_wildcards(self, WILDCARD_REASON)

    # Where things lie in the exports' bucket.
    def _objects(self, folder: str) -> str:
        path = "/".join(filter(None, (self.settings.prefix, folder)))
        return f"arn:{Aws.PARTITION}:s3:::{self.settings.bucket}/{path}/*"

    @property
    def _exports(self) -> str:
        return self._objects("AWSDynamoDB")

    @property
    def _work(self) -> str:
        return self._objects(WORK_FOLDER)

    def _function(self, stage: Stage) -> lambda_.Function:
        heavy = stage.over is not None
        return stage_function(
            self,
            f"{stage.name.capitalize()}Function",
            description=f"tally backfill: {self._role_purpose(stage)}",
            role_description=f"tally backfill {stage.name}: {self._role_purpose(stage)}",
            statements=self._statements(stage),
            handler=stage.handler_path,
            memory_size=WORKER_MEMORY_MB if heavy else PLAN_MEMORY_MB,
            timeout=WORKER_TIMEOUT if heavy else PLAN_TIMEOUT,
            code=self._code,
            runtime=self._runtime,
            layers=self._layers,
            environment=self._environment,
        )

    @staticmethod
    def _role_purpose(stage: Stage) -> str:
        return {
            "plan": "check and claim an export, list its data files",
            "fold": "fold one export data file into partials per counter range",
            "commit": "commit one counter range of partials to the counts table",
            "summary": "add up what the backfill read and wrote, record the days it made complete",
            "scan": "scan one segment of the events table for the audit",
        }[stage.name]

    def _statements(self, stage: Stage) -> list[iam.PolicyStatement]:
        table = self.counts_table.table_arn
        read_exports = iam.PolicyStatement(actions=["s3:GetObject"], resources=[self._exports])
        work_prefix = "/".join(filter(None, (self.settings.prefix, WORK_FOLDER))) + "/*"
        list_work = iam.PolicyStatement(
            actions=["s3:ListBucket"],
            resources=[f"arn:{Aws.PARTITION}:s3:::{self.settings.bucket}"],
            conditions={"StringLike": {"s3:prefix": [work_prefix]}},
        )
        if stage.name == "plan":
            return [
                iam.PolicyStatement(actions=["dynamodb:DescribeExport"], resources=[f"{self.events_table_arn}/export/*"]),
                iam.PolicyStatement(  # Query: a claim of the table's history at another instant refuses the export
                    actions=["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query"],
                    resources=[table],
                    conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [BACKFILL_PREFIX + "*"]}},
                ),
                # A calendar prefix's backfill: where the closes began its days, in each zone's progress item.
                iam.PolicyStatement(
                    actions=["dynamodb:GetItem"],
                    resources=[table],
                    conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [PROGRESS_PARTITION]}},
                ),
                read_exports,
                iam.PolicyStatement(actions=["s3:PutObject"], resources=[self._work]),
            ]
        if stage.name == "fold":
            return [read_exports, iam.PolicyStatement(actions=["s3:PutObject"], resources=[self._work])]
        if stage.name == "commit":
            return [
                iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"], resources=[self._work]),
                list_work,
                # Bucket and sketch items: UpdateItem, and the sketches' reads; keyed by counter names.
                iam.PolicyStatement(
                    actions=["dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:BatchGetItem"], resources=[table]
                ),
                iam.PolicyStatement(
                    effect=iam.Effect.DENY,
                    actions=["dynamodb:UpdateItem"],
                    resources=[table],
                    conditions={
                        "ForAnyValue:StringLike": {
                            "dynamodb:LeadingKeys": [BACKFILL_PREFIX + "*", SETTINGS_KEY[0] + "*", ALERTS_PREFIX + "*"]
                        }
                    },
                ),
                iam.PolicyStatement(
                    actions=["dynamodb:BatchWriteItem"],
                    resources=[table],
                    conditions={
                        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [DIRECTORY_PREFIX + "*", RANK_PREFIX + "*"]}
                    },
                ),
            ]
        if stage.name == "scan":
            return [
                iam.PolicyStatement(actions=["dynamodb:Scan"], resources=[self.events_table_arn]),
                iam.PolicyStatement(actions=["s3:PutObject"], resources=[self._work]),
            ]
        if stage.name == "summary":  # and the days the whole table made complete: each zone's progress item
            return [
                iam.PolicyStatement(actions=["s3:GetObject"], resources=[self._work]),
                list_work,
                iam.PolicyStatement(
                    actions=["dynamodb:UpdateItem"],
                    resources=[table],
                    conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [PROGRESS_PARTITION]}},
                ),
            ]
        return [iam.PolicyStatement(actions=["s3:GetObject"], resources=[self._work]), list_work]

    def _invoke(self, stage: Stage) -> tasks.LambdaInvoke:
        """The stage's function, given the fields of the state it selects (and its item, in a map)."""
        fields = (*stage.selects, stage.item) if stage.item else stage.selects
        selected = {field: sfn.JsonPath.string_at(f"$.{field}") for field in fields}
        task = tasks.LambdaInvoke(
            self,
            f"{stage.name.capitalize()}Step",
            lambda_function=self.functions[stage.name],
            payload=sfn.TaskInput.from_object(selected),
            payload_response_only=True,
            result_path=f"$.{stage.result}" if stage.result else None,
            retry_on_service_exceptions=False,
        )
        # A refusal (an export taken at another instant, claimed by another export) is final; anything else
        # (a throttled or timed-out function, a throttled S3 or DynamoDB) is tried again.
        task.add_retry(errors=[refusal.__name__ for refusal in REFUSALS], max_attempts=0)  # as Lambda names them
        task.add_retry(errors=["States.ALL"], max_attempts=CHILD_RETRIES, backoff_rate=2, interval=Duration.seconds(5))
        return task

    def _state_machine(self, name: str, stages: tuple[Stage, ...], comment: str) -> sfn.StateMachine:
        """The stages in order: each stage once, or a Distributed Map over the list the state names."""
        chain: sfn.IChainable | None = None
        for stage in stages:
            state = self._state(stage)
            chain = state if chain is None else chain.next(state)  # type: ignore[attr-defined]
        log_group = logs.LogGroup(self, f"{name}Logs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY)
        machine = sfn.StateMachine(
            self,
            name,
            comment=comment,
            definition_body=sfn.DefinitionBody.from_chainable(chain),  # type: ignore[arg-type]
            timeout=EXECUTION_TIMEOUT,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=False),
        )
        # The fold map's ItemReader reads the plan's list of files (named per export at run time).
        machine.add_to_role_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[self._work]))
        return machine

    def _state(self, stage: Stage) -> sfn.State:
        if stage.over is None:
            return self._invoke(stage)
        # A map's child gets the stage's fields of the state and its item (the ItemSelector).
        selector = {field: sfn.JsonPath.string_at(f"$.{field}") for field in stage.selects}
        selector[stage.item] = sfn.JsonPath.string_at("$$.Map.Item.Value")  # type: ignore[index]
        reads = (
            {
                "item_reader": sfn.S3JsonItemReader(
                    bucket_name_path=sfn.JsonPath.string_at("$.bucket"), key=sfn.JsonPath.string_at("$.filesKey")
                )
            }
            if stage.over == "files"
            else {"items_path": f"$.{stage.over}"}
        )
        mapped = sfn.DistributedMap(
            self,
            f"{stage.name.capitalize()}Map",
            item_selector=selector,
            max_concurrency=self.settings.committers if stage.over == "ranges" else self.settings.workers,
            result_path=sfn.JsonPath.DISCARD,
            label=stage.name,
            **reads,  # type: ignore[arg-type]
        )
        mapped.item_processor(self._invoke(stage))
        return mapped
