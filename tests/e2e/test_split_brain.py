"""Split brain (issue 14 item 3): two replicas; the leader reaches the API server through a latency proxy,
then its requests stall for longer than the lease (a partition, as far as it can tell). The standby takes
over. No bind of the old leader may land after the new leader's first bind.

What proves it: a watch on the namespace's pods sees the binds in the order the API server committed them.
Each bind carries its decision's id (the `metrics-sched.io/decision` annotation, copied from the Binding),
and each replica logs its decisions with their ids: so every bind is the old leader's or the new one's, and
the last of the old leader's must come before the first of the new one's. (Decision ids count per process:
the old leader makes more decisions before the partition than the new one makes in the whole test, so an
id names one replica.)
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube
from tests.e2e.latency_proxy import LatencyProxy
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import SchedulerProcess, leader_of, start_scheduler, write_config

pytestmark = pytest.mark.e2e

ANNOTATION = "metrics-sched.io/decision"
# Short leases keep the test short: the old leader stops starting binds 1.75 s after its last renewal
# (renewDeadline - bind timeout, (3 - 0.5) / 2 = 1.25 s) and the standby takes over 4 s after the last
# renewal it saw.
ELECTION = {"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "0.5s"}
WARM_UP = 60  # pods the leader binds first: its decision ids then exceed any the new leader reaches
STALL = 8.0  # seconds each request of the old leader is held once "partitioned": twice the lease


@dataclass
class BindEvent:
    pod: str
    decision: int


def proxied_kubeconfig(cluster: DevCluster, proxy: LatencyProxy, directory: Path) -> Path:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path = directory / "kubeconfig-proxied"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def decisions(proc: SchedulerProcess) -> set[tuple[str, int]]:
    """(pod, decision id) of every decision the replica logged."""
    found = set()
    for line in proc.managed.log.read_text().splitlines():
        if line.startswith("{") and '"decision_id"' in line:
            entry = json.loads(line)
            found.add((entry["pod"], int(entry["decision_id"])))
    return found


class BindWatch:
    """The namespace's binds in commit order, from one watch stream."""

    def __init__(self, api: KubeAPI, namespace: str) -> None:
        self.binds: list[BindEvent] = []
        self._seen: set[str] = set()
        self._stop = threading.Event()
        listed = api.get(f"/api/v1/namespaces/{namespace}/pods")
        self._path = f"/api/v1/namespaces/{namespace}/pods"
        self._rv = listed["metadata"]["resourceVersion"]
        self._api = api
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        params = {"watch": "true", "resourceVersion": self._rv, "timeoutSeconds": "120"}
        with self._api.client.stream("GET", self._path, params=params, timeout=None) as response:
            for line in response.iter_lines():
                if self._stop.is_set():
                    return
                if not line.strip():
                    continue
                obj = json.loads(line)["object"]
                name = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
                if obj["spec"].get("nodeName") and name not in self._seen:
                    self._seen.add(name)
                    note = (obj["metadata"].get("annotations") or {}).get(ANNOTATION, "")
                    self.binds.append(BindEvent(name, int(note.split()[0].lstrip("#")) if note else -1))

    def count(self) -> int:
        return len(self.binds)

    def stop(self) -> None:
        self._stop.set()


def create(api: KubeAPI, namespace: str, names: list[str], scheduler: str, pool: str, **spec: Any) -> None:
    for pod_name in names:
        api.post(f"/api/v1/namespaces/{namespace}/pods",
                 kube.pod_manifest(pod_name, scheduler=scheduler, cpu="100m", memory="10Mi", **in_pool(pool), **spec))


def not_leading(proc: SchedulerProcess) -> bool:
    try:
        return not proc.status()["leader"]
    except httpx.HTTPError:
        return True  # gone: not leading either


@contextmanager
def priority_class(api: KubeAPI, name: str, value: int) -> Iterator[str]:
    api.post("/apis/scheduling.k8s.io/v1/priorityclasses", {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value})
    try:
        yield name
    finally:
        api.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def test_no_bind_of_the_old_leader_lands_after_the_new_leaders_first(
        cluster: DevCluster, api: KubeAPI, namespace: str, tmp_path: Path) -> None:
    """The harm a late bind does: the new leader fills a node with pods of its choice, then the old leader's
    bind of another pod lands there too. One contested node fits 10 pods of 100m: the old leader decides 5
    `late` pods for it just as its requests start stalling; once it has stopped (and before the standby
    takes over) 10 `urgent` pods of a higher priority arrive, which the new leader binds first. A `late` bind
    that lands after that overcommits the node."""
    assert cluster.endpoints is not None
    server = urlsplit(cluster.endpoints.apiserver)
    assert server.hostname is not None and server.port is not None
    name = f"ms-sb-{secrets.token_hex(3)}"
    with node_pool(cluster, 2, cpu="64", memory="64Gi") as (roomy, _), \
            node_pool(cluster, 1, cpu="1", memory="64Gi") as (contested, _), \
            priority_class(api, f"{name}-urgent", 1000) as urgent, \
            LatencyProxy(server.hostname, server.port) as proxy:
        config = write_config(cluster, name, {"leaderElection": {
            **ELECTION, "leaderElect": True, "resourceName": name, "resourceNamespace": "default"}})
        old = start_scheduler(cluster, name, config, "old", kubeconfig=proxied_kubeconfig(cluster, proxy, tmp_path),
                              log_format="json")
        try:
            kube.poll(lambda: leader_of(cluster, name) == old.identity, 20, "the proxied replica leading")
            new = start_scheduler(cluster, name, config, "new", log_format="json")
            try:
                watch = BindWatch(api, namespace)
                create(api, namespace, [f"w{i:03d}" for i in range(WARM_UP)], name, roomy)
                kube.poll(lambda: watch.count() >= WARM_UP, 30, "the warm-up pods bound")
                proxy.latency = 0.3  # slow, but renewals and binds still go through
                create(api, namespace, [f"slow{i}" for i in range(5)], name, roomy)
                kube.poll(lambda: watch.count() >= WARM_UP + 5, 10, "binds through the slow proxy")
                proxy.latency = STALL
                create(api, namespace, [f"late{i}" for i in range(5)], name, contested)
                kube.poll(lambda: not_leading(old), 10, "the old leader stopping")
                assert leader_of(cluster, name) == old.identity  # the standby has not taken over yet
                create(api, namespace, [f"urgent{i}" for i in range(10)], name, contested,
                       priorityClassName=urgent)
                kube.poll(lambda: leader_of(cluster, name) == new.identity, 15, "the standby taking over")
                kube.poll(lambda: watch.count() >= WARM_UP + 5 + 10, 15, "the new leader binding the urgent pods")
                # The old leader lost the lease: it stops, and exits 1 to be restarted as a standby. Once it is
                # gone the proxy drops whatever it still held of it (delivered only while its sender waits):
                # from then on nothing of the old leader can land.
                kube.poll(lambda: not old.alive(), 25, "the old leader exiting")
                assert old.managed.popen.returncode == 1, old.managed.describe_exit()
                kube.poll(lambda: proxy.holding(received_before=time.monotonic()) == 0, 5, "the proxy emptied")
                watch.stop()
                by_old, by_new = decisions(old), decisions(new)
                owners = []
                for bind in watch.binds:
                    key = (bind.pod, bind.decision)
                    assert (key in by_old) != (key in by_new), f"cannot tell who bound {bind}"
                    owners.append("old" if key in by_old else "new")
                last_old = max(i for i, who in enumerate(owners) if who == "old")
                first_new = owners.index("new")
                assert last_old < first_new, (
                    f"the old leader's bind of {watch.binds[last_old].pod} (#{last_old}) landed after the new "
                    f"leader's first, {watch.binds[first_new].pod} (#{first_new}): {''.join(w[0] for w in owners)}")
                assert last_old >= WARM_UP  # the old leader did bind through the slow proxy
                on_contested = [p for p in kube.list_pods(api, namespace)
                                if p["spec"].get("nodeName", "").startswith(contested)]
                assert len(on_contested) <= 10, f"{len(on_contested)} pods of 100m on a node of 1 CPU"
            finally:
                cluster.group.stop(new.name)
        finally:
            cluster.group.stop(old.name)
