"""DRA pods in the core bench: decisions/s and latency at 5,000 nodes x 8 GPUs published as ResourceSlices, next to
the plain case measured in the same process (issue 43 item 5).

The cluster is core_bench's (every built-in plugin, heterogeneous nodes, telemetry); each node also publishes one
ResourceSlice of 8 GPUs (driver gpu.nvidia.com, attributes as NVIDIA's driver names them) and one DeviceClass
selects them. Each DRA pod has its own ResourceClaim for one GPU (ExactCount 1, a CEL selector on the product name
besides the class's), created before the pod, as the resource-claim controller makes them from a template. Claims
are written through a writer that answers at once (the core alone, no API server), so PreBind costs what the plugin
does, not a round trip. Reported per case: decisions/s over the measured decisions, p50 and p99, and for the DRA
case the ratio to the plain case of the same run. The 2-core machine is noisy: `--repeat` runs alternate the cases
and the spread is reported.

    python -m bench.dra_bench [--nodes 5000] [--decisions 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bench.core_bench import CORE_CONFIG, cluster, make_pod, run_decisions
from bench.scenario import Harness, pod_object
from metrics_sched.plugins.dynamic_resources.index import CLAIMS, CLASSES, SLICES

DRIVER = "gpu.nvidia.com"
NAMESPACE = "bench"


def say(message: str) -> None:
    print(f"[dra] {message}", file=sys.stderr, flush=True)


class NullClaimWriter:
    """Answers every claim write at once with the claim as written (a fresh resourceVersion)."""

    def __init__(self) -> None:
        self._rv = itertools.count(1_000_000)
        self.writes = 0

    def _written(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        self.writes += 1
        body = copy.deepcopy(dict(claim))
        body.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
        return body

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def update_claim(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        return self._written(claim)

    def update_claim_status(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        return self._written(claim)

    def patch_claim_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def create_claim(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        body = self._written(claim)
        body["metadata"]["name"] = f"{body['metadata'].pop('generateName', 'claim-')}{self.writes}"
        body["metadata"]["uid"] = f"created-{self.writes}"
        return body

    def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        return None

    def set_extended_resource_claim_status(self, namespace: str, pod: str, status: Mapping[str, Any]) -> None:
        return None


def gpu_slice(node: str, devices: int) -> dict[str, Any]:
    gpus = [{"name": f"gpu-{i}", "attributes": {
        "type": {"string": "gpu"}, "index": {"int": i}, "uuid": {"string": f"GPU-{node}-{i}"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"}, "driverVersion": {"version": "580.95.5"}},
        "capacity": {"memory": {"value": "80Gi"}}} for i in range(devices)]
    return {"metadata": {"name": f"{node}-{DRIVER}", "uid": f"slice-{node}", "resourceVersion": "1"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                  "resourceSliceCount": 1}, "devices": gpus}}


DEVICE_CLASS = {"metadata": {"name": DRIVER, "uid": "class-gpu", "resourceVersion": "1"},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}" && '
                                                              f'device.attributes["{DRIVER}"].type == "gpu"'}}]}}


def claim(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"claim-{i:06d}", "namespace": NAMESPACE, "uid": f"claim-uid-{i}",
                         "resourceVersion": "1"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1,
                "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].productName.startsWith('
                                                     '"NVIDIA H100")'}}]}}]}},
            "status": {}}


def dra_pod(i: int) -> dict[str, Any]:
    pod = pod_object(f"d-{i:06d}", cpu="1", memory="4Gi")
    pod["metadata"]["namespace"] = NAMESPACE
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"claim-{i:06d}"}]
    return pod


def with_devices(harness: Harness, nodes: int, devices: int, pods: int) -> None:
    """The slices, the class and the pods' claims, delivered as their watches would."""
    on = harness.scheduler.handlers.on_object_event
    writer = NullClaimWriter()
    for framework in harness.scheduler.frameworks.values():
        framework.handle.claim_writer = writer
    on(CLASSES, "ADDED", DEVICE_CLASS)
    for i in range(nodes):
        on(SLICES, "ADDED", gpu_slice(f"node-{i:05d}", devices))
    for i in range(pods):
        on(CLAIMS, "ADDED", claim(i))
    for kind in (SLICES, CLASSES, CLAIMS):
        harness.scheduler.handlers.on_synced(kind.name)


def measure(case: str, nodes: int, devices: int, decisions: int, warmup: int, seed: int) -> dict[str, Any]:
    harness = cluster(nodes, seed, config=CORE_CONFIG)
    try:
        total = decisions + warmup
        if case == "dra":
            with_devices(harness, nodes, devices, total)
            pods = [dra_pod(i) for i in range(total)]
        else:
            pods = [make_pod(i) for i in range(total)]
        started = time.perf_counter()
        stats = run_decisions(harness, pods, warmup)
        stats["seconds"] = round(time.perf_counter() - started, 2)
        return stats
    finally:
        harness.stop()


def run(nodes: int, devices: int, decisions: int, warmup: int, repeat: int, seed: int = 0) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    for r in range(repeat):
        order: Sequence[str] = ("plain", "dra") if r % 2 == 0 else ("dra", "plain")
        row: dict[str, Any] = {}
        for case in order:
            say(f"round {r + 1}/{repeat}: {case}, {nodes} nodes x {devices} GPUs, {decisions} decisions")
            row[case] = measure(case, nodes, devices, decisions, warmup, seed)
            say(f"  {row[case]['decisions_per_second']} decisions/s, p99 {row[case]['p99_ms']} ms, "
                f"unscheduled {row[case]['unscheduled']}")
        row["ratio"] = round(row["dra"]["decisions_per_second"] / row["plain"]["decisions_per_second"], 3)
        rounds.append(row)
    ratios = [r["ratio"] for r in rounds]
    summary = {
        "nodes": nodes, "devices_per_node": devices, "decisions": decisions,
        "plain_decisions_per_second": [r["plain"]["decisions_per_second"] for r in rounds],
        "dra_decisions_per_second": [r["dra"]["decisions_per_second"] for r in rounds],
        "plain_p99_ms": [r["plain"]["p99_ms"] for r in rounds],
        "dra_p99_ms": [r["dra"]["p99_ms"] for r in rounds],
        "dra_over_plain": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "dra_unscheduled": [r["dra"]["unscheduled"] for r in rounds],
    }
    return {"summary": summary, "rounds": rounds}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--decisions", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    result = run(args.nodes, args.devices, args.decisions, args.warmup, args.repeat)
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
