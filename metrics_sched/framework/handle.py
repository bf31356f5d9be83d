"""The Handle: what a plugin may use from the scheduler, as typed members (kube-scheduler's Handle).

    cluster       the cluster state (nodes as a NodeTable, placed and assumed pods)
    metrics       the telemetry cache: fresh values per metric and node (and per device, for metrics kept so),
                  freshness contracts
    ledger        the in-flight ledger: estimated load of pods placed since their node's last sample
    pod_writer    the API writes (binding, events, status)
    volume_writer the writes of volume binding (a PV's claimRef, a claim's selected node); None: not wired
    claim_writer  the writes of device allocation (a ResourceClaim's status); None: not wired
    waiting_pods  pods held at Permit, to allow or reject them from another plugin or thread
    preemptor     the writes of preemption (nominations, victims' condition and deletion); None: not wired
    activator     moves pods straight back to the active queue (a gang waking its members)
    group_status  where PodGroup status is reported (written off the hot path); None: not wired
    may_write     whether this replica may write now (the leader's fence; always True without leader election)
    events        typed events the plugin publishes (e.g. the values of the metrics it declares) to subscribers
    indexes       the cluster indexes of every profile (index(cls): the one a plugin declares in Plugin.indexes)
    run_filters   the profile's filters, for PostFilter's what-if runs on a cloned CycleState
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from metrics_sched.config.contract import FreshnessContract
from metrics_sched.framework.activation import PodActivator
from metrics_sched.framework.cluster_index import ClusterIndexes, IndexT
from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.filtered import DryRun, Filtered
from metrics_sched.framework.plugin_events import PluginEvents
from metrics_sched.framework.waiting import WaitingPods
from metrics_sched.model.group_membership import GroupKey
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.ports import PodGroupApi, PodGroupStatus, PodWriter, Preemptor, ResourceClaimWriter, VolumeWriter
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.node_table import FloatArray, IntArray, NodeTable
from metrics_sched.telemetry.cache import MetricColumn
from metrics_sched.telemetry.devices import DeviceValue
from metrics_sched.telemetry.ledger import InFlightLedgerStore

__all__ = ["FilterRunner", "GroupRef", "GroupStatusSink", "Handle", "MetricReader", "Services"]


def _always() -> bool:
    return True


class MetricReader(Protocol):
    """The read side of the telemetry cache (MetricCache implements it)."""

    @property
    def generation(self) -> int: ...

    def column(self, metric: str, table: NodeTable) -> MetricColumn: ...

    def contract(self, metric: str) -> FreshnessContract: ...

    @property
    def clock(self) -> Callable[[], float]:
        """The clock freshness is judged by (observed_at times are on it: DeviceValue.age(metrics.clock()))."""
        ...

    def device_values(self, metric: str, node: str) -> Mapping[str, DeviceValue]:
        """The node's devices with a fresh value of `metric`: device id (as the source's `deviceLabels` give it,
        e.g. a GPU's UUID or index) -> (value, observed_at). Empty for a metric not kept per device. For the hot
        path: no I/O, and the same mapping object while nothing changed or expired."""
        ...

    def device_value(self, metric: str, node: str, device: str) -> DeviceValue | None:
        """One device's fresh value and when it was measured; None when it has none or it is stale (missing, by
        the contract)."""
        ...


class GroupRef(Protocol):
    """What reporting a group's status needs of it (a gang plugin's PodGroup): which group, and the group version
    it came from (status is written there)."""

    @property
    def key(self) -> GroupKey: ...

    @property
    def served(self) -> PodGroupApi: ...


class GroupStatusSink(Protocol):
    """Where a gang plugin reports a group's status (Coscheduling's GroupStatusReporter; a list in tests)."""

    def report(self, group: GroupRef, status: PodGroupStatus) -> None: ...


class FilterRunner(Protocol):
    def run_filters(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered: ...

    def dry_run(self, pod: PodInfo, table: NodeTable, cycle: CycleState | None = None) -> DryRun | None:
        """PreFilter and Filter over the state as it is now, in a clone of `cycle` (the pod's own cycle state) or a
        fresh one, with what the filters that ran (not skipped) declare about the verdict; None if a PreFilter
        refuses."""
        ...

    def rank(self, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray | None:
        """The profile's total scores (0-100) of `rows`, feasible or not; None if a PreFilter or PreScore refuses."""
        ...


@dataclass
class Services:
    """What the scheduler wires in once; every profile's Handle shares it (waiting pods included, as in
    kube-scheduler: a Permit plugin of one profile may allow a pod of another)."""

    cluster: ClusterState
    metrics: MetricReader
    ledger: InFlightLedgerStore
    pod_writer: PodWriter
    waiting_pods: WaitingPods = field(default_factory=WaitingPods)
    volume_writer: VolumeWriter | None = None
    preemptor: Preemptor | None = None
    activator: PodActivator = field(default_factory=PodActivator)
    group_status: GroupStatusSink | None = None
    may_write: Callable[[], bool] = _always
    events: PluginEvents = field(default_factory=PluginEvents)
    indexes: ClusterIndexes = field(default_factory=ClusterIndexes)
    claim_writer: ResourceClaimWriter | None = None


@dataclass
class Handle(Services):
    filters: FilterRunner | None = None  # set by the Framework that owns this handle, before any plugin runs

    @classmethod
    def of(cls, services: Services) -> Handle:
        return cls(services.cluster, services.metrics, services.ledger, services.pod_writer, services.waiting_pods,
                   services.volume_writer, services.preemptor, services.activator, services.group_status,
                   services.may_write, services.events, services.indexes, services.claim_writer)

    def index(self, cls: type[IndexT]) -> IndexT:
        """The scheduler's instance of a cluster index the plugin declares (Plugin.indexes): one per class, shared
        by every plugin and profile declaring it. LookupError if no enabled plugin declares it."""
        return self.indexes.get(cls)

    @property
    def table(self) -> NodeTable:
        return self.cluster.table

    def owner_counts(self, owner_key: str) -> IntArray:
        return self.cluster.owner_counts(owner_key)

    def dry_run(self, pod: PodInfo, cycle: CycleState | None = None) -> DryRun | None:
        """PreFilter and Filter over the cluster's state as it is now (preemption's what-if runs), in a clone of
        `cycle` when given: the pod's own cycle state, as a PostFilter has it (upstream's SelectVictimsOnNode)."""
        if self.filters is None:
            raise RuntimeError("dry_run before the framework was built")
        return self.filters.dry_run(pod, self.table, cycle)

    def rank(self, pod: PodInfo, rows: IntArray) -> FloatArray | None:
        """The profile's total scores of `rows` (PostFilter's tie-break among equally good nodes)."""
        if self.filters is None:
            raise RuntimeError("rank before the framework was built")
        return self.filters.rank(pod, self.table, rows)

    def run_filters(self, cycle: CycleState, pod: PodInfo, table: NodeTable | None = None) -> Filtered:
        """The profile's filters over `table` (default: the cluster's); PostFilter passes a cloned cycle."""
        if self.filters is None:
            raise RuntimeError("run_filters before the framework was built")
        return self.filters.run_filters(cycle, pod, self.table if table is None else table)
