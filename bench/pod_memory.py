"""Memory of bound pods as the watch delivers them: 5,000 nodes (bench.core_bench's cluster) and N bound pods of
the shape KWOK leaves them in (Running, service-account volume, tolerations, the decision annotation), each
decoded from JSON, passed through the Reflector's KnownObjects and the event handlers, then a full decision
ring (10,000 records), then M pending pods of ours as the API server stores bench/pod_creator.py's (the
backlog an end-to-end run at 50,000 pods holds while the creator outruns the scheduler), queued through the
same path. `--child objects` also keeps every pod's whole object, as KnownObjects did before it kept
tombstones. One fresh process per mode; VmRSS / VmHWM in MB after each stage, and bytes per pod of the bound and
pending stages.

    python -m bench.pod_memory [--pods 50000] [--pending 20000]
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

ANNOTATION = ("#123 score 71.2, margin 0.4, 4800/5000 feasible; node_load_per_cpu=0.41 gpu_temperature=52 "
              "node_hourly_cost=3.2")  # StoredDecision.annotation()
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


def pending_pod(i: int, scheduler: str) -> dict[str, Any]:
    """bench/pod_creator.py's pod as the API server stores it (defaults and admission's tolerations added)."""
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": f"q-{i:06d}", "namespace": "bench-ms-resources-8337",
                     "uid": f"e27cfff7-9b12-47b6-982a-{i:012d}", "resourceVersion": str(900_000 + i),
                     "generation": 1, "creationTimestamp": "2026-12-02T00:58:36Z",
                     "labels": {"bench-chunk": str(i // 250)}},
        "spec": {"containers": [{"name": "c", "image": "registry.local/pause:3.10",
                                 "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}},
                                 "terminationMessagePath": "/dev/termination-log",
                                 "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
                 "restartPolicy": "Always", "terminationGracePeriodSeconds": 0, "dnsPolicy": "ClusterFirst",
                 "securityContext": {}, "schedulerName": scheduler,
                 "tolerations": [{"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute",
                                  "tolerationSeconds": 300} for t in ("not-ready", "unreachable")],
                 "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority"},
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def child(pods: int, keep_objects: bool, pending: int = 0) -> dict[str, Any]:
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

    def watched(pod: dict[str, Any]) -> None:
        obj = orjson.loads(orjson.dumps(pod))  # decoded, as from the watch
        for kind, delta in known.upsert(obj):
            handlers.on_pod_event(kind, delta)
        if keep_objects:
            kept.append(obj)

    for i in range(pods):
        watched(kwok_pod(i, f"node-{i % 5000:05d}"))
    gc.collect()
    stages["bound_pods"] = proc_status()
    results, state = realistic_results(20)
    ring = DecisionRing(10_000)
    for i in range(ring.size):
        ring.add(build_record(results[i % len(results)], state.table, config_hash="abc123def456"))
    gc.collect()
    stages["decision_ring_full"] = proc_status()
    scheduler_name = next(iter(handlers.scheduler_names))
    for i in range(pending):
        watched(pending_pod(i, scheduler_name))
    gc.collect()
    stages["pending_pods"] = proc_status()
    placed = len(harness.scheduler.state.pods)
    queued = sum(harness.scheduler.queue.lengths().values())
    harness.stop()
    per_pod = {"bound_bytes_per_pod": round((stages["bound_pods"]["VmRSS"] - stages["nodes"]["VmRSS"]) * 2**20 / pods)}
    if pending:
        per_pod["pending_bytes_per_pod"] = round(
            (stages["pending_pods"]["VmRSS"] - stages["decision_ring_full"]["VmRSS"]) * 2**20 / pending)
    return {"pods": pods, "pending": pending, "keep_objects": keep_objects, "pods_in_state": placed,
            "queued": queued, **per_pod, "stages": stages}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--pending", type=int, default=20_000)
    parser.add_argument("--child", choices=("tombstones", "objects"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.pods, args.child == "objects", args.pending)))
        return
    out = []
    for mode in ("tombstones", "objects"):
        done = subprocess.run([sys.executable, "-m", "bench.pod_memory", "--pods", str(args.pods), "--pending",
                               str(args.pending), "--child", mode],
                              capture_output=True, text=True, check=True, timeout=1800)
        out.append(json.loads(done.stdout))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
