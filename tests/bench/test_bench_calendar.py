"""Days and months in the bench: the floor's counter-days and counter-months, every write of the stream and of the
close charged (late adds, late marks, progress), the close's reads answered by the meter as moto answers them."""

from __future__ import annotations

from bench import calendar_buckets, workloads, writes
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS
from tally.core.windows import parse_instant
from tally.local.delivery import DeliveryConfig

CONFIG = DeliveryConfig(batch_size=100, window_seconds=60)
ZONE = "America/New_York"


def at(text: str) -> int:
    return parse_instant(text)


def test_every_counter_keeps_days_with_the_empty_prefix():
    kept = calendar_buckets.keeping_days(Settings())
    assert kept.calendar_prefixes == ("",) and kept.kept_zones == ("UTC", ZONE)
    assert kept.keeps_calendar("orders/acme") and kept.keeps_calendar("x")
    assert not Settings().keeps_calendar("orders/acme")


def test_the_long_floor_counts_each_counter_day_and_month_of_each_zone_once():
    events = [
        ("a", at("2026-10-31T23:30:00Z"), at("2026-10-31T23:30:01Z")),  # UTC Oct 31; New York Oct 31, 19:30
        ("a", at("2026-11-01T02:00:00Z"), at("2026-11-01T02:00:01Z")),  # UTC Nov 1; New York still Oct 31 (22:00)
        ("b", at("2026-11-15T10:00:00Z"), at("2026-11-15T10:00:01Z")),
        ("b", at("2026-11-15T11:00:00Z"), at("2026-11-18T11:00:00Z")),  # late: the same day and month still
        ("views/x", at("2026-11-15T10:00:00Z"), at("2026-11-15T10:00:01Z")),  # kept by no prefix
        ("b", at("2026-06-01T10:00:00Z"), at("2026-11-15T10:00:00Z")),  # past the hour retention: not counted
    ]
    settings = Settings(calendar_prefixes=("a", "b"), calendar_zones=(ZONE,))
    # a: days UTC {Oct 31, Nov 1} + New York {Oct 31}; months UTC {Oct, Nov} + New York {Oct}. b: one of each.
    assert calendar_buckets.long_floor(events, settings) == {"days": 3 + 2, "months": 3 + 2}
    everything = calendar_buckets.keeping_days(Settings())
    assert calendar_buckets.long_floor(events, everything) == {"days": 5 + 2, "months": 5 + 2}
    assert calendar_buckets.long_floor(events, Settings()) == {"days": 0, "months": 0}


def test_on_time_events_cost_the_close_one_write_per_counter_day_and_month_and_the_ratio_counts_it():
    workload = workloads.steady(counters=3, per_second=2, seconds=180)
    plain = writes.run_tally(workload, Settings(), CONFIG).meter
    figures = calendar_buckets.closed_figures(workload, Settings(), CONFIG)
    floor, stream, close = figures["floor"], figures["stream"], figures["close"]
    assert (floor["counter_days"], floor["counter_months"]) == (3 * 2, 3 * 2)  # one day, one month, two zones
    assert stream["write_units"] == plain.units  # on time: the stream writes what it writes without days
    assert stream["late_direct_writes"] == stream["late_mark_writes"] == 0
    assert close["items_written"] == floor["counter_days"] + floor["counter_months"]
    assert close["write_units"] == close["items_written"] + close["progress_writes"] > close["items_written"]
    assert close["read_requests"] > 0 and close["read_units"] > 0
    assert figures["write_units"] == stream["write_units"] + close["write_units"]
    assert figures["units_over_floor_units"] == round(figures["write_units"] / floor["write_units"], 3) > 1.0


def test_late_records_add_to_their_days_directly_and_the_daily_close_adds_the_rest_once():
    workload = workloads.calendar(counters=3, days=6, total=300, seed=6)  # 4 late records
    counted = list(workload.counted_arrivals())
    late = [(c, e, a) for c, e, a in counted if a >= (e // HOUR_MS + 1) * HOUR_MS + DAY_MS]
    assert late and len(late) < len(counted) // 10
    run = calendar_buckets.stream_and_close(workload, calendar_buckets.keeping_days(Settings()), CONFIG, daily=True)
    items = run.client.items
    for zone in ("UTC", ZONE):  # each closed day holds its events once, late ones included
        days = {key: int(item["count"]["N"]) for key, item in items.items()
                if key[1].startswith(f"D#{zone}@") and not key[0].startswith("#")}
        assert sum(days.values()) == len(counted)
        months = {key: int(item["count"]["N"]) for key, item in items.items()
                  if key[1].startswith(f"MO#{zone}@") and not key[0].startswith("#")}
        assert sum(months.values()) == len(counted)
    stream = run.ledger.of("stream")
    assert stream["writes:day or month"] >= len(late) and stream["writes:late mark"] == 0  # marks ride on their items
    marked = sum(int(item["late"]["N"]) for key, item in items.items() if key[1].startswith("H#") and "late" in item)
    assert marked == len(late)  # each late record marked its hour once
    assert run.closes > 6  # once a day, then until everything closed


def test_the_writes_rows_carry_the_ratio_with_days_and_months_and_the_targets_judge_it():
    import bench.__main__ as bench_main

    workload = workloads.steady(counters=3, per_second=2, seconds=120)
    measured = writes.measure(workload, Settings(), CONFIG)
    ratio = measured["ratios"]["tally_calendar_units_over_floor_units"]
    assert ratio == measured["tally_calendar"]["units_over_floor_units"] > 1.0
    assert measured["ratios"]["tally_units_over_floor_units"] == round(
        measured["tally"]["write_units"] / measured["floor"]["write_units"], 3)  # without days: as before
    rows = [t for t in bench_main.targets(_published_with(measured)) if "days and months" in t["target"]]
    assert [t["figure"] for t in rows if t["target"].startswith("steady")] == [ratio]
    assert {"target": "days and months (python -m bench calendar)", "wanted": "run", "figure": None, "met": False} in rows


def _published_with(measured: dict) -> dict:
    """The published figures with the steady row replaced by ``measured``, and without the calendar part."""
    import json
    from pathlib import Path

    published = json.loads((Path(__file__).resolve().parents[2] / "bench" / "results.json").read_text())
    published["writes"] = [measured if w["workload"] == "steady" else w for w in published["writes"]]
    published.pop("calendar", None)
    return published


def test_the_calendar_part_publishes_alone_and_its_targets_are_judged_from_its_figures(tmp_path, monkeypatch, capsys):
    import json
    from pathlib import Path

    import bench.__main__ as bench_main

    published = json.loads((Path(__file__).resolve().parents[2] / "bench" / "results.json").read_text())
    figures = published["calendar"]
    judged = {t["target"]: t for t in bench_main.targets(published)}
    assert judged["365 closed days of 1 counter: read units (strong, worst zone)"]["figure"] == max(
        row["read_units_strong"] for row in figures["reads"]["days"])
    assert judged["this month so far (month_to_date): requests, worst instant"]["figure"] == max(
        row["requests"] for row in figures["reads"]["month_to_date"])
    workload = judged["calendar workload, closed daily: all WCU / floor WCU (counter-days and -months included)"]
    assert workload["figure"] == figures["workload"]["units_over_floor_units"] > 1.0
    for w in published["writes"]:  # every write workload judged with days and months, met or not
        ratio = w["ratios"]["tally_calendar_units_over_floor_units"]
        row = judged[f"{w['workload']}: tally with days and months (all writes, close included) WCU / floor WCU"]
        assert row["figure"] == ratio and row["met"] == (ratio <= 1.1)
    monkeypatch.setattr(bench_main, "ROOT", tmp_path)
    monkeypatch.setattr(bench_main, "PUBLISHED", tmp_path / "results.json")
    monkeypatch.setattr(bench_main, "deployment", lambda: (Settings(), CONFIG, {}))
    monkeypatch.setattr(bench_main.calendar_buckets, "results", lambda settings, config: {"calendar": figures})
    (tmp_path / "results.json").write_text('{"published": true}\n')
    bench_main.main(["calendar"])
    assert json.loads((tmp_path / "results.json").read_text()) == {"published": True, "calendar": figures}
    printed = capsys.readouterr().out
    assert "Reads of closed days and months" in printed and "Storage a plain count counter keeps" in printed
