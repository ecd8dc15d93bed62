"""The histogram's bench: what the bins cost, side by side, and the 1 KB statement (the meter is checked against
moto with a histogram rule in test_bench_cost)."""

from __future__ import annotations

from decimal import Decimal

from bench import aggregates
from bench.cost import item_size
from tally.core.histograms import bin_of, is_bin
from tally.core.settings import Settings
from tally.local.delivery import DeliveryConfig

CONFIG = DeliveryConfig(batch_size=100, window_seconds=60)


def test_a_histogram_rule_costs_its_bins_in_item_size_and_nothing_else():
    costs = aggregates.histogram_costs(Settings(), CONFIG, providers=2, per_second=8, seconds=600)
    without, with_bins = costs["without"], costs["with"]
    assert with_bins["item_writes"] == without["item_writes"]  # the same updates, with more terms
    assert with_bins["write_units"] > without["write_units"]  # hour buckets of 2,400 durations pass 1 KB
    assert without["per_provider_buckets"]["hour"]["bins_max"] == 0
    hour = with_bins["per_provider_buckets"]["hour"]
    assert hour["bins_mean"] > 100 and hour["over_1_kb"] > 0
    assert costs["with_over_without"]["write_units"] > 1
    assert with_bins["reads_24h"]["batch"] == without["reads_24h"]["batch"]  # every item under 4 KB


def test_the_widest_spread_within_one_kilobyte_is_exactly_that():
    rows = {row["spread"]: row for row in aggregates.bucket_size_by_spread()}
    names = [bin_of(Decimal(1.05**k)) for k in range(400)]  # any distinct bins weigh the same
    for per_bin in (99, 9_999):
        widest = rows[f"widest within 1 KB at {per_bin:,} per bin"]

        def size(bins):
            return item_size(aggregates._bucket_item("load/posts/counting-on-dynamodb", dict.fromkeys(names[:bins], per_bin)))

        assert size(widest["bins"]) <= 1024 < size(widest["bins"] + 1)
        assert widest["spread_factor"] >= 20
    assert rows["1 ms to 60 s"]["bins"] == 555
    assert sum(is_bin(name) for name in aggregates._bucket_item("c", {"+Ab": 1, "0": 2})) == 2
