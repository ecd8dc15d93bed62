import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tally.core.alerts import (
    ABOVE,
    ALARM,
    BELOW,
    DELIVERY_LEASE_MS,
    OK,
    SETTLE_MS,
    Alert,
    AlertState,
    CommitWindow,
    alerts_for,
    commit_crossing,
    commit_windows,
    crossing_of,
    judged_last_minutes,
    minutes_written,
    pending_crossing,
    replay,
    settled_end_ms,
    state_of,
)
from tally.core.buckets import Bucket
from tally.core.rules import RulesError, parse_rules
from tally.core.units import MINUTE_MS


def rule_with(alerts, **fields):
    entry = {"name": "logins", "counter": "logins/{ip}", "alerts": alerts, **fields}
    return parse_rules(json.dumps([entry])).rules[0]


def above(threshold, clear=None):
    return Alert("burst", "logins", "10m", 10 * MINUTE_MS, ABOVE, threshold, threshold if clear is None else clear)


def below(threshold, clear=None):
    return Alert("quiet", "logins", "1h", 60 * MINUTE_MS, BELOW, threshold, threshold if clear is None else clear)


def test_rule_reads_its_alerts_with_defaults_for_clear():
    rule = rule_with(
        [{"name": "burst", "window": "10m", "above": 100, "clear": 50}, {"name": "quiet", "window": " 1h ", "below": 3}]
    )
    assert rule.alerts == (
        Alert("burst", "logins", "10m", 10 * MINUTE_MS, ABOVE, 100, 50),
        Alert("quiet", "logins", "1h", 60 * MINUTE_MS, BELOW, 3, 3),
    )


@pytest.mark.parametrize(
    ("alerts", "message"),
    [
        ([], "field 'alerts': must be a non-empty list"),
        ({"name": "a"}, "field 'alerts': must be a non-empty list"),
        (["burst"], "alert 1: must be an object"),
        ([{"window": "10m", "above": 1}], "alert 1: field 'name': must be 1-64 letters"),
        ([{"name": "#x", "window": "10m", "above": 1}], "alert 1 ('#x'): field 'name'"),
        ([{"name": "a", "window": "10m", "above": 1, "level": 2}], "alert 1 ('a'): field 'level': unknown"),
        ([{"name": "a", "above": 1}], "field 'window': must be a length from 1m to 24h"),
        ([{"name": "a", "window": "soon", "above": 1}], "field 'window': window length must look like"),
        ([{"name": "a", "window": "25h", "above": 1}], "field 'window': must be a length from 1m to 24h"),
        ([{"name": "a", "window": "10m"}], "needs exactly one of 'above' and 'below'"),
        ([{"name": "a", "window": "10m", "above": 1, "below": 0}], "needs exactly one of 'above' and 'below'"),
        ([{"name": "a", "window": "10m", "above": 1.5}], "field 'above': must be a whole count from 0 to"),
        ([{"name": "a", "window": "10m", "above": -1}], "field 'above': must be a whole count"),
        ([{"name": "a", "window": "10m", "above": True}], "field 'above': must be a whole count"),
        ([{"name": "a", "window": "10m", "above": "5"}], "field 'above': must be a whole count"),
        ([{"name": "a", "window": "10m", "below": 0}], "field 'below': must be at least 1"),
        ([{"name": "a", "window": "10m", "above": 5, "clear": 6}], "field 'clear': must be at most 'above' (5), got 6"),
        ([{"name": "a", "window": "10m", "below": 5, "clear": 4}], "field 'clear': must be at least 'below' (5), got 4"),
        (
            [{"name": "a", "window": "10m", "above": 5}, {"name": "a", "window": "1h", "below": 1}],
            "alert 2 ('a'): field 'name': same name as alert 1",
        ),
    ],
)
def test_bad_alerts_get_one_line_naming_rule_alert_and_field(alerts, message):
    with pytest.raises(RulesError) as raised:
        rule_with(alerts)
    assert str(raised.value).startswith("rule 1 ('logins'): field 'alerts': ")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_alert_names_are_unique_across_rules():
    text = json.dumps(
        [
            {"name": "a", "counter": "a/{x}", "alerts": [{"name": "burst", "window": "10m", "above": 1}]},
            {"name": "b", "counter": "b/{x}", "alerts": [{"name": "burst", "window": "10m", "above": 1}]},
        ]
    )
    with pytest.raises(RulesError, match=r"rule 2 \('b'\): field 'alerts': alert 'burst' is also an alert of rule 1"):
        parse_rules(text)


def test_above_alarms_past_the_threshold_and_clears_at_clear():
    alert = above(100, clear=50)
    assert replay(alert, [100, 101, 100, 51, 50, 99, 101]) == [OK, ALARM, ALARM, ALARM, OK, OK, ALARM]


def test_below_alarms_under_the_threshold_and_clears_at_clear():
    alert = below(5, clear=10)
    assert replay(alert, [5, 4, 5, 9, 10, 6, 0]) == [OK, ALARM, ALARM, ALARM, OK, OK, ALARM]


def test_threshold_events_report_the_level_crossed():
    alert = above(100, clear=50)
    assert (alert.level(ALARM), alert.level(OK)) == (100, 50)


def brute_force_alarm(alert, totals, index):
    """ALARM at ``index`` iff some earlier-or-same total was past the threshold and none since reached ``clear``."""
    past = (lambda t: t > alert.threshold) if alert.direction == ABOVE else (lambda t: t < alert.threshold)
    cleared = (lambda t: t <= alert.clear) if alert.direction == ABOVE else (lambda t: t >= alert.clear)
    for start in range(index, -1, -1):
        if past(totals[start]):
            return all(not cleared(totals[k]) or past(totals[k]) for k in range(start + 1, index + 1))
    return False


@st.composite
def alerts_and_totals(draw):
    direction = draw(st.sampled_from([ABOVE, BELOW]))
    threshold = draw(st.integers(1, 20))
    gap = draw(st.integers(0, 8))
    clear = max(threshold - gap, 0) if direction == ABOVE else threshold + gap
    alert = Alert("a", "r", "10m", 10 * MINUTE_MS, direction, threshold, clear)
    return alert, draw(st.lists(st.integers(0, 30), max_size=40))


@given(alerts_and_totals())
def test_crossings_agree_with_brute_force_replay(case):
    """Judging the totals one by one, through crossing_of and the state it records, takes the states brute
    force gives, and numbers the crossings 1, 2, ... with distinct ids."""
    alert, totals = case
    stored = AlertState()
    crossings = []
    for index, total in enumerate(totals):
        crossing = crossing_of(alert, "c", stored, total, index * MINUTE_MS, (index + 10) * MINUTE_MS)
        if crossing is not None:
            crossings.append(crossing)
            stored = crossing.recorded("me", index)
        assert (stored.state == ALARM) == brute_force_alarm(alert, totals, index)
    expected = [
        i for i in range(len(totals)) if brute_force_alarm(alert, totals, i) != (i and brute_force_alarm(alert, totals, i - 1))
    ]
    assert [c.start_ms // MINUTE_MS for c in crossings] == expected
    assert [c.transitions for c in crossings] == list(range(1, len(crossings) + 1))
    assert [c.state for c in crossings] == [ALARM, OK] * (len(crossings) // 2) + [ALARM] * (len(crossings) % 2)
    assert len({c.id for c in crossings}) == len(crossings)


def test_raise_only_never_clears():
    alarmed = AlertState(ALARM, 1)
    assert crossing_of(above(10), "c", alarmed, 0, 0, MINUTE_MS, raise_only=True) is None
    assert crossing_of(above(10), "c", alarmed, 0, 0, MINUTE_MS).state == OK
    assert crossing_of(above(10), "c", AlertState(), 11, 0, MINUTE_MS, raise_only=True).state == ALARM


def test_a_crossing_has_one_id_for_every_deliverer_and_a_full_detail():
    first = crossing_of(above(100), "logins/1.2.3.4", AlertState(), 150, 0, 10 * MINUTE_MS)
    again = pending_crossing(above(100), "logins/1.2.3.4", first.recorded("shard-a", 5))
    assert again == first and again.id == first.id
    assert first.detail() == {
        "id": first.id,
        "alert": "burst",
        "rule": "logins",
        "counter": "logins/1.2.3.4",
        "state": ALARM,
        "window": "10m",
        "start": "1970-01-01T00:00Z",
        "end": "1970-01-01T00:10Z",
        "total": 150,
        "threshold": 100,
    }
    # Another counter, another crossing number or another window end: another id.
    assert crossing_of(above(100), "logins/other", AlertState(), 150, 0, 10 * MINUTE_MS).id != first.id
    assert crossing_of(above(100), "logins/1.2.3.4", AlertState(OK, 2), 150, 0, 10 * MINUTE_MS).id != first.id
    assert crossing_of(above(100), "logins/1.2.3.4", AlertState(), 150, 0, 11 * MINUTE_MS).id != first.id


def test_a_pending_delivery_is_due_to_its_maker_at_once_and_to_anyone_after_the_lease():
    stored = AlertState(ALARM, 1, pending=True, by="shard-a", changed_ms=1_000)
    assert stored.delivery_due("shard-a", 1_000)
    assert not stored.delivery_due("shard-b", 1_000 + DELIVERY_LEASE_MS - 1)
    assert stored.delivery_due("shard-b", 1_000 + DELIVERY_LEASE_MS)
    assert not AlertState(ALARM, 1, pending=False, by="shard-a").delivery_due("shard-a", 10**12)


def test_a_commit_writes_minutes_of_the_counters_asked_with_their_events():
    deltas = {
        ("a", Bucket("M", 100)): 2,
        ("a", Bucket("M", 103)): 1,
        ("a", Bucket("H", 2)): 3,
        ("b", Bucket("H", 1)): 4,
        ("c", Bucket("M", 7)): 5,
    }
    assert minutes_written(deltas, {"a", "b"}) == {"a": {100: 2, 103: 1}}


def test_a_commit_judges_from_the_alerts_length_before_its_first_minute_to_its_last_none_past_now():
    five = 5 * MINUTE_MS
    assert judged_last_minutes([10, 12], five, 100 * MINUTE_MS) == range(5, 17)  # 16: the last holding 12
    assert judged_last_minutes([10, 12], five, 14 * MINUTE_MS) == range(5, 14)  # the window ending now: 13
    assert judged_last_minutes([10, 12], five, 14 * MINUTE_MS + 1) == range(5, 15)
    assert judged_last_minutes([10, 12], five, 11 * MINUTE_MS) == range(5, 13)  # clock behind: its own minutes
    assert judged_last_minutes([10, 12], five, 100 * MINUTE_MS, alarmed=False) == range(10, 17)  # nothing to clear


def test_commit_windows_total_each_window_and_keep_unchanged_ones_only_where_they_may_clear():
    written = {10: 3, 20: 4}
    counts = {6: 2, 8: 1, 10: 5, 20: 4}
    windows, skipped = commit_windows(3 * MINUTE_MS, written, counts, 22 * MINUTE_MS + 5)
    by_last = {w.end_ms // MINUTE_MS - 1: w for w in windows}
    assert skipped == 0
    # 7..9 before the first minute, 10..12 hold it, 13..19 unchanged between, 20..22 hold 20 (none after 22).
    assert sorted(by_last) == list(range(7, 23))
    assert by_last[7] == CommitWindow(5 * MINUTE_MS, 8 * MINUTE_MS, 2, 0, True)
    assert by_last[10] == CommitWindow(8 * MINUTE_MS, 11 * MINUTE_MS, 6, 3, True)
    assert by_last[10].before == 3
    assert (by_last[13].total, by_last[13].own, by_last[13].complete) == (0, 0, True)
    assert [(by_last[m].total, by_last[m].complete) for m in (20, 21, 22)] == [(4, True), (4, False), (4, False)]
    # A window reaching before the oldest minute still kept is not judged; an unchanged one after the last
    # written minute is left, ended or not: the stream's next records may fill it.
    windows, skipped = commit_windows(3 * MINUTE_MS, {10: 1}, {10: 1}, 20 * MINUTE_MS, oldest_minute=9)
    assert skipped == 4 and [w.end_ms // MINUTE_MS - 1 for w in windows] == [11, 12]


def window(last, total, own=None, complete=True, length=10):
    return CommitWindow((last - length + 1) * MINUTE_MS, (last + 1) * MINUTE_MS, total, total if own is None else own,
                        complete)


def test_a_commit_raises_windows_it_pushed_over_and_clears_only_complete_windows_after_the_last_change():
    alert = above(5, clear=2)
    raised = commit_crossing(alert, "c", AlertState(), window(20, 6, own=1))
    assert (raised.state, raised.end_ms, raised.raised_ms) == (ALARM, 21 * MINUTE_MS, 21 * MINUTE_MS)
    alarmed = replace(raised.recorded("t", 0), pending=False)
    assert commit_crossing(alert, "c", alarmed, window(25, 9)) is None  # the same episode
    assert commit_crossing(alert, "c", alarmed, window(25, 2, complete=False)) is None  # may still fill
    assert commit_crossing(alert, "c", alarmed, window(19, 0)) is None  # older than the alarm
    cleared = commit_crossing(alert, "c", alarmed, window(25, 2))
    assert (cleared.state, cleared.transitions, cleared.raised_ms) == (OK, 2, 21 * MINUTE_MS)
    ok = replace(cleared.recorded("t", 0), pending=False)
    assert commit_crossing(alert, "c", ok, window(30, 6, own=0)) is None  # not changed by this commit
    assert commit_crossing(alert, "c", ok, window(23, 8, own=1)) is None  # inside the last episode
    assert commit_crossing(alert, "c", ok, window(15, 8, own=2)) is None  # was over before: judged then
    late = commit_crossing(alert, "c", ok, window(15, 8, own=3))  # pushed over by this commit, before the episode
    assert (late.state, late.transitions, late.end_ms) == (ALARM, 3, 16 * MINUTE_MS)
    assert commit_crossing(alert, "c", ok, window(26, 6, own=1)).state == ALARM  # after the clearing: a new one


def brute_force_episodes(alert, counts, last_minutes, ended_before):
    """The documented definition: every minute-aligned window in time order, judged from OK by the hysteresis
    rule; each ALARM starts one maximal run of windows over the threshold, each OK ends one (only windows that
    have ended, those whose last minute is before ``ended_before``, clear). (state, start, end, total) each."""
    length = alert.window_ms // MINUTE_MS
    state, events = OK, []
    for last in last_minutes:
        total = sum(counts.get(minute, 0) for minute in range(last - length + 1, last + 1))
        new = alert.judge(state, total)
        if new != state and (new == ALARM or last < ended_before):
            events.append((new, (last - length + 1) * MINUTE_MS, (last + 1) * MINUTE_MS, total))
            state = new
    return events


@st.composite
def committed_minutes(draw):
    """An above alert, minute counts from minute 100 on, and commits in time order, each writing a run of
    minutes and judged in the minute after its last, the last one long after (a backlog: every window has
    ended). Runs are cut before a counted minute at most the alert's length after the last counted one:
    longer quiet stretches between commits are the schedule's to clear."""
    length = draw(st.integers(1, 5))
    threshold = draw(st.integers(1, 15))
    clear = max(threshold - draw(st.integers(0, 5)), 0)
    alert = Alert("a", "r", f"{length}m", length * MINUTE_MS, ABOVE, threshold, clear)
    counts = draw(st.lists(st.integers(0, 8) | st.just(0), min_size=1, max_size=30))
    counted = [m for m, n in enumerate(counts) if n]
    cuttable = [m for previous, m in zip(counted, counted[1:]) if m - previous <= length]
    cuts = sorted(draw(st.sets(st.sampled_from(cuttable), max_size=8))) if cuttable else []
    runs = [range(a, b) for a, b in zip([0, *cuts], [*cuts, len(counts)])]
    commits = [{100 + m: counts[m] for m in run if counts[m]} for run in runs]
    return alert, [commit for commit in commits if commit], draw(st.integers(0, 59_999))


@settings(max_examples=80, deadline=None)
@given(committed_minutes())
def test_commits_raise_every_episode_brute_force_finds_once_in_time_order(case):
    """Commits in time order, each walking its windows with commit_crossing from the state the last one left,
    put the events the brute-force definition gives over the counts as committed: the same states, windows
    and totals, numbered 1, 2, ... with distinct ids."""
    alert, commits, seconds = case
    if not commits:
        return
    length = alert.window_ms // MINUTE_MS
    final = {minute: n for commit in commits for minute, n in commit.items()}
    counts: dict[int, int] = {}
    state, made = AlertState(), []
    for index, commit in enumerate(commits):
        counts.update(commit)
        later = index + 1 < len(commits)
        now = (max(commit) + (1 if later else length + 2)) * MINUTE_MS + seconds
        windows, skipped = commit_windows(alert.window_ms, commit, counts, now, alarmed=state.state == ALARM)
        assert skipped == 0
        for window_ in windows:
            crossing = commit_crossing(alert, "c", state, window_)
            if crossing is not None:
                made.append(crossing)
                state = replace(crossing.recorded("t", now), pending=False)
    last = max(final)
    expected = brute_force_episodes(alert, final, range(min(final), last + length), last + 1)
    assert [(c.state, c.start_ms, c.end_ms, c.total) for c in made] == expected
    assert [c.transitions for c in made] == list(range(1, len(made) + 1))
    assert len({c.id for c in made}) == len(made)


def test_below_windows_end_with_the_newest_settled_minute():
    now = 1_000 * MINUTE_MS + 30_000
    assert settled_end_ms(now) == now - 30_000 - SETTLE_MS
    assert settled_end_ms(1_000 * MINUTE_MS) == 1_000 * MINUTE_MS - SETTLE_MS


def test_alerts_for_a_counter_come_from_the_rules_that_can_write_it():
    rules = parse_rules(
        json.dumps(
            [
                {"name": "logins", "counter": "logins/{ip}", "alerts": [{"name": "burst", "window": "10m", "above": 5}]},
                {"name": "quiet", "counter": "logins/{ip}", "when": {"ok": {"equals": True}},
                 "alerts": [{"name": "silence", "window": "1h", "below": 1}]},
                {"name": "views", "counter": "views/{page}"},
            ]
        )
    ).rules
    assert [a.name for a in alerts_for(rules, "logins/1.2.3.4")] == ["burst", "silence"]
    assert [a.name for a in alerts_for(rules, "logins/1.2.3.4", BELOW)] == ["silence"]
    assert alerts_for(rules, "views/home") == ()


def test_state_items_read_back_as_states():
    assert state_of(None) == AlertState()
    item = {"state": "ALARM", "transitions": 3, "pending": True, "by": "x", "changed": 5, "start": 1, "end": 2, "total": 9,
            "raised": 2}
    assert state_of(item) == AlertState(ALARM, 3, True, "x", 5, 1, 2, 9, 2)
