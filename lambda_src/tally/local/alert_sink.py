"""Where alert events go locally: an EventBridge rule on the bus sends tally's events to an SQS queue,
which ``drain`` empties. The same calls work on moto (in process or its server) and on AWS."""

from __future__ import annotations

import json
from typing import Any

from tally.alerting import EVENT_DETAIL_TYPE, EVENT_SOURCE

SINK_RULE = "tally-alerts-sink"


class AlertSink:
    """A queue receiving every ``Counter alert`` event put on ``bus``."""

    def __init__(self, events: Any, sqs: Any, bus: str = "default", queue: str = "tally-alerts") -> None:
        self.sqs = sqs
        self.queue_url = sqs.create_queue(QueueName=queue)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        if bus != "default":
            try:
                events.create_event_bus(Name=bus)
            except events.exceptions.ResourceAlreadyExistsException:
                pass
        pattern = {"source": [EVENT_SOURCE], "detail-type": [EVENT_DETAIL_TYPE]}
        events.put_rule(Name=SINK_RULE, EventBusName=bus, EventPattern=json.dumps(pattern))
        events.put_targets(Rule=SINK_RULE, EventBusName=bus, Targets=[{"Id": "queue", "Arn": arn}])

    def drain(self) -> list[dict[str, Any]]:
        """The details of the events that arrived since the last drain, in arrival order."""
        details = []
        while True:
            messages = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get("Messages", [])
            if not messages:
                return details
            for message in messages:
                details.append(json.loads(message["Body"])["detail"])
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
