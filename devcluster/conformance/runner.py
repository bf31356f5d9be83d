"""Runs upstream's [sig-scheduling] e2e specs against metrics-sched as the cluster's only scheduler.

The dev cluster gets what the specs need of a cluster and the default one leaves out: the ReplicationController
controller, the ServiceAccount and root-CA publisher controllers (the framework waits for each test namespace's
`default` ServiceAccount and `kube-root-ca.crt`, so no verification flag is turned off), and the node agent
(devcluster.node_agent: extended resources from capacity to allocatable, as a kubelet). No kube-scheduler runs;
metrics-sched serves `default-scheduler` (`replacesDefaultScheduler: true`) with no telemetry sources, so its
telemetry terms drop out and what is tested is the placement kube-scheduler's specs describe. The nodes are KWOK
nodes without GPUs, in three zones, each with the kube-system pods a real node runs (see SYSTEM_DAEMONS).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from devcluster.cluster import DevCluster, wait_until
from devcluster.conformance.build import ensure_e2e_binary
from devcluster.conformance.junit import RunReport, format_table, read_report
from devcluster.nodes import fleet
from devcluster.ports import free_port
from devcluster.progress import Progress
from devcluster.versions import load_versions

# The controllers the specs need beyond the dev cluster's own list (devcluster.cluster.CONTROLLERS).
EXTRA_CONTROLLERS = (
    "replicationcontroller-controller",  # SchedulerPreemption and the spreading specs make RCs
    "serviceaccount-controller",  # each namespace's `default` ServiceAccount, which the framework waits for
    "root-ca-certificate-publisher-controller",  # ... and its kube-root-ca.crt ConfigMap
)
# Upstream's selection for a conformance-style run of one SIG: no feature-gated, disruptive or flaky specs.
FOCUS = r"\[sig-scheduling\]"
SKIP = r"\[Feature:|\[Disruptive\]|\[Flaky\]"
NODES = 4
SCHEDULER = "metrics-sched"
# The per-node kube-system pods upstream's e2enode.WaitForTotalHealthy looks for on every schedulable node (its
# requiredPerNodePods: DaemonSet pods of a real cluster). Without them each SchedulerPriorities spec waits out the
# full minute of its BeforeEach (it ignores the error): ~5 minutes of a run.
SYSTEM_DAEMONS = ("kube-proxy", "fluentd-elasticsearch", "node-problem-detector")
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"
SYSTEM_BINDER = "conformance-setup"


@dataclass(frozen=True)
class Selection:
    focus: str = FOCUS
    skip: str = SKIP


def e2e_argv(binary: Path, kubeconfig: Path, report_dir: Path, selection: Selection,
             timeout: str = "90m") -> list[str]:
    """The e2e binary's command line: upstream's flags, the framework's defaults otherwise (provider skeleton)."""
    return [
        str(binary), f"--kubeconfig={kubeconfig}", f"--report-dir={report_dir}",
        f"--ginkgo.focus={selection.focus}", f"--ginkgo.skip={selection.skip}",
        f"--ginkgo.timeout={timeout}", "--ginkgo.no-color",
    ]


def scheduler_config(port: int) -> dict[str, Any]:
    return {
        "apiVersion": "metrics-sched.io/v1alpha1", "kind": "MetricsSchedulerConfiguration",
        "replacesDefaultScheduler": True,
        "profiles": [{"schedulerName": "default-scheduler"}],
        "leaderElection": {"leaderElect": False},
        "server": {"bindAddress": "127.0.0.1", "port": port, "insecure": True},
    }


def system_pods(nodes: Sequence[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod, binding): one pod of each SYSTEM_DAEMONS per node, requesting nothing (no spec's arithmetic of a
    node's requests changes), and the Binding that puts it on its node. Bound through the binding subresource, as
    the DaemonSet's pods are by a scheduler: the API server then sets PodScheduled, which the specs'
    WaitForStableCluster requires of every pod on a node (a pod created with spec.nodeName has no such condition).
    Their schedulerName is served by no scheduler, so metrics-sched leaves them alone."""
    out = []
    for node in nodes:
        for daemon in SYSTEM_DAEMONS:
            name = f"{daemon}-{node}"
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "kube-system", "labels": {"k8s-app": daemon}},
                   "spec": {"schedulerName": SYSTEM_BINDER, "priorityClassName": "system-node-critical",
                            "tolerations": [{"operator": "Exists"}],
                            "containers": [{"name": daemon, "image": PAUSE_IMAGE}]}}
            binding = {"apiVersion": "v1", "kind": "Binding",
                       "metadata": {"name": name, "namespace": "kube-system"},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
            out.append((pod, binding))
    return out


def _start_scheduler(cluster: DevCluster, progress: Callable[[str], None]) -> None:
    port = free_port()
    path = cluster.run_dir / "metrics-sched.yaml"
    path.write_text(yaml.safe_dump(scheduler_config(port)))
    progress("starting metrics-sched as default-scheduler")
    cluster.group.start(SCHEDULER, [sys.executable, "-m", "metrics_sched.app.cli", "run", "--config", str(path),
                                    "--kubeconfig", str(cluster.kubeconfig), "--identity", "conformance",
                                    "--log-format", "text"])
    wait_until(lambda: httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200, 60,
               "metrics-sched /readyz", lambda: cluster.group.check(SCHEDULER))


def run(selection: Selection, *, run_dir: Path | None = None, kubernetes: str | None = None,
        extra_args: Sequence[str] = ()) -> tuple[RunReport, Path]:
    """Builds what is missing, runs the specs; returns the report and the run directory (logs, report)."""
    progress = Progress("conformance")
    versions = load_versions(kubernetes=kubernetes)
    binary = ensure_e2e_binary(versions, progress)
    run_dir = (run_dir or Path(tempfile.mkdtemp(prefix="metrics-sched-conformance-"))).resolve()
    report_dir = run_dir / "report"
    shutil.rmtree(report_dir, ignore_errors=True)
    cluster = DevCluster(run_dir / "cluster", with_prometheus=False, with_emulator=False, dra_driver=False,
                         extra_controllers=EXTRA_CONTROLLERS, node_agent=True, kubernetes=kubernetes)
    with cluster:
        nodes = fleet(NODES, gpus_per_node=0, seed=1)
        cluster.add_nodes(nodes)
        with cluster.api() as api:
            for pod, binding in system_pods([node.name for node in nodes]):
                api.post("/api/v1/namespaces/kube-system/pods", pod)
                api.post(f"/api/v1/namespaces/kube-system/pods/{pod['metadata']['name']}/binding", binding)
        _start_scheduler(cluster, progress)
        argv = [*e2e_argv(binary, cluster.kubeconfig, report_dir, selection), *extra_args]
        log = run_dir / "e2e.log"
        progress(f"running the specs ({selection.focus} minus {selection.skip}); output in {log}")
        started = time.monotonic()
        with log.open("wb") as out:
            # The binary's exit code says what the report says; the report is read either way.
            subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=run_dir, check=False)
        progress(f"the specs ran in {time.monotonic() - started:.0f}s")
        cluster.group.check(SCHEDULER)  # a scheduler that died mid-run explains every failure after it
    return read_report(report_dir), run_dir


def main(selection: Selection, *, run_dir: Path | None = None, kubernetes: str | None = None,
         extra_args: Sequence[str] = ()) -> int:
    started = time.monotonic()
    report, used_dir = run(selection, run_dir=run_dir, kubernetes=kubernetes, extra_args=extra_args)
    print(format_table(report))
    print(f"conformance: {'PASSED' if report.ok else 'FAILED'} in {time.monotonic() - started:.0f}s; "
          f"logs and report in {used_dir}")
    return 0 if report.ok else 1


__all__ = ["EXTRA_CONTROLLERS", "FOCUS", "SKIP", "Selection", "e2e_argv", "main", "run", "scheduler_config",
           "system_pods"]
