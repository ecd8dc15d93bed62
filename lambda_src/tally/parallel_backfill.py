"""The backfill in the account: an export's files folded by many workers, committed by one writer per counter range.

A Step Functions state machine runs ``STAGES`` (the construct renders them;
``make adopt-demo`` runs the same handlers in worker processes), each stage a
Lambda function of ``tally.functions.backfill_stages`` over ``Backfill``:

1. **plan** (``plan``): checks the export (completed, taken at count-from,
   within a day of it), claims the table's count-from instant for it, and
   writes the list of its data files for the next stage to map over.
2. **fold** (``fold_file``, one per data file, any number at once): parses a
   file's items through the handler's own parsing, as the single-process
   backfill does, and folds them into one partial per counter range (a
   counter's range is a hash of its name, ``counter_range``), written to S3.
3. **commit** (``commit_range``, one per range): merges its range's partials
   and commits them. The export is one writer (``Writer.of_export``) and its
   whole history one segment at one position (``EXPORT_POSITION``), split by
   item: a counter belongs to one range, so each bucket item is written by
   exactly one committer, once, under the export's one watermark, however many
   workers folded it. A rerun, with any number of ranges or workers, finds
   that watermark and adds nothing (an update found applied costs a write unit,
   so a committer also records the chunks it finished and a retry skips them).
4. **summary** (``summarize``): what the files held and the commits wrote; for the whole table, once every
   range has committed, the days and months the export made complete, in each kept zone's progress
   (``dynamo.closing.record_adoption``), for readers to take from their items.

The claim item names the export and this protocol (``RANGES_PROTOCOL``), so
an export begun by the single-process backfill (whose segments sit at other
positions) cannot be finished here, nor the other way round.

Every stage is given ``rules``: empty for the whole table at the deployment's
countFrom, else the names (comma-separated) of rules added later whose history
alone is counted, at their own countFrom, or ``calendar:`` and the calendar
prefixes declared later whose days' history alone is counted
(``HistoryScope.text``). A calendar backfill's plan reads, in each zone's
progress, where the closes began the prefixes' days (set once), and hands the
days to write to every fold with its file (``days``, in the files' list the
fold map reads) and to the summary (``days.json`` in the work folder), which
records them as complete: each stage keeps to its role, and every fold and
every redrive writes the same days.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

import tally.exports as exports
from tally.backfill import (
    BackfillSummary,
    HistoryScope,
    ScopeRefused,
    WriteRateLimit,
    chunks,
    nothing_older,
    export_outcomes,
    place,
    write_units,
)
from tally.core.buckets import iso_second
from tally.core.records import Reason
from tally.core.ladder import LATE_PREFIX, Run, late_partition
from tally.core.segments import Item, Segment, contributions
from tally.core.settings import Settings
from tally.core.windows import now_ms
from tally.dynamo.backfill import BackfillClaimed
from tally.dynamo.closing import HistoryNotReady, history_runs, record_adoption, record_history
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory

RANGES_PROTOCOL = "ranges"
# The whole export is one segment at the place of its first item; its parts share that position.
EXPORT_POSITION = str(place(0, 0))
# Bucket items one commit call takes (whole counters, so each counter's hours still go before its minutes).
COMMIT_CHUNK_ITEMS = 10_000
DEFAULT_RANGES = 64
WORK_FOLDER = "tally-backfill"

ENV_BUCKET = "TALLY_BACKFILL_BUCKET"  # the bucket exports go to
ENV_PREFIX = "TALLY_BACKFILL_PREFIX"  # and their prefix (each export lies under <prefix>/AWSDynamoDB/<id>/)
ENV_RANGES = "TALLY_BACKFILL_RANGES"
ENV_MAX_WCU = "TALLY_BACKFILL_MAX_WCU"  # write units per second on the counts table, all committers together
ENV_COMMITTERS = "TALLY_BACKFILL_COMMITTERS"  # committers at once (the commit map's concurrency)


# The backfill's Lambda functions, one per stage (named here, never imported: they import this module).
STAGES_MODULE = "tally.functions.backfill_stages"


class PlanRefused(ValueError):
    """The export cannot be backfilled as asked; the message says why in one line."""


# Failures no retry can mend (the state machine's retriers and the local run stop at them).
REFUSALS: tuple[type[Exception], ...] = (
    PlanRefused, ScopeRefused, BackfillClaimed, exports.ExportError, HistoryNotReady
)


@dataclass(frozen=True)
class Stage:
    """One step of the state machine: a handler, run once or once per item of a list, and what it is given.

    ``selects`` are the fields of the execution's state (the plan's output) the
    handler's event holds; a mapped stage's event also holds its item, under
    ``item``. ``result`` is where the handler's answer goes in the state: the
    plan's answer is the state; a map's answers are dropped (they would outgrow it).
    """

    name: str
    handler: str  # a function of ``module``
    selects: tuple[str, ...]
    over: str | None = None  # what it maps over: "files" (the plan's list in S3, at bucket/filesKey), else a list in the state
    item: str | None = None
    result: str | None = None
    module: str = STAGES_MODULE  # where ``handler`` lies

    @property
    def handler_path(self) -> str:
        """The Lambda handler: module and function."""
        return f"{self.module}.{self.handler}"


STAGES = (
    Stage("plan", "plan", ("exportArn", "rules")),
    Stage("fold", "fold_file", ("work", "rules"), over="files", item="file"),
    Stage("commit", "commit_range", ("work", "exportArn", "rules"), over="ranges", item="range"),
    Stage("summary", "summarize", ("work", "rules"), result="summary"),
)


@dataclass(frozen=True)
class BackfillConfig:
    """Where exports and the work lie, and how the commit spreads; from the environment the construct writes."""

    bucket: str
    prefix: str
    ranges: int = DEFAULT_RANGES
    max_wcu: float = 1000.0
    committers: int = 10

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> BackfillConfig:
        try:
            config = cls(
                bucket=environ[ENV_BUCKET],
                prefix=environ.get(ENV_PREFIX, "").strip("/"),
                ranges=int(environ.get(ENV_RANGES, DEFAULT_RANGES)),
                max_wcu=float(environ.get(ENV_MAX_WCU, 1000)),
                committers=int(environ.get(ENV_COMMITTERS, 10)),
            )
        except KeyError:
            raise PlanRefused(f"{ENV_BUCKET} is not set: the bucket the events table is exported to") from None
        except ValueError as error:
            raise PlanRefused(f"backfill settings: {error}") from None
        if not 1 <= config.ranges <= 10_000 or config.max_wcu <= 0 or config.committers < 1:
            raise PlanRefused(
                f"backfill settings: ranges must be 1-10000 (got {config.ranges}), max WCU positive "
                f"(got {config.max_wcu}), committers at least 1 (got {config.committers})"
            )
        return config

    @property
    def committer_wcu(self) -> float:
        """Each committer's share of the write rate."""
        return self.max_wcu / min(self.committers, self.ranges)

    def work_prefix(self, export_arn: str, scope_key: str = "table") -> str:
        """Where one export's work lies: beside the exports, never inside one (the workers only read those);
        a folder per scope (the table, or a set of rules: ``HistoryScope.key``) and per number of ranges, so a
        rerun with another number never merges partials of the first."""
        export_id = export_arn.rsplit("/", 1)[-1]
        scope = None if scope_key == "table" else scope_key  # the table's work stays where it always lay
        return "/".join(filter(None, (self.prefix, WORK_FOLDER, export_id, scope, f"{self.ranges}-ranges")))

    def export_root(self) -> str:
        return "/".join(filter(None, (self.prefix, exports.EXPORT_ROOT.rstrip("/")))) + "/"


def counter_range(counter: str, ranges: int) -> int:
    """The range a counter's items are committed by: stable across runs, processes and machines."""
    return int.from_bytes(hashlib.sha256(counter.encode("utf-8")).digest()[:8], "big") * ranges >> 64


DAYS_FILE = "days.json"  # a calendar backfill's days, for its summary


def runs_to_json(runs: Mapping[str, Mapping[str, Run]]) -> dict[str, dict[str, str]]:
    """A calendar backfill's days as the stages pass them: prefix -> zone -> ``first..last``."""
    return {prefix: {zone: f"{first.isoformat()}..{last.isoformat()}" for zone, (first, last) in zones.items()}
            for prefix, zones in runs.items()}


def runs_from_json(days: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, Run]]:
    return {prefix: {zone: _run(text) for zone, text in zones.items()} for prefix, zones in days.items()}


def _run(text: str) -> Run:
    first, _, last = text.partition("..")
    return date.fromisoformat(first), date.fromisoformat(last)


def _days(scope: HistoryScope, days: Mapping[str, Any] | None) -> dict[str, dict[str, Run]] | None:
    """The days its plan found for a calendar backfill (PlanRefused without them); None for any other scope."""
    if not scope.calendar:
        return None
    if not days or set(days) != set(scope.calendar):
        raise PlanRefused(f"{scope.described}: its days are not in the plan's list (run the execution from its plan)")
    return runs_from_json(days)


def partial_key(work: str, range_number: int, file_index: int) -> str:
    return f"{work}/partials/{range_number:05d}/{file_index:07d}.json.gz"


def fold_images(
    images: Iterable[Mapping[str, Any]],
    file_index: int,
    scope: HistoryScope,
    settings: Settings,
    ranges: int,
    runs: Mapping[str, Mapping[str, Run]] | None = None,
) -> tuple[dict[int, Segment], BackfillSummary]:
    """One data file's items -> a partial segment per counter range, and what the items counted as
    (``settings``: the scope's; ``runs``: the days a calendar backfill writes, ``HistoryScope.ladder``)."""
    count_from_ms = scope.count_from_ms
    ladder = scope.ladder(settings, runs)  # an export's records climb to their days directly (core/ladder.py)
    partials: dict[int, Segment] = {}
    summary = BackfillSummary(files=1)
    for first, chunk in chunks(images):
        outcomes = export_outcomes(chunk, place(file_index, first), count_from_ms, settings)
        summary.add(scope.reported(outcomes))
        for item_outcomes in scope.folded(outcomes):
            by_range: dict[int, list] = {}
            for found in item_outcomes:
                for added in contributions(found, ladder):
                    # A late mark goes with its counter's items: the commit writes it by their updates.
                    by_range.setdefault(counter_range(added[1][0].removeprefix(LATE_PREFIX), ranges), []).append(added)
            for number, added_here in by_range.items():
                segment = partials.get(number)
                if segment is None:
                    # One position for the whole export: nothing to split, so its records are not held.
                    segment = partials[number] = Segment(EXPORT_POSITION, count_from_ms, EXPORT_POSITION, held=None)
                segment.add(EXPORT_POSITION, added_here)
    return partials, summary


def merge(segments: Iterable[Segment]) -> Segment | None:
    """The union of partial segments: counts, sums and bins added, sketches merged."""
    merged: Segment | None = None
    for part in segments:
        if merged is None:
            merged = part
            continue
        for item, delta in part.deltas.items():
            merged.deltas[item] = merged.deltas.get(item, 0) + delta
        for item, units in part.sums.items():
            merged.sums[item] = merged.sums.get(item, 0) + units
        for item, bins in part.bins.items():
            held = merged.bins.setdefault(item, {})
            for name, count in bins.items():
                held[name] = held.get(name, 0) + count
        for item, sketch in part.sketches.items():
            if item in merged.sketches:
                merged.sketches[item].merge(sketch)
            else:
                merged.sketches[item] = sketch
        merged.records += part.records
    return merged


def commit_chunks(segment: Segment, max_items: int) -> Iterator[Segment]:
    """The segment in parts of whole counters (at most ``max_items`` items unless one counter has more), in
    sort-key order: the same parts every time, each at the segment's position. A late mark goes in the part of
    its item, whose update writes it."""
    part: list[Item] = []
    counter = None
    for item, *_ in segment.ordered_deltas():
        if item[0].startswith(LATE_PREFIX):
            continue
        if item[0] != counter and len(part) >= max_items:
            yield _part_of(segment, part)
            part = []
        counter = item[0]
        part.append(item)
    if part:
        yield _part_of(segment, part)


def _part_of(segment: Segment, items: list[Item]) -> Segment:
    part = Segment(segment.first_sequence, segment.first_arrival_ms, segment.last_sequence, held=None)
    marks = [mark for mark in ((late_partition(counter), key) for counter, key in items) if mark in segment.deltas]
    for item in [*items, *marks]:
        part.deltas[item] = segment.deltas[item]
        for source, target in ((segment.sums, part.sums), (segment.bins, part.bins), (segment.sketches, part.sketches)):
            if item in source:
                target[item] = source[item]
    return part


def summary_to_json(summary: BackfillSummary) -> dict[str, Any]:
    return {
        "items": summary.items,
        "files": summary.files,
        "counted": dict(summary.counted),
        "rejected": {reason.value: count for reason, count in summary.rejected.items()},
        "rejected_by_rule": dict(summary.rejected_by_rule),
        "skipped": {reason.value: count for reason, count in summary.skipped.items()},
        "bucket_updates": summary.bucket_updates,
        "updates_already_applied": summary.updates_already_applied,
        "commit_retries": summary.commit_retries,
        "write_units": summary.write_units,
    }


def summary_from_json(data: Mapping[str, Any]) -> BackfillSummary:
    return BackfillSummary(
        items=data["items"],
        files=data["files"],
        counted=Counter(data["counted"]),
        rejected=Counter({Reason(reason): count for reason, count in data["rejected"].items()}),
        rejected_by_rule=Counter(data["rejected_by_rule"]),
        skipped=Counter({Reason(reason): count for reason, count in data["skipped"].items()}),
        bucket_updates=data["bucket_updates"],
        updates_already_applied=data["updates_already_applied"],
        commit_retries=data["commit_retries"],
        write_units=data["write_units"],
    )


def add_summaries(total: BackfillSummary, part: BackfillSummary) -> None:
    total.items += part.items
    total.files += part.files
    total.counted.update(part.counted)
    total.rejected.update(part.rejected)
    total.rejected_by_rule.update(part.rejected_by_rule)
    total.skipped.update(part.skipped)
    total.bucket_updates += part.bucket_updates
    total.updates_already_applied += part.updates_already_applied
    total.commit_retries += part.commit_retries
    total.write_units += part.write_units


class Backfill:
    """The stages' work against S3 and the counts table (clients given: Lambda's, or the local ones)."""

    def __init__(self, dynamodb: Any, s3: Any, settings: Settings, config: BackfillConfig) -> None:
        self.dynamodb, self.s3, self.settings, self.config = dynamodb, s3, settings, config

    def plan(self, export_arn: str, rules: str = "") -> dict[str, Any]:
        """Check and claim the export, list its data files in S3: the input of the fold and commit maps."""
        scope = self._scope(rules)
        count_from_ms = scope.count_from_ms
        refusal = scope.refusal_at(now_ms())
        if refusal is not None:
            raise PlanRefused(refusal)
        export = exports.describe(self.dynamodb, export_arn)
        if export.status != "COMPLETED":
            raise PlanRefused(f"export {export_arn} is {export.status}, not COMPLETED: {export.failure or 'wait for it'}")
        refusal = scope.export_refusal(export_arn, export.export_time_ms)
        if refusal is not None:
            raise PlanRefused(refusal)
        if export.bucket != self.config.bucket or export.prefix.strip("/") != self.config.prefix:
            raise PlanRefused(
                f"export {export_arn} lies in s3://{export.bucket}/{export.prefix}, but the backfill reads "
                f"s3://{self.config.bucket}/{self.config.prefix} only"
            )
        counts = CountsTable(self.dynamodb, self.settings.counts_table, self.settings, previous_release_until_ms=0)
        runs = self._runs(scope)  # a calendar backfill waits for the prefixes' first close, before it claims anything
        counts.claim_backfill(
            export.table_arn, iso_second(count_from_ms), export.arn, scope.claim_expires_s(self.settings),
            protocol=RANGES_PROTOCOL, rules=scope.rules, calendar=scope.calendar,
        )
        files = sorted(exports.data_files(self.s3, export), key=lambda file: file.key)
        work = self.config.work_prefix(export_arn, scope.key)
        days = None if runs is None else runs_to_json(runs)
        listed = [{"key": file.key, "index": index, "items": file.item_count, **({"days": days} if days else {})}
                  for index, file in enumerate(files)]
        if days is not None:
            self._put_json(f"{work}/{DAYS_FILE}", days)
        files_key = f"{work}/files.json"
        self.s3.put_object(Bucket=self.config.bucket, Key=files_key, Body=json.dumps(listed).encode())
        known = [file.item_count for file in files]
        return {
            "exportArn": export_arn,
            "rules": scope.text,
            "bucket": self.config.bucket,
            "work": work,
            "filesKey": files_key,
            "files": len(files),
            "items": sum(known) if all(count is not None for count in known) else export.item_count,  # type: ignore[arg-type]
            "ranges": list(range(self.config.ranges)),
        }

    def fold_file(self, work: str, key: str, index: int, rules: str = "", days: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Fold one data file into a partial per counter range (written even when empty: a retry writes the same);
        ``days``: a calendar backfill's, as its plan listed them with the file."""
        scope = self._scope(rules)
        if not key.startswith(self.config.export_root()):
            raise PlanRefused(f"s3://{self.config.bucket}/{key} is not under the exports' prefix")
        images = exports.items(self.s3, self.config.bucket, key)
        partials, summary = fold_images(
            images, index, scope, scope.settings_for(self.settings), self.config.ranges, _days(scope, days)
        )
        for number, segment in sorted(partials.items()):
            body = gzip.compress(json.dumps(segment.to_state(), separators=(",", ":")).encode(), compresslevel=5)
            self.s3.put_object(Bucket=self.config.bucket, Key=partial_key(work, number, index), Body=body)
        self._put_json(f"{work}/folded/{index:07d}.json", summary_to_json(summary))
        return {"index": index, "items": summary.items, "partials": len(partials)}

    def commit_range(self, work: str, export_arn: str, range_number: int, rules: str = "") -> dict[str, Any]:
        """Merge one range's partials and commit them, chunk by chunk, at the export's one position."""
        prefix = f"{work}/partials/{range_number:05d}/"
        keys = [
            entry["Key"]
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.config.bucket, Prefix=prefix)
            for entry in page.get("Contents", [])
        ]
        merged = merge(Segment.from_state(json.loads(gzip.decompress(self._get(key)))) for key in sorted(keys))
        progress_key = f"{work}/committed/{range_number:05d}.json"
        done = self._get_json(progress_key) or {"chunks": 0, **summary_to_json(BackfillSummary())}
        summary = summary_from_json(done)
        if merged is not None:
            counts = CountsTable(self.dynamodb, self.settings.counts_table, self.settings, previous_release_until_ms=0)
            scope = self._scope(rules)
            commit = counts.commit if scope.calendar else CounterDirectory(
                self.dynamodb, self.settings.counts_table, self.settings
            ).recording(counts.commit)  # days and months alone: no minute or hour for the directory to list
            writer = scope.writer(export_arn)
            limit = WriteRateLimit(self.config.committer_wcu)
            for number, part in enumerate(commit_chunks(merged, COMMIT_CHUNK_ITEMS)):
                if number < done["chunks"]:
                    continue
                units = write_units(part)
                limit.spend(units)
                summary.add_commit(commit(part, writer), units)
                done = {**summary_to_json(summary), "chunks": number + 1}
                self._put_json(progress_key, done)
        else:
            self._put_json(progress_key, done)
        return {"range": range_number, "bucket_updates": summary.bucket_updates, "write_units": summary.write_units}

    def summarize(self, work: str, rules: str = "") -> dict[str, Any]:
        """Every file's and every range's summary, added up: what the backfill read, counted and wrote. Run after
        every range committed: for the whole table, it records the days the export made complete; for calendar
        prefixes, the days their backfill did."""
        scope = self._scope(rules)
        if scope.calendar:
            record_history(self.dynamodb, self.settings.counts_table, _days(scope, self._get_json(f"{work}/{DAYS_FILE}")))
        elif not rules and self.settings.calendar_prefixes:
            record_adoption(self.dynamodb, self.settings.counts_table, scope.settings_for(self.settings), scope.count_from_ms)
        total = BackfillSummary()
        for folder in ("folded", "committed"):
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.config.bucket, Prefix=f"{work}/{folder}/"):
                for entry in page.get("Contents", []):
                    add_summaries(total, summary_from_json(json.loads(self._get(entry["Key"]))))
        return summary_to_json(total)

    def _scope(self, rules: str) -> HistoryScope:
        """What this execution counts: the table (``rules`` empty), the named rules' history, or the named calendar
        prefixes' (``HistoryScope.text``)."""
        if not rules and self.settings.count_from_ms is None:
            raise PlanRefused("the counting function has no count-from instant (countFrom): there is nothing to backfill")
        return HistoryScope.parse(self.settings, rules)

    def _runs(self, scope: HistoryScope) -> dict[str, dict[str, Run]] | None:
        """The days a calendar backfill writes (``dynamo.closing.history_runs``, read by the plan alone); None for
        any other scope."""
        if not scope.calendar:
            return None
        runs = history_runs(self.dynamodb, self.settings.counts_table, self.settings, scope.calendar, scope.count_from_ms)
        if not runs:
            raise PlanRefused(nothing_older(scope))
        return runs

    def _get(self, key: str) -> bytes:
        return self.s3.get_object(Bucket=self.config.bucket, Key=key)["Body"].read()

    def _get_json(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._get(key))
        except self.s3.exceptions.NoSuchKey:
            return None

    def _put_json(self, key: str, data: Any) -> None:
        self.s3.put_object(Bucket=self.config.bucket, Key=key, Body=json.dumps(data).encode())

