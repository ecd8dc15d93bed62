"""The tally stack: the events table (created, or an existing one imported) and the Tally construct.

By default the stack creates the events table from `tally.core.tables`, as the
local pipeline does, streaming the images its counter rules judge (NEW_IMAGE,
or NEW_AND_OLD_IMAGES once a rule counts transitions or deletions). With context ``eventsTableName`` and ``eventsStreamArn``
it counts an existing table instead: the template then holds no events table,
and the function may read that one stream only.

The construct's id is "Default", which CDK leaves out of logical ids, so a
stack deployed before the construct existed updates in place: no table,
function or event source mapping is replaced.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from tally_cdk.context import StackSettings
from tally_cdk.construct import CDK_REMOVAL_POLICIES, Tally, table_from_description
from tally.core.tables import events_table_for
from tally.stack_outputs import (
    AUDIT_STATE_MACHINE_OUTPUT,
    CLOSE_STATE_MACHINE_OUTPUT,
    EXPORTS_OUTPUT,
    STATE_MACHINE_OUTPUT,
)


class TallyStack(Stack):
    """One deployable tally: the events table (or an imported one) and everything that counts it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: StackSettings | None = None,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.settings = settings or StackSettings.from_context(self.node.try_get_context)
        self.events_table = self._events_table()
        self.tally = Tally(self, "Default", events_table=self.events_table, settings=self.settings)
        self.counts_table = self.tally.counts_table
        self.failure_queue = self.tally.failure_queue
        self.function = self.tally.function
        self._outputs()

    def _events_table(self) -> dynamodb.ITable:
        if self.settings.events_table_name:
            return dynamodb.Table.from_table_attributes(
                self,
                "EventsTable",
                table_name=self.settings.events_table_name,
                table_stream_arn=self.settings.events_stream_arn,
            )
        return table_from_description(
            self,
            "EventsTable",
            events_table_for(self.settings.handler_settings.counter_rules),
            CDK_REMOVAL_POLICIES[self.settings.events_table_removal_policy],
        )

    def _outputs(self) -> None:
        CfnOutput(self, "EventsTableName", value=self.events_table.table_name)
        CfnOutput(self, "CountsTableName", value=self.counts_table.table_name)
        CfnOutput(self, "EventsStreamArn", value=self.events_table.table_stream_arn or "")
        CfnOutput(self, "FailureQueueUrl", value=self.failure_queue.queue_url)
        if self.tally.read_api is not None:
            CfnOutput(self, "ReadApiUrl", value=self.tally.read_api.url)
        if self.tally.backfill is not None:
            CfnOutput(self, STATE_MACHINE_OUTPUT, value=self.tally.backfill.state_machine.state_machine_arn)
            CfnOutput(self, AUDIT_STATE_MACHINE_OUTPUT, value=self.tally.backfill.audit_state_machine.state_machine_arn)
            CfnOutput(self, EXPORTS_OUTPUT, value=self.settings.backfill.exports)
        if self.tally.close is not None:
            CfnOutput(self, CLOSE_STATE_MACHINE_OUTPUT, value=self.tally.close.state_machine.state_machine_arn)
