"""A gang moved whole (`rebalance.gangs: whole`): its members read, each judged movable, the whole group's
placement simulated, and the move judged as one.

A gang (a scheduler-plugins PodGroup, or a Workload API scheduling group) runs with all its members or not at
all: evicting one stops the others' work. So a member on a bad node moves only with every other member, wherever
they are, or the gang stays.

Members: the bound, non-terminating, non-terminal pods of the group, read from the API with one LIST of the
gang's namespace per gang and tick (narrowed by the pod-group label for scheduler-plugins' API; the Workload
API's spec.schedulingGroup is no label, so its namespace is read whole and filtered). The cluster state keeps
no pod specs, and the simulation needs every member's.

The simulation: in the state without any member (ClusterState.simulated), the members are placed one by one
through the profile's own what-if (PreFilter, Filter, Score: Coscheduling's PreFilter and Filter included, so
what the scheduler would require of the gang's replacement holds), each placed member counted on its target for
the next ones (resources, ports, inter-pod counts), and its share of the rules' metrics added for the next ones'
projection: two members never both take the last room of one node, nor together push it over a rule. A target is
never a bad node; a member not on a bad node may land where it is (its replacement would be placed afresh, and
its own node is then a candidate like any other). When the profile's Coscheduling places a gang in one topology
domain (its Domain placement, or a PodGroup naming its topology key), every target must share one domain: the
domains of the first member's best targets are tried in turn (at most MAX_DOMAINS).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from metrics_sched.framework.handle import MetricReader
from metrics_sched.framework.runtime import Framework
from metrics_sched.model.group_membership import POD_GROUP_LABEL, GroupApi, GroupKey, GroupRefError, group_of_raw
from metrics_sched.model.podinfo import PodInfo, parse_pod
from metrics_sched.plugins.coscheduling.plugin import Coscheduling
from metrics_sched.ports import KubeObject
from metrics_sched.rebalance.projection import Projection
from metrics_sched.rebalance.simulation import Move, without_node
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.pod_record import PodRecord

__all__ = ["MAX_DOMAINS", "DomainRule", "GangMove", "Member", "MemberLister", "domain_rule", "members_of",
           "place_gang"]

MAX_DOMAINS = 3  # topology domains tried for a gang placed in one domain
_TERMINAL = frozenset({"Succeeded", "Failed"})


class MemberLister(Protocol):
    """One namespace's pods as the API has them now (ClusterLister.namespace_pods satisfies it). Raises ApiError."""

    def namespace_pods(self, namespace: str, label_selector: str | None = None) -> Iterable[KubeObject]: ...


@dataclass(frozen=True)
class Member:
    record: PodRecord  # as the cluster state counts it
    raw: KubeObject  # as read now


@dataclass(frozen=True)
class GangMove:
    """Where each member would go (in the order they were placed) and the move's worth."""

    key: GroupKey
    moves: tuple[tuple[Member, Move], ...]

    @property
    def gain(self) -> float:
        """The members' mean gain."""
        return sum(move.gain for _, move in self.moves) / len(self.moves)

    @property
    def here_fits(self) -> bool:
        """False when some member's filters no longer admit its node: the gang leaves whatever the margin."""
        return all(move.here_fits for _, move in self.moves)

    def words(self) -> str:
        left = [m.record.key for m, move in self.moves if not move.here_fits]
        why = f"; the filters of {', '.join(left)} no longer admit its node" if left else ""
        return f"gang {self.key} moves whole ({len(self.moves)} members, mean gain {self.gain:+.1f}){why}"


@dataclass(frozen=True)
class DomainRule:
    """Every member's target in one domain of `topology_key`; `required`: the group named the key itself (a
    gang none of whose feasible nodes carries it cannot be placed)."""

    topology_key: str
    required: bool
    # No domain holds the gang: placed across domains, as Coscheduling falls back (a domain the group did not ask
    # for is a preference); False: the gang stays.
    fallback: bool = False


def members_of(lister: MemberLister, key: GroupKey) -> list[KubeObject]:
    """The gang's bound members that are not leaving, as the API has them now. Raises ApiError."""
    selector = f"{POD_GROUP_LABEL}={key.name}" if key.api == GroupApi.COSCHEDULING else None
    found: list[KubeObject] = []
    for pod in lister.namespace_pods(key.namespace, selector):
        metadata = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        try:
            group = group_of_raw(str(metadata.get("namespace") or key.namespace), metadata.get("labels") or {}, spec)
        except GroupRefError:
            continue
        if group != key or not spec.get("nodeName") or metadata.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in _TERMINAL:
            continue  # done: nothing to move, and no room held
        found.append(pod)
    return found


def domain_rule(framework: Framework, key: GroupKey) -> DomainRule | None:
    """The topology domain the profile's Coscheduling would keep the gang's replacement in (as its PreFilter and
    placement decide), or None: placed member by member (no Coscheduling, a Workload group that is no gang, the
    MemberByMember placement). A domain the group did not name is a preference when Coscheduling falls back
    across domains (`fallback`)."""
    plugin = next((p for p in framework.instances.values() if isinstance(p, Coscheduling)), None)
    if plugin is None:
        return None
    group = plugin.store.get(key)
    if group is None or not group.gang:
        return None  # a missing group fails the what-if's PreFilter, which says why
    required = group.topology_key is not None
    if not required and plugin.args.gang_placement != "Domain":
        return None
    return DomainRule(group.topology_key or plugin.args.topology_key, required,
                      fallback=not required and plugin.args.fallback_to_member_by_member)


def place_gang(framework: Framework, cluster: ClusterState, key: GroupKey, members: list[Member],
               bad: Collection[str], projection: Projection, metrics: MetricReader,
               domain: DomainRule | None) -> GangMove | str:
    """Every member's target, placed one after the other in the state without the gang, or why the gang has
    none. `bad`: the nodes found bad at this tick (never a target)."""
    infos: list[PodInfo] = []
    for member in members:
        info = parse_pod(without_node(member.raw))
        if info.parse_error:
            return f"member {member.record.key}: {info.parse_error}"
        infos.append(info)
    with cluster.lock, cluster.simulated(removed=[m.record for m in members]):
        table = cluster.table
        if domain is None:
            return _place_all(framework, cluster, key, members, infos, bad, projection, metrics, None)
        values = _domains(framework, cluster, members[0], infos[0], bad, domain)
        if isinstance(values, str):
            return values
        if not values:  # no feasible node carries the key: the scheduler places the gang by score alone
            return _place_all(framework, cluster, key, members, infos, bad, projection, metrics, None)
        refused: list[str] = []
        for value in values:
            within = np.asarray(table.label_column(domain.topology_key) == value, dtype=bool)
            placed = _place_all(framework, cluster, key, members, infos, bad, projection, metrics, within)
            if isinstance(placed, GangMove):
                return placed
            refused.append(f"{domain.topology_key}={value}: {placed}")
        if domain.fallback:
            return _place_all(framework, cluster, key, members, infos, bad, projection, metrics, None)
        return f"no {domain.topology_key} domain holds the whole gang ({'; '.join(refused)})"


def _domains(framework: Framework, cluster: ClusterState, member: Member, info: PodInfo, bad: Collection[str],
             domain: DomainRule) -> list[str] | str:
    """The domains to try, best first: those of the first member's feasible targets, by their best score.
    Empty: no feasible target carries the key (and the group did not name it)."""
    table = cluster.table
    here = table.index.get(member.record.node)
    also = np.array([] if here is None else [here], dtype=np.int64)
    outcome = framework.what_if(info, table, also)
    if not outcome.status.ok:
        return f"member {member.record.key}: {outcome.status.plugin}: {outcome.status.reason}"
    rows = outcome.rows
    usable = np.isin(rows, outcome.feasible) & ~np.isin(rows, _rows_of(table.index, bad))
    ranked = rows[usable][np.argsort(-outcome.total[usable], kind="stable")]
    labels = table.label_column(domain.topology_key)
    values: list[str] = []
    for row in ranked.tolist():
        value = labels[row]
        if isinstance(value, str) and value and value not in values:
            values.append(value)
            if len(values) == MAX_DOMAINS:
                break
    if not values and domain.required:
        return f"no feasible node carries {domain.topology_key}, which pod group {member.record.key} requires"
    return values


def _rows_of(index: Mapping[str, int], names: Collection[str]) -> np.ndarray:
    """The rows of the bad nodes (a few names: no pass over every node)."""
    return np.array([index[name] for name in names if name in index], dtype=np.int64)


def _place_all(framework: Framework, cluster: ClusterState, key: GroupKey, members: list[Member],
               infos: list[PodInfo], bad: Collection[str], projection: Projection, metrics: MetricReader,
               within: np.ndarray | None) -> GangMove | str:
    """One attempt: the members in turn, each counted on its target for the next (hold the cluster lock, inside
    the simulation without the gang)."""
    table = cluster.table
    bad_rows = _rows_of(table.index, bad)
    already: dict[int, dict[str, float]] = {}  # target row -> metric -> what members placed there bring
    moves: list[tuple[Member, Move]] = []
    with contextlib.ExitStack() as placed:
        for member, info in zip(members, infos, strict=True):
            here = table.index.get(member.record.node)
            if here is None:
                return f"member {member.record.key}: node {member.record.node} left"
            outcome = framework.what_if(info, table, np.array([here], dtype=np.int64))
            if not outcome.status.ok:
                return f"member {member.record.key}: {outcome.status.plugin}: {outcome.status.reason}"
            rows, total = outcome.rows, outcome.total
            usable = np.isin(rows, outcome.feasible) & ~np.isin(rows, bad_rows)
            if within is not None:
                usable &= within[rows]
            candidates = np.flatnonzero(usable)
            if candidates.size == 0:
                found = ", ".join(f"{count} {reason}" for reason, count in sorted(outcome.rejections.items()))
                return f"member {member.record.key}: no node fits that is not bad ({found or 'none left'})"
            ranked = candidates[np.argsort(-total[candidates], kind="stable")]
            here_total = float(total[int(np.flatnonzero(rows == here)[0])])
            target, why = -1, ""
            for best in ranked.tolist():
                row = int(rows[best])
                # Back where it is: nothing moves onto the node (it is not bad, or it would not be usable).
                why = "" if row == here else (projection.refusal(info, table, metrics, here, row, already.get(row))
                                              or "")
                if not why:
                    target = best
                    break
            if target < 0:
                return (f"member {member.record.key}: every node that fits would then break a rule with the "
                        f"members' share ({why})")
            row = int(rows[target])
            if row != here:
                into = already.setdefault(row, {})
                for metric, share in projection.shares(info, table, metrics, here, row).items():
                    into[metric] = into.get(metric, 0.0) + share
            name = table.name(row)
            placed.enter_context(cluster.simulated(added=[(cluster.record_of(info, name), row)]))
            moves.append((member, Move(name, float(total[target]), here_total,
                                       here_fits=bool(np.isin(here, outcome.feasible)))))
    return GangMove(key, tuple(moves))
