"""PodGroup status, written off the scheduling thread.

The plugin reports a group's status as it changes (Scheduling when members start waiting at Permit, Scheduled
when the quorum is reached, Pending after a failed attempt) to its Handle's group_status, a GroupStatusSink (see
metrics_sched.framework.handle) that GroupStatusReporter implements; a single writer thread sends the latest status
of each group, so a burst of changes to one group costs one write, and the scheduling cycle never waits for the
API. A group deleted meanwhile (404) is dropped; other failures are logged and the next change retries.
"""

from __future__ import annotations

import logging
import threading

from metrics_sched.framework import ApiError, GroupKey, GroupRef, PodGroupApi, PodGroupStatus, PodGroupStatusWriter

__all__ = ["GroupStatusReporter"]

log = logging.getLogger(__name__)


class GroupStatusReporter:
    def __init__(self, writer: PodGroupStatusWriter) -> None:
        self._writer = writer
        self._pending: dict[GroupKey, PodGroupStatus] = {}
        self._written: dict[GroupKey, PodGroupStatus] = {}
        self._served: dict[GroupKey, PodGroupApi] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="pod-group-status", daemon=True)
        self._thread.start()

    def report(self, group: GroupRef, status: PodGroupStatus) -> None:
        key = group.key
        with self._cond:
            if self._written.get(key) == status and key not in self._pending:
                return
            self._pending[key] = status
            self._served[key] = group.served
            self._cond.notify()

    def forget(self, key: GroupKey) -> None:
        with self._cond:
            self._pending.pop(key, None)
            self._written.pop(key, None)
            self._served.pop(key, None)

    def flush(self, timeout: float = 5.0) -> bool:
        """Waits until every reported status was written (tests, shutdown)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._stopped)
                if self._stopped:
                    return
                key = next(iter(self._pending))
                status = self._pending.pop(key)
                served = self._served[key]
                self._busy = True
            try:
                self._writer.write_pod_group_status(served, key.namespace, key.name, status)
                with self._cond:
                    self._written[key] = status
            except ApiError as exc:
                if not exc.not_found:
                    log.warning("cannot write the status of pod group %s: %s", key, exc)
            except Exception:  # a writer bug must not stop the reports of other groups
                log.exception("writing the status of pod group %s failed", key)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
