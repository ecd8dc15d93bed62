"""The stream runner over HTTP against moto's server: generator -> stream -> handler -> buckets."""

from __future__ import annotations

import json
import os
import random
import signal
import time

import pytest
from script_support import load_script
from sweeps import sweep

from tally.local.delivery import DeliveryConfig
from tally.dynamo.counts_table import CountsTable
from tally.local.aws import LocalContext, client, local_handler, scan_items, stream_arn_of, write_items
from tally.core.plans import PlanKind
from tally.query import count_windows
from tally.core.segments import rejected_counter
from tally.core.records import Reason
from tally.core.settings import Settings
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.local.stream_reader import StreamReader
from tally.core.windows import Window, now_ms
from tally.local.workload import brute_force_counts

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("fresh_handler_cache")]

generate_events = load_script("generate_events")
run_stream = load_script("run_stream")


def generate(*args: str) -> None:
    """Events for alpha and beta; bad records only when asked for (the generator writes one of each by default)."""
    bad = [] if "--bad" in args else ["--bad", "0"]
    assert generate_events.main(["--seed", "11", "--counters", "alpha", "beta", *bad, *args]) == 0


def assert_counts_match_brute_force(tables, counters, windows) -> None:
    """Both plans, every window, against a scan of the raw events."""
    table = CountsTable(client("dynamodb"), tables.counts, Settings())
    items = scan_items(client("dynamodb"), tables.events)
    for at_ms, length_ms in windows:
        expected = brute_force_counts(items, counters, Window.ending(at_ms, length_ms))
        for plan in PlanKind:
            results = count_windows(table, counters, length_ms=length_ms, at_ms=at_ms, plan=plan, consistent=True)
            assert {r.counter: r.total for r in results} == {c: expected[c]["expected"] for c in counters}, plan
    assert sum(expected[c]["in_window"] for c in counters) > 0  # the windows were not vacuous


def test_generated_events_are_counted_exactly_by_both_plans(tables, capsys):
    generate("--hours", "3", "--rate", "20", "40", "--bad", "6")
    assert run_stream.main(["--until-idle", "--idle-polls", "1", "--poll-interval", "0", "--window-seconds", "1"]) == 0
    assert "INSERT" in capsys.readouterr().out

    now = now_ms()
    windows = [(now, 24 * HOUR_MS), (now - 67 * MINUTE_MS, 90 * MINUTE_MS), (now - 17 * MINUTE_MS, 2 * HOUR_MS)]
    assert_counts_match_brute_force(tables, ["alpha", "beta"], windows)

    table = CountsTable(client("dynamodb"), tables.counts, Settings())
    reasons = [Reason.MISSING_COUNTER, Reason.INVALID_COUNTER, Reason.MISSING_TIME, Reason.INVALID_TIME]
    reasons += [Reason.FUTURE_TIME, Reason.LATE_EVENT]
    rejected = count_windows(table, [rejected_counter(reason) for reason in reasons], consistent=True)
    assert [r.total for r in rejected] == [1] * 6  # one injected bad record of each kind, counted by arrival


class CountingStreams:
    """The real Streams client, with its GetRecords calls counted."""

    def __init__(self, streams) -> None:
        self.streams = streams
        self.pages_with_records = 0

    def __getattr__(self, name):
        return getattr(self.streams, name)

    def get_records(self, **request):
        response = self.streams.get_records(**request)
        self.pages_with_records += bool(response["Records"])
        return response


def test_a_shard_longer_than_a_page_is_read_page_by_page(tables):
    generate("--hours", "1", "--rate", "20", "20")  # 40 events
    streams = CountingStreams(client("dynamodbstreams"))
    reader = StreamReader(
        streams,
        stream_arn_of(client("dynamodb"), tables.events),
        local_handler(tables.counts),
        config=DeliveryConfig(batch_size=5, window_seconds=60),
        context=LocalContext(),
        limit=7,
    )
    reader.run(until_idle=True, idle_polls=1, poll_interval=0, commit_open_windows=True)
    assert reader.stats.records == 40
    assert streams.pages_with_records == 6  # ceil(40 / 7)
    assert_counts_match_brute_force(tables, ["alpha", "beta"], [(now_ms(), 24 * HOUR_MS)])


@pytest.mark.parametrize("window_seconds", [1, 60])
def test_an_invocation_failing_after_its_commit_is_retried_without_double_counting(tables, window_seconds):
    generate("--hours", "2", "--rate", "30", "30")  # 120 events
    handler = local_handler(tables.counts)
    failures = []

    def fails_once_after_committing(event, context):
        response = handler(event, context)
        if not failures and event["isFinalInvokeForWindow"]:
            failures.append(event)
            raise TimeoutError("timed out after the commit")
        return response

    retried = []
    reader = StreamReader(
        client("dynamodbstreams"),
        stream_arn_of(client("dynamodb"), tables.events),
        fails_once_after_committing,
        config=DeliveryConfig(batch_size=50, window_seconds=window_seconds),
        context=LocalContext(),
        on_retry=lambda event, error, attempt: retried.append(event),
    )
    reader.run(until_idle=True, idle_polls=1, poll_interval=0, commit_open_windows=True)
    assert retried == failures and len(failures) == 1
    assert reader.attempts == reader.invocations + 1
    assert_counts_match_brute_force(tables, ["alpha", "beta"], [(now_ms(), 24 * HOUR_MS)])


def test_a_runner_restarted_from_its_checkpoint_reads_only_what_is_new(tables, tmp_path, capsys):
    checkpoint = tmp_path / "checkpoint.json"
    runner = ["--until-idle", "--idle-polls", "1", "--poll-interval", "0", "--window-seconds", "1", "--checkpoint", str(checkpoint)]
    generate("--hours", "1", "--rate", "15", "15")
    assert run_stream.main(runner) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("30 records")
    first = json.loads(checkpoint.read_text())
    assert len(first) == 1

    assert generate_events.main(["--seed", "12", "--counters", "alpha", "--hours", "1", "--rate", "9", "9", "--bad", "0"]) == 0
    assert run_stream.main(runner) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("9 records")
    assert json.loads(checkpoint.read_text()) != first
    assert_counts_match_brute_force(tables, ["alpha", "beta"], [(now_ms(), 24 * HOUR_MS)])


def test_the_handlers_logs_go_to_stderr_and_stdout_holds_the_summary_alone(tables, capsys):
    generate("--hours", "1", "--rate", "5", "5", "--bad", "6")
    capsys.readouterr()
    assert run_stream.main(["--until-idle", "--idle-polls", "1", "--poll-interval", "0", "--window-seconds", "1", "--log-level", "INFO"]) == 0
    captured = capsys.readouterr()
    [summary] = captured.out.splitlines()
    assert summary.startswith("16 records (INSERT 16)")
    assert "record rejected" in captured.err and "invocation done" in captured.err


def put_events(tables, counters: dict[str, int], minute_ms: int, tag: str) -> None:
    """``counters[c]`` events of each counter c, all stamped within one minute."""
    items = [
        {"id": f"{tag}-{counter}-{n}", "counter": counter, "ts": minute_ms + n * 100}
        for counter, count in counters.items()
        for n in range(count)
    ]
    write_items(client("dynamodb"), tables.events, items)


def hour_counts(tables, counters) -> dict[str, int]:
    table = CountsTable(client("dynamodb"), tables.counts, Settings())
    return {r.counter: r.total for r in count_windows(table, list(counters), length_ms=HOUR_MS, consistent=True)}


def test_a_runner_commits_no_window_before_its_end_and_a_run_again_adds_exactly_the_new_records(
    tables, capsys, monkeypatch
):
    """Six events of c/a, then a seventh in the same minute, the runner run after each without a checkpoint: 7.
    The runner used to commit the window still open when it stopped, and the next run, cutting that window whole,
    skipped the seventh. Stopped by Ctrl-C, it now commits nothing of a window that has not ended.

    Tumbling windows start at multiples of their length: the six are put as one starts, so that the window is
    still open, whatever the machine's load, when the first run has read them."""
    minute = (now_ms() - 5 * MINUTE_MS) // MINUTE_MS * MINUTE_MS
    window_seconds = 3
    idle = ["--until-idle", "--idle-polls", "1", "--poll-interval", "0.1", "--window-seconds", str(window_seconds)]
    time.sleep(window_seconds - time.time() % window_seconds + 0.05)
    put_events(tables, {"c/a": 6}, minute, "first")
    report_wait = run_stream.report_wait

    def ctrl_c_while_waiting(seconds):  # as a user would press it, once the runner waits on its open window
        report_wait(seconds)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(run_stream, "report_wait", ctrl_c_while_waiting)
    try:
        assert run_stream.main(idle) == 0
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    monkeypatch.setattr(run_stream, "report_wait", report_wait)
    err = capsys.readouterr().err
    assert "waiting" in err and "records of windows still open are not committed" in err
    assert hour_counts(tables, ["c/a"]) == {"c/a": 0}
    put_events(tables, {"c/a": 1}, minute, "second")
    assert run_stream.main(idle) == 0
    assert hour_counts(tables, ["c/a"]) == {"c/a": 7}
    assert run_stream.main(idle) == 0  # nothing new: nothing changes
    assert hour_counts(tables, ["c/a"]) == {"c/a": 7}


@pytest.mark.parametrize("windows", [(1, 1, 1, 1), (2, 1, 3, 1)], ids=["same-window", "window-changed"])
def test_rounds_of_events_each_followed_by_a_run_from_the_trim_horizon_end_exact(tables, windows):
    """Four rounds of 20 to 60 events over 20 counters, the runner once after each, without a checkpoint: every
    counter exact, also when the window length changes between runs (other cuts of the same records)."""
    rng = random.Random(37)
    counters = [f"c/{n:02d}" for n in range(20)]
    minute = (now_ms() - 5 * MINUTE_MS) // MINUTE_MS * MINUTE_MS
    expected = dict.fromkeys(counters, 0)
    for round_number, window in enumerate(windows):
        drawn = rng.choices(counters, k=rng.randint(20, 60))
        put = {counter: drawn.count(counter) for counter in counters if counter in drawn}
        put_events(tables, put, minute, f"round{round_number}")
        for counter, count in put.items():
            expected[counter] += count
        argv = ["--until-idle", "--idle-polls", "1", "--poll-interval", "0.1", "--window-seconds", str(window)]
        assert run_stream.main(argv) == 0
        assert hour_counts(tables, counters) == expected, f"after round {round_number + 1}"


def runner_pass(tables, rng: random.Random, *, kill_after: int | None) -> None:
    """One run of the runner with cuts drawn from ``rng`` (batch size, window length, GetRecords limit), from the
    trim horizon; killed (stopped, its open windows left uncommitted) after ``kill_after`` invocations, or to the
    end of its windows. An overlap it meets is split on records read again through moto's Streams API."""
    config = DeliveryConfig(batch_size=rng.choice([1, 2, 3, 5, 10, 1000]), window_seconds=rng.choice([1, 2, 3]))
    handler = local_handler(tables.counts, log_level="CRITICAL")
    invocations = 0

    def counted(event, context):
        nonlocal invocations
        response = handler(event, context)
        invocations += 1
        if kill_after is not None and invocations >= kill_after:
            reader.stop.set()
        return response

    reader = StreamReader(client("dynamodbstreams"), stream_arn_of(client("dynamodb"), tables.events), counted,
                          config=config, context=LocalContext(), limit=rng.choice([1, 7, 100, 1000]))
    reader.run(until_idle=True, idle_polls=1, poll_interval=0.05)  # a run that gave up would raise DeliveryFailed


@pytest.mark.parametrize("seed", sweep([2, 1, 3, 4, 5]))
def test_the_runner_run_again_with_any_cuts_and_kills_never_gives_up_and_ends_exact(tables, seed):
    """Rounds of new events over 40 counters, each followed by runs of the runner from the trim horizon with other
    batch sizes, windows and GetRecords limits, some killed mid-window: no run gives up, and the last one leaves
    every counter at brute force (a 1-record batch makes every window carry its earlier records as sums)."""
    rng = random.Random(seed)
    counters = [f"c/{n:02d}" for n in range(40)]
    minute = (now_ms() - 5 * MINUTE_MS) // MINUTE_MS * MINUTE_MS
    for round_number in range(3):
        for chunk in range(3):  # arrivals over about two seconds: several windows, cut differently by each run
            drawn = rng.choices(counters, k=rng.randint(10, 30))
            put_events(tables, {c: drawn.count(c) for c in set(drawn)}, minute, f"s{seed}r{round_number}c{chunk}")
            time.sleep(0.7)
        for _ in range(2):
            runner_pass(tables, rng, kill_after=rng.choice([None, 2, 5, 12]))
    runner_pass(tables, rng, kill_after=None)
    assert_counts_match_brute_force(tables, counters, [(now_ms(), 24 * HOUR_MS)])


def test_stdout_holds_the_summary_alone_however_many_invocations_the_run_makes(tables, capsys):
    """With metrics off (they are CloudWatch's), Powertools keeps each invocation's metric values unflushed, and
    prints them all once one metric holds 100 values: a run of more than 100 invocations wrote that JSON to
    stdout, and a runner following the stream kept every value in memory."""
    put_events(tables, {"c/a": 120}, (now_ms() - 5 * MINUTE_MS) // MINUTE_MS * MINUTE_MS, "many")
    capsys.readouterr()
    argv = ["--until-idle", "--idle-polls", "1", "--poll-interval", "0", "--window-seconds", "1", "--batch-size", "1"]
    assert run_stream.main(argv) == 0
    [summary] = capsys.readouterr().out.splitlines()
    assert summary.startswith("120 records (INSERT 120)")
