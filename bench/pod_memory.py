"""Memory of bound pods as the watch delivers them: 5,000 nodes (bench.core_bench's cluster) and N bound pods of
the shape KWOK leaves them in (Running, service-account volume, tolerations, the decision annotation), each
decoded from JSON, passed through the Reflector's KnownObjects and the event handlers, then a full decision
ring (10,000 records). `--child objects` also keeps every pod's whole object, as KnownObjects did before it
kept tombstones. One fresh process per mode; VmRSS / VmHWM in MB after each stage.

    python -m bench.pod_memory [--pods 50000]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
from typing import Any

import orjson

from adapters.kubernetes.known_objects import KnownObjects

ANNOTATION = ("#123 score 71.2; NodeResourcesFit 88; NodeLoad 63 (node_load_per_cpu=0.41); GPUTemperature 70 "
              "(gpu_temperature=52); Cost 55 (node_hourly_cost=3.2); margin 0.4 over runner-up; "
              "4800/5000 nodes feasible")
CONDITION = {"status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-12-01T18:00:01Z"}


def kwok_pod(i: int, node: str) -> dict[str, Any]:
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": f"p-{i:06d}", "namespace": "bench", "uid": f"5f0c3c1e-2b1d-4f7e-9a53-{i:012d}",
                     "resourceVersion": str(100_000 + i), "creationTimestamp": "2026-12-01T18:00:00Z",
                     "annotations": {"metrics-sched.io/decision": ANNOTATION}},
        "spec": {"schedulerName": "ms-all", "terminationGracePeriodSeconds": 0, "nodeName": node,
                 "containers": [{"name": "c", "image": "registry.local/pause:3.10",
                                 "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}},
                                 "terminationMessagePath": "/dev/termination-log",
                                 "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
                                 "volumeMounts": [{"name": "kube-api-access-abcde", "readOnly": True,
                                                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
                 "volumes": [{"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
                     {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                     {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                     {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                         "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
                 "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
                 "serviceAccount": "default", "securityContext": {}, "priority": 0, "enableServiceLinks": True,
                 "preemptionPolicy": "PreemptLowerPriority",
                 "tolerations": [{"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute",
                                  "tolerationSeconds": 300} for t in ("not-ready", "unreachable")]},
        "status": {"phase": "Running", "hostIP": "10.0.4.210", "podIP": "10.0.4.211",
                   "startTime": "2026-12-01T18:00:01Z", "qosClass": "Burstable",
                   "conditions": [{"type": t, **CONDITION} for t in ("PodScheduled", "Initialized", "Ready")],
                   "containerStatuses": [{"name": "c", "state": {"running": {"startedAt": "2026-12-01T18:00:02Z"}},
                                          "ready": True, "restartCount": 0, "image": "registry.local/pause:3.10",
                                          "imageID": "", "started": True}]},
    }


def child(pods: int, keep_objects: bool) -> dict[str, Any]:
    from bench.core_bench import cluster, proc_status
    from metrics_sched.audit import DecisionRing, build_record
    from tests.unit.test_bounded_memory import realistic_results

    stages = {"imported": proc_status()}
    harness = cluster(5000)
    gc.collect()
    stages["nodes"] = proc_status()
    handlers = harness.scheduler.handlers
    known = KnownObjects()
    kept = []
    for i in range(pods):
        obj = orjson.loads(orjson.dumps(kwok_pod(i, f"node-{i % 5000:05d}")))  # decoded, as from the watch
        for kind, delta in known.upsert(obj):
            handlers.on_pod_event(kind, delta)
        if keep_objects:
            kept.append(obj)
    gc.collect()
    stages["bound_pods"] = proc_status()
    results, state = realistic_results(20)
    ring = DecisionRing(10_000)
    for i in range(ring.size):
        ring.add(build_record(results[i % len(results)], state.table, config_hash="abc123def456"))
    gc.collect()
    stages["decision_ring_full"] = proc_status()
    placed = len(harness.scheduler.state.pods)
    harness.stop()
    return {"pods": pods, "keep_objects": keep_objects, "pods_in_state": placed, "stages": stages}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--child", choices=("tombstones", "objects"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.pods, args.child == "objects")))
        return
    out = []
    for mode in ("tombstones", "objects"):
        done = subprocess.run([sys.executable, "-m", "bench.pod_memory", "--pods", str(args.pods), "--child", mode],
                              capture_output=True, text=True, check=True, timeout=1800)
        out.append(json.loads(done.stdout))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
