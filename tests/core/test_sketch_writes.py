"""The sketch-merge policy as steps: reads first, writes conditioned on what was read, merges again on conflict."""

import pytest

from tally.core.buckets import Bucket, sketch_partition
from tally.core.commit import Pause, RetriesExhausted
from tally.core.retry import Backoff
from tally.core.segments import Segment
from tally.core.settings import Settings
from tally.core.units import HOUR_MS
from tally.core.sketch_writes import (
    ReadSketches,
    SketchOutcome,
    WriteSketches,
    sketch_key,
    sketch_steps,
)
from tally.core.sketches import Sketch, hash_of

T0 = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS
HOUR = ("visitors", Bucket.of_hour(T0 // HOUR_MS))
MINUTE = ("visitors", Bucket.of_minute(T0 // 60_000))


def sketch_of(*values):
    return Sketch(map(hash_of, values))


def segment(**sketches):
    items = {HOUR: sketches.get("hour"), MINUTE: sketches.get("minute")}
    items = {item: sketch for item, sketch in items.items() if sketch is not None}
    return Segment("100", T0, "101", 2, deltas=dict.fromkeys(items, 2), sketches=items)


class Table:
    """Sketch items in memory, answering the steps as DynamoDB would; ``interfere`` writes before a write lands."""

    def __init__(self, stored=None, interfere=None):
        self.stored = dict(stored or {})
        self.interfere = interfere
        self.reads = self.writes = 0

    def run(self, steps):
        reply = None
        try:
            while True:
                step = steps.send(reply)
                if isinstance(step, ReadSketches):
                    self.reads += len(step.keys)
                    reply = {key: self.stored.get(key) for key in step.keys}
                elif isinstance(step, WriteSketches):
                    reply = [self.write(write) for write in step.writes]
                else:
                    assert isinstance(step, Pause)
                    reply = None
        except StopIteration as done:
            return done.value

    def write(self, write):
        if self.interfere:
            self.interfere(self, write.key)
        values = write.request["ExpressionAttributeValues"]
        seen = values.get(":seen", {}).get("B")
        if self.stored.get(write.key) != seen:
            return SketchOutcome.CONFLICT, self.stored.get(write.key)
        self.writes += 1
        self.stored[write.key] = values[":sketch"]["B"]
        return SketchOutcome.WRITTEN, None


def steps(seg, attempts=8):
    return sketch_steps(seg, 0, "counts", Settings(), lambda: Backoff(attempts=attempts, sleep=lambda s: None))


def test_a_segment_merges_its_sketches_into_what_the_items_hold():
    table = Table({sketch_key(HOUR, 0): sketch_of("a", "b").to_bytes()})
    result = table.run(steps(segment(hour=sketch_of("b", "c"), minute=sketch_of("c"))))
    assert (result.written, result.unchanged, result.conflicts) == (2, 0, 0)
    assert Sketch.from_bytes(table.stored[sketch_key(HOUR, 0)]) == sketch_of("a", "b", "c")
    assert Sketch.from_bytes(table.stored[sketch_key(MINUTE, 0)]) == sketch_of("c")
    assert table.reads == 2


def test_a_retried_segment_finds_its_values_merged_and_writes_nothing():
    seg = segment(hour=sketch_of(*range(500)), minute=sketch_of("x"))
    table = Table()
    table.run(steps(seg))
    before = dict(table.stored)
    result = table.run(steps(seg))
    assert (result.written, result.unchanged) == (0, 2)
    assert table.stored == before and table.writes == 2


def test_a_writer_that_loses_the_race_merges_again_with_what_the_winner_wrote():
    def another_shard_first(table, key):
        if key == sketch_key(HOUR, 0) and not table.interfered:
            table.interfered = True
            table.stored[key] = sketch_of("other").to_bytes()

    table = Table(interfere=another_shard_first)
    table.interfered = False
    result = table.run(steps(segment(hour=sketch_of("mine"))))
    assert (result.written, result.conflicts) == (1, 1)
    assert Sketch.from_bytes(table.stored[sketch_key(HOUR, 0)]) == sketch_of("mine", "other")


def test_a_sketch_that_keeps_changing_fails_the_invocation():
    def always_first(table, key):
        table.others += 1
        table.stored[key] = sketch_of(f"other-{table.others}").to_bytes()

    table = Table(interfere=always_first)
    table.others = 0
    with pytest.raises(RetriesExhausted, match="still changing"):
        table.run(steps(segment(hour=sketch_of("mine")), attempts=3))
    assert table.others == 3


def test_a_throttled_or_lost_write_is_sent_again_with_the_same_condition():
    seg = segment(hour=sketch_of("a"))
    generator = steps(seg)
    read = next(generator)
    first = generator.send({key: None for key in read.keys})
    assert isinstance(first, WriteSketches)
    pause = generator.send([(SketchOutcome.RETRY, None)])
    assert isinstance(pause, Pause)
    again = generator.send(None)
    assert again.writes[0].request == first.writes[0].request
    with pytest.raises(StopIteration) as done:
        generator.send([(SketchOutcome.WRITTEN, None)])
    assert (done.value.value.written, done.value.value.retries) == (1, 1)


def test_a_lanes_sketch_items_live_in_the_lanes_own_partition_under_the_bucket_sort_key():
    counter, bucket = HOUR
    assert sketch_key(HOUR, 5) == (sketch_partition(counter, 5), bucket.sort_key) == ("#sketches#5#visitors", bucket.sort_key)
    generator = sketch_steps(segment(hour=sketch_of("a"), minute=sketch_of("a")), 5, "counts", Settings(),
                             lambda: Backoff(sleep=lambda s: None))
    read = next(generator)
    assert {pk for pk, _ in read.keys} == {"#sketches#5#visitors"}
    written = generator.send({key: None for key in read.keys})
    assert isinstance(written, WriteSketches)
    assert {write.request["Key"]["pk"]["S"] for write in written.writes} == {"#sketches#5#visitors"}
    assert {write.request["Key"]["sk"]["S"] for write in written.writes} == {HOUR[1].sort_key, MINUTE[1].sort_key}


def test_a_segment_without_sketches_reads_nothing():
    assert Table().run(steps(Segment("1", T0, "1", 1, deltas={HOUR: 1}))).written == 0
