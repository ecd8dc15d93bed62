"""Every Lambda function of tally, one module each: thin wiring of the library to AWS, the logic stays outside.

- ``stream_handler.handler``: the stream function (``CountingFunction``), a
  tumbling window of DynamoDB Stream records in, commits out
  (``tally.invocation``), with logs, metrics and the alerts judged after them.
- ``alert_schedule.scheduled``: the alert function (``AlertFunction``), once a
  minute, clearing alarms, judging below alerts, putting pending events
  (``tally.alerting``).
- ``read_api.handler``: the read function (``ReadFunction``), API Gateway's
  HTTP API requests answered by the routes of ``tally.http_api``.
- ``backfill_stages.plan``, ``.fold_file``, ``.commit_range``, ``.summarize``:
  the in-account backfill's functions (``PlanFunction``, ``FoldFunction``,
  ``CommitFunction``, ``SummaryFunction``), one per stage of its state machine
  (``tally.parallel_backfill.STAGES``).
- ``audit_stages.scan_segment``: the audit's function (``ScanFunction``), a
  segment of its parallel Scan of the events table written to S3
  (``tally.parallel_audit.AUDIT_STAGES``).
- ``close_stages.plan``, ``.close_part``, ``.finish``: the close of days and
  months (``PlanFunction``, ``PartFunction``, ``FinishFunction`` of the
  ``Close`` construct), one per kind of step of its daily state machine
  (``tally.closing.CLOSE_STEPS``).

These modules may import anything in tally; the library never imports them
back (tests/test_imports.py), only the local toolkit (``tally.local``) does,
to run them on this machine as Lambda does. Stage functions are named by
string in ``STAGES``, ``AUDIT_STAGES`` and ``CLOSE_STEPS``, which the constructs render.
"""
