"""The audit's optional file sink: every decision record as one JSON line (the format of
`/decisions?format=jsonl`, the input of `metrics-sched replay`), in a file rotated by size.

`audit.file: {path, maxBytes, backups}`: when the file would pass maxBytes it becomes `path.1` (`path.1` becomes
`path.2`, ...; `path.<backups>` is dropped). The scheduling loop only enqueues the line: a writer thread does
the I/O, and when it falls behind by QUEUE_SIZE records the newest are dropped and counted, never waited for.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from pathlib import Path
from typing import Any

from metrics_sched.audit.record import DecisionRecord, StoredDecision

log = logging.getLogger(__name__)

QUEUE_SIZE = 10_000


class JsonlFileSink:
    def __init__(self, path: Path, *, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.dropped = 0
        self._lines: queue.Queue[bytes | None] = queue.Queue(QUEUE_SIZE)
        self._thread = threading.Thread(target=self._run, name="audit-file-sink", daemon=True)
        self._thread.start()

    def on_record(self, record: StoredDecision | DecisionRecord, result: Any = None) -> None:
        """A record observer (Auditor.record_observers): the record as it is when decided (no bind outcome)."""
        try:
            self._lines.put_nowait(json.dumps(record.as_dict()).encode() + b"\n")
        except queue.Full:
            self.dropped += 1

    def close(self, timeout: float = 5.0) -> None:
        """Writes what is queued, then stops the writer."""
        self._lines.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        out = self.path.open("ab")
        try:
            while (line := self._lines.get()) is not None:
                try:
                    if out.tell() and out.tell() + len(line) > self.max_bytes:
                        out.close()
                        self._rotate()
                        out = self.path.open("ab")
                    out.write(line)
                    if self._lines.empty():
                        out.flush()  # a reader sees whole lines once the burst is written
                except OSError as exc:  # a full disk must not stop the audit's other sinks
                    self.dropped += 1
                    log.error("audit file %s: %s", self.path, exc)
        finally:
            out.close()

    def _rotate(self) -> None:
        if self.backups <= 0:
            self.path.unlink(missing_ok=True)
            return
        for index in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{index}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{index + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
