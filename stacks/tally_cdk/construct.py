"""tally as one construct: attach it to any DynamoDB table with a stream.

    from tally_cdk import Tally
    Tally(self, "Tally", events_table=orders)      # orders: an ITable whose stream has NEW_IMAGE

It holds the counts table, the counting function and its role and log group,
the event source mapping on the table's stream, the on-failure queue, alarms,
a dashboard and (unless turned off) the HTTP read API of `tally_cdk.read_api`.
The events table stays the caller's: created in the same app (its stream view
is checked at synth against what the rules need: ``events_table_for(rules)``
describes one that has it) or imported by name and stream ARN (then the
function may read that stream only).

The counts table's keys and TTL come from `tally.core.tables`, the same
descriptions the local pipeline builds its tables from.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import jsii
from aws_cdk import (
    Acknowledgment,
    Aws,
    Duration,
    RemovalPolicy,
    Validations,
)
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as events_targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct, IValidation

import tally
from tally_cdk.backfill import AccountBackfill
from tally_cdk.closing import AccountClose
from tally_cdk.context import StackSettings
from tally_cdk.read_api import ReadApi
from tally_cdk.roles import role_with_own_logs
from tally.core import settings as tally_settings
from tally.alerting import ALERTS_PREFIX, ENV_ALERT_BUS
from tally.core.alerts import alerts_of
from tally.core.directory import DIRECTORY_PREFIX
from tally.core.item_growth import ITEM_GROWTH_KB, SHARDS_PER_LANE
from tally.core.ranking import RANK_PREFIX
from tally.core.rules import Rules
from tally.core.tables import COUNTS_TABLE, TableDescription

HANDLER = "tally.functions.stream_handler.handler"
ALERT_HANDLER = "tally.functions.alert_schedule.scheduled"
# Below alerts and clearing are judged once a minute; a scheduled invocation that fails is tried
# twice more (the same event id: it finishes its own crossings) while its minute is still current.
ALERT_SCHEDULE = Duration.minutes(1)
ALERT_RETRIES = 2
ALERT_EVENT_AGE = Duration.minutes(2)
# The function ships the runtime only: the local toolkit and build leftovers stay behind.
LEFT_OUT_OF_THE_ASSET = ("local", "__pycache__", "*.pyc")
RUNTIME = lambda_.Runtime.PYTHON_3_13
POWERTOOLS_LAYER_NAME = "AWSLambdaPowertoolsPythonV3-python313-arm64"
POWERTOOLS_ACCOUNT = "017000801446"

# The metric contract of the handler (Powertools embedded metric format).
METRICS_NAMESPACE = "Tally"
SERVICE_NAME = "tally"
HANDLER_METRICS = (
    "RecordsCounted",
    "RecordsSkipped",
    "RecordsRejected",
    "BucketUpdates",
    "UpdatesAlreadyApplied",
    "CommitRetries",
    "WindowStatesDiscarded",
    "UpdatesResumed",
    "OverlapsReadAgain",
    "StreamReadRequests",
    "WindowStatesRebuilt",
    "ItemsUnresolved",
)
# What the bucket updates cost (ReturnConsumedCapacity), apart: a Maximum and a ratio, not sums.
BUCKET_WRITE_UNITS, LARGEST_BUCKET_ITEM_KB = "BucketWriteUnits", "LargestBucketItemKB"

# The handler folds a batch in memory and commits one UpdateItem per bucket item of a
# segment, 32 at a time. 256 MB holds a full 6 MB batch plus boto3 and Powertools with
# room to spare, and gives twice the CPU of 128 MB, which keeps the cold-start imports short.
MEMORY_MB = 256
# A window's updates take well under a second; 60 s leaves room for the commit's
# retries on throttling (at most about 21 s of pauses, tally.core.retry.commit_backoff),
# yet a hung invocation stalls its shard for at most a minute before Lambda retries it,
# and a retry is safe because every update is idempotent.
TIMEOUT = Duration.seconds(60)

# Lambda keeps retrying a failing batch; DynamoDB Streams drops records after 24
# hours, so this is "retry until the record is gone". Discarding earlier would
# lose counts for good, and retries cannot double count (watermarks). A stuck
# shard is surfaced by the iterator-age alarm long before.
RETRY_ATTEMPTS = -1
MAX_RECORD_AGE = Duration.days(1)
# Every bucket update is conditioned on its shard's watermark, which only moves forward:
# a shard's segments must commit one after the other, in stream order. Lambda keeps a
# shard's records in order only with one batch of the shard at a time; above 1 it runs
# several batches of a shard at once, ordered per partition key alone, and a segment
# committed after a later one of its shard would be skipped as applied.
PARALLELIZATION_FACTOR = 1

ITERATOR_AGE_ALARM_MINUTES = 5
ALARM_PERIOD = Duration.minutes(5)
# Bucket items past ITEM_GROWTH_KB for three periods in a row: a popular item that stays this large for 15
# minutes holds the watermarks of that many shards (a lone large item, say a histogram's, does not persist).
ITEM_GROWTH_ALARM_PERIODS = 3
FAILURE_QUEUE_RETENTION = Duration.days(14)

CDK_REMOVAL_POLICIES = {"retain": RemovalPolicy.RETAIN, "destroy": RemovalPolicy.DESTROY}


@functools.cache
def runtime_asset() -> Path:
    """The function's code: the installed tally package, wherever it is installed (a wheel, an editable
    checkout), copied without its local toolkit into a folder of its own, once per process."""
    package = Path(tally.__file__).resolve().parent
    staged = Path(tempfile.mkdtemp(prefix="tally-asset-"))
    atexit.register(shutil.rmtree, staged, True)  # synthesis copies it into the cloud assembly before then
    shutil.copytree(package, staged / "tally", ignore=shutil.ignore_patterns(*LEFT_OUT_OF_THE_ASSET))
    return staged


class TallyConfigurationError(ValueError):
    """The construct cannot count this table as configured; the message says why, in one line."""


@jsii.implements(IValidation)
class _StreamContract:
    """Refuses a synth whose event source mapping breaks what exactly-once counting needs.

    The construct sets these itself; this catches an escape hatch or an Aspect
    that changes them on the generated mapping.
    """

    def __init__(self, tally: Tally) -> None:
        self.tally = tally

    def validate(self) -> list[str]:
        errors = []
        for mapping in self.tally.node.find_all():
            if not isinstance(mapping, lambda_.CfnEventSourceMapping):
                continue
            if mapping.parallelization_factor != PARALLELIZATION_FACTOR:
                errors.append(
                    f"ParallelizationFactor must be {PARALLELIZATION_FACTOR}, got {mapping.parallelization_factor}: "
                    "tally commits a shard's segments in stream order, and Lambda keeps that order only one batch at a time"
                )
            if not mapping.tumbling_window_in_seconds:
                errors.append("TumblingWindowInSeconds must be 1-900: only a windowed invocation names its shard")
            if mapping.bisect_batch_on_function_error:
                errors.append("BisectBatchOnFunctionError must stay off: a retry must rebuild the same segments")
        return errors


class Tally(Construct):
    """Counts, alarms and dashboard for one events table with a stream.

    ``settings`` carries everything an operator may tune (attribute names,
    retentions, the count-from instant, tumbling window, batch size, ...);
    by default the documented defaults of `tally_cdk.context`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        events_table: dynamodb.ITable,
        settings: StackSettings | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.settings = settings or StackSettings.from_context(lambda key: None)
        self.events_table = events_table
        check_stream(events_table, self.settings.handler_settings.counter_rules)
        self.counts_table = table_from_description(
            self, "CountsTable", COUNTS_TABLE, CDK_REMOVAL_POLICIES[self.settings.counts_table_removal_policy]
        )
        self.failure_queue = self._failure_queue()
        # One asset and one layer for both functions: the read API runs the very package that counts.
        self.code = lambda_.Code.from_asset(str(runtime_asset()))
        self.powertools_layer = lambda_.LayerVersion.from_layer_version_arn(
            self,
            "PowertoolsLayer",
            f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{POWERTOOLS_ACCOUNT}:layer:"
            f"{POWERTOOLS_LAYER_NAME}:{self.settings.powertools_layer_version}",
        )
        self.alerts = alerts_of(self.settings.handler_settings.counter_rules.rules)
        self.function = self._counting_function()
        self.alert_function = self._alert_function() if self.alerts else None
        self._connect_stream()
        self.node.add_validation(_StreamContract(self))
        self.read_api = self._read_api()
        self.backfill = self._backfill()
        self.close = self._close()
        self.alarms = self._alarms()
        self._dashboard(self.alarms)

    def _failure_queue(self) -> sqs.Queue:
        """Receives the metadata (shard, sequence range) of batches Lambda gave up on."""
        queue = sqs.Queue(
            self,
            "FailureQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=FAILURE_QUEUE_RETENTION,
        )
        Validations.of(queue).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-SQS3",
                reason="This queue is itself the dead-letter destination of the stream's event "
                "source mapping; a further dead-letter queue behind it would never receive anything "
                "because nothing consumes it automatically.",
            )
        )
        return queue

    def _counting_function(self) -> lambda_.Function:
        role, log_group = role_with_own_logs(
            self, "CountingFunction", "tally stream handler: read the events stream, write counts"
        )
        # One conditional UpdateItem per bucket item; BatchGetItem reads the markers the
        # previous release left, to take over segments it committed in part; PutItem
        # publishes the counting settings.
        self.counts_table.grant(role, "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:BatchGetItem")
        # The counter directory's entries and the rank records go in BatchWriteItem puts, to their own
        # partitions only.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["dynamodb:BatchWriteItem"],
                resources=[self.counts_table.table_arn],
                conditions={
                    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [DIRECTORY_PREFIX + "*", RANK_PREFIX + "*"]}
                },
            )
        )
        Validations.of(role).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason="dynamodb:ListStreams, granted by the DynamoDB event source, supports no "
                "resource-level permissions; every other statement names its table, stream, queue "
                "or log group.",
            )
        )

        if self.alerts:
            role.add_to_policy(self._put_alert_events())
            # After each commit, the minute items of the windows it changed: one Query a counter.
            self.counts_table.grant(role, "dynamodb:Query")
        return self._python_function(
            "CountingFunction",
            "Counts events from the events table stream into minute and hour buckets",
            HANDLER,
            role,
            log_group,
        )

    def _python_function(
        self, name: str, description: str, handler: str, role: iam.Role, log_group: logs.LogGroup
    ) -> lambda_.Function:
        """One of tally's functions: the package's code, the pinned runtime and Powertools layer, the settings."""
        function = lambda_.Function(
            self,
            name,
            description=description,
            code=self.code,
            handler=handler,
            runtime=RUNTIME,
            architecture=lambda_.Architecture.ARM_64,
            memory_size=MEMORY_MB,
            timeout=TIMEOUT,
            role=role,
            log_group=log_group,
            layers=[self.powertools_layer],
            environment=self._settings_environment(),
        )
        Validations.of(function).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-L1",
                reason="The runtime is pinned to python3.13 together with the matching Powertools "
                "layer flavour (python313); moving to a newer runtime changes both and is a "
                "reviewed upgrade, not a side effect of a CDK library update.",
            )
        )
        return function

    @property
    def alert_bus_arn(self) -> str:
        """The bus alert events go to: ``alertBus`` (a name or an ARN), else the account's default bus."""
        bus = self.settings.alert_bus
        if bus.startswith("arn:"):
            return bus
        return f"arn:{Aws.PARTITION}:events:{Aws.REGION}:{Aws.ACCOUNT_ID}:event-bus/{bus or 'default'}"

    def _put_alert_events(self) -> iam.PolicyStatement:
        """Alert events go to one bus: PutEvents there and nowhere else."""
        return iam.PolicyStatement(actions=["events:PutEvents"], resources=[self.alert_bus_arn])

    def _alert_function(self) -> lambda_.Function:
        """The once-a-minute evaluation (``tally.functions.alert_schedule.scheduled``): clears alarms, judges
        below alerts, puts events whose makers died. It reads the counts table and writes alert states only."""
        role, log_group = role_with_own_logs(
            self, "AlertFunction", "tally alert evaluation: read counts, write alert states, put alert events"
        )
        self.counts_table.grant(role, "dynamodb:Query", "dynamodb:BatchGetItem")
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["dynamodb:UpdateItem"],
                resources=[self.counts_table.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [ALERTS_PREFIX + "*"]}},
            )
        )
        role.add_to_policy(self._put_alert_events())
        function = self._python_function(
            "AlertFunction",
            "Judges tally's alerts once a minute: clearing, below alerts, pending events",
            ALERT_HANDLER,
            role,
            log_group,
        )
        events.Rule(
            self,
            "AlertSchedule",
            description="Runs tally's alert evaluation once a minute",
            schedule=events.Schedule.rate(ALERT_SCHEDULE),
            targets=[
                events_targets.LambdaFunction(
                    function, retry_attempts=ALERT_RETRIES, max_event_age=ALERT_EVENT_AGE
                )
            ],
        )
        return function

    def _settings_environment(self) -> dict[str, str]:
        """The settings every function reads at cold start (`Settings.from_env`): the counting settings as the
        handler publishes them (``counting_environment``: rules, retentions, lanes, ranked and calendar prefixes,
        count-from), the counts table, and where logs, metrics and alert events go."""
        return {
            **self.settings.handler_settings.counting_environment(),
            tally_settings.ENV_COUNTS_TABLE: self.counts_table.table_name,
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            **({ENV_ALERT_BUS: self.settings.alert_bus} if self.settings.alert_bus else {}),
        }

    def _read_api(self) -> ReadApi | None:
        """The HTTP read API (on by default), answering from the counts table with the same package."""
        if not self.settings.read_api.enabled:
            return None
        return ReadApi(
            self,
            "ReadApi",
            settings=self.settings.read_api,
            counts_table=self.counts_table,
            code=self.code,
            runtime=RUNTIME,
            layers=[self.powertools_layer],
            environment=self._settings_environment(),
        )

    def _backfill(self) -> AccountBackfill | None:
        """The in-account backfill (``backfillExports``), with the package and settings that count the stream."""
        if not self.settings.backfill.enabled:
            return None
        return AccountBackfill(
            self,
            "Backfill",
            settings=self.settings.backfill,
            counts_table=self.counts_table,
            events_table_arn=self.events_table.table_arn,
            events_table_name=self.events_table.table_name,
            code=self.code,
            runtime=RUNTIME,
            layers=[self.powertools_layer],
            environment=self._settings_environment(),
        )

    def _close(self) -> AccountClose | None:
        """The daily close of days and months, only where counters keep them (``calendarPrefixes``): with the
        package and settings that count the stream."""
        if not self.settings.handler_settings.calendar_prefixes:
            return None
        return AccountClose(
            self,
            "Close",
            counts_table=self.counts_table,
            code=self.code,
            runtime=RUNTIME,
            layers=[self.powertools_layer],
            environment=self._settings_environment(),
        )

    def _connect_stream(self) -> None:
        window = self.settings.tumbling_window_seconds
        self.function.add_event_source(
            event_sources.DynamoEventSource(
                self.events_table,
                starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                # With a tumbling window the open segment travels in the window state,
                # so the batch size only trades invocations against payload size; 1,000
                # records of typical event size stay far below the 6 MB invocation limit.
                batch_size=self.settings.batch_size,
                # Counts commit when the window closes, so waiting a few seconds to fill a
                # batch costs no freshness and saves invocations under light traffic.
                max_batching_window=Duration.seconds(self.settings.max_batching_window_seconds),
                # Only a windowed invocation names its shard, which every bucket update is keyed on.
                tumbling_window=Duration.seconds(window),
                parallelization_factor=PARALLELIZATION_FACTOR,
                # A retry must rebuild the same segments, with the same first records; a
                # bisected batch would not.
                bisect_batch_on_error=False,
                retry_attempts=RETRY_ATTEMPTS,
                max_record_age=MAX_RECORD_AGE,
                on_failure=event_sources.SqsDlq(self.failure_queue),
            )
        )

    def _alarms(self) -> list[cloudwatch.Alarm]:
        # A record may wait for its tumbling window to close before it is committed.
        iterator_age_threshold = Duration.minutes(ITERATOR_AGE_ALARM_MINUTES).plus(
            Duration.seconds(self.settings.tumbling_window_seconds)
        )
        alarms = [
            self._alarm_above(
                "IteratorAgeAlarm",
                "Stream records wait too long: the counting function is failing or too slow",
                self.function.metric("IteratorAge", statistic="Maximum", period=ALARM_PERIOD),
                iterator_age_threshold.to_milliseconds(),
            ),
            self._alarm_above(
                "FunctionErrorsAlarm",
                "The counting function failed; Lambda retries the batch",
                self.function.metric_errors(statistic="Sum", period=ALARM_PERIOD),
            ),
            self._alarm_above(
                "FailureQueueAlarm",
                "Lambda gave up on stream records: their events are not counted",
                self.failure_queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=ALARM_PERIOD),
            ),
            self._alarm_above(
                "RecordsRejectedAlarm",
                "Events were rejected as malformed, too late or in the future; the dashboard shows the reasons",
                self._handler_metric("RecordsRejected"),
            ),
            self._alarm_above(
                "WindowStateDiscardedAlarm",
                "A tumbling-window state could not be read and was discarded: the records it held are not "
                "counted; the function's log names their sequence range",
                self._handler_metric("WindowStatesDiscarded"),
            ),
            self._alarm_above(
                "ItemsUnresolvedAlarm",
                "An overlap with what an earlier reader of the shard took could not be split (its records had left "
                "the stream): the bucket items it names are low by at most the bound the function's log gives, "
                "reads mark their counters not exact, and the shard went on. Repair them from the events table: "
                "scripts/audit.py COUNTER --repair (docs/guarantees.md, Reading a stream again)",
                self._handler_metric("ItemsUnresolved"),
            ),
        ]
        alarms.append(self._item_growth_alarm())
        if self.read_api is not None:
            alarms += [self._alarm_above(*alarm) for alarm in self.read_api.alarms()]
        if self.close is not None:
            alarms += [self._alarm_above(*alarm) for alarm in self.close.alarms()]
        if self.settings.alarm_topic_arn:
            topic = sns.Topic.from_topic_arn(self, "AlarmTopic", self.settings.alarm_topic_arn)
            for alarm in alarms:
                alarm.add_alarm_action(cloudwatch_actions.SnsAction(topic))
        return alarms

    def _alarm_above(
        self, alarm_id: str, description: str, metric: cloudwatch.IMetric, threshold: float = 0
    ) -> cloudwatch.Alarm:
        """Fires in the first period the metric exceeds the threshold; no data is no trouble."""
        return cloudwatch.Alarm(
            self,
            alarm_id,
            alarm_description=description,
            metric=metric,
            threshold=threshold,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )

    def _item_growth_alarm(self) -> cloudwatch.Alarm:
        """Fires while bucket items stay past ITEM_GROWTH_KB: before the commits stop keeping up, with what to set."""
        return cloudwatch.Alarm(
            self,
            "ItemGrowthAlarm",
            alarm_description=(
                f"Bucket items stay larger than {ITEM_GROWTH_KB} KB: a popular bucket item holds the watermarks of "
                f"more than about {ITEM_GROWTH_KB * 50} stream shards, each update costs {ITEM_GROWTH_KB + 1} write "
                "units or more, and as the events stream gains shards its commits stop keeping up (1,000 shards on "
                "one lane do not). Raise bucketLanes (CDK context bucketLanes, TALLY_BUCKET_LANES of the function "
                f"and every reader) to about one lane per {SHARDS_PER_LANE} shards of the events stream (aws "
                "dynamodbstreams describe-stream --stream-arn <arn> lists them): the function's warning \"bucket "
                "items growing\" names the value to set, recommended_bucket_lanes. It counts from 5 minutes "
                "after the deploy, and batches that arrived before keep their lanes, whatever retries them; "
                "never lower it (docs/performance.md, Scale)"
            ),
            metric=self._handler_metric(LARGEST_BUCKET_ITEM_KB, statistic="Maximum"),
            threshold=ITEM_GROWTH_KB,
            evaluation_periods=ITEM_GROWTH_ALARM_PERIODS,
            datapoints_to_alarm=ITEM_GROWTH_ALARM_PERIODS,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )

    def _handler_metric(self, name: str, statistic: str = "Sum") -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name=name,
            dimensions_map={"service": SERVICE_NAME},
            statistic=statistic,
            period=ALARM_PERIOD,
        )

    def _dashboard(self, alarms: list[cloudwatch.Alarm]) -> None:
        rejected_by_reason = cloudwatch.MathExpression(
            expression=(
                f"SEARCH('{{{METRICS_NAMESPACE},service,reason}} MetricName=\"RecordsRejected\" "
                f"service=\"{SERVICE_NAME}\"', 'Sum', {int(ALARM_PERIOD.to_seconds())})"
            ),
            label="",
            period=ALARM_PERIOD,
        )
        dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.hours(24))
        dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=alarms, width=24, height=3),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Records",
                left=[self._handler_metric(name) for name in HANDLER_METRICS[:3]],
                width=8,
            ),
            cloudwatch.GraphWidget(title="Rejected records by reason", left=[rejected_by_reason], width=8),
            cloudwatch.GraphWidget(
                title="Commits",
                left=[self._handler_metric(name) for name in HANDLER_METRICS[3:]],
                width=8,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Iterator age (max)",
                left=[self.function.metric("IteratorAge", statistic="Maximum", period=Duration.minutes(1))],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Invocations and errors",
                left=[self.function.metric_invocations(period=ALARM_PERIOD)],
                right=[self.function.metric_errors(period=ALARM_PERIOD)],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Failure queue (messages visible)",
                left=[
                    self.failure_queue.metric_approximate_number_of_messages_visible(
                        statistic="Maximum", period=ALARM_PERIOD
                    )
                ],
                width=8,
            ),
        )
        write_units_per_update = cloudwatch.MathExpression(
            expression="units / updates",
            using_metrics={
                "units": self._handler_metric(BUCKET_WRITE_UNITS),
                "updates": self._handler_metric("BucketUpdates"),
            },
            label="write units per bucket update",
            period=ALARM_PERIOD,
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Bucket items: largest (KB), write units per update",
                left=[self._handler_metric(LARGEST_BUCKET_ITEM_KB, statistic="Maximum")],
                right=[write_units_per_update],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=ITEM_GROWTH_KB, label="ItemGrowthAlarm")],
                width=8,
            ),
        )
        if self.read_api is not None:
            dashboard.add_widgets(*self.read_api.widgets())
        if self.close is not None:
            dashboard.add_widgets(*self.close.widgets())


def table_from_description(
    scope: Construct, construct_id: str, description: TableDescription, removal_policy: RemovalPolicy
) -> dynamodb.Table:
    """An on-demand table with point-in-time recovery, keyed, streamed and expired as described."""
    string_key = dynamodb.AttributeType.STRING
    return dynamodb.Table(
        scope,
        construct_id,
        partition_key=dynamodb.Attribute(name=description.partition_key, type=string_key),
        sort_key=dynamodb.Attribute(name=description.sort_key, type=string_key) if description.sort_key else None,
        time_to_live_attribute=description.ttl_attribute,
        stream=dynamodb.StreamViewType(description.stream_view) if description.stream_view else None,
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        removal_policy=removal_policy,
    )


def check_stream(table: dynamodb.ITable, rules: Rules) -> None:
    """Refuse a table tally cannot count: no stream, or (when the app defines it) a view without the images
    the rules judge: new images for inserts and changes, old ones for transitions and deletions.

    An imported table's view cannot be known at synth; the handler then rejects
    records without an image a rule needs (``missing_image``, ``missing_old_image``), counted and logged.
    """
    if not table.table_stream_arn:
        raise TallyConfigurationError(
            f"events table {table.node.path} has no stream: tally needs one with view {rules.stream_view}"
        )
    definition = table.node.default_child
    specification = getattr(definition, "stream_specification", None)
    view = getattr(specification, "stream_view_type", None) if specification is not None else None
    shortfall = rules.view_shortfall(view) if isinstance(view, str) else None
    if shortfall:
        raise TallyConfigurationError(f"events table {table.node.path} streams {view}: {shortfall}")
