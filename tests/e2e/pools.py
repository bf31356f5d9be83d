"""A private pool of fake nodes for one test: labelled and tainted so only that test's pods land there."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from devcluster import DevCluster, NodeSpec
from devcluster.nodes import node_ip

POOL_LABEL = "metrics-sched.test/pool"


@contextmanager
def node_pool(cluster: DevCluster, count: int, *, cpu: str = "1", memory: str = "8Gi", gpus: int | list[int] = 0,
              pods: int = 110, own_zones: int = 0) -> Iterator[tuple[str, list[NodeSpec]]]:
    """`own_zones`: that many zones named after the pool (no other node shares their domains), node i in
    zone i % own_zones; otherwise zone-0..2, shared with other pools."""
    pool = f"p{secrets.token_hex(3)}"
    base = 60000 + secrets.randbelow(5000) * 16
    gpu_list = gpus if isinstance(gpus, list) else [gpus] * count
    specs = [
        NodeSpec(name=f"{pool}-{i:02d}", internal_ip=node_ip(base + i), cpu=cpu, memory=memory, pods=pods,
                 gpus=gpu_list[i], labels={POOL_LABEL: pool, "topology.kubernetes.io/zone":
                                                 f"{pool}-zone-{i % own_zones}" if own_zones else f"zone-{i % 3}"},
                 taints=({"key": POOL_LABEL, "value": pool, "effect": "NoSchedule"},))
        for i in range(count)
    ]
    cluster.add_nodes(specs)
    try:
        yield pool, specs
    finally:
        cluster.remove_nodes([s.name for s in specs])


def in_pool(pool: str) -> dict[str, Any]:
    """Pod spec fields that target (and tolerate) the pool."""
    return {"nodeSelector": {POOL_LABEL: pool},
            "tolerations": [{"key": POOL_LABEL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}]}


@dataclass
class CaseCopy:
    """One seeded differential case's copy on one scheduler's side: its own pool of nodes, named after the test's
    prefix, the run, the case number and the scheduler ("kube" | "ms")."""

    prefix: ClassVar[str] = "d"
    case: dict[str, Any]
    scheduler: str
    run: str
    nodes: list[NodeSpec] = field(default_factory=list)

    @property
    def pool(self) -> str:
        return f"{self.prefix}{self.run}-{self.case['case']:03d}-{self.scheduler}"

    @property
    def names(self) -> list[str]:
        return [f"{self.pool}-{j}" for j in range(len(self.case["nodes"]))]


C = TypeVar("C", bound=CaseCopy)


def case_pairs(cases: Iterable[dict[str, Any]], schedulers: Sequence[str], copy: Callable[[dict[str, Any], str], C],
               cpu_milli: Callable[[Any], int], ip_base: int) -> list[dict[str, C]]:
    """Each case copied once per scheduler, each copy with its own pool of nodes (`case["nodes"]`, whose CPU in
    millicores `cpu_milli` reads), labelled and tainted with the pool so only that copy's pods land there."""
    pairs: list[dict[str, C]] = []
    serial = 0
    for case in cases:
        pair = {}
        for scheduler in schedulers:
            side = copy(case, scheduler)
            for name, node in zip(side.names, case["nodes"], strict=True):
                serial += 1
                side.nodes.append(NodeSpec(name=name, internal_ip=node_ip(ip_base + serial), cpu=f"{cpu_milli(node)}m",
                                           memory="8Gi", labels={POOL_LABEL: side.pool},
                                           taints=({"key": POOL_LABEL, "value": side.pool, "effect": "NoSchedule"},)))
            pair[scheduler] = side
        pairs.append(pair)
    return pairs
