"""LIST+WATCH of one resource in a daemon thread, delivering exact deltas (client-go's Reflector, small).

The pitfalls it exists for: a watch whose connection dies silently (a client read timeout notices,
and the watch resumes from the last resourceVersion seen, bookmarks included); 410 Gone (the
resourceVersion was compacted: relist, and deliver only what changed); and errors, which are retried
with backoff for as long as the process runs, never ending the thread.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from adapters.kubernetes.client import KubeClient, WatchStream, WatchTimeout
from adapters.kubernetes.known_objects import KnownObjects
from metrics_sched.ports import ApiError, EventType, KubeObject

log = logging.getLogger(__name__)

EventHandler = Callable[[EventType, KubeObject], None]

# A watch that ends this soon without a single event is a failure to back off from, not a normal expiry.
MIN_HEALTHY_WATCH_SECONDS = 1.0


@dataclass(frozen=True)
class ReflectorOptions:
    page_size: int = 500
    # The server ends each watch after a random time in this range, spreading reconnects out.
    watch_timeout_seconds: tuple[int, int] = (240, 360)
    # The client gives up on a watch silent this long; the API server sends a bookmark about once a minute.
    read_timeout: float = 60.0
    backoff_initial: float = 0.2
    backoff_max: float = 5.0
    # What kube-scheduler trims too: server-side-apply bookkeeping, often the bulk of a pod's JSON.
    strip_managed_fields: bool = True


@dataclass
class ReflectorStats:
    lists: int = 0
    relists: int = 0  # lists after the first: 410 Gone, or a list that failed part-way
    watches: int = 0
    watch_restarts: int = 0  # watches resumed from a resourceVersion (expiry, read timeout, error)
    watch_timeouts: int = 0  # of which: silent past the read timeout
    events: int = 0  # deliveries to the sink, relist deltas included
    bookmarks: int = 0
    errors: int = 0
    handler_errors: int = 0
    dropped_events: int = 0  # watch lines that were not a well-formed event: skipped, the watch went on
    resource_version: str = ""
    synced: bool = False


class ResourceExpired(Exception):
    """The resourceVersion we hold is too old for the server (410 Gone): only a relist helps."""


class Reflector:
    def __init__(
        self,
        client: KubeClient,
        resource: str,
        path: str,
        on_event: EventHandler,
        on_synced: Callable[[], None],
        *,
        params: Mapping[str, str] | None = None,
        options: ReflectorOptions | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """path: the collection, e.g. /api/v1/pods; params: extra query (labelSelector, fieldSelector)."""
        self.resource = resource
        self.path = path
        self._client = client
        self._on_event = on_event
        self._on_synced = on_synced
        self._params = dict(params or {})
        self.options = options or ReflectorOptions()
        self._rng = rng or random.Random()
        self._known = KnownObjects()
        self._stats = ReflectorStats()
        self._stopping = threading.Event()
        self._synced = threading.Event()
        self._lock = threading.Lock()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None
        self._resource_version = ""
        self._first_watch_after_list = True

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"reflector for {self.resource} already started")
        self._thread = threading.Thread(target=self.run, name=f"reflector-{self.resource}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.request_stop()
        self.join(timeout)

    def request_stop(self) -> None:
        """Asks the thread to end and aborts its open watch; returns at once."""
        self._stopping.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.abort()

    def join(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("reflector for %s did not stop within %.1fs", self.resource, timeout)

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def stats(self) -> ReflectorStats:
        return dataclasses.replace(self._stats)

    @property
    def resource_version(self) -> str:
        return self._resource_version

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> None:
        """The thread body: list, then watch, for as long as the reflector is not stopped."""
        need_list = True
        failures = 0  # consecutive attempts that got nowhere; drives the backoff
        while not self._stopping.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                failures = 0 if self._watch() else failures + 1
            except ResourceExpired:
                need_list = True
                failures += 1
                log.info("%s: resourceVersion %s expired; relisting", self.resource, self._resource_version)
                if failures == 1:
                    continue  # the usual case after a long outage: relist at once
            except ApiError as exc:
                failures += 1
                self._stats.errors += 1
                if not self._stopping.is_set():
                    log.warning("%s: %s; retrying", self.resource, exc)
            except Exception:
                # A bug must not silently end the watch: log it, back off, carry on.
                failures += 1
                self._stats.errors += 1
                log.exception("%s: unexpected error in the reflector loop", self.resource)
            if failures:
                self._stopping.wait(backoff_delay(failures, self.options, self._rng.uniform(0.5, 1.0)))

    def _list(self) -> None:
        items: list[dict[str, Any]] = []
        params = {**self._params, "limit": str(self.options.page_size)}
        resource_version = ""
        while True:
            try:
                page = self._client.list(self.path, params)
            except ApiError as exc:
                if exc.status == 410:  # the continue token expired mid-list: start over
                    raise ResourceExpired(str(exc)) from exc
                raise
            if self._stopping.is_set():
                return
            item_kind = str(page.get("kind", "")).removesuffix("List")
            for item in page.get("items") or ():
                # List items come without kind/apiVersion, watch objects with them: make both alike.
                item.setdefault("kind", item_kind)
                item.setdefault("apiVersion", page.get("apiVersion", ""))
                items.append(self._trim(item))
            meta = page.get("metadata") or {}
            resource_version = str(meta.get("resourceVersion", ""))
            if not meta.get("continue"):
                break
            params["continue"] = str(meta["continue"])
        if self._stats.lists:
            self._stats.relists += 1
        self._stats.lists += 1
        for kind, obj in self._known.replace(items):
            self._deliver(kind, obj)
        self._set_resource_version(resource_version)
        self._first_watch_after_list = True
        log.info("%s: listed %d objects at resourceVersion %s", self.resource, len(items), resource_version)
        try:
            self._on_synced()
        except Exception:
            self._stats.handler_errors += 1
            log.exception("%s: the sink's on_synced failed", self.resource)
        self._stats.synced = True
        self._synced.set()

    def _watch(self) -> bool:
        """One watch from the current resourceVersion; True if it made progress (events, or a normal life)."""
        low, high = self.options.watch_timeout_seconds
        params = {**self._params, "resourceVersion": self._resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(self._rng.randint(low, high))}
        if not self._first_watch_after_list:
            self._stats.watch_restarts += 1
        self._first_watch_after_list = False
        self._stats.watches += 1
        started = time.monotonic()
        received = 0
        try:
            with self._client.watch(self.path, params, read_timeout=self.options.read_timeout) as stream:
                with self._lock:
                    if self._stopping.is_set():
                        return True
                    self._stream = stream
                counted = 0  # of the stream's malformed lines, those already in the stats
                try:
                    for event in stream.events():
                        if self._stopping.is_set():
                            break
                        received += 1
                        self._stats.dropped_events += stream.malformed - counted
                        counted = stream.malformed
                        self._handle(event)
                finally:
                    self._stats.dropped_events += stream.malformed - counted
                    with self._lock:
                        self._stream = None
        except WatchTimeout:
            self._stats.watch_timeouts += 1
            log.info("%s: watch silent for %.0fs; resuming from resourceVersion %s",
                     self.resource, self.options.read_timeout, self._resource_version)
        except ApiError as exc:
            if exc.status == 410:
                raise ResourceExpired(str(exc)) from exc
            raise
        return received > 0 or time.monotonic() - started >= MIN_HEALTHY_WATCH_SECONDS

    def _handle(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if kind == "ERROR" and isinstance(obj, dict):
            raise _status_error(self.path, obj)
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata") or {}, dict):
            # One bad event must not end the watch (restarting it would only fetch the same event again,
            # with a backoff): it is dropped, counted, and the events after it are read.
            self._stats.dropped_events += 1
            log.warning("%s: dropping a malformed %r watch event (no object, or metadata not a mapping)",
                        self.resource, str(kind)[:40])
            return
        if kind == "BOOKMARK":
            self._stats.bookmarks += 1
            self._set_resource_version(str((obj.get("metadata") or {}).get("resourceVersion", "")))
            return
        if kind == "DELETED":
            deltas = self._known.delete(self._trim(obj))
        elif kind in ("ADDED", "MODIFIED"):
            deltas = self._known.upsert(self._trim(obj))
        else:
            log.warning("%s: ignoring watch event of unknown type %r", self.resource, kind)
            return
        for delta_kind, delta_obj in deltas:
            self._deliver(delta_kind, delta_obj)
        self._set_resource_version(str((obj.get("metadata") or {}).get("resourceVersion", "")))

    def _deliver(self, kind: EventType, obj: KubeObject) -> None:
        self._stats.events += 1
        try:
            self._on_event(kind, obj)
        except Exception:
            # The sink's bug, not the watch's: the object stays known, the stream goes on.
            self._stats.handler_errors += 1
            log.exception("%s: the sink failed on a %s event", self.resource, kind)

    def _trim(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.options.strip_managed_fields:
            meta = obj.get("metadata")
            if isinstance(meta, dict):
                meta.pop("managedFields", None)
        return obj

    def _set_resource_version(self, resource_version: str) -> None:
        if resource_version:
            self._resource_version = resource_version
            self._stats.resource_version = resource_version


def backoff_delay(failures: int, options: ReflectorOptions, jitter: float = 1.0) -> float:
    """initial, doubling per consecutive failure up to max; jitter in (0, 1] keeps reflectors out of step."""
    # The exponent is capped: a long outage must not overflow a float.
    return min(options.backoff_max, options.backoff_initial * 2.0 ** min(max(0, failures - 1), 32)) * jitter


def _status_error(path: str, status: Mapping[str, Any]) -> Exception:
    """The exception for a watch ERROR event, whose object is a Status."""
    code = status.get("code")
    message = str(status.get("message", ""))
    reason = str(status.get("reason", ""))
    if code == 410 or reason in ("Expired", "Gone") or "too old resource version" in message:
        return ResourceExpired(message)
    return ApiError(code if isinstance(code, int) else None, f"WATCH {path}: {message}", reason=reason)
