"""The what-if before an eviction: where would the scheduler put this pod, and how much better is it there?

The pod is read again from the API (the state keeps no pod specs: their memory would be paid by every
scheduler, rebalancing or not) and parsed as a new pod with no node, as its controller's replacement would
be. The profile's own PreFilter → Filter → PreScore → Score then runs over the cluster (Framework.what_if),
with the pod's current node scored alongside the nodes it could move to, in one normalisation.

The victim still counts on its current node (resources, ports, affinity counts, measured load), and only
there: the other nodes are scored as if it arrived, its own node as if a second copy did. That bias
lowers only the current node's score, in the direction of moving; the margin absorbs it, and telemetry,
which makes a hot or loaded node score low, is what carries the decision. What the margin cannot absorb is
a pod whose own load makes its node bad: every target looks better without it. So the targets are taken in
order of score and each is checked with the pod's share of the rules' metrics moved onto it (projection.py):
the best one the rules would not then flag is the move; none, and the pod stays (no ping-pong).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from metrics_sched.framework.handle import MetricReader
from metrics_sched.framework.runtime import Framework
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.ports import KubeObject
from metrics_sched.rebalance.projection import Projection
from metrics_sched.state.cluster_state import ClusterState

__all__ = ["Move", "PodReader", "simulate", "without_node"]

_NAMED = 3  # refused targets named in a verdict's reason


class PodReader(Protocol):
    """The pod as the API has it now (PodWriter.get_pod satisfies it). Returns None if gone; raises ApiError."""

    def get_pod(self, namespace: str, name: str) -> KubeObject | None: ...


@dataclass(frozen=True)
class Move:
    target: str
    target_total: float
    here_total: float
    # Whether the pod's filters still admit its own node. A node the pod would no longer be placed on (a GPU
    # above the threshold) is left for any feasible node that is not bad itself, whatever the margin.
    here_fits: bool = True

    @property
    def gain(self) -> float:
        return self.target_total - self.here_total

    def words(self) -> str:
        words = f"{self.target} scores {self.target_total:.1f} vs {self.here_total:.1f} here ({self.gain:+.1f})"
        return words if self.here_fits else f"{words}; the pod's filters no longer admit this node"


def without_node(pod: KubeObject) -> dict[str, Any]:
    """The pod as its replacement would come: no spec.nodeName (shallow copies; the original is untouched)."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    return {**pod, "spec": {k: v for k, v in spec.items() if k != "nodeName"}}


def simulate(framework: Framework, cluster: ClusterState, pod: KubeObject, node: str,
             projection: Projection | None = None, metrics: MetricReader | None = None) -> Move | str:
    """The best node other than `node` for `pod` and both totals, or why there is none. With a projection (and
    the metrics it reads), a node the rules would flag once the pod's share moved there is no target."""
    info = parse_pod(without_node(pod))
    if info.parse_error:
        return info.parse_error
    with cluster.lock:
        table = cluster.table
        here = table.index.get(node)
        if here is None:
            return f"node {node} left"
        outcome = framework.what_if(info, table, np.array([here], dtype=np.int64))
        if not outcome.status.ok:
            return f"{outcome.status.plugin}: {outcome.status.reason}"
        rows, total = outcome.rows, outcome.total
        others = np.flatnonzero(np.isin(rows, outcome.feasible) & (rows != here))
        if others.size == 0:
            found = ", ".join(f"{count} {reason}" for reason, count in sorted(outcome.rejections.items()))
            return f"no other node fits ({found or 'no other node'})"
        # Best first; ties: the lowest row, so a plan repeats.
        ranked = others[np.argsort(-total[others], kind="stable")]
        here_total = float(total[int(np.flatnonzero(rows == here)[0])])
        refused: list[str] = []
        for best in ranked.tolist():
            why = (projection.refusal(info, table, metrics, here, int(rows[best]))
                   if projection is not None and metrics is not None else None)
            if why is None:
                return Move(table.name(int(rows[best])), float(total[best]), here_total,
                            here_fits=bool(np.isin(here, outcome.feasible)))
            if len(refused) < _NAMED:
                refused.append(f"{table.name(int(rows[best]))}: {why}")
        more = f" and {ranked.size - len(refused)} more" if ranked.size > len(refused) else ""
        return f"every node that fits would then break a rule with the pod's share ({'; '.join(refused)}{more})"


def short_of(move: Move, margin: float) -> str:
    """Why a move is not worth it: no node better by the margin."""
    return (f"no node better by {margin:g} points (best: {move.target} {move.target_total:.1f} "
            f"vs {move.here_total:.1f} here)")
