"""What the scheduling core needs from the outside world, as small protocols.

adapters/ implements them against the Kubernetes API; unit tests use in-memory fakes. Telemetry sources
subclass metrics_sched.telemetry.PolledSource (their health bookkeeping is shared there) and exchange
the data types at the end of this module. Objects cross this boundary as the API's own JSON (dicts), never as generated
models: the hot path reads raw JSON.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
KubeObject = Mapping[str, Any]
# The workload objects whose selectors kube-scheduler's DefaultSelector reads (PodTopologySpread's system
# default constraints), named as their resources.
WorkloadKind = Literal["services", "replicationcontrollers", "replicasets", "statefulsets"]


class ApiError(Exception):
    """An API call that failed. status is the HTTP status, or None when the outcome is unknown
    (timeout, connection reset, ...): the request may or may not have taken effect."""

    def __init__(self, status: int | None, message: str, *, reason: str = "") -> None:
        super().__init__(f"HTTP {status}: {message}" if status is not None else f"no response: {message}")
        self.status = status
        self.message = message
        self.reason = reason

    @property
    def ambiguous(self) -> bool:
        return self.status is None or self.status >= 500

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404


@dataclass(frozen=True)
class ApiKind:
    """A kind of API object a ClusterSource lists and watches for the sink: where its collection is, the name the
    source reports it by (on_synced, its stats), whether scheduling waits for its initial list, and whether it is
    watched only where the API server serves it (a CRD, an alpha API: a discovery request first)."""

    group_version: str  # "v1" for the core group, else "<group>/<version>"
    resource: str  # the collection, plural and lower case
    name: str = ""  # default: the resource
    awaited: bool = True
    optional: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.resource)

    @property
    def path(self) -> str:
        """The cluster-wide collection, e.g. /api/v1/persistentvolumes or /apis/policy/v1/poddisruptionbudgets."""
        prefix = "/api" if self.group_version == "v1" else "/apis"
        return f"{prefix}/{self.group_version}/{self.resource}"


class ClusterEventSink(Protocol):
    """Receives the cluster's objects as a source lists and watches them."""

    def on_node_event(self, kind: EventType, node: KubeObject) -> None: ...

    def on_pod_event(self, kind: EventType, pod: KubeObject) -> None: ...

    def on_object_event(self, kind: ApiKind, event: EventType, obj: KubeObject) -> None:
        """An object of any other watched kind (one a plugin's cluster index declares, or the cluster state keeps)."""
        ...

    def on_synced(self, resource: str) -> None:
        """The initial list of `resource` (nodes, pods, or an ApiKind's name) has been delivered (and again after
        each relist)."""
        ...


class ClusterSource(Protocol):
    """LIST+WATCH of nodes, pods and the other kinds it was built for (those the sink's cluster indexes declare),
    delivering to a sink from background threads."""

    def start(self, sink: ClusterEventSink) -> None: ...

    def stop(self) -> None: ...


class ClusterLister(Protocol):
    """A fresh LIST of all nodes and pods, read from the API (not from the watches): what the cache comparer
    checks the cluster state against. Items stream page by page; raises ApiError."""

    def list_nodes(self) -> Iterator[KubeObject]: ...

    def list_pods(self) -> Iterator[KubeObject]: ...

    def namespace_pods(self, namespace: str, label_selector: str | None = None) -> Iterator[KubeObject]:
        """One namespace's pods (those `label_selector` matches): the rebalancer's read of a gang's members."""
        ...


@dataclass(frozen=True)
class SchedulingEvent:
    """An events.k8s.io/v1 Event about a pod, e.g. Scheduled or FailedScheduling."""

    namespace: str
    pod_name: str
    pod_uid: str
    type: Literal["Normal", "Warning"]
    reason: str
    action: str
    note: str
    reporting_controller: str
    reporting_instance: str


@dataclass(frozen=True)
class EventSeries:
    """An Event seen again (events.k8s.io/v1 `series`): how often in all, and when last."""

    count: int  # at least 2: the API refuses a series of one
    last_observed: float  # unix seconds


class PodWriter(Protocol):
    """The writes (and the one re-read) the bind loop makes."""

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        """POST pods/binding carrying the pod UID (and annotations the API copies onto the pod). Raises ApiError."""
        ...

    def get_pod(self, namespace: str, name: str) -> KubeObject | None:
        """The pod as the API has it now (None if gone). Raises ApiError."""
        ...

    def record_event(self, event: SchedulingEvent, series: EventSeries | None = None) -> str:
        """Creates the Event (already a series when it recurred before it could be written) and returns its
        name, which update_event_series patches later. Raises ApiError."""
        ...

    def update_event_series(self, event: SchedulingEvent, name: str, series: EventSeries) -> None:
        """Patches the series of the Event `name` (the API keeps its other fields immutable); creates it again
        under that name if it has expired meanwhile. Raises ApiError."""
        ...

    def set_pod_scheduled_condition(
        self, namespace: str, name: str, *, status: Literal["True", "False"], reason: str, message: str,
        resource_version: str | None = None,
    ) -> None:
        """Patches pods/status so `kubectl describe pod` shows PodScheduled with reason and message. With
        resource_version, only that version of the pod is patched: the API answers 409 if the pod changed
        since (bound, deleted and re-created...). Raises ApiError."""
        ...


class VolumeWriter(Protocol):
    """The writes VolumeBinding's PreBind makes (kube-scheduler's BindPodVolumes). Each is conditional on the
    resourceVersion the scheduler decided on: the API answers 409 if the object changed since. Raise ApiError."""

    def bind_volume(self, name: str, resource_version: str, namespace: str, claim: str, claim_uid: str, *,
                    bound_by_controller: bool = True) -> str:
        """Pre-binds the PersistentVolume to the claim (spec.claimRef, and the bound-by-controller annotation
        unless the user pre-bound it); the PV controller completes the binding on the claim. Returns the PV's new
        resourceVersion."""
        ...

    def select_node(self, namespace: str, claim: str, resource_version: str, node: str) -> str:
        """Annotates the claim with volume.kubernetes.io/selected-node: its provisioner creates a volume there.
        Returns the claim's new resourceVersion."""
        ...


class ResourceClaimWriter(Protocol):
    """The writes DynamicResources makes on ResourceClaims (kube-scheduler's claim status updates). Raise ApiError
    (409 when the claim changed since the version sent, 404 when it is gone)."""

    def get_claim(self, namespace: str, name: str) -> KubeObject | None:
        """The claim as the API has it now (None if gone): a write that met a conflict decides again on it."""
        ...

    def update_claim(self, claim: KubeObject) -> KubeObject:
        """PUT of the claim (metadata and spec; PreBind adds the delete-protection finalizer this way), conditional on
        its metadata.resourceVersion. Returns the claim as written."""
        ...

    def update_claim_status(self, claim: KubeObject) -> KubeObject:
        """PUT of the claim's status subresource: `claim` carries metadata.resourceVersion, so the API refuses it
        (409) if the claim changed since. Returns the claim as written."""
        ...

    def patch_claim_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> KubeObject:
        """A strategic merge patch of the status subresource (Unreserve removing the pod from reservedFor)."""
        ...

    def create_claim(self, claim: KubeObject) -> KubeObject:
        """Creates the claim (metadata.generateName names it); returns it as created."""
        ...

    def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        """Deletes the claim, preconditioned on its uid (404: gone already, not an error)."""
        ...

    def set_extended_resource_claim_status(self, namespace: str, pod: str, status: Mapping[str, Any]) -> None:
        """Merge-patches the pod's status.extendedResourceClaimStatus: which claim and requests serve its
        extended resources (DRAExtendedResource)."""
        ...


class Evictor(Protocol):
    """The Eviction API (policy/v1 pods/eviction): the API server honours PodDisruptionBudgets."""

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool = False) -> None:
        """Evicts the pod (preconditioned on its uid). Raises ApiError: 429 when a PodDisruptionBudget forbids it
        now, 404 when the pod is gone, 409 when the uid no longer matches. `dry_run`: the API server checks all
        that (the PodDisruptionBudget included) and changes nothing (deleteOptions.dryRun: ["All"])."""
        ...


class Preemptor(Protocol):
    """The writes preemption makes (kube-scheduler's PreemptPod and its nominatedNodeName updates). Raise ApiError."""

    def set_nominated_node(self, namespace: str, name: str, node: str | None) -> None:
        """Patches the pod's status.nominatedNodeName (None clears it)."""
        ...

    def mark_disruption_target(self, namespace: str, name: str, message: str) -> None:
        """Patches the victim's status with the condition DisruptionTarget=True, reason PreemptionByScheduler, so its
        controller and its containers can tell why it goes (404 when it is gone)."""
        ...

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Deletes the victim (preconditioned on its uid: a re-created pod of the same name is not deleted for its
        predecessor), with its own grace period. 404 when it is gone, 409 when the uid no longer matches."""
        ...


# The served group versions of the two pod-group APIs (metrics_sched.model.group_membership.GroupApi's groups):
# the CRD, and the Workload API's PodGroup as 1.36 (v1alpha2) and 1.37 (v1beta1) serve it.
PodGroupApi = Literal["scheduling.x-k8s.io/v1alpha1", "scheduling.k8s.io/v1alpha2", "scheduling.k8s.io/v1beta1"]


@dataclass(frozen=True)
class PodGroupStatus:
    """What the scheduler reports on a PodGroup: the CRD's status.phase and scheduled count, or, for the Workload
    API's PodGroup, its PodGroupScheduled condition (True once minCount members are placed)."""

    phase: Literal["Pending", "Scheduling", "Scheduled"]
    scheduled: int  # members placed (bound, or allowed to bind) when the status was computed
    reason: str  # the condition's reason: Scheduled or Unschedulable
    message: str


class PodGroupStatusWriter(Protocol):
    """Writes a PodGroup's status subresource (a merge patch of the fields above only). Raises ApiError."""

    def write_pod_group_status(self, api: PodGroupApi, namespace: str, name: str, status: PodGroupStatus) -> None:
        ...


@dataclass(frozen=True)
class LeaseRecord:
    """A coordination.k8s.io/v1 Lease as leader election sees it."""

    namespace: str
    name: str
    holder: str | None
    lease_duration_seconds: int
    acquire_time: str | None  # RFC3339 with microseconds, as the API stores MicroTime
    renew_time: str | None
    lease_transitions: int
    resource_version: str | None = None


class LeaseStore(Protocol):
    def get(self, namespace: str, name: str) -> LeaseRecord | None: ...

    def create(self, record: LeaseRecord) -> LeaseRecord:
        """Raises ApiError (409 when someone else created it first)."""
        ...

    def update(self, record: LeaseRecord) -> LeaseRecord:
        """Optimistic update on record.resource_version; raises ApiError (409 on a lost race)."""
        ...


class RequestObserver(Protocol):
    """Told of every API request the Kubernetes client makes (client-go's rest_client_* metrics): the HTTP method,
    the API server's host:port, the status code ("<error>" when no reply came) and the seconds the request took
    (None for a watch, whose duration is its lifetime). Called on the requesting thread: must be cheap."""

    def observe_request(self, method: str, host: str, code: str, seconds: float | None) -> None: ...


# -- telemetry ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeDirectory:
    """What a metric source may need to map its series to nodes and to turn usage into utilisation."""

    names: frozenset[str]
    by_internal_ip: Mapping[str, str]  # InternalIP -> node name
    cpu_allocatable: Mapping[str, float]  # cores
    memory_allocatable: Mapping[str, float]  # bytes
    # kubernetes.io/hostname label -> node name: exporters report the host name, which may differ from the
    # node's name (and be its short name or FQDN).
    hostnames: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Sample:
    """One value of one configured metric for one node, stamped with when it was measured."""

    metric: str
    node: str
    value: float
    observed_at: float  # unix seconds, from the sample's own timestamp, not from when we asked


@dataclass(frozen=True)
class SeriesMatching:
    """How one metric's series of one refresh were matched to nodes: the coverage self-check."""

    matched: Mapping[str, int]  # rule (e.g. "node", "instance/internal_ip") -> series matched by it
    unmatched: int
    unmatched_examples: tuple[Mapping[str, str], ...]  # label sets of a few unmatched series


@dataclass
class FetchResult:
    samples: list[Sample]
    # Values refused, by reason: nan, inf, negative, sentinel, malformed, unknown_node, ...
    dropped: dict[str, int]
    # Per metric that failed this round (the others still count): metric -> error message.
    errors: dict[str, str]
    queries: int = 0
    unmatched_series: int = 0
    # Per metric, how its series found their nodes (sources that resolve series by labels fill it).
    series_matching: dict[str, SeriesMatching] = field(default_factory=dict)
