"""DefaultBinder: POST pods/binding (carrying the pod UID and the annotations in BINDING_ANNOTATIONS).

After an error the API is asked what happened rather than guessed: a pod that shows spec.nodeName
was bound (by us or a racing replica) and is never bound again; a pod that is gone, or re-created
under the same name with another UID, is given up; only a pod still unbound is an error (retried
with backoff). When even the re-read fails the outcome is unknown: the pod stays assumed.
"""

from __future__ import annotations

import logging
import time

from metrics_sched.framework import (
    BINDING_ANNOTATIONS,
    ApiError,
    BindOutcomeKind,
    BindPlugin,
    BindStatus,
    Code,
    CycleState,
    KubeObject,
    PodInfo,
    Status,
)

log = logging.getLogger(__name__)

REREAD_ATTEMPTS = 5


class DefaultBinder(BindPlugin):
    name = "DefaultBinder"
    reread_delay = 0.1  # seconds before the second re-read, doubling

    def bind(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        try:
            self.handle.pod_writer.bind(pod.namespace, pod.name, pod.uid, node, cycle.get(BINDING_ANNOTATIONS))
        except ApiError as error:
            return self._after_error(pod, node, error)
        return BindStatus(outcome=BindOutcomeKind.BOUND)

    def _reread(self, pod: PodInfo) -> KubeObject | None:
        """The pod as the API has it now. Once this replica may no longer write (it lost, or may be about to lose,
        the lease) one attempt only: through a partition each would wait out its timeout, holding the bind worker
        and the replica's exit, and the unknown outcome leaves the pod assumed, as any unanswered re-read does."""
        delay = self.reread_delay
        for attempt in range(REREAD_ATTEMPTS):
            try:
                return self.handle.pod_writer.get_pod(pod.namespace, pod.name)
            except ApiError as exc:
                if attempt == REREAD_ATTEMPTS - 1 or not self.handle.may_write():
                    raise
                log.warning("re-reading %s after a bind error: %s", pod.key, exc)
                time.sleep(delay)
                delay *= 2
        return None

    def _after_error(self, pod: PodInfo, node: str, error: ApiError) -> BindStatus:
        try:
            current = self._reread(pod)
        except ApiError as exc:
            log.error("bind of %s to %s: outcome unknown (%s; re-read failed: %s)", pod.key, node, error, exc)
            return BindStatus(Code.PENDING, f"{error}; re-read: {exc}", outcome=BindOutcomeKind.UNKNOWN)
        if current is None or (current.get("metadata") or {}).get("uid") != pod.uid:
            return BindStatus(Code.UNRESOLVABLE, str(error), outcome=BindOutcomeKind.GONE)
        bound_to = (current.get("spec") or {}).get("nodeName")
        if bound_to == node:
            return BindStatus(outcome=BindOutcomeKind.ALREADY_BOUND)
        if bound_to:
            return BindStatus(Code.UNRESOLVABLE, f"bound to {bound_to}: {error}",
                              outcome=BindOutcomeKind.BOUND_ELSEWHERE)
        return BindStatus(Code.ERROR, str(error), outcome=BindOutcomeKind.ERROR)
