"""The close_scale figures: the requests a counter's close makes are those the model takes, and at a million
counters a day the daily close keeps up, each part within Lambda's 15 minutes."""

from __future__ import annotations

import json

import pytest

import bench.__main__ as bench_main
from bench import close_scale
from tally.closing import MAX_DAYS_PER_PART


@pytest.fixture(scope="module")
def measured():
    return close_scale.measure(count=24)


def test_a_counters_close_is_one_query_of_its_children_with_their_marks_and_one_update(measured):
    plain, distinct = (close_scale.per_counter(measured[f"utc_day_{kind}"]) for kind in ("plain", "distinct"))
    assert (plain["queries"], plain["updates"], plain["sketch_writes"], plain["write_units"]) == (1, 1, 0, 1)
    # A distinct counter's sketch lane is one Query more, its day's sketch one merge (a read, then a write) more.
    assert (distinct["queries"], distinct["updates"], distinct["sketch_writes"]) == (2, 1, 1)
    assert measured["utc_day_plain"]["written"] == measured["utc_day_plain"]["counters"] == 24
    # The counter directory: each of the 16 partitions of each UTC day the period touches, and the previous
    # release's partition of it (part 0): a New York day touches two UTC days, a month all of its own.
    assert measured["utc_day_plain"]["reads"]["directory"] == 17
    assert measured["zone_day_plain"]["reads"]["directory"] == 34
    assert measured["month_plain"]["reads"]["directory"] == 31 * 17
    assert measured["utc_week_plain"]["written"] == 7 * measured["utc_week_plain"]["counters"]


def test_at_a_million_counters_a_day_the_close_keeps_up_and_a_week_a_part_stays_within_lambdas_limit(measured):
    figures = close_scale.model(measured)
    rows = {(row["case"], row["counters_a_day"], len(row["zones"])): row for row in figures["rows"]}
    daily = rows[("day", 10**6, 2)]
    assert daily["keeps_up"] and daily["wall_seconds"] < 3600 and daily["within_lambda_timeout"]
    assert daily["parts"] == 32 and daily["write_units"] == pytest.approx(2 * 10**6 * 1.1, rel=0.01)
    assert rows[("day and month", 10**6, 2)]["parts"] == 64
    catch_up = rows[("catch-up", 10**6, 2)]
    assert catch_up["within_lambda_timeout"] and catch_up["longest_part_seconds_a_month_a_part"] > 900
    assert catch_up["parts"] == 2 * 16 * (-(-31 // MAX_DAYS_PER_PART) + 1)
    assert all(row["cost_usd"] < 60 for row in figures["rows"])


def test_the_model_runs_alone_and_replaces_only_its_own_figures(tmp_path, monkeypatch, capsys, measured):
    monkeypatch.setattr(bench_main, "ROOT", tmp_path)
    monkeypatch.setattr(bench_main, "PUBLISHED", tmp_path / "results.json")
    monkeypatch.setattr(close_scale, "measure", lambda: measured)
    (tmp_path / "results.json").write_text('{"published": true}\n')

    bench_main.main(["close-scale-model"])

    published = json.loads((tmp_path / "results.json").read_text())
    assert set(published) == {"published", "close_scale"} and published["close_scale"]["measured"] == measured
    assert "The daily close on AWS, modeled" in capsys.readouterr().out
