"""The dead-letter reporter fails loudly when records cannot be written (before any commit). No
service: the broker is a closed port."""

from __future__ import annotations

import pytest

from cdcflow.errors import DeadLetterWriteFailed
from connectors.base import FailedRecord
from connectors.kafka.dlq import DeadLetterReporter


def test_an_unreachable_dlq_fails_the_flush() -> None:
    conf = {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 2000, "socket.timeout.ms": 1000}
    dlq = DeadLetterReporter(conf, "t.dlq", "p", "run-1", flush_timeout=10)
    dlq.report(FailedRecord("t", 0, 5, b"k", b"v", [], "converter", "c", "E", "bad"))
    written = r"dead-letter topic 't.dlq' on 127.0.0.1:1: 1 of 1 records were not written"
    with pytest.raises(DeadLetterWriteFailed, match=written):
        dlq.flush()
