"""The settings the pipeline counts with, published in the counts table beside the counts.

``core/settings.py`` reads them from the environment; the handler publishes them here at every cold
start, so that whoever writes events or reads counts can check it agrees.
"""

from __future__ import annotations

from dataclasses import dataclass

from tally.core.settings import Settings
from tally.dynamo.calls import TableAccess, key_of, retried_while_throttled
from tally.version import __version__

# The settings the pipeline counts with, published where the counts are, so that whoever writes
# events or reads counts can check it agrees (pk, sk). Reserved: no counter name starts with '#'.
SETTINGS_KEY = ("#settings#", "counting")


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
