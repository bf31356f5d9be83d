"""A private pool of fake nodes for one test: labelled and tainted so only that test's pods land there."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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
