"""The published settings item (tally.dynamo.settings)."""

from dataclasses import replace

from moto_tables import COUNTS

import tally

from .support import T0


def test_published_settings_read_back_as_published(counts_table, settings):
    assert counts_table.published_settings() is None
    counts_table.publish_settings("Tally-Counter", T0)
    published = counts_table.published_settings()
    assert (published.publisher, published.published_ms) == ("Tally-Counter", T0)
    assert published.settings() == replace(settings, counts_table=published.settings().counts_table)
    assert published.version == tally.__version__


def test_settings_a_release_before_0_2_0_published_read_without_a_version(counts_table, dynamodb):
    counts_table.publish_settings("Tally-Counter", T0)
    dynamodb.update_item(TableName=COUNTS, Key={"pk": {"S": "#settings#"}, "sk": {"S": "counting"}},
                         UpdateExpression="REMOVE version")
    assert counts_table.published_settings().version is None
