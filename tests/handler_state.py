"""Put back what running tally's handler in-process changes, for the tests that share the process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def handler_state_restored() -> Iterator[None]:
    """The scripts own their process: they set the handler's environment and log level for good and it
    caches its clients. Tests share a process, so all of that is put back afterwards."""
    from tally import handler

    environment, level = dict(os.environ), handler.logger.log_level
    stream = handler.logger.registered_handler.stream
    handler.counts_table.cache_clear()
    handler.scheduled_table.cache_clear()
    try:
        yield
    finally:
        handler.counts_table.cache_clear()
        handler.scheduled_table.cache_clear()
        handler.logger.setLevel(level)
        handler.logger.registered_handler.setStream(stream)
        os.environ.clear()
        os.environ.update(environment)
