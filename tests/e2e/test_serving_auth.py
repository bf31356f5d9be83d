"""The scheduler's HTTPS endpoint on the dev cluster, authenticated and authorized by the API server as
kube-scheduler's is: /healthz for anyone; /metrics without a token 401, with a token lacking the RBAC
permission 403, with the reader ClusterRole (deploy/clusterrole-reader.yaml) 200. And `explain --service`
asks the replica that holds the Lease, found through the Service's EndpointSlices, over verified TLS.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from metrics_sched.serving.self_signed import generate
from tests.e2e import kube
from tests.e2e.scheduler_proc import leader_of, start_scheduler, write_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SERVICE = "ms-https"


def reader_roles() -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((DEPLOY / "clusterrole-reader.yaml").read_text()) if d]
    return [d for d in docs if d["kind"] == "ClusterRole"]


def host_address() -> str:
    """This host's address other than loopback (an EndpointSlice refuses 127.0.0.0/8): the one its default
    route leaves from (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))
        except OSError as exc:
            pytest.fail(f"no non-loopback IPv4 address for the EndpointSlice: {exc}", pytrace=False)
        address = str(probe.getsockname()[0])
    ip = ipaddress.ip_address(address)
    if ip.is_loopback or ip.is_unspecified or ip.is_link_local:
        pytest.fail(f"no usable non-loopback IPv4 address for the EndpointSlice (got {address})", pytrace=False)
    return address


def token_for(api: KubeAPI, namespace: str, account: str) -> str:
    api.post(f"/api/v1/namespaces/{namespace}/serviceaccounts",
             {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}, ok=(409,))
    answer = api.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"expirationSeconds": 3600}})
    token: str = answer["status"]["token"]
    return token


@pytest.fixture
def reader_binding(api: KubeAPI, namespace: str) -> Iterator[str]:
    """A ServiceAccount bound to deploy/'s metrics-sched-reader ClusterRole; yields its token."""
    for role in reader_roles():
        if api.request("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role['metadata']['name']}",
                       ok=(404,)).get("kind") != "ClusterRole":
            api.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", role, ok=(409,))
    token = token_for(api, namespace, "reader")
    binding = f"{namespace}-reader"
    api.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-sched-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]})
    try:
        yield token
    finally:
        api.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{binding}")


def test_metrics_needs_a_token_the_api_server_authorizes(cluster: DevCluster, api: KubeAPI, namespace: str,
                                                         reader_binding: str, tmp_path: Path) -> None:
    pair = generate(tmp_path / "tls", ["127.0.0.1", f"{SERVICE}.{namespace}.svc"])
    name = f"ms-{secrets.token_hex(3)}"
    # Denied answers are cached for 10 s by default; 1 s here so that the binding made below is seen soon.
    server = {"bindAddress": "127.0.0.1", "tlsCertFile": str(pair.cert_file),
              "tlsPrivateKeyFile": str(pair.key_file), "authorizationCacheUnauthorizedTTL": "1s"}
    config = write_config(cluster, name, {"server": server}, leader_elect=False)
    proc = start_scheduler(cluster, name, config, ca_file=pair.ca_file)
    nobody = token_for(api, namespace, "nobody")
    try:
        with httpx.Client(verify=ssl.create_default_context(cafile=str(pair.ca_file)), timeout=10) as http:
            def get(path: str, token: str | None = None) -> httpx.Response:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                return http.get(f"{proc.url}{path}", headers=headers)

            assert get("/healthz").status_code == 200
            assert get("/readyz").status_code == 200
            assert get("/livez").status_code == 200
            no_token = get("/metrics")
            assert no_token.status_code == 401, no_token.text
            assert get("/metrics", "not-a-token").status_code == 401
            forbidden = get("/metrics", nobody)
            assert forbidden.status_code == 403, forbidden.text
            assert f"system:serviceaccount:{namespace}:nobody" in forbidden.text
            allowed = get("/metrics", reader_binding)
            assert allowed.status_code == 200, allowed.text
            assert "scheduler_pending_pods" in allowed.text
            assert get("/decisions", reader_binding).status_code == 200
            assert get("/decisions", nobody).status_code == 403
            # Profiling is off: the path does not exist, but only an authorized caller learns that.
            assert get("/debug/threads", nobody).status_code == 403

            # Granting the permission takes effect once the cached denial expires, without a restart.
            api.post("/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": f"{namespace}-nobody"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "metrics-sched-metrics-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": namespace}]})
            # A RoleBinding cannot grant non-resource URLs (they are cluster-wide): still 403.
            assert get("/metrics", nobody).status_code == 403
            binding = f"{namespace}-nobody"
            api.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": binding},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "metrics-sched-metrics-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": namespace}]})
            try:
                kube.poll(lambda: get("/metrics", nobody).status_code == 200, 15,
                          "/metrics allowed once the ClusterRoleBinding exists")
                assert get("/decisions", nobody).status_code == 403  # the metrics role is /metrics only
            finally:
                api.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{binding}")
                api.delete(f"/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings/{binding}")

            exposition = get("/metrics", reader_binding).text
            for result in ("unauthenticated", "forbidden", "allowed", "always_allowed"):
                line = next(x for x in exposition.splitlines()
                            if x.startswith(f'metrics_sched_http_requests_checked_total{{result="{result}"}}'))
                assert float(line.rsplit(" ", 1)[1]) >= 1, line
        # Plain HTTP to the TLS port is not served.
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{proc.port}/healthz", timeout=5)
    finally:
        cluster.group.stop(proc.name)


def test_explain_asks_the_leader_behind_the_service(cluster: DevCluster, api: KubeAPI, namespace: str,
                                                    tmp_path: Path) -> None:
    address = host_address()
    pair = generate(tmp_path / "tls", ["127.0.0.1", f"{SERVICE}.{namespace}.svc"])
    name = f"ms-{secrets.token_hex(3)}"
    server = {"bindAddress": "0.0.0.0", "tlsCertFile": str(pair.cert_file), "tlsPrivateKeyFile": str(pair.key_file)}
    config = write_config(cluster, name, {"server": server})
    procs = [start_scheduler(cluster, name, config, replica, ca_file=pair.ca_file) for replica in range(2)]
    try:
        leader = kube.poll(lambda: leader_of(cluster, name), 30, f"a leader for {name}")
        # The Service as a Deployment's would be: port https; one EndpointSlice per replica (each listens on its
        # own port here, all on this host), each endpoint naming its Pod as the Lease names its holder.
        api.post(f"/api/v1/namespaces/{namespace}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE},
            "spec": {"ports": [{"name": "https", "port": 10259, "targetPort": "https"}]}})
        for proc in procs:
            api.post(f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", {
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": f"{SERVICE}-{proc.identity}",
                             "labels": {"kubernetes.io/service-name": SERVICE}},
                "addressType": "IPv4",
                "ports": [{"name": "https", "port": proc.port, "protocol": "TCP"}],
                "endpoints": [{"addresses": [address], "conditions": {"ready": True},
                               "targetRef": {"kind": "Pod", "namespace": namespace, "name": proc.identity}}]})
        # A pod that fits nowhere: only the leader attempts it and records a decision.
        api.post(f"/api/v1/namespaces/{namespace}/pods", kube.pod_manifest("too-big", scheduler=name, cpu="100000"))
        by_identity = {p.identity: p for p in procs}

        def recorded() -> bool:
            body = httpx.get(f"{by_identity[leader].url}/decisions", params={"pod": f"{namespace}/too-big"},
                             headers={"Authorization": f"Bearer {cluster_token(cluster)}"},
                             verify=ssl.create_default_context(cafile=str(pair.ca_file)), timeout=5).json()
            return bool(body["decisions"])

        kube.poll(recorded, 30, "the leader's decision on too-big")
        # --direct: to the pod's address, as from inside the cluster (through the API server is the next test's).
        command = [sys.executable, "-m", "metrics_sched.app.cli", "explain", f"{namespace}/too-big",
                   "--kubeconfig", str(cluster.kubeconfig), "--ca-file", str(pair.ca_file), "--direct"]
        for where in (["--service", f"{namespace}/{SERVICE}"], ["--url", f"https://{SERVICE}.{namespace}.svc:10259"]):
            out = subprocess.run([*command, *where, "--lease", f"default/{name}"], capture_output=True, text=True,
                                 timeout=60)
            assert out.returncode == 0, out.stderr
            assert f"asking the leader {leader} at https://{address}:{by_identity[leader].port}" in out.stderr
            assert f"pod {namespace}/too-big" in out.stdout and "result: unschedulable" in out.stdout, out.stdout
        # Without a holder there is nobody to ask: a one-line error, exit 2.
        missing = subprocess.run([*command, "--service", f"{namespace}/{SERVICE}", "--lease", f"default/{name}-none"],
                                 capture_output=True, text=True, timeout=60)
        assert missing.returncode == 2 and "not found" in missing.stderr, missing.stderr
        assert "Traceback" not in missing.stderr
    finally:
        for proc in procs:
            cluster.group.stop(proc.name)


def cluster_token(cluster: DevCluster) -> str:
    doc = yaml.safe_load(cluster.kubeconfig.read_text())
    token: str = doc["users"][0]["user"]["token"]
    return token


def reader_kubeconfig(cluster: DevCluster, token: str, path: Path) -> Path:
    """The cluster's kubeconfig with another user: only this token (a reader's), nothing of the admin."""
    doc = yaml.safe_load(cluster.kubeconfig.read_text())
    doc["users"] = [{"name": "reader", "user": {"token": token}}]
    doc["contexts"][0]["context"]["user"] = "reader"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def kubectl_plugin(directory: Path) -> Path:
    """The `kubectl-metrics_sched` console script as pyproject installs it, for this checkout's interpreter."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "kubectl-metrics_sched"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom metrics_sched.app.cli import kubectl_main\n"
                      "sys.exit(kubectl_main())\n")
    script.chmod(0o755)
    return script


def test_kubectl_metrics_sched_explain_through_the_api_server_with_the_reader_roles_only(
        cluster: DevCluster, api: KubeAPI, namespace: str, reader_binding: str, tmp_path: Path) -> None:
    """`kubectl metrics-sched explain NS/POD` from a "laptop": a kubeconfig whose user has only the reader
    ClusterRole and the shipped find-leader Role; the scheduler is reached through the API server's pod proxy
    (its pod's address is this host's non-loopback one: the API server refuses to proxy to loopback). The CLI
    cannot connect to the scheduler itself: its certificate's CA is nowhere in the kubeconfig, which `--direct`
    shows by failing; through the API server (which never verifies a pod's certificate) the same call works."""
    address = host_address()
    pair = generate(tmp_path / "tls", ["127.0.0.1"])
    name = f"ms-{secrets.token_hex(3)}"
    # The Service, its leader's Lease and the reader Role's names as deploy/ ships them, in the test's namespace.
    # An allowing answer is cached 1 s (10 s by default), so that the unbinding at the end is seen soon.
    server = {"bindAddress": "0.0.0.0", "tlsCertFile": str(pair.cert_file), "tlsPrivateKeyFile": str(pair.key_file),
              "authorizationCacheAuthorizedTTL": "1s"}
    election = {"leaderElect": True, "resourceName": "metrics-sched", "resourceNamespace": namespace}
    config = write_config(cluster, name, {"server": server, "leaderElection": election})
    proc = start_scheduler(cluster, name, config, ca_file=pair.ca_file)
    try:
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/metrics-sched"
        kube.poll(lambda: (api.request("GET", lease_path, ok=(404,)).get("spec") or {}).get("holderIdentity")
                  == proc.identity, 30, "the scheduler holding the Lease")
        # The scheduler as its Deployment's pod would be: a Pod named as the Lease holder, with this host's address
        # (bound to a node nothing runs, so nothing rewrites its status), behind the Service.
        api.post(f"/api/v1/namespaces/{namespace}/pods",
                 kube.pod_manifest(proc.identity, nodeName=f"{namespace}-host"))
        api.merge_patch(f"/api/v1/namespaces/{namespace}/pods/{proc.identity}/status",
                        {"status": {"phase": "Running", "podIP": address, "podIPs": [{"ip": address}]}})
        api.post(f"/api/v1/namespaces/{namespace}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "metrics-sched"},
            "spec": {"ports": [{"name": "https", "port": 10259, "targetPort": "https"}]}})
        api.post(f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "metrics-sched-1", "labels": {"kubernetes.io/service-name": "metrics-sched"}},
            "addressType": "IPv4", "ports": [{"name": "https", "port": proc.port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": True},
                           "targetRef": {"kind": "Pod", "namespace": namespace, "name": proc.identity}}]})
        finder = next(d for d in yaml.safe_load_all((DEPLOY / "clusterrole-reader.yaml").read_text())
                      if d and d["kind"] == "Role")
        finder["metadata"]["namespace"] = namespace
        api.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles", finder)
        api.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": finder["metadata"]["name"]},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]})
        # A pod that fits nowhere: the scheduler records why.
        api.post(f"/api/v1/namespaces/{namespace}/pods", kube.pod_manifest("too-big", scheduler=name, cpu="100000"))

        def recorded() -> bool:
            body = httpx.get(f"{proc.url}/decisions", params={"pod": f"{namespace}/too-big"},
                             headers={"Authorization": f"Bearer {reader_binding}"}, verify=proc.verify,
                             timeout=5).json()
            return bool(body["decisions"])

        kube.poll(recorded, 30, "the decision on too-big")
        plugin = kubectl_plugin(tmp_path / "bin")
        env = {**os.environ, "KUBECONFIG": str(reader_kubeconfig(cluster, reader_binding, tmp_path / "reader")),
               "METRICS_SCHED_SERVICE": f"{namespace}/metrics-sched",
               "PATH": f"{plugin.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        env.pop("METRICS_SCHED_URL", None)

        def run(*argv: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, env=env)

        # Through kubectl's plugin mechanism where a kubectl is installed, and the entry point itself always.
        commands = [[str(plugin)]] + ([["kubectl", "metrics-sched"]] if shutil.which("kubectl", path=env["PATH"])
                                      else [])
        for command in commands:
            out = run(*command, "explain", f"{namespace}/too-big")
            assert out.returncode == 0, (command, out.stderr)
            assert f"asking the leader {proc.identity} through the API server" in out.stderr, out.stderr
            assert f"pod {namespace}/too-big" in out.stdout and "result: unschedulable" in out.stdout, out.stdout
        as_json = run(str(plugin), "explain", f"{namespace}/too-big", "-o", "json")
        assert as_json.returncode == 0, as_json.stderr
        [decision] = json.loads(as_json.stdout)["decisions"]
        assert (decision["pod"], decision["result"]) == (f"{namespace}/too-big", "unschedulable")
        listing = run(str(plugin), "decisions", "--pod", f"{namespace}/too-big", "-o", "yaml")
        assert listing.returncode == 0, listing.stderr
        assert {d["result"] for d in yaml.safe_load(listing.stdout)["decisions"]} == {"unschedulable"}
        table = run(str(plugin), "decisions", "--pod", f"{namespace}/too-big")
        assert table.returncode == 0 and f"{namespace}/too-big" in table.stdout, table.stderr
        sources = run(str(plugin), "sources", "-o", "json")
        assert sources.returncode == 0 and isinstance(json.loads(sources.stdout), dict), sources.stderr
        # The scheduler's port itself is out of the CLI's reach (here: it cannot verify the certificate).
        direct = run(str(plugin), "explain", f"{namespace}/too-big", "--direct")
        assert direct.returncode == 2 and "CERTIFICATE_VERIFY_FAILED" in direct.stderr, direct.stderr
        # Without the reader ClusterRole the scheduler refuses the path (its own SubjectAccessReview), through the
        # API server as directly.
        api.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{namespace}-reader")
        kube.poll(lambda: "403" in run(str(plugin), "sources").stderr, 20,
                  "the scheduler's 403 once the reader ClusterRoleBinding is gone")
    finally:
        cluster.group.stop(proc.name)
