"""VolumeBinding: a pod's PersistentVolumeClaims decide where it may go, and get bound once it goes there
(kube-scheduler 1.36's volumebinding plugin).

- PreFilter sorts the pod's claims (persistentVolumeClaim and generic ephemeral volumes): a missing, lost or
  deleting claim, or one not yet bound in Immediate mode, makes the pod unschedulable and unresolvable; bound
  claims and unbound WaitForFirstConsumer claims go on to Filter. A pod without claims skips the plugin.
- Filter, over every node at once: a bound claim's PV must be reachable from the node (its nodeAffinity, read
  against the node's labels); an unbound claim needs an available PV there (smallest that fits: class, size,
  access modes, volume mode, selector, node affinity; each PV chosen once per pod) or, for a class with a
  provisioner, the node within the class's allowedTopologies and, if the CSI driver publishes capacity, a
  CSIStorageCapacity there that fits. A claim whose selected-node names another node fails at once.
  Reasons, per node and in this order: node affinity, bind conflict, not enough storage, missing PV.
- Reserve assumes the chosen bindings in the VolumeStore (a PV's claimRef, a claim's selected node), so the next
  pod does not pick the same PV; Unreserve restores them.
- PreBind writes them (VolumeWriter: conditional merge patches) and waits, up to `bindTimeoutSeconds`, until the
  PV controller (or the provisioner and the PV controller) has bound every claim: it wakes on every watch change
  instead of polling. A failure or time-out is an error: the pod is unreserved and requeued.

Scoring by storage capacity is behind an alpha feature gate upstream (off in 1.36), so there is no Score.
In-tree volume migration (a PV's zone labels rewritten to its CSI driver's topology) is not applied: the PV's
own nodeAffinity is what counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrics_sched.framework import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    NO_PROVISIONER,
    SUCCESS,
    ApiError,
    ArgsError,
    Batchable,
    BatchScope,
    BoolArray,
    ClaimRef,
    ClusterEvent,
    Code,
    CycleState,
    EventHint,
    Filtered,
    FilterPlugin,
    Handle,
    IntArray,
    LabelSelector,
    NodeTable,
    PersistentVolume,
    PersistentVolumeClaim,
    PodInfo,
    PreBindPlugin,
    PreFilterPlugin,
    QueueingHint,
    Reads,
    ReservePlugin,
    StateKey,
    Status,
    StorageClass,
    claim_key,
    explain,
    has_only_local_volumes,
    term_mask,
)

from ..volumes import AssumeConflict, VolumeStore

__all__ = [
    "ERR_BIND_CONFLICT",
    "ERR_NODE_CONFLICT",
    "ERR_NOT_ENOUGH_SPACE",
    "ERR_PV_NOT_EXIST",
    "ERR_UNBOUND_IMMEDIATE",
    "VolumeBinding",
    "fully_bound",
    "pv_node_mask",
]

ERR_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
ERR_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
ERR_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"

# PV node-affinity masks are kept per PV version until node labels change: every PV of a class is read each cycle,
# so an LRU smaller than the class would miss every time. The cap only bounds a churn of PV versions.
_MASK_CACHE = 65536


def fully_bound(claim: PersistentVolumeClaim) -> bool:
    """Bound as the PV controller finishes it: spec.volumeName and the bind-completed annotation."""
    return bool(claim.volume_name) and ANN_BIND_COMPLETED in claim.annotations


def pv_node_mask(table: NodeTable, pv: PersistentVolume) -> BoolArray:
    """Rows whose labels satisfy the PV's required node affinity (CheckNodeAffinity: matched against the labels
    only, so a matchFields term never matches; no affinity: every node)."""
    if pv.node_terms is None:
        return np.ones(table.capacity, dtype=bool)
    mask = np.zeros(table.capacity, dtype=bool)
    for term in pv.node_terms:
        if term.get("matchFields"):
            continue
        mask |= term_mask(table, term)
    return mask


def _topology_mask(table: NodeTable, terms: Sequence[Mapping[str, Any]]) -> BoolArray:
    """A class's allowedTopologies (MatchTopologySelectorTerms): none allows every node; terms are ORed, a term
    with no expressions matches nothing, each expression needs the label with one of its values."""
    if not terms:
        return np.ones(table.capacity, dtype=bool)
    mask = np.zeros(table.capacity, dtype=bool)
    for term in terms:
        expressions = term.get("matchLabelExpressions") or []
        if not expressions:
            continue
        rows = np.ones(table.capacity, dtype=bool)
        for expr in expressions:
            rows &= table.label_in(str(expr.get("key", "")), [str(v) for v in expr.get("values") or ()])
        mask |= rows
    return mask


def _selector_mask(table: NodeTable, selector: LabelSelector | None) -> BoolArray:
    """Rows whose labels a CSIStorageCapacity's nodeTopology selects (None: no node)."""
    if selector is None or selector.nothing:
        return np.zeros(table.capacity, dtype=bool)
    mask = np.ones(table.capacity, dtype=bool)
    for req in selector.requirements:
        if req.operator == "In":
            mask &= table.label_in(req.key, req.values)
        elif req.operator == "NotIn":
            mask &= ~table.label_in(req.key, req.values)
        elif req.operator == "Exists":
            mask &= table.label_exists(req.key)
        else:
            mask &= ~table.label_exists(req.key)
    return mask


@dataclass(frozen=True)
class _PodClaims:
    """PreFilter's sorting of the pod's claims, in spec.volumes order."""

    bound: tuple[PersistentVolumeClaim, ...]
    delayed: tuple[PersistentVolumeClaim, ...]  # unbound, WaitForFirstConsumer


@dataclass
class _NodeChoices:
    """Filter's answer per row, for Reserve on the chosen row: which PV each matched claim takes (-1: none) and
    which claims are to be provisioned there."""

    matching: tuple[PersistentVolumeClaim, ...]  # in the order they were matched (by size)
    candidates: tuple[tuple[PersistentVolume, ...], ...]  # per matching claim, the PVs its index arrays point into
    chosen: tuple[IntArray, ...]  # per matching claim, per row: index into its candidates, or -1
    selected: tuple[PersistentVolumeClaim, ...]  # claims whose selected-node is the node: provisioned there

    def clone(self) -> _NodeChoices:
        return dataclasses.replace(self, chosen=tuple(c.copy() for c in self.chosen))


@dataclass(frozen=True)
class _Plan:
    """What Reserve assumed for the chosen node and PreBind writes."""

    node: str
    bindings: tuple[tuple[PersistentVolume, PersistentVolumeClaim], ...]  # assumed PV (with claimRef), its claim
    provisions: tuple[PersistentVolumeClaim, ...]  # assumed claims (with selected-node)
    assumed_volumes: tuple[str, ...]  # what Unreserve restores
    assumed_claims: tuple[str, ...]


_CLAIMS = StateKey[_PodClaims]("VolumeBinding/claims")
_CHOICES = StateKey[_NodeChoices]("VolumeBinding/choices")
_PLAN = StateKey[_Plan]("VolumeBinding/plan")
_SENT = StateKey[frozenset[tuple[str, str]]]("VolumeBinding/sent")  # ("pv", name) / ("pvc", key) PreBind wrote


class VolumeBinding(PreFilterPlugin, FilterPlugin, ReservePlugin, PreBindPlugin, Batchable):
    name = "VolumeBinding"
    node_local = True  # the node's labels against PV affinity and capacity
    indexes = (VolumeStore,)

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads claims and volumes across the cluster: a pod with any is not batched."""
        return BatchScope(Reads.NODE) if has_only_local_volumes(pod) else None

    @dataclass(frozen=True)
    class Args:
        # How long PreBind waits for the PV controller (and provisioner) to bind the claims (upstream: 600).
        bind_timeout_seconds: int = 600

        def validate(self) -> None:
            if self.bind_timeout_seconds < 0:
                raise ArgsError("bindTimeoutSeconds", "must be >= 0")

    args: Args

    def __init__(self, args: Args, handle: Handle) -> None:
        super().__init__(args, handle)
        self._volumes = handle.index(VolumeStore)
        self._masks: dict[tuple[str, str], BoolArray] = {}
        self._masks_for: tuple[int, int] = (-1, -1)  # (labels generation, capacity) the masks were computed at

    # -- queueing ---------------------------------------------------------------------------------
    def events_to_register(self) -> list[EventHint]:
        return [
            EventHint(ClusterEvent.NODE_ADDED), EventHint(ClusterEvent.NODE_LABELS),
            EventHint(ClusterEvent.PVC_CHANGED, _claim_of_pod),
            EventHint(ClusterEvent.PV_CHANGED), EventHint(ClusterEvent.STORAGE_CLASS_CHANGED),
            EventHint(ClusterEvent.CSI_NODE_CHANGED), EventHint(ClusterEvent.CSI_CAPACITY_CHANGED),
            EventHint(ClusterEvent.CSI_DRIVER_CHANGED),
        ]

    # -- PreFilter --------------------------------------------------------------------------------
    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        volumes = pod.volumes
        if not volumes.claims:
            return Status(Code.SKIP)
        store = self._volumes
        for volume in volumes.claims:
            key = claim_key(pod.namespace, volume.claim)
            claim = store.watched_claim(key)
            if claim is None:
                if volume.ephemeral:
                    return Status(Code.UNRESOLVABLE, "waiting for ephemeral volume controller to create the "
                                                     f'persistentvolumeclaim "{volume.claim}"')
                return Status(Code.UNRESOLVABLE, f'persistentvolumeclaim "{volume.claim}" not found')
            if claim.phase == "Lost":
                return Status(Code.UNRESOLVABLE, f'persistentvolumeclaim "{volume.claim}" bound to non-existent '
                                                 f'persistentvolume "{claim.volume_name}"')
            if claim.deleting:
                return Status(Code.UNRESOLVABLE, f'persistentvolumeclaim "{volume.claim}" is being deleted')
            if volume.ephemeral and pod.uid not in claim.owner_uids:
                return Status(Code.UNRESOLVABLE, f"PVC {key} was not created for pod {pod.key} (pod is not owner)")
        bound: list[PersistentVolumeClaim] = []
        delayed: list[PersistentVolumeClaim] = []
        immediate: list[PersistentVolumeClaim] = []
        for volume in volumes.claims:
            claim = store.claim(claim_key(pod.namespace, volume.claim))  # the assumed version, if any
            if claim is None:
                return Status(Code.UNRESOLVABLE, f'persistentvolumeclaim "{volume.claim}" not found')
            if fully_bound(claim):
                bound.append(claim)
                continue
            storage_class = store.storage_class(claim.storage_class) if claim.storage_class else None
            if storage_class is not None and storage_class.wait_for_first_consumer and not claim.volume_name:
                delayed.append(claim)
            else:
                immediate.append(claim)
        if immediate:
            explain(cycle, *(f"pvc {c.name}: not bound yet, and its class "
                             f"{c.storage_class or '(none)'} binds immediately (not at first consumer)"
                             for c in immediate))
            return Status(Code.UNRESOLVABLE, ERR_UNBOUND_IMMEDIATE)
        cycle.write(_CLAIMS, _PodClaims(tuple(bound), tuple(delayed)))
        return SUCCESS

    # -- Filter -----------------------------------------------------------------------------------
    def _pv_mask(self, table: NodeTable, pv: PersistentVolume) -> BoolArray:
        generation = (table.labels_generation, table.capacity)
        if generation != self._masks_for or len(self._masks) > _MASK_CACHE:
            self._masks.clear()
            self._masks_for = generation
        key = (pv.name, pv.resource_version)
        mask = self._masks.get(key)
        if mask is None:
            mask = self._masks[key] = pv_node_mask(table, pv)
        return mask

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        claims = cycle.get(_CLAIMS)
        size = table.capacity
        if claims is None:
            return Filtered(np.ones(size, dtype=bool))
        store = self._volumes
        bound_ok = np.ones(size, dtype=bool)
        pvs_found = np.ones(size, dtype=bool)
        # Bound claims, in order; each node stops at its first failure (a missing PV is the same for all).
        for claim in claims.bound:
            pv = store.volume(claim.volume_name)
            if pv is None:
                pvs_found = ~bound_ok  # a node that failed an earlier claim stopped there: only the others miss it
                explain(cycle, f"pvc {claim.name}: bound to PV {claim.volume_name}, which does not exist")
                break
            mask = self._pv_mask(table, pv)
            if not mask.all():
                explain(cycle, f"pvc {claim.name}: {_where(pv)}")
            bound_ok &= mask
        unbound_ok = np.ones(size, dtype=bool)
        enough_space = np.ones(size, dtype=bool)
        if claims.delayed:
            self._filter_delayed(cycle, claims.delayed, table, unbound_ok, enough_space)
        reasons: dict[str, BoolArray] = {}
        for reason, ok in ((ERR_NODE_CONFLICT, bound_ok), (ERR_BIND_CONFLICT, unbound_ok),
                           (ERR_NOT_ENOUGH_SPACE, enough_space), (ERR_PV_NOT_EXIST, pvs_found)):
            if not ok.all():
                reasons[reason] = ~ok
        feasible = bound_ok & unbound_ok & enough_space & pvs_found
        return Filtered(feasible, reasons)

    def _filter_delayed(self, cycle: CycleState, delayed: Sequence[PersistentVolumeClaim], table: NodeTable,
                        unbound_ok: BoolArray, enough_space: BoolArray) -> None:
        """Unbound WaitForFirstConsumer claims (FindPodVolumes' second half); updates the two masks in place."""
        size = table.capacity
        store = self._volumes
        # A claim some scheduler already gave a node may only go there (nothing else is checked elsewhere).
        selected = [c for c in delayed if c.selected_node is not None]
        matching = sorted((c for c in delayed if c.selected_node is None), key=lambda c: c.request)
        reachable = np.ones(size, dtype=bool)
        for claim in selected:
            node_rows = np.zeros(size, dtype=bool)
            row = table.index.get(claim.selected_node or "")
            if row is not None:
                node_rows[row] = True
            reachable &= node_rows
            explain(cycle, f"pvc {claim.name}: already given node {claim.selected_node} (selected-node)")
        # Static matching, smallest fitting PV first, each PV taken once per node (the greedy of upstream's
        # findMatchingVolumes, run for every node at once: one argmax per claim over a PVs x nodes matrix).
        taken: dict[str, BoolArray] = {}  # PV name -> rows where an earlier claim of this pod took it
        chosen: list[IntArray] = []
        candidates: list[tuple[PersistentVolume, ...]] = []
        unmatched: list[BoolArray] = []
        for claim in matching:
            pvs, picks = self._match(claim, store.volumes_of_class(claim.storage_class), table, taken)
            candidates.append(pvs)
            chosen.append(picks)
            unmatched.append(picks < 0)
            for i, pv in enumerate(pvs):
                rows = picks == i
                if rows.any():
                    taken[pv.name] = taken.get(pv.name, np.zeros(size, dtype=bool)) | rows
        cycle.write(_CHOICES, _NodeChoices(tuple(matching), tuple(candidates), tuple(chosen), tuple(selected)))
        # Dynamic provisioning for the selected claims (every reachable node) and the unmatched ones (their rows),
        # in that order; a node stops at its first claim that cannot be provisioned there.
        provision: list[tuple[PersistentVolumeClaim, BoolArray]] = [(c, reachable) for c in selected]
        provision += [(c, rows & reachable) for c, rows in zip(matching, unmatched, strict=True)]
        undecided = reachable.copy()
        for claim, rows in provision:
            in_list = rows & undecided
            if not in_list.any():
                continue
            storage_class = store.storage_class(claim.storage_class)
            if storage_class is None or storage_class.provisioner in ("", NO_PROVISIONER):
                explain(cycle, f"pvc {claim.name}: no available PV of class {claim.storage_class} fits"
                               + ("" if storage_class is None else
                                  f", and the class cannot provision ({storage_class.provisioner})"))
                unbound_ok &= ~in_list
                undecided &= ~in_list
                continue
            topology = _topology_mask(table, storage_class.allowed_topologies)
            conflict = in_list & ~topology
            if conflict.any():
                explain(cycle, f"pvc {claim.name}: class {storage_class.name} provisions only in its "
                               "allowedTopologies")
            unbound_ok &= ~conflict
            undecided &= ~conflict
            space = self._capacity_mask(claim, storage_class, table)
            short = in_list & ~conflict & ~space
            if short.any():
                explain(cycle, f"pvc {claim.name}: no CSIStorageCapacity of class {storage_class.name} "
                               f"has {claim.request} bytes on some nodes")
            enough_space &= ~short
            undecided &= ~short
        unbound_ok &= reachable

    def _match(self, claim: PersistentVolumeClaim, pvs: Sequence[PersistentVolume], table: NodeTable,
               taken: Mapping[str, BoolArray]) -> tuple[tuple[PersistentVolume, ...], IntArray]:
        """FindMatchingVolume for every row: (the candidate PVs, per row the index of the one chosen or -1)."""
        size = table.capacity
        ref = ClaimRef(claim.namespace, claim.name, claim.uid)
        prebound: PersistentVolume | None = None
        usable: list[PersistentVolume] = []
        for pv in pvs:
            if pv.claim_ref is not None and not _bound_to(pv.claim_ref, ref):
                continue
            if (pv.capacity < claim.request or pv.volume_mode != claim.volume_mode
                    or pv.attributes_class != claim.attributes_class or pv.deleting):
                continue
            if pv.claim_ref is not None:  # pre-bound to this claim: it alone decides
                prebound = pv
                break
            if (pv.phase != "Available" or pv.storage_class != claim.storage_class
                    or (claim.selector is not None and not claim.selector.matches(pv.labels))
                    or not claim.access_modes <= pv.access_modes):
                continue
            usable.append(pv)
        if prebound is not None:
            picks = np.where(self._pv_mask(table, prebound), 0, -1).astype(np.int64)
            return (prebound,), picks
        if not usable:
            return (), np.full(size, -1, dtype=np.int64)
        # Smallest capacity first; on a tie the first in list order (a stable sort keeps it).
        usable.sort(key=lambda pv: pv.capacity)
        fits = np.stack([self._pv_mask(table, pv) & ~taken.get(pv.name, np.zeros(size, dtype=bool))
                         for pv in usable])
        first = np.argmax(fits, axis=0)
        picks = np.where(fits.any(axis=0), first, -1).astype(np.int64)
        return tuple(usable), picks

    def _capacity_mask(self, claim: PersistentVolumeClaim, storage_class: StorageClass,
                       table: NodeTable) -> BoolArray:
        """hasEnoughCapacity: only when the class's CSI driver publishes capacity and the claim asks for some."""
        size = table.capacity
        store = self._volumes
        driver = store.csi_driver(storage_class.provisioner)
        if claim.request <= 0 or driver is None or not driver.storage_capacity:
            return np.ones(size, dtype=bool)
        mask = np.zeros(size, dtype=bool)
        for capacity in sorted(store.capacities(storage_class.name), key=lambda c: c.key):
            limit = capacity.maximum_volume_size if capacity.maximum_volume_size is not None else capacity.capacity
            if limit is not None and limit >= claim.request:
                mask |= _selector_mask(table, capacity.node_topology)
        return mask

    # -- Reserve / Unreserve ---------------------------------------------------------------------
    def reserve(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        claims = cycle.get(_CLAIMS)
        if claims is None or not claims.delayed:
            return SUCCESS
        store = self._volumes
        row = self.handle.table.index.get(node)
        choices = cycle.get(_CHOICES)
        if row is None or choices is None:
            return Status.error(f'no pod volume found for node "{node}"')
        bindings: list[tuple[PersistentVolume, PersistentVolumeClaim]] = []
        for claim, pvs, picks in zip(choices.matching, choices.candidates, choices.chosen, strict=True):
            pick = int(picks[row]) if row < picks.shape[0] else -1
            if pick >= 0:
                bindings.append((pvs[pick], claim))
        matched = {c.key for _, c in bindings}
        provisions = [*choices.selected, *(c for c in choices.matching if c.key not in matched)]
        assumed_volumes: list[str] = []
        assumed_claims: list[str] = []
        written: list[tuple[PersistentVolume, PersistentVolumeClaim]] = []
        try:
            for pv, claim in bindings:
                ref = ClaimRef(claim.namespace, claim.name, claim.uid)
                was_bound = pv.claim_ref is not None and _bound_to(pv.claim_ref, ref)
                if pv.claim_ref == ref and (was_bound or ANN_BOUND_BY_CONTROLLER in pv.annotations):
                    written.append((pv, claim))  # GetBindVolumeToClaim: nothing to change, nothing assumed
                    continue
                annotations = dict(pv.annotations)
                if not was_bound:
                    annotations.setdefault(ANN_BOUND_BY_CONTROLLER, "yes")
                new_pv = dataclasses.replace(pv, claim_ref=ref, annotations=annotations)
                store.assume_volume(new_pv, pv.resource_version)
                assumed_volumes.append(pv.name)
                written.append((new_pv, claim))
            for claim in provisions:
                store.assume_claim(dataclasses.replace(
                    claim, annotations={**claim.annotations, ANN_SELECTED_NODE: node}), claim.resource_version)
                assumed_claims.append(claim.key)
        except Exception as exc:  # AssumeConflict, or a bug: nothing this Reserve assumed may stay behind
            for name in assumed_volumes:
                store.restore_volume(name)
            for key in assumed_claims:
                store.restore_claim(key)
            if not isinstance(exc, AssumeConflict):
                raise
            return Status.error(str(exc))
        for pv, claim in written:
            explain(cycle, f"pvc {claim.name}: binds PV {pv.name} on {node}")
        for claim in provisions:
            explain(cycle, f"pvc {claim.name}: provisioned by {claim.storage_class}'s provisioner on {node}")
        cycle.write(_PLAN, _Plan(node, tuple(written), tuple(provisions), tuple(assumed_volumes),
                                 tuple(assumed_claims)))
        return SUCCESS

    def unreserve(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        plan = cycle.get(_PLAN)
        if plan is None:
            return
        store = self._volumes
        # What PreBind wrote stays assumed: the watch will deliver the written version (dropping the assumption);
        # restoring it now would show the PV Available again until then, to be picked and fail the next pod.
        sent = cycle.get(_SENT, frozenset())
        for name in plan.assumed_volumes:
            if ("pv", name) not in sent:
                store.restore_volume(name)
        for key in plan.assumed_claims:
            if ("pvc", key) not in sent:
                store.restore_claim(key)

    # -- PreBind ----------------------------------------------------------------------------------
    def pre_bind(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        plan = cycle.get(_PLAN)
        if plan is None or not (plan.bindings or plan.provisions):
            return SUCCESS
        writer = self.handle.volume_writer
        if writer is None:
            return Status.error("binding volumes: no volume writer is configured")
        store = self._volumes
        sent_volumes: dict[str, int] = {}
        sent_claims: dict[str, int] = {}
        try:
            for pv, claim in plan.bindings:
                watched = store.watched_volume(pv.name)
                if watched is not None and watched.claim_ref == ClaimRef(claim.namespace, claim.name, claim.uid):
                    continue  # already ours (a retried PreBind, or pre-bound by the user)
                version = writer.bind_volume(pv.name, pv.resource_version, claim.namespace, claim.name, claim.uid,
                                             bound_by_controller=ANN_BOUND_BY_CONTROLLER in pv.annotations)
                sent_volumes[pv.name] = _rv(version)
            for claim in plan.provisions:
                watched_claim = store.watched_claim(claim.key)
                if watched_claim is not None and watched_claim.selected_node == node:
                    continue
                version = writer.select_node(claim.namespace, claim.name, claim.resource_version, node)
                sent_claims[claim.key] = _rv(version)
        except ApiError as exc:
            return Status.error(f"binding volumes: {exc}")
        finally:
            cycle.write(_SENT, frozenset({("pv", n) for n in sent_volumes} | {("pvc", k) for k in sent_claims}))
        uid = pod.uid

        def check() -> Status | None:
            if not self.handle.cluster.is_placed(uid):
                return Status.error(f'binding volumes: pod does not exist any more: pod "{pod.name}" not found')
            return self._check_bindings(plan, node, sent_volumes, sent_claims)

        done = store.wait_for(check, float(self.args.bind_timeout_seconds))
        if done is None:
            explain(cycle, f"volumes not bound within {self.args.bind_timeout_seconds}s on {node}")
            return Status.error(f"binding volumes: timed out after {self.args.bind_timeout_seconds}s waiting "
                                "for the claims to be bound")
        return done

    def _check_bindings(self, plan: _Plan, node: str, sent_volumes: Mapping[str, int],
                        sent_claims: Mapping[str, int]) -> Status | None:
        """checkBindings on the watched objects: SUCCESS when all are bound, an error status when one can no
        longer be, None while waiting. Runs on a bind worker: the node table is read under the cluster's lock,
        and node affinity is computed afresh (the mask cache belongs to the scheduling thread)."""
        store = self._volumes
        with self.handle.cluster.lock:
            return self._check_bindings_locked(plan, node, sent_volumes, sent_claims, store)

    def _check_bindings_locked(self, plan: _Plan, node: str, sent_volumes: Mapping[str, int],
                               sent_claims: Mapping[str, int], store: VolumeStore) -> Status | None:
        table = self.handle.table
        row = table.index.get(node)
        if row is None:
            return Status.error(f'binding volumes: node "{node}" is gone')
        record = table.records[row]
        if record is None:
            return Status.error(f'binding volumes: node "{node}" is gone')
        labels = record.labels  # one node: its labels, not a mask over the table
        pending = False
        for pv, claim in plan.bindings:
            watched = store.watched_volume(pv.name)
            watched_claim = store.watched_claim(claim.key)
            if watched is None or watched_claim is None:
                return Status.error(f"binding volumes: failed to check binding: {pv.name} or {claim.key} is gone")
            if _rv(watched.resource_version) < sent_volumes.get(pv.name, 0):
                pending = True
                continue
            if not _reachable(watched, labels):
                return Status.error(f'binding volumes: pv "{pv.name}" node affinity doesn\'t match node "{node}": '
                                    "no matching NodeSelectorTerms")
            if watched.claim_ref is None or not watched.claim_ref.uid:
                return Status.error(f'binding volumes: ClaimRef got reset for pv "{pv.name}"')
            if not fully_bound(watched_claim):
                pending = True
        for claim in plan.provisions:
            watched_claim = store.watched_claim(claim.key)
            if watched_claim is None:
                return Status.error(f"binding volumes: failed to check provisioning pvc: {claim.key} is gone")
            if _rv(watched_claim.resource_version) < sent_claims.get(claim.key, 0):
                pending = True
                continue
            # Upstream tells an annotation-less claim apart; a provisioner that gives up removes only
            # selected-node, which is a provisioning failure.
            if not watched_claim.annotations:
                return Status.error(f'binding volumes: selectedNode annotation reset for PVC "{claim.name}"')
            if watched_claim.selected_node != node:
                return Status.error(f'binding volumes: provisioning failed for PVC "{claim.name}"')
            if watched_claim.volume_name:
                provisioned = store.watched_volume(watched_claim.volume_name)
                if provisioned is None:
                    pending = True
                    continue
                if not _reachable(provisioned, labels):
                    return Status.error(f'binding volumes: pv "{provisioned.name}" node affinity doesn\'t match node '
                                        f'"{node}": no matching NodeSelectorTerms')
            if not fully_bound(watched_claim):
                pending = True
        return None if pending else SUCCESS


def _reachable(pv: PersistentVolume, labels: Mapping[str, str]) -> bool:
    """CheckNodeAffinity for one node's labels (PreBind's check: no mask over the whole table)."""
    if pv.node_terms is None:
        return True
    return any(not term.get("matchFields") and _term_matches(term, labels) for term in pv.node_terms)


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    expressions = term.get("matchExpressions") or []
    if not expressions:
        return False  # an empty term matches nothing
    for expr in expressions:
        key, operator = str(expr.get("key", "")), expr.get("operator")
        values = [str(v) for v in expr.get("values") or ()]
        value = labels.get(key)
        if operator == "In":
            ok = value in values
        elif operator == "NotIn":
            ok = value not in values
        elif operator == "Exists":
            ok = value is not None
        elif operator == "DoesNotExist":
            ok = value is None
        elif operator in ("Gt", "Lt") and len(values) == 1 and value is not None:
            try:
                ok = int(value) > int(values[0]) if operator == "Gt" else int(value) < int(values[0])
            except ValueError:
                ok = False
        else:
            ok = False
        if not ok:
            return False
    return True


def _bound_to(ref: ClaimRef, claim: ClaimRef) -> bool:
    """IsVolumeBoundToClaim: same namespace and name, and the uid unset or equal."""
    return ref.namespace == claim.namespace and ref.name == claim.name and ref.uid in ("", claim.uid)


def _rv(version: str) -> int:
    try:
        return int(version)
    except ValueError:
        return 0


def _where(pv: PersistentVolume) -> str:
    """The PV's node affinity in words, for explain: "PV pv-7 is in zone-b", "PV local-3 is on node kwok-2"."""
    if not pv.node_terms:
        return f"PV {pv.name} is reachable from no node (empty node affinity)"
    if len(pv.node_terms) == 1:
        expressions = pv.node_terms[0].get("matchExpressions") or []
        if len(expressions) == 1 and expressions[0].get("operator") == "In":
            key = str(expressions[0].get("key", ""))
            values = ", ".join(str(v) for v in expressions[0].get("values") or ())
            if key == "kubernetes.io/hostname":
                return f"PV {pv.name} is on node {values}"
            if key.endswith("/zone"):
                return f"PV {pv.name} is in {values}"
            if key.endswith("/region"):
                return f"PV {pv.name} is in region {values}"
            return f"PV {pv.name} needs {key} in [{values}]"
    return f"PV {pv.name} is reachable only from nodes matching its node affinity"


def _claim_of_pod(pod: PodInfo, claim: Any) -> QueueingHint:
    """A claim added or updated helps only the pods that use it (by name in the pod's namespace)."""
    if not isinstance(claim, PersistentVolumeClaim) or claim.namespace != pod.namespace:
        return QueueingHint.SKIP
    names = {c.claim for c in pod.volumes.claims}
    return QueueingHint.QUEUE if claim.name in names else QueueingHint.SKIP
