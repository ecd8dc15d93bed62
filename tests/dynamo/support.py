"""What the tests of tally.dynamo share: a segment and its buckets, shards, a client that fails on cue, visits to a distinct counter."""

from dataclasses import replace

from botocore.exceptions import ClientError

from moto_tables import COUNTS, no_sleep_backoff

from tally.core.buckets import Bucket, legacy_sketch_sort_key, sketch_partition
from tally.core.commit import Writer
from tally.core.segments import Segment
from tally.core.sketches import Sketch, hash_of
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.dynamo.counts_table import CountsTable


T0 = 1_795_000_000_000 - 1_795_000_000_000 % HOUR_MS


MINUTE = Bucket.of_minute(T0 // MINUTE_MS)


HOUR = Bucket.of_hour(T0 // HOUR_MS)


WRITER = Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/e/stream/x", "shardId-1")


OTHER_SHARD = Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/e/stream/x", "shardId-2")


def segment(first="100", delta=3):
    return Segment(first, T0, first, 1, {("c", MINUTE): delta, ("c", HOUR): delta})


class Faulty:
    """Wraps a boto3 client; ``faults[method]`` is a list of callables run (and popped) before the real call."""

    def __init__(self, client):
        self.client = client
        self.faults = {}
        self.calls = {}

    def __getattr__(self, name):
        real = getattr(self.client, name)

        def call(**kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            pending = self.faults.get(name)
            if pending:
                return pending.pop(0)(real, kwargs)
            return real(**kwargs)

        return call


def error(code, item=None):
    def raise_it(_real, _kwargs):
        response = {"Error": {"Code": code, "Message": code}}
        if item is not None:
            response["Item"] = item
        raise ClientError(response, "UpdateItem")

    return raise_it


def put_counts(client, counter, n):
    for i in range(n):
        client.put_item(
            TableName=COUNTS,
            Item={"pk": {"S": counter}, "sk": {"S": Bucket.of_minute(T0 // MINUTE_MS + i).sort_key}, "count": {"N": str(i + 1)}},
        )


def big_segment(counters=150, first="500"):
    deltas = {(f"c{i:03d}", bucket): 1 for i in range(counters) for bucket in (MINUTE, HOUR)}
    return Segment(first, T0, first, len(deltas) // 2, deltas)


def visited(first, clients):
    """A segment of one shard: its clients' visits to counter 'v' in one minute and its hour."""
    sketch = Sketch(map(hash_of, clients))
    items = {("v", MINUTE): len(clients), ("v", HOUR): len(clients)}
    return Segment(first, T0, first, len(clients), dict(items), sketches={item: sketch.copy() for item in items})


def shards_visiting(dynamodb, settings, lanes, shard_count, also=()):
    """A table of ``lanes`` lanes on which each of ``shard_count`` shards commits its own client's visit to 'v'
    (and ``also``'s): the table and the shards."""
    table = CountsTable(dynamodb, COUNTS, replace(settings, bucket_lanes=lanes), backoff=no_sleep_backoff)
    shards = [Writer.of_shard("arn:aws:dynamodb:us-east-1:1:table/e/stream/x", f"shardId-{n}") for n in range(shard_count)]
    for n, shard in enumerate(shards):
        table.commit(visited(str(100 + n), [f"c{n}", *also]), shard)
    return table, shards


def passes(real, kwargs):
    return real(**kwargs)


COUNT_UPDATES = [passes, passes]  # a visited segment's two count updates (its hour, its minute) come first


def stored_sketch(dynamodb, bucket, lane=0):
    """Lane ``lane`` of counter 'v''s sketch of ``bucket``, from the lane's own partition."""
    key = {"pk": {"S": sketch_partition("v", lane)}, "sk": {"S": bucket.sort_key}}
    return Sketch.from_bytes(dynamodb.get_item(TableName=COUNTS, Key=key)["Item"]["hll"]["B"])


def put_legacy_sketch(dynamodb, bucket, lane, values):
    """A sketch item as 0.2.0 wrote it: in the counter's own partition, at ``<bucket>#d<lane>``."""
    item = {"pk": {"S": "v"}, "sk": {"S": legacy_sketch_sort_key(bucket.sort_key, lane)},
            "hll": {"B": Sketch(map(hash_of, values)).to_bytes()}, "ttl": {"N": str(bucket.end_ms // 1000 + 86_400)}}
    dynamodb.put_item(TableName=COUNTS, Item=item)
