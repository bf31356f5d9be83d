"""KubePodWriter: the PodWriter port (bind with annotations, re-read, events and their series, status condition)
as raw JSON calls.

The bind reads only the status code: generated clients that parsed the Binding reply used to fail
after the bind had already happened (kubernetes-client/python #547, #825).
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import quote

from adapters.kubernetes.client import MERGE_PATCH, STRATEGIC_MERGE_PATCH, KubeClient
from adapters.kubernetes.kube_time import Clock, micro_time, seconds_time, utc_now
from metrics_sched.ports import ApiError, EventSeries, KubeObject, SchedulingEvent

# events.k8s.io/v1 validation limits (bytes, as the API server counts them).
NOTE_MAX_BYTES = 1024
FIELD_MAX_BYTES = 128

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_sequence = itertools.count()


class KubePodWriter:
    def __init__(self, client: KubeClient, *, clock: Clock = utc_now) -> None:
        self._client = client
        self._clock = clock

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        """The Binding carries the pod's uid: a pod deleted and re-created under the same name is not
        bound by a decision made for its predecessor (the API answers 409). Its annotations are copied
        onto the pod by the API server, so the decision summary costs no extra write."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            metadata["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1", "kind": "Binding", "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self._client.send("POST", f"{_pod_path(namespace, name)}/binding", body)

    def get_pod(self, namespace: str, name: str) -> KubeObject | None:
        try:
            return self._client.request("GET", _pod_path(namespace, name))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    def record_event(self, event: SchedulingEvent, series: EventSeries | None = None) -> str:
        """POSTs an events.k8s.io/v1 Event about the pod and returns its name. Raises ApiError (callers treat
        events as best-effort)."""
        now = self._clock()
        name = _event_name(event.pod_name, now)
        self._client.send("POST", _events_path(event.namespace), _event_body(event, name, now, series))
        return name

    def update_event_series(self, event: SchedulingEvent, name: str, series: EventSeries) -> None:
        """Patches only `series`, as client-go's recorder does: events.k8s.io/v1 keeps every other field
        immutable (the note stays the first occurrence's). An Event that expired (the API server's event TTL)
        is created again under its name."""
        patch = {"series": _series_json(series)}
        try:
            self._client.send("PATCH", f"{_events_path(event.namespace)}/{quote(name, safe='')}", patch,
                              content_type=MERGE_PATCH)
        except ApiError as exc:
            if not exc.not_found:
                raise
            self._client.send("POST", _events_path(event.namespace), _event_body(event, name, self._clock(), series))

    def set_pod_scheduled_condition(
        self, namespace: str, name: str, *, status: Literal["True", "False"], reason: str, message: str,
        resource_version: str | None = None,
    ) -> None:
        # Strategic merge keys pod conditions by type: only PodScheduled is replaced, the others stay.
        body: dict[str, Any] = {"status": {"conditions": [{
            "type": "PodScheduled", "status": status, "reason": reason, "message": message,
            "lastProbeTime": None, "lastTransitionTime": seconds_time(self._clock()),
        }]}}
        if resource_version:
            # A resourceVersion in a patch is a precondition: 409 Conflict if the pod changed since.
            body["metadata"] = {"resourceVersion": resource_version}
        self._client.send("PATCH", f"{_pod_path(namespace, name)}/status", body, content_type=STRATEGIC_MERGE_PATCH)


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"


def _events_path(namespace: str) -> str:
    return f"/apis/events.k8s.io/v1/namespaces/{quote(namespace, safe='')}/events"


def _event_body(event: SchedulingEvent, name: str, now: dt.datetime, series: EventSeries | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name, "namespace": event.namespace},
        "eventTime": micro_time(now),
        "reportingController": _truncate(event.reporting_controller, FIELD_MAX_BYTES),
        "reportingInstance": _truncate(event.reporting_instance, FIELD_MAX_BYTES),
        "action": _truncate(event.action, FIELD_MAX_BYTES),
        "reason": _truncate(event.reason, FIELD_MAX_BYTES),
        "note": _truncate(event.note, NOTE_MAX_BYTES),
        "type": event.type,
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": event.namespace,
                      "name": event.pod_name, "uid": event.pod_uid},
    }
    if series is not None:
        body["series"] = _series_json(series)
    return body


def _series_json(series: EventSeries) -> dict[str, Any]:
    return {"count": series.count,
            "lastObservedTime": micro_time(dt.datetime.fromtimestamp(series.last_observed, dt.UTC))}


def _event_name(pod_name: str, now: dt.datetime) -> str:
    # client-go's name, "<pod>.<unix nanoseconds in hex>". Not generateName "<pod>.": kube-apiserver 1.36
    # validates generateName itself as a DNS subdomain, which a trailing dot is not. The clock only has
    # microseconds: a per-process sequence fills the nanoseconds so two events in one microsecond differ.
    micros = (now - _EPOCH) // dt.timedelta(microseconds=1)
    suffix = f".{micros * 1000 + next(_sequence) % 1000:x}"
    return pod_name[: 253 - len(suffix)] + suffix


def _truncate(text: str, max_bytes: int) -> str:
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return text
    # Cut on a character boundary, and say that something was cut.
    return encoded[: max_bytes - len("...")].decode(errors="ignore") + "..."
