"""DevCluster: etcd + kube-apiserver + kube-controller-manager + KWOK (+ kube-scheduler) + Prometheus + the
telemetry emulator + a test volume provisioner + a fake DRA driver for the GPU nodes.

Everything listens on free loopback ports; logs go to <run dir>/logs; `endpoints.json` and
`kubeconfig` in the run dir tell clients where things are. Used as a context manager (tests, demo,
benchmarks) or detached (`metrics-sched devcluster up` / `down`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from devcluster import custom_metrics_api, dra, pod_group_crd, prometheus
from devcluster.build import CLUSTER_BINARIES, ControlPlaneBinaries, ensure_built
from devcluster.certs import ClusterPKI, generate_pki
from devcluster.heartbeats import NodeHeartbeats
from devcluster.kubeapi import Credentials, KubeAPI, KubeAPIError, tls_context
from devcluster.nodes import NodeSpec, create_nodes, delete_nodes, fleet
from devcluster.ports import free_port, free_ports
from devcluster.processes import ProcessError, ProcessGroup, kill_leftovers, leftovers, tail
from devcluster.progress import Progress
from devcluster.versions import Versions

ENDPOINTS_FILE = "endpoints.json"
KUBECONFIG_FILE = "kubeconfig"

# The controllers the tests need, no more (each one costs start-up time, watches and writes). Not among them:
# taint-eviction-controller (node lifecycle taints a NotReady node NoExecute; nothing evicts its pods, so a
# test may take a node down and find its pods where they were), pod-garbage-collector-controller (it would
# delete the pods of a node a test removed), serviceaccount controllers (the ServiceAccount admission is off).
CONTROLLERS = (
    "persistentvolume-binder-controller",
    "persistentvolume-protection-controller",  # StorageObjectInUseProtection admission puts finalizers on PVs
    "persistentvolumeclaim-protection-controller",  # ... and on PVCs: only these controllers remove them
    "ephemeral-volume-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "job-controller",
    "replicaset-controller",
    "deployment-controller",
    "node-lifecycle-controller",
    # DRA: makes a pod's ResourceClaims from its ResourceClaimTemplates, records them in
    # pod.status.resourceClaimStatuses, and deallocates and deletes them when the pod is gone.
    "resourceclaim-controller",
)
# KWOK renews a Lease per node it manages (every quarter of this), which is what node lifecycle reads as the
# node's heartbeat.
NODE_LEASE_SECONDS = 40
# Nodes nobody renews a Lease for (some tests create nodes KWOK does not manage) turn Unknown and tainted
# unreachable after the grace period; 10 minutes outlasts any test, where upstream's 50 s would not.
NODE_MONITOR_GRACE = "10m"


class DevClusterError(RuntimeError):
    pass


def without_stage(stages: str, name: str) -> str:
    """KWOK's stage documents (YAML separated by `---` lines) without the one called `name`."""
    docs = stages.split("\n---\n")
    kept = [doc for doc in docs if (yaml.safe_load(doc) or {}).get("metadata", {}).get("name") != name]
    return "\n---\n".join(kept).rstrip("\n") + "\n"


@dataclass
class Endpoints:
    run_dir: str
    kubeconfig: str
    apiserver: str
    ca_file: str
    admin_token_file: str
    etcd: str
    kwok: str
    emulator: str | None = None
    emulator_tls: str | None = None  # the backend of the Custom Metrics APIServices
    prometheus: str | None = None
    cmdb: str | None = None
    cmdb_token_file: str | None = None
    kube_scheduler: str | None = None
    controller_manager: str | None = None
    versions: dict[str, str] = field(default_factory=dict)

    def write(self, run_dir: Path) -> Path:
        path = run_dir / ENDPOINTS_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path

    @classmethod
    def read(cls, run_dir: Path) -> Endpoints:
        return cls(**json.loads((run_dir / ENDPOINTS_FILE).read_text()))


def wait_until(check: Callable[[], bool], timeout: float, what: str,
               alive: Callable[[], None] | None = None) -> None:
    """Polls check() (connection errors count as "not yet") until true; `alive` raises if a process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        with contextlib.suppress(httpx.HTTPError, OSError, ValueError):
            if check():
                return
        time.sleep(0.1)
    raise DevClusterError(f"{what} not ready after {timeout:.0f}s")


# What telemetry_sources() asks Prometheus for (and, with recording_rules, the rules Prometheus evaluates).
PROMETHEUS_METRICS: tuple[dict[str, str], ...] = (
    {"name": "gpu_temperature", "preset": "dcgm_gpu_temp"},
    {"name": "gpu_utilisation", "preset": "dcgm_gpu_util"},
    {"name": "node_load_per_cpu", "preset": "node_load_per_cpu"},
    {"name": "node_hourly_cost", "preset": "opencost_node_hourly_cost"},
)


class DevCluster:
    def __init__(
        self,
        run_dir: Path | None = None,
        *,
        nodes: int = 0,
        gpus_per_node: int = 8,
        seed: int = 1,
        with_prometheus: bool = True,
        with_emulator: bool = True,
        with_kube_scheduler: bool = False,
        with_controller_manager: bool = True,
        scrape_interval: float = 2.0,
        detach: bool = False,
        quiet: bool = False,
        kubernetes: str | None = None,
        node_heartbeats: NodeHeartbeats | None = None,
        recording_rules: bool = False,
        dra_driver: bool = True,
        extra_controllers: tuple[str, ...] = (),
        node_agent: bool = False,
    ) -> None:
        self.owns_run_dir = run_dir is None
        self.run_dir = Path(run_dir or tempfile.mkdtemp(prefix="metrics-sched-")).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.initial_nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.seed = seed
        self.with_prometheus = with_prometheus
        self.with_emulator = with_emulator
        self.with_kube_scheduler = with_kube_scheduler
        # kube-controller-manager, KWOK's node Leases and the test provisioner come and go together.
        self.with_controller_manager = with_controller_manager
        self.scrape_interval = scrape_interval
        self.progress = Progress("devcluster", quiet=quiet)
        self.quiet = quiet
        # One of the versions deploy/local/versions.toml lists; None: $METRICS_SCHED_KUBERNETES, else its default.
        self.kubernetes = kubernetes
        # None: Leases only for node lifecycle (with the controller manager) and no periodic status updates;
        # given: what kubelets do (the benchmarks: the API server and the schedulers' node watches carry the
        # load a real cluster of this size puts on them).
        self.node_heartbeats = node_heartbeats
        # Prometheus loads the product's per-node recording rules and telemetry_sources() reads them.
        self.recording_rules = recording_rules
        # The fake DRA driver (devcluster.dra): DeviceClasses at start, each GPU node's ResourceSlices when
        # add_nodes creates it.
        self.dra_driver = dra_driver
        # Controllers beyond CONTROLLERS (upstream's e2e specs need e.g. the ReplicationController one).
        self.extra_controllers = extra_controllers
        # devcluster.node_agent: the parts of a kubelet KWOK does not do as a kubelet would (extended resources
        # from capacity to allocatable; terminating pods deleted by uid, in place of KWOK's pod-delete stage).
        self.node_agent = node_agent
        self.group = ProcessGroup(self.run_dir, detach=detach)
        self.endpoints: Endpoints | None = None
        self._etcd_dir: Path | None = None
        self._argv: dict[str, list[str]] = {}
        self._bins: ControlPlaneBinaries | None = None
        self._pki: ClusterPKI | None = None
        self.nodes: list[NodeSpec] = []

    @property
    def versions(self) -> Versions:
        """What the started cluster runs: version-specific expectations key on `versions.kubernetes_minor`."""
        if self._bins is None:
            raise DevClusterError("the dev cluster has not been started")
        return self._bins.versions

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> DevCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Endpoints:
        retriable = (ProcessError, DevClusterError, TimeoutError, httpx.HTTPError, KubeAPIError)
        for attempt in (1, 2):
            try:
                return self._start()
            except BaseException as exc:
                self.stop()
                if not isinstance(exc, retriable):
                    raise
                if attempt == 2:
                    raise DevClusterError(f"dev cluster failed to start: {type(exc).__name__}: {exc}") from exc
                # Free ports are picked before the processes bind them; another process can take one in
                # between. Start again on fresh ports, once, saying why.
                self.progress(f"start failed ({type(exc).__name__}: {exc}); retrying once on fresh ports")
                self.nodes = []
        raise AssertionError("unreachable")

    def _start(self) -> Endpoints:
        # Only what this cluster starts: a demo needs neither kube-scheduler nor helm (start_kube_scheduler
        # builds it when a test asks for it).
        need = set(CLUSTER_BINARIES) | ({"kube-scheduler"} if self.with_kube_scheduler else set())
        if not self.with_controller_manager:
            need.discard("kube-controller-manager")
        self._bins = ensure_built(quiet=self.quiet, kubernetes=self.kubernetes, need=need)
        # The emulator serves metrics.k8s.io and the Custom Metrics APIs with the same certificate, under its
        # Service's name.
        self._pki = pki = generate_pki(self.run_dir / "pki",
                                       hosts=("127.0.0.1", "localhost", custom_metrics_api.SERVICE_HOST))
        admin_token = secrets.token_urlsafe(32)
        token_file = self.run_dir / "admin-token"
        token_file.write_text(admin_token)
        token_file.chmod(0o600)
        tokens_csv = self.run_dir / "tokens.csv"
        tokens_csv.write_text(f'{admin_token},admin,admin-uid,"system:masters"\n')
        tokens_csv.chmod(0o600)

        etcd_client, etcd_peer, apiserver_port, kwok_port, kcm_port = free_ports(5)
        self._start_etcd(etcd_client, etcd_peer)
        apiserver = f"https://127.0.0.1:{apiserver_port}"
        self._start_apiserver(apiserver_port, f"http://127.0.0.1:{etcd_client}", pki, tokens_csv)
        kubeconfig = self._write_kubeconfig(apiserver, pki.ca_cert, admin_token)
        with self.api() as api:
            pod_group_crd.install(api)  # gangs: scheduler-plugins' PodGroup (Coscheduling)
            if self.dra_driver:
                dra.install_device_classes(api)
        self._start_kwok(kubeconfig, kwok_port)

        self.endpoints = Endpoints(
            run_dir=str(self.run_dir), kubeconfig=str(kubeconfig), apiserver=apiserver,
            ca_file=str(pki.ca_cert), admin_token_file=str(token_file),
            etcd=f"http://127.0.0.1:{etcd_client}", kwok=f"http://127.0.0.1:{kwok_port}",
            versions={"kubernetes": self._bins.versions.kubernetes, "etcd": self._bins.versions.etcd,
                      "kwok": self._bins.versions.kwok},
        )
        if self.with_controller_manager:
            self._start_controller_manager(kubeconfig, kcm_port)
            self._start_provisioner(kubeconfig)
        if self.node_agent:
            self.progress("starting the node agent")
            self.group.start("node-agent", [sys.executable, "-m", "devcluster.node_agent",
                                            "--kubeconfig", str(kubeconfig)])
            self.group.check("node-agent")
        if self.with_emulator:
            self._start_emulator(kubeconfig)
        if self.with_prometheus:
            self.start_prometheus()
        if self.with_kube_scheduler:
            self.start_kube_scheduler()
        if self.initial_nodes:
            self.add_nodes(fleet(self.initial_nodes, gpus_per_node=self.gpus_per_node, seed=self.seed))
        self.endpoints.write(self.run_dir)
        self.progress(f"ready: {self.run_dir / ENDPOINTS_FILE}")
        return self.endpoints

    def stop(self) -> None:
        self.group.stop_all()
        # Anything a child forked and left behind is found through the environment marker.
        kill_leftovers(self.run_dir)
        if self._etcd_dir is not None:
            shutil.rmtree(self._etcd_dir, ignore_errors=True)
        self.endpoints = None

    def leftovers(self) -> list[tuple[int, str]]:
        return leftovers(self.run_dir)

    # -- components ------------------------------------------------------------------------------
    def _alive(self, name: str) -> Callable[[], None]:
        return lambda: self.group.check(name)

    def _start_etcd(self, client_port: int, peer_port: int) -> None:
        assert self._bins is not None
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.run_dir
        self._etcd_dir = Path(tempfile.mkdtemp(prefix=f"{self.run_dir.name}-etcd-", dir=base))
        client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        argv = [
            str(self._bins.etcd), "--name=devcluster", f"--data-dir={self._etcd_dir}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=devcluster={peer}", "--unsafe-no-fsync=true",
            "--quota-backend-bytes=8589934592", "--log-level=warn",
            "--snapshot-count=100000", "--auto-compaction-retention=5m",
        ]
        self.progress("starting etcd")
        self._argv["etcd"] = argv
        self.group.start("etcd", argv)
        wait_until(lambda: httpx.get(f"{client}/health", timeout=1).json().get("health") == "true",
              30, "etcd", self._alive("etcd"))

    def _start_apiserver(self, port: int, etcd: str, pki: ClusterPKI, tokens_csv: Path) -> None:
        assert self._bins is not None
        argv = [
            str(self._bins.kube_apiserver),
            f"--etcd-servers={etcd}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--token-auth-file={tokens_csv}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_public_key}",
            f"--service-account-signing-key-file={pki.sa_private_key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            # No ServiceAccount admission: no controller creates default ServiceAccounts (not needed here). No
            # TaintNodesByCondition: a node is created Ready, and without the not-ready taint that admission
            # adds (node lifecycle would lift it a moment later) it is schedulable the moment add_nodes returns.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            # A single-tenant loopback cluster: no flow control between our own clients.
            "--max-requests-inflight=0", "--max-mutating-requests-inflight=0",
            "--enable-priority-and-fairness=false",
            # A collection (a namespace's pods, a test run's nodes by label) is deleted one object after the other
            # by default (1 worker): a differential test's clean-up of ~1,400 pods and nodes took 9-14 s.
            "--delete-collection-workers=8",
            f"--cert-dir={self.run_dir / 'apiserver-certs'}",
            "--profiling=false",
            # Workload and PodGroup (gang scheduling): off by default, and served under a different
            # scheduling.k8s.io version (behind different gates) by each Kubernetes minor.
            *self._bins.versions.workload_api.apiserver_flags(),
        ]
        self._argv["kube-apiserver"] = argv
        self.progress("starting kube-apiserver")
        self._launch_apiserver()

    def _launch_apiserver(self) -> None:
        self.group.start("kube-apiserver", self._argv["kube-apiserver"])
        port = next(a.split("=", 1)[1] for a in self._argv["kube-apiserver"] if a.startswith("--secure-port="))
        assert self._pki is not None
        token = (self.run_dir / "admin-token").read_text()

        def ready() -> bool:
            assert self._pki is not None
            resp = httpx.get(f"https://127.0.0.1:{port}/readyz", verify=tls_context(self._pki.ca_cert),
                             headers={"Authorization": f"Bearer {token}"}, timeout=2)
            return resp.status_code == 200

        wait_until(ready, 120, "kube-apiserver /readyz", self._alive("kube-apiserver"))

    def restart_apiserver(self, down_for: float = 0.0) -> None:
        """Stops and restarts kube-apiserver on the same port (tests of watch recovery)."""
        self.group.stop("kube-apiserver")
        if down_for:
            time.sleep(down_for)
        self._launch_apiserver()

    def _write_kubeconfig(self, server: str, ca: Path, token: str) -> Path:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "devcluster",
            "clusters": [{"name": "devcluster", "cluster": {"server": server, "certificate-authority": str(ca)}}],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": "admin"}}],
        }
        path = self.run_dir / KUBECONFIG_FILE
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def _start_kwok(self, kubeconfig: Path, port: int) -> None:
        assert self._bins is not None
        heartbeats = self.node_heartbeats
        lease_seconds = NODE_LEASE_SECONDS if self.with_controller_manager else 0
        options = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
            "options": {
                "manageNodesWithAnnotationSelector": "kwok.x-k8s.io/node=fake",
                "cidr": "10.0.0.0/8",
                "nodeIP": "10.239.255.254",
                # Without node_heartbeats, Leases only when node lifecycle reads them (renewals cost CPU).
                "nodeLeaseDurationSeconds": heartbeats.lease_duration_seconds if heartbeats else lease_seconds,
                # A config file gets no defaults: 0 here is refused.
                "nodeLeaseParallelism": heartbeats.lease_parallelism if heartbeats else 16,
                "podPlayStageParallelism": 16,
                "nodePlayStageParallelism": 16,
                "enableCRDs": [],
            },
        }
        config = self.run_dir / "kwok.yaml"
        stages = self._bins.kwok_stages.read_text()
        if self.node_agent:
            # The node agent deletes terminating pods itself, by uid (see devcluster.node_agent).
            stages = without_stage(stages, "pod-delete")
        stages += f"---\n{heartbeats.status_stage()}" if heartbeats else ""
        config.write_text(yaml.safe_dump(options) + "---\n" + stages)
        argv = [str(self._bins.kwok), f"--kubeconfig={kubeconfig}", f"--config={config}",
                f"--server-address=127.0.0.1:{port}"]
        if heartbeats:  # KWOK logs every renewal and status patch at INFO: 500 lines/s at 5,000 nodes
            argv.append("--v=WARN")
        self.progress("starting kwok")
        self.group.start("kwok", argv)
        wait_until(lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200,
              30, "kwok /healthz", self._alive("kwok"))

    def _start_controller_manager(self, kubeconfig: Path, port: int) -> None:
        assert self.endpoints is not None and self._bins is not None and self._pki is not None
        argv = [
            str(self._bins.kube_controller_manager), f"--kubeconfig={kubeconfig}",
            f"--controllers={','.join(CONTROLLERS + self.extra_controllers)}",
            # The admin token for every controller: no per-controller ServiceAccounts (nothing makes them).
            "--use-service-account-credentials=false",
            "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--tls-cert-file={self._pki.serving_cert}", f"--tls-private-key-file={self._pki.serving_key}",
            # The claim/volume resync: an unbound Immediate claim only looks for a new PV on it (upstream 15 s).
            "--pvclaimbinder-sync-period=1s",
            f"--node-monitor-grace-period={NODE_MONITOR_GRACE}",
            # Upstream's 20 QPS would make every namespace deletion (a LIST and a DELETE per resource type)
            # take seconds; this is a single-tenant loopback cluster.
            "--kube-api-qps=500", "--kube-api-burst=1000",
            "--profiling=false",
        ]
        self.progress("starting kube-controller-manager")
        self.group.start("kube-controller-manager", argv)
        url = f"https://127.0.0.1:{port}"
        verify = tls_context(self._pki.ca_cert)
        wait_until(lambda: httpx.get(f"{url}/healthz", verify=verify, timeout=1).status_code == 200, 60,
                   "kube-controller-manager", self._alive("kube-controller-manager"))
        self.endpoints.controller_manager = url

    def _start_provisioner(self, kubeconfig: Path) -> None:
        """The test provisioner of devcluster.provisioner (it needs the PV binder: it acts on the claims the PV
        controller hands to it)."""
        self.progress("starting the test volume provisioner")
        self.group.start("provisioner", [sys.executable, "-m", "devcluster.provisioner",
                                         "--kubeconfig", str(kubeconfig)])
        self.group.check("provisioner")

    def _start_emulator(self, kubeconfig: Path) -> None:
        assert self.endpoints is not None and self._pki is not None
        port, tls_port = free_ports(2)
        token_file = self.run_dir / "cmdb-token"
        token_file.write_text(secrets.token_hex(20))
        token_file.chmod(0o600)
        argv = [sys.executable, "-m", "devcluster.emulator", "--host", "127.0.0.1",
                "--port", str(port), "--seed", str(self.seed),
                "--cmdb-token-file", str(token_file), "--tls-port", str(tls_port),
                "--tls-cert-file", str(self._pki.serving_cert), "--tls-key-file", str(self._pki.serving_key)]
        self.progress("starting telemetry emulator")
        self.group.start("emulator", argv)
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: httpx.get(f"{url}/healthz", timeout=1).status_code == 200, 30, "emulator",
              self._alive("emulator"))
        self.endpoints.emulator = url
        self.endpoints.cmdb = f"{url}/api/dcim/devices/"
        self.endpoints.cmdb_token_file = str(token_file)
        self.endpoints.emulator_tls = f"https://127.0.0.1:{tls_port}"
        self.progress("registering the metrics.k8s.io and Custom Metrics APIServices")
        with self.api() as api:
            custom_metrics_api.install(api, tls_port, self._pki.ca_cert)

    def start_prometheus(self) -> str:
        """Starts (or restarts, on the same port and data) Debian's Prometheus."""
        assert self.endpoints is not None and self.endpoints.emulator is not None
        directory = self.run_dir / "prometheus"
        directory.mkdir(exist_ok=True)
        url = self.endpoints.prometheus or f"http://127.0.0.1:{free_port()}"
        emulator = self.endpoints.emulator.removeprefix("http://")
        recorded = {m["preset"] for m in PROMETHEUS_METRICS} if self.recording_rules else None
        config = prometheus.write_config(directory, emulator, self.scrape_interval, recorded)
        self.progress("starting prometheus")
        self.group.start("prometheus", prometheus.argv(directory, url.removeprefix("http://"), config))
        wait_until(lambda: httpx.get(f"{url}/-/ready", timeout=1).status_code == 200, 60, "prometheus",
              self._alive("prometheus"))
        self.endpoints.prometheus = url
        return url

    def stop_prometheus(self) -> None:
        self.group.stop("prometheus")

    def add_scrape_target(self, name: str, address: str, labels: dict[str, str] | None = None) -> None:
        prometheus.add_target(self.run_dir / "prometheus", name, address, labels)

    def remove_scrape_target(self, name: str) -> None:
        prometheus.remove_target(self.run_dir / "prometheus", name)

    def start_kube_scheduler(
        self, *, qps: float = 50, burst: int = 100, percentage_of_nodes_to_score: int | None = None,
        name: str = "kube-scheduler", profile: dict[str, Any] | None = None, feature_gates: tuple[str, ...] = (),
        leader_election: dict[str, Any] | None = None,
    ) -> str:
        """The real kube-scheduler; QPS 50/burst 100 are its defaults. Without `profile` it runs its default
        profile (`default-scheduler`); a profile (schedulerName, plugins, pluginConfig) replaces it.
        `feature_gates` are turned on (a flag only: KubeSchedulerConfiguration has no field for them).
        `leader_election`: its leaderElection section (default: none, it schedules at once)."""
        assert self.endpoints is not None and self._bins is not None and self._pki is not None
        ensure_built(quiet=self.quiet, kubernetes=self.kubernetes, need={"kube-scheduler"})  # a file check once built
        port = free_port()
        config: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": self.endpoints.kubeconfig, "qps": qps, "burst": burst},
            "leaderElection": leader_election or {"leaderElect": False},
        }
        if profile is not None:
            config["profiles"] = [profile]
        if percentage_of_nodes_to_score is not None:
            config["percentageOfNodesToScore"] = percentage_of_nodes_to_score
        path = self.run_dir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        argv = [str(self._bins.kube_scheduler), f"--config={path}", "--bind-address=127.0.0.1",
                f"--secure-port={port}", f"--tls-cert-file={self._pki.serving_cert}",
                f"--tls-private-key-file={self._pki.serving_key}"]
        if feature_gates:
            argv.append("--feature-gates=" + ",".join(f"{gate}=true" for gate in feature_gates))
        self.progress(f"starting {name}")
        self.group.start(name, argv)
        url = f"https://127.0.0.1:{port}"
        verify = tls_context(self._pki.ca_cert)
        wait_until(lambda: httpx.get(f"{url}/healthz", verify=verify, timeout=1).status_code == 200, 60, name,
              self._alive(name))
        self.endpoints.kube_scheduler = url
        return url

    def stop_kube_scheduler(self, name: str = "kube-scheduler") -> None:
        self.group.stop(name)
        if self.endpoints is not None:
            self.endpoints.kube_scheduler = None

    # -- clients and helpers ---------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.run_dir / KUBECONFIG_FILE

    def api(self) -> KubeAPI:
        return KubeAPI(Credentials.from_kubeconfig(self.kubeconfig))

    def emulator(self) -> Any:
        from devcluster.emulator import EmulatorControl

        assert self.endpoints is not None and self.endpoints.emulator is not None
        return EmulatorControl(self.endpoints.emulator)

    def add_nodes(self, specs: Sequence[NodeSpec]) -> None:
        started = time.monotonic()
        with self.api() as api:
            uids = create_nodes(api, specs, progress=self.progress)
            if self.dra_driver:
                gpus = [dra.node_gpus(s, self.seed, uids[s.name]) for s in specs]
                dra.publish(api, [g for g in gpus if g is not None])
        if self.endpoints is not None and self.endpoints.emulator:
            with self.emulator() as emulator:
                emulator.register_nodes([s.registration() for s in specs])
        known = {n.name for n in specs}
        self.nodes = [n for n in self.nodes if n.name not in known] + list(specs)
        self.progress(f"{len(specs)} nodes created in {time.monotonic() - started:.1f}s")

    def remove_nodes(self, names: Sequence[str]) -> None:
        with self.api() as api:
            delete_nodes(api, names)
            if self.dra_driver:
                dra.unpublish(api, names)
        if self.endpoints is not None and self.endpoints.emulator:
            with self.emulator() as emulator:
                for name in names:
                    emulator.remove_node(name)
        self.nodes = [n for n in self.nodes if n.name not in set(names)]

    def telemetry_sources(self, *, interval: float = 5.0, prometheus: bool = True, cmdb: bool = True,
                          metrics_server: bool = True) -> list[dict[str, Any]]:
        """Scheduler `sources:` entries reading this cluster's Prometheus, CMDB and metrics API."""
        assert self.endpoints is not None
        out: list[dict[str, Any]] = []
        if prometheus and self.endpoints.prometheus:
            out.append({
                "name": "prometheus", "type": "prometheus", "url": self.endpoints.prometheus, "interval": interval,
                "recordingRules": self.recording_rules,
                "metrics": [dict(m) for m in PROMETHEUS_METRICS],
            })
        if cmdb and self.endpoints.cmdb:
            out.append({"name": "cmdb", "type": "cmdb", "preset": "netbox", "url": self.endpoints.cmdb,
                        "interval": interval, "auth": {"tokenFile": self.endpoints.cmdb_token_file}})
        if metrics_server:
            out.append({"name": "metrics-server", "type": "metrics-server", "interval": interval})
        return out

    def log_tail(self, name: str, lines: int = 40) -> str:
        return tail(self.run_dir / "logs" / f"{name}.log", lines)


def down(run_dir: Path) -> list[tuple[int, str]]:
    """Stops every process a detached `devcluster up` started in run_dir; returns what it stopped."""
    stopped = kill_leftovers(run_dir)
    for leftover in Path("/dev/shm").glob(f"{run_dir.name}-etcd-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    return stopped
