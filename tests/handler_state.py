"""Put back what running tally's functions in-process changes, for the tests that share the process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def handler_state_restored() -> Iterator[None]:
    """The scripts own their process: they set the handler's environment and log level for good and it
    caches its clients. Tests share a process, so all of that is put back afterwards."""
    from tally.functions import alert_schedule, stream_handler

    environment, level = dict(os.environ), stream_handler.logger.log_level
    stream = stream_handler.logger.registered_handler.stream
    stream_handler.counts_table.cache_clear()
    alert_schedule.scheduled_table.cache_clear()
    try:
        yield
    finally:
        stream_handler.counts_table.cache_clear()
        alert_schedule.scheduled_table.cache_clear()
        stream_handler.logger.setLevel(level)
        stream_handler.logger.registered_handler.setStream(stream)
        os.environ.clear()
        os.environ.update(environment)
