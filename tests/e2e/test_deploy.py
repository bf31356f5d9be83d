"""deploy/ on the dev cluster: every manifest passes a server-side dry run, and the scheduler runs as its
own ServiceAccount with exactly the RBAC allowlist of deploy/ and nothing more.

The Prometheus Operator CRDs (ServiceMonitor, PrometheusRule) come from the operator's Go module, fetched
through the Go module proxy into the Go module cache (kept between runs). No Go, no proxy: the test fails.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from devcluster import DevCluster
from devcluster.kubeapi import Credentials, KubeAPI
from devcluster.ports import free_port
from tests.deploy_rbac import CLUSTER_RULES, LEASE, LEASE_RULES, NAMESPACE, SERVICE_ACCOUNT, Rule
from tests.e2e import kube, prom

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
FIELD_MANAGER = "metrics-sched-deploy-test"
DECISION_ANNOTATION = "metrics-sched.io/decision"

OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
OPERATOR_VERSION = "v0.85.0"
OPERATOR_CRD_DIR = "example/prometheus-operator-crd"
OPERATOR_CRDS = ("monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml")


# Granted to every authenticated user by the built-in system:basic-user role.
BUILTIN_RULES: frozenset[Rule] = frozenset({
    ("authorization.k8s.io", "selfsubjectaccessreviews", "create", None),
    ("authorization.k8s.io", "selfsubjectrulesreviews", "create", None),
    ("authentication.k8s.io", "selfsubjectreviews", "create", None),
})
# From Kubernetes 1.37 on (ClusterTrustBundle GA, on by default; a beta gate, off, in 1.36), the built-in
# system:cluster-trust-bundle-discovery ClusterRoleBinding grants these to every ServiceAccount.
TRUST_BUNDLE_RULES: frozenset[Rule] = frozenset(
    ("certificates.k8s.io", "clustertrustbundles", verb, None) for verb in ("get", "list", "watch"))


def builtin_rules(kubernetes_minor: int) -> frozenset[Rule]:
    """What the API server of Kubernetes 1.<kubernetes_minor> grants every ServiceAccount by itself."""
    return BUILTIN_RULES | (TRUST_BUNDLE_RULES if kubernetes_minor >= 37 else frozenset())
RBAC_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap")


# -- the manifests ------------------------------------------------------------------------------------
def load_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kustomization_objects() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    return [doc for resource in kustomization["resources"] for doc in load_docs(DEPLOY / resource)]


def find(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind]
    assert len(matches) == 1, f"expected one {kind} in deploy/, found {len(matches)}"
    return matches[0]


# -- the Prometheus Operator CRDs from the Go module proxy ----------------------------------------------
@functools.cache
def operator_crd_dir() -> Path:
    """The operator module's CRD folder, downloaded once into the Go module cache (`go mod download` answers
    from the cache when the module is there, without the network)."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("`go` is not on PATH: it is needed to fetch the Prometheus Operator CRDs "
                    f"({OPERATOR_MODULE}@{OPERATOR_VERSION}) through the Go module proxy", pytrace=False)
    with tempfile.TemporaryDirectory() as cwd:  # outside any go.mod
        proc = subprocess.run([go, "mod", "download", "-json", f"{OPERATOR_MODULE}@{OPERATOR_VERSION}"], cwd=cwd,
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "GO111MODULE": "on", "GOFLAGS": "-mod=mod"})
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        info = {}
    if proc.returncode != 0 or info.get("Error") or not info.get("Dir"):
        pytest.fail(f"go mod download {OPERATOR_MODULE}@{OPERATOR_VERSION} failed (exit {proc.returncode}): "
                    f"{info.get('Error') or proc.stderr.strip()[-1000:]}", pytrace=False)
    directory = Path(info["Dir"]) / OPERATOR_CRD_DIR
    missing = [name for name in OPERATOR_CRDS if not (directory / name).is_file()]
    if missing:
        pytest.fail(f"{OPERATOR_MODULE}@{OPERATOR_VERSION} has no {missing} under {OPERATOR_CRD_DIR}", pytrace=False)
    return directory


def operator_crds() -> list[dict[str, Any]]:
    return [load_docs(operator_crd_dir() / name)[0] for name in OPERATOR_CRDS]


# -- API helpers --------------------------------------------------------------------------------------
def resource_path(api: KubeAPI, obj: dict[str, Any], namespace: str | None = None) -> str:
    """The object's URL, its resource name and scope read from the API server's discovery."""
    api_version, kind, name = obj["apiVersion"], obj["kind"], obj["metadata"]["name"]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    resources = api.get(base)["resources"]
    entry = next((r for r in resources if r["kind"] == kind and "/" not in r["name"]), None)
    assert entry is not None, f"the API server does not serve {kind} in {api_version}"
    if not entry["namespaced"]:
        return f"{base}/{entry['name']}/{name}"
    ns = obj["metadata"].get("namespace") or namespace
    assert ns, f"{kind}/{name} needs a namespace"
    return f"{base}/namespaces/{ns}/{entry['name']}/{name}"


def apply(api: KubeAPI, obj: dict[str, Any], *, dry_run: bool, namespace: str | None = None) -> httpx.Response:
    """Server-side apply (with dryRun=All: validated, defaulted and admitted, never stored). Unknown or
    duplicate fields are errors (fieldValidation=Strict, as kubectl sends it)."""
    params = {"fieldManager": FIELD_MANAGER, "force": "true", "fieldValidation": "Strict"}
    if dry_run:
        params["dryRun"] = "All"
    if namespace and obj["kind"] != "Namespace":
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": obj["metadata"].get("namespace", namespace)}}
    return api.client.patch(resource_path(api, obj, namespace), content=json.dumps(obj).encode(), params=params,
                            headers={"Content-Type": "application/apply-patch+yaml"})


def install_crds(api: KubeAPI) -> list[str]:
    names = []
    for crd in operator_crds():
        name = crd["metadata"]["name"]
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"

        def not_terminating(path: str = path) -> bool:
            # An earlier module's teardown deleted it: until its objects are gone it still answers (a 409 here),
            # then vanishes under this module's feet. Wait for it to be gone, then create it anew.
            existing = api.request("GET", path, ok=(404,))
            return existing.get("kind") != "CustomResourceDefinition" or not existing["metadata"].get(
                "deletionTimestamp")

        kube.poll(not_terminating, 60, f"CRD {name} of an earlier module to finish deleting")
        api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, ok=(409,))
        names.append(name)
    plurals = {crd["spec"]["names"]["plural"] for crd in operator_crds()}

    def served() -> bool:
        # Until the group is registered the answer is a plain-text 404, not a Status.
        resp = api.client.get("/apis/monitoring.coreos.com/v1")
        return resp.status_code == 200 and plurals <= {r["name"] for r in resp.json().get("resources") or []}

    kube.poll(served, 30, "monitoring.coreos.com/v1 to serve servicemonitors and prometheusrules")
    return names


def sa_client(cluster: DevCluster, token: str) -> KubeAPI:
    assert cluster.endpoints is not None
    return KubeAPI(Credentials(server=cluster.endpoints.apiserver, ca_file=Path(cluster.endpoints.ca_file),
                               token=token))


def resource_rules(client: KubeAPI, namespace: str) -> set[Rule]:
    """The effective resource rules of the caller in `namespace`, one tuple per (group, resource, verb, name)."""
    review = client.post("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": namespace}})
    status = review["status"]
    assert not status.get("incomplete"), f"incomplete rules review: {status.get('evaluationError')}"
    rules: set[Rule] = set()
    for rule in status["resourceRules"]:
        names: list[str | None] = list(rule.get("resourceNames") or [None])
        rules.update(itertools.product(rule.get("apiGroups") or [""], rule.get("resources") or [],
                                       rule.get("verbs") or [], names))
    # The built-in grants differ per Kubernetes minor (the one this API server runs): present, then set aside.
    builtin = builtin_rules(int(client.get("/version")["minor"]))
    assert builtin <= rules, f"built-in rules missing from the review: {sorted(builtin - rules, key=str)}"
    return rules - builtin


def allowed(client: KubeAPI, verb: str, resource: str, *, group: str = "", namespace: str = "",
            name: str = "", subresource: str = "") -> bool:
    review = client.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": namespace,
                                        "name": name, "subresource": subresource}}})
    return bool(review["status"].get("allowed"))


def alert_rules() -> list[dict[str, Any]]:
    rule = find(kustomization_objects(), "PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]


def exported(exposition: str, series: str, /, **labels: str) -> bool:
    """Whether /metrics has a sample of `series` carrying these label values."""
    for line in exposition.splitlines():
        if line.startswith((series + "{", series + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return True
    return False


# -- fixtures -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def installed(api: KubeAPI) -> Iterator[list[dict[str, Any]]]:
    """The Namespace, ServiceAccount, RBAC and ConfigMap of deploy/, applied for real (removed afterwards)."""
    objects = [o for o in kustomization_objects() if o["kind"] in RBAC_KINDS]
    assert {o["kind"] for o in objects} == set(RBAC_KINDS)
    objects.sort(key=lambda o: RBAC_KINDS.index(o["kind"]))
    try:
        for obj in objects:
            resp = apply(api, obj, dry_run=False)
            assert resp.status_code < 300, f"apply {obj['kind']}/{obj['metadata']['name']}: {resp.text[:500]}"
        yield objects
    finally:
        # No namespace controller runs here: delete what is inside the namespace ourselves, then finalize it.
        for obj in reversed(objects):
            if obj["kind"] != "Namespace":
                api.delete(resource_path(api, obj))
        api.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}")
        kube.delete_namespace(api, NAMESPACE)


@pytest.fixture(scope="module")
def sa_token(api: KubeAPI, installed: list[dict[str, Any]]) -> str:
    """A bound token of the ServiceAccount, from the TokenRequest API (what the kubelet would mount)."""
    review = api.post(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    token: str = review["status"]["token"]
    assert token
    return token


@pytest.fixture(scope="module")
def sa_api(cluster: DevCluster, sa_token: str) -> Iterator[KubeAPI]:
    with sa_client(cluster, sa_token) as client:
        yield client


# -- tests --------------------------------------------------------------------------------------------
def test_every_manifest_passes_a_server_side_dry_run(api: KubeAPI, crds: list[str],
                                                     installed: list[dict[str, Any]], namespace: str) -> None:
    objects: list[tuple[dict[str, Any], str | None]] = [(obj, None) for obj in kustomization_objects()]
    objects += [(obj, None) for obj in load_docs(DEPLOY / "secret-cmdb-token.example.yaml")]
    objects += [(obj, namespace) for path in sorted((DEPLOY / "examples").glob("*.yaml")) for obj in load_docs(path)]
    kinds = {obj["kind"] for obj, _ in objects}
    assert {"Deployment", "Service", "ServiceMonitor", "PrometheusRule", "NetworkPolicy", "Secret", "Pod",
            *RBAC_KINDS} <= kinds

    failures, warnings = [], []
    for obj, ns in objects:
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        resp = apply(api, obj, dry_run=True, namespace=ns)
        if resp.status_code >= 300:
            failures.append(f"{what}: HTTP {resp.status_code}: {resp.text[:600]}")
            continue
        answered = resp.json()
        assert (answered["kind"], answered["metadata"]["name"]) == (obj["kind"], obj["metadata"]["name"])
        # A pod template that breaks the namespace's Pod Security level ("restricted") comes back as a warning.
        warnings += [f"{what}: {w}" for w in resp.headers.get_list("warning")]
    assert not failures, "server-side dry run rejected:\n" + "\n".join(failures)
    assert not warnings, "server-side dry run warned:\n" + "\n".join(warnings)

    # The API server does not look inside a PrometheusRule (the operator's webhook would): promtool does,
    # expressions and annotation templates alike. It comes with Prometheus, which the dev cluster needs.
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian's prometheus package, `make deps`) is needed to check prometheusrule.yaml"
    rules_file = Path(tempfile.mkdtemp(prefix="metrics-sched-rules-")) / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": find(kustomization_objects(), "PrometheusRule")["spec"]["groups"]}))
    checked = subprocess.run([promtool, "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60)
    shutil.rmtree(rules_file.parent)
    assert checked.returncode == 0, f"promtool check rules:\n{checked.stdout}{checked.stderr}"

    # dryRun=All stored nothing.
    for obj, ns in objects:
        if obj["kind"] not in RBAC_KINDS:
            path = resource_path(api, obj, ns)
            assert api.request("GET", path, ok=(404,))["code"] == 404, f"{path} exists after a dry run"


def test_rules_review_equals_the_allowlist(sa_api: KubeAPI, namespace: str) -> None:
    assert resource_rules(sa_api, NAMESPACE) == CLUSTER_RULES | LEASE_RULES
    assert resource_rules(sa_api, namespace) == CLUSTER_RULES
    assert resource_rules(sa_api, "kube-system") == CLUSTER_RULES


def test_service_account_is_denied_everything_else(api: KubeAPI, sa_api: KubeAPI, namespace: str,
                                                   cluster: DevCluster) -> None:
    # The allowlist itself, so the denials below are not a token that can do nothing.
    for verb, resource, kwargs in [
        ("list", "pods", {}), ("watch", "nodes", {}), ("get", "pods", {"namespace": namespace, "name": "x"}),
        ("create", "pods", {"namespace": namespace, "subresource": "binding", "name": "x"}),
        ("patch", "pods", {"namespace": namespace, "subresource": "status", "name": "x"}),
        ("create", "events", {"namespace": namespace, "group": "events.k8s.io"}),
        ("list", "nodes", {"group": "metrics.k8s.io"}),
        ("create", "leases", {"namespace": NAMESPACE, "group": "coordination.k8s.io"}),
        ("update", "leases", {"namespace": NAMESPACE, "group": "coordination.k8s.io", "name": LEASE}),
    ]:
        assert allowed(sa_api, verb, resource, **kwargs), f"{verb} {resource} {kwargs} should be allowed"

    lease = {"group": "coordination.k8s.io"}
    for verb, resource, kwargs in [
        ("get", "secrets", {"namespace": NAMESPACE}), ("list", "secrets", {"namespace": NAMESPACE}),
        ("list", "secrets", {}), ("watch", "secrets", {}), ("get", "configmaps", {"namespace": NAMESPACE}),
        # (delete pods is allowed: preemption deletes its victims; see deploy/clusterrole.yaml)
        ("create", "pods", {"namespace": namespace}),
        ("patch", "pods", {"namespace": namespace, "name": "x"}),
        ("update", "pods", {"namespace": namespace, "name": "x"}),
        ("update", "pods", {"namespace": namespace, "subresource": "status", "name": "x"}),
        ("create", "pods", {"namespace": namespace, "subresource": "eviction", "name": "x"}),
        ("patch", "nodes", {"name": "node-000"}), ("delete", "nodes", {"name": "node-000"}),
        ("patch", "nodes", {"subresource": "status", "name": "node-000"}),
        ("get", "leases", {**lease, "namespace": "kube-system", "name": "kube-scheduler"}),
        ("update", "leases", {**lease, "namespace": "kube-system", "name": "kube-scheduler"}),
        ("create", "leases", {**lease, "namespace": "kube-system"}),
        ("get", "leases", {**lease, "namespace": NAMESPACE, "name": "someone-else"}),
        ("update", "leases", {**lease, "namespace": NAMESPACE, "name": "someone-else"}),
        ("list", "leases", {**lease, "namespace": NAMESPACE}),
        ("delete", "leases", {**lease, "namespace": NAMESPACE, "name": LEASE}),
        ("create", "clusterrolebindings", {"group": "rbac.authorization.k8s.io"}),
        ("impersonate", "serviceaccounts", {"namespace": "kube-system", "name": "default"}),
        ("create", "serviceaccounts", {"namespace": NAMESPACE, "subresource": "token", "name": SERVICE_ACCOUNT}),
    ]:
        assert not allowed(sa_api, verb, resource, **kwargs), f"{verb} {resource} {kwargs} should be denied"

    # Real requests with the token: each is refused by authorization (403), before any 404.
    victim = api.post(f"/api/v1/namespaces/{namespace}/pods", kube.pod_manifest("victim", scheduler="nobody"))
    node = cluster.nodes[0].name
    other_lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "someone-else", "namespace": NAMESPACE}, "spec": {"holderIdentity": "me"}}
    client = sa_api.client
    denied = {
        "get secrets": client.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/metrics-sched-cmdb-token"),
        "list secrets": client.get(f"/api/v1/namespaces/{NAMESPACE}/secrets"),
        "list all secrets": client.get("/api/v1/secrets"),
        "patch pod": client.patch(f"/api/v1/namespaces/{namespace}/pods/victim",
                                  content=b'{"metadata":{"labels":{"pwned":"1"}}}',
                                  headers={"Content-Type": "application/merge-patch+json"}),
        "patch node": client.patch(f"/api/v1/nodes/{node}", content=b'{"metadata":{"labels":{"pwned":"1"}}}',
                                   headers={"Content-Type": "application/merge-patch+json"}),
        "get kube-scheduler lease": client.get(
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler"),
        "get another lease": client.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/someone-else"),
        "update another lease": client.put(
            f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/someone-else", json=other_lease),
    }
    assert {what: r.status_code for what, r in denied.items()} == dict.fromkeys(denied, 403)
    still = api.get(f"/api/v1/namespaces/{namespace}/pods/victim")
    assert still["metadata"]["uid"] == victim["metadata"]["uid"]
    assert "pwned" not in still["metadata"].get("labels", {})
    assert "pwned" not in api.get(f"/api/v1/nodes/{node}")["metadata"].get("labels", {})
    assert client.get("/api/v1/pods", params={"limit": "1"}).status_code == 200


def test_scheduler_runs_as_its_service_account(cluster: DevCluster, api: KubeAPI, sa_token: str,
                                               namespace: str, tmp_path: Path) -> None:
    endpoints = cluster.endpoints
    assert endpoints is not None and endpoints.prometheus and endpoints.cmdb
    prometheus_url = endpoints.prometheus
    kubeconfig = kube.token_kubeconfig(endpoints, sa_token, NAMESPACE, tmp_path, user="metrics-sched")

    # The shipped config, pointed at the dev cluster's telemetry; profile and leader election as shipped.
    config = yaml.safe_load(find(kustomization_objects(), "ConfigMap")["data"]["config.yaml"])
    scheduler_name = config["profiles"][0]["schedulerName"]
    assert config["leaderElection"]["resourceNamespace"] == NAMESPACE
    assert config["leaderElection"]["resourceName"] == LEASE
    # Plain HTTP on loopback for this test's reads and scrape; the shipped HTTPS serving (reviews as this
    # ServiceAccount) is tests/e2e/test_serving_auth.py's.
    config["server"] = {"bindAddress": "127.0.0.1", "insecure": True}
    for source in config["sources"]:
        source["interval"] = "1s"
        if source["type"] == "prometheus":
            source["url"] = endpoints.prometheus
        elif source["type"] == "cmdb":
            source["url"] = endpoints.cmdb
            source["auth"]["tokenFile"] = endpoints.cmdb_token_file
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))

    port = free_port()
    identity = f"deploy-test-{secrets.token_hex(3)}"
    name = f"metrics-sched-sa-{secrets.token_hex(3)}"
    managed = cluster.group.start(name, [
        sys.executable, "-m", "metrics_sched.app.cli", "run", "--config", str(config_file),
        "--kubeconfig", str(kubeconfig), "--port", str(port), "--identity", identity, "--log-format", "text",
    ])
    url = f"http://127.0.0.1:{port}"
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"
    try:
        def ready() -> bool:
            if not managed.alive():
                raise AssertionError(managed.describe_exit())
            try:
                return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        kube.poll(ready, 30, "the scheduler ready (caches synced as the ServiceAccount)")

        def holder() -> str | None:
            lease = api.request("GET", lease_path, ok=(404,))
            return (lease.get("spec") or {}).get("holderIdentity") if lease.get("kind") == "Lease" else None

        assert kube.poll(holder, 20, f"Lease {NAMESPACE}/{LEASE} held") == identity

        pods = [kube.pod_manifest(f"cpu-{i}", scheduler=scheduler_name) for i in range(3)]
        pods += [{**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
                 for doc in load_docs(DEPLOY / "examples" / "gpu-pod.yaml")]
        stuck = kube.pod_manifest("too-big", scheduler=scheduler_name, cpu="100000")
        for pod in [*pods, stuck]:
            api.post(f"/api/v1/namespaces/{namespace}/pods", pod)
        names = {p["metadata"]["name"] for p in pods}

        def bound() -> list[dict[str, Any]] | None:
            found = [p for p in kube.list_pods(api, namespace) if p["metadata"]["name"] in names]
            ok = len(found) == len(names) and all(p["spec"].get("nodeName") for p in found)
            return found if ok else None

        placed = kube.poll(bound, 20, f"{sorted(names)} bound by {scheduler_name}")
        gpu_pod = next(p for p in placed if p["metadata"]["name"] == "cuda-smoke")
        gpu_node = api.get(f"/api/v1/nodes/{gpu_pod['spec']['nodeName']}")
        assert int(gpu_node["status"]["allocatable"].get("nvidia.com/gpu", "0")) >= 1

        # The decision annotation (carried by the Binding), pods/status patch, events create.
        def annotated() -> bool:
            return all(DECISION_ANNOTATION in (p["metadata"].get("annotations") or {})
                       for p in kube.list_pods(api, namespace) if p["metadata"]["name"] in names)

        kube.poll(annotated, 10, f"the {DECISION_ANNOTATION} annotation on every bound pod")

        def unschedulable() -> bool:
            pod = api.get(f"/api/v1/namespaces/{namespace}/pods/too-big")
            return any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
                       for c in pod["status"].get("conditions") or [])

        kube.poll(unschedulable, 10, "PodScheduled=False on the pod that fits nowhere")

        def events() -> set[tuple[str, str]]:
            items = api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
            return {(e["regarding"]["name"], e["reason"]) for e in items}

        expected_events = {(n, "Scheduled") for n in names} | {("too-big", "FailedScheduling")}
        kube.poll(lambda: expected_events <= events(), 10, f"events {sorted(expected_events)}")

        # Every source answers, metrics-server through the API server's metrics.k8s.io (its RBAC rule); and, as
        # the stale-GPU-metrics alert below asserts, at least half the nodes have a fresh GPU temperature.
        def sources_up() -> dict[str, Any] | None:
            health: dict[str, Any] = httpx.get(f"{url}/sources", timeout=2).json()
            gpu = [c["gpu_temperature"] for h in health.values() if "gpu_temperature" in (c := h.get("coverage") or {})]
            ok = health and all(h.get("up") for h in health.values()) and gpu and min(gpu) >= 0.5
            return health if ok else None

        try:
            health = kube.poll(sources_up, 20, "every configured source up, gpu_temperature coverage >= 0.5",
                               interval=0.3)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {httpx.get(f'{url}/sources', timeout=2).json()}") from None
        assert set(health) == {s["name"] for s in config["sources"]}

        # The alerts' metrics, as this scheduler exports them and as Prometheus evaluates the alerts on them.
        # (Polled: a bind result is counted when the bind call returns, a moment after the API shows the pod.)
        wanted = [("metrics_sched_source_up", {"source": "prometheus"}),
                  ("metrics_sched_metric_coverage_ratio", {"metric": "gpu_temperature"}),
                  ("scheduler_pending_pods", {"queue": "unschedulable"}),
                  ("metrics_sched_bind_results_total", {"result": "bound"}),
                  ("metrics_sched_leader", {}),
                  # What operators look for on any component (issue 46): process_*, the API client's requests as
                  # client-go counts them (the binds), the Lease's leader gauge, unschedulable pods by plugin.
                  ("process_resident_memory_bytes", {}), ("process_start_time_seconds", {}),
                  ("rest_client_requests_total", {"method": "POST", "code": "201"}),
                  ("rest_client_request_duration_seconds_bucket", {"verb": "POST"}),
                  ("leader_election_master_status", {"name": LEASE}),
                  ("scheduler_unschedulable_pods", {"plugin": "NodeResourcesFit", "profile": scheduler_name})]
        missing: list[str] = []

        def all_exported() -> bool:
            exposition = httpx.get(f"{url}/metrics", timeout=5).text
            missing[:] = [f"{metric} {labels}" for metric, labels in wanted
                          if not exported(exposition, metric, **labels)]
            return not missing

        try:
            kube.poll(all_exported, 10, "the alerts' metrics on /metrics", interval=0.2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; /metrics has no {missing}") from None
        instance = f"127.0.0.1:{port}"
        cluster.add_scrape_target(name, instance)
        try:
            kube.poll(lambda: prom.query(prometheus_url, f'metrics_sched_leader{{instance="{instance}"}} == 1'),
                      20, "Prometheus scraping the scheduler", interval=0.3)
            for alert in alert_rules():
                fired = prom.query(prometheus_url, alert["expr"])  # raises on a query Prometheus refuses
                mine = [r["metric"] for r in fired if r["metric"].get("instance") == instance]
                assert not mine, f"{alert['alert']} fires on a healthy scheduler: {mine}"
            # The pending-pods alert counts the leader's queues only; the join matches on a real scrape.
            joined = prom.query(prometheus_url, f'scheduler_pending_pods{{instance="{instance}"}} '
                                                      "and on (instance) (metrics_sched_leader == 1)")
            assert {r["metric"]["queue"] for r in joined} >= {"active", "backoff", "unschedulable"}
        finally:
            cluster.remove_scrape_target(name)

        log = managed.log.read_text(errors="replace").lower()
        assert "forbidden" not in log and " 403" not in log, f"the scheduler was refused something:\n{log[-3000:]}"
    finally:
        cluster.group.stop(name)

    # SIGTERM released the Lease with a PUT (update on its own Lease).
    kube.poll(lambda: not holder(), 5, "the Lease released")


def test_token_request_kubeconfig_is_the_service_account(sa_api: KubeAPI) -> None:
    review = sa_api.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    info = review["status"]["userInfo"]
    assert info["username"] == f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
    assert f"system:serviceaccounts:{NAMESPACE}" in info["groups"]
