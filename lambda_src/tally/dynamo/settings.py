"""The settings the pipeline counts with, published in the counts table beside the counts.

``core/settings.py`` reads them from the environment; the handler publishes them here at every cold
start, so that whoever writes events or reads counts can check it agrees.
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from tally.core.commit import RetriesExhausted
from tally.core.lanes import LaneHistory
from tally.core.settings import ENV_BUCKET_LANES, Settings
from tally.dynamo.calls import TableAccess, error_code, key_of, retried_while_throttled
from tally.version import __version__

# The settings the pipeline counts with, published where the counts are, so that whoever writes
# events or reads counts can check it agrees (pk, sk). Reserved: no counter name starts with '#'.
SETTINGS_KEY = ("#settings#", "counting")
# The lanes over time (core/lanes.py): written when a function starts counting with other lanes, read by every commit.
LANES_KEY = ("#settings#", "lanes")
# Functions starting at once that race to write the next lanes: each reads the winner's and judges again.
LANES_WRITE_ATTEMPTS = 5


@dataclass(frozen=True)
class PublishedSettings:
    """What the pipeline last published: its counting environment, who published it and when."""

    environment: dict[str, str]
    publisher: str
    published_ms: int
    version: str | None = None  # the release that published them (None: one before 0.2.0)

    def settings(self) -> Settings:
        """The published settings as ``Settings.from_env`` reads them (SettingsError if this release cannot)."""
        return Settings.from_env(self.environment)


class PublishedSettingsItem(TableAccess):
    """The settings item of ``CountsTable``: written by the handler, read by the scripts and readers."""

    def publish_settings(self, publisher: str, published_ms: int) -> None:
        """Write the settings this table is counted with (``Settings.counting_environment``), replacing the last."""
        self.client.put_item(
            TableName=self.table_name,
            Item={
                **key_of(*SETTINGS_KEY),
                "environment": {"M": {name: {"S": value} for name, value in self.settings.counting_environment().items()}},
                "publisher": {"S": publisher},
                "published": {"N": str(published_ms)},
                "version": {"S": __version__},
            },
        )

    def published_settings(self) -> PublishedSettings | None:
        """What the pipeline counting into this table last published, or None if nothing has."""
        item = retried_while_throttled(
            self.backoff, self.client.get_item, TableName=self.table_name, Key=key_of(*SETTINGS_KEY), ConsistentRead=True
        ).get("Item")
        if item is None:
            return None
        environment = {name: value["S"] for name, value in item["environment"]["M"].items()}
        version = item.get("version", {}).get("S")
        return PublishedSettings(environment, item["publisher"]["S"], int(item["published"]["N"]), version)

    def lane_history(self, consistent: bool = False) -> tuple[LaneHistory, int] | None:
        """The lanes over time kept in the table, with the revision that wrote them; None before any was written."""
        item = retried_while_throttled(
            self.backoff, self.client.get_item, TableName=self.table_name, Key=key_of(*LANES_KEY), ConsistentRead=consistent
        ).get("Item")
        if item is None:
            return None
        changes = tuple((int(pair["L"][0]["N"]), int(pair["L"][1]["N"])) for pair in item["changes"]["L"])
        return LaneHistory(changes), int(item["revision"]["N"])

    def adopt_lanes(self, now_ms: int) -> LaneHistory:
        """Make this function's lanes the table's from LANES_LEAD_MS after ``now_ms`` on, unless they are its last
        already, and give the history. The first history starts with the lanes the last publisher counted with
        (before this function publishes its own): segments that arrived before the change keep their lanes."""
        for _ in range(LANES_WRITE_ATTEMPTS):
            found = self.lane_history(consistent=True)
            if found is None:
                published = self.published_settings()
                before = published.environment.get(ENV_BUCKET_LANES) if published else None
                history, revision = LaneHistory.always(int(before or self.settings.bucket_lanes)), 0
            else:
                history, revision = found
            adopted = history.adopting(self.settings.bucket_lanes, now_ms)
            if adopted is None and found is not None:
                return history
            written = adopted or history
            try:
                self._write_lanes(written, revision)
            except ClientError as error:
                if error_code(error) != "ConditionalCheckFailedException":
                    raise
                continue  # another function wrote them first: judge again from what it wrote
            return written
        raise RetriesExhausted(f"the lanes' history kept changing over {LANES_WRITE_ATTEMPTS} tries")

    def _write_lanes(self, history: LaneHistory, revision: int) -> None:
        changes = [{"L": [{"N": str(start)}, {"N": str(lanes)}]} for start, lanes in history.changes]
        request = {
            "TableName": self.table_name,
            "Item": {**key_of(*LANES_KEY), "changes": {"L": changes}, "revision": {"N": str(revision + 1)}},
        }
        if revision:
            request |= {
                "ConditionExpression": "#revision = :r",
                "ExpressionAttributeNames": {"#revision": "revision"},
                "ExpressionAttributeValues": {":r": {"N": str(revision)}},
            }
        else:
            request |= {"ConditionExpression": "attribute_not_exists(#changes)", "ExpressionAttributeNames": {"#changes": "changes"}}
        self.client.put_item(**request)
