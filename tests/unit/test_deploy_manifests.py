"""deploy/ read as files: the kustomization, the Deployment's hardening, the RBAC allowlist, the config.

The same manifests are dry-run and exercised on a real API server in tests/e2e/test_deploy.py.
"""

from __future__ import annotations

import copy
import functools
import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from metrics_sched.app.sources import build_sources
from metrics_sched.config import parse_config
from metrics_sched.plugins import in_tree_registry
from tests.deploy_rbac import CLUSTER_RULES, LEASE, LEASE_RULES, NAMESPACE, REBALANCE_RULES, SERVICE_ACCOUNT, Rule

pytestmark = pytest.mark.unit

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PORT = 10259  # HTTPS, kube-scheduler's secure port
SECRET_EXAMPLE = "secret-cmdb-token.example.yaml"
SERVING_CERT_EXAMPLE = "serving-cert.example.yaml"  # needs cert-manager: applied by hand
REBALANCE_RBAC = "rbac-rebalance.yaml"  # applied on its own, only when the rebalancer is enabled
TOKEN_FILE = "/var/run/secrets/metrics-sched/cmdb/token"
RUNBOOKS = DEPLOY.parent / "docs" / "runbooks.md"
# Where the alerts' runbook_url point: docs/runbooks.md, one `## <alert>` entry per alert.
RUNBOOK_BASE = "https://github.com/metrics-sched/metrics-sched/blob/main/docs/runbooks.md"




def yaml_files() -> list[Path]:
    local = DEPLOY / "local"
    chart = DEPLOY / "helm"  # Helm templates and values, not manifests: tests/e2e/test_helm.py renders and checks them
    return sorted(p for p in DEPLOY.rglob("*")
                  if p.suffix in (".yaml", ".yml") and local not in p.parents and chart not in p.parents)


@functools.cache
def _parsed(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def load_docs(path: Path) -> list[dict[str, Any]]:
    return copy.deepcopy(_parsed(path))  # parsed once; each test gets its own copy


def kustomization() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    return data


def base_objects() -> list[dict[str, Any]]:
    return [doc for name in kustomization()["resources"] for doc in load_docs(DEPLOY / name)]


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in base_objects() if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''} in the kustomization, found {len(found)}"
    return found[0]


def deployment() -> dict[str, Any]:
    return one("Deployment", "metrics-sched")


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = deployment()["spec"]["template"]["spec"]
    return spec


def container() -> dict[str, Any]:
    containers = pod_spec()["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def scheduler_config() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(one("ConfigMap", "metrics-sched-config")["data"]["config.yaml"])
    return data


def normalised_rules(rules: list[dict[str, Any]]) -> set[Rule]:
    out: set[Rule] = set()
    for rule in rules:
        names: list[str | None] = list(rule.get("resourceNames") or [None])
        out.update(itertools.product(rule.get("apiGroups") or [], rule.get("resources") or [], rule.get("verbs") or [],
                                     names))
    return out


def pod_specs_everywhere() -> list[tuple[str, dict[str, Any]]]:
    """Every pod spec in deploy/ (Pods and workload templates), with where it was found."""
    out = []
    for path in yaml_files():
        for doc in load_docs(path):
            where = f"{path.relative_to(DEPLOY)}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            if doc.get("kind") == "Pod":
                out.append((where, doc["spec"]))
            elif doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
                out.append((where, doc["spec"]["template"]["spec"]))
    return out


# -- files and the kustomization ----------------------------------------------------------------------
def test_every_yaml_parses_into_kubernetes_objects() -> None:
    files = yaml_files()
    assert len(files) >= 10
    for path in files:
        docs = load_docs(path)
        assert docs, f"{path} is empty"
        if path.name == "kustomization.yaml":
            continue
        for doc in docs:
            assert isinstance(doc, dict), path
            assert doc.get("apiVersion") and doc.get("kind") and doc.get("metadata", {}).get("name"), path


def test_the_kustomization_lists_every_manifest_and_only_existing_files() -> None:
    data = kustomization()
    assert data["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and data["kind"] == "Kustomization"
    resources = data["resources"]
    assert len(resources) == len(set(resources))
    for name in resources:
        assert (DEPLOY / name).is_file(), f"kustomization.yaml lists {name}, which does not exist"
    top_level = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(resources) == top_level - {SECRET_EXAMPLE, SERVING_CERT_EXAMPLE, REBALANCE_RBAC,
                                          "rbac-custom-metrics.yaml"}, \
        "a manifest of deploy/ is missing from the kustomization"
    assert SECRET_EXAMPLE not in resources, "the example Secret (a placeholder token) must never be deployed"
    assert REBALANCE_RBAC not in resources, "evictions are granted only where the rebalancer runs"
    kinds = {o["kind"] for o in base_objects()}
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap",
            "Deployment", "Service", "ServiceMonitor", "PrometheusRule", "NetworkPolicy"} <= kinds
    # No Secret value ships: the only Secret is the scraper's token, which the API server's token controller fills.
    for secret in (o for o in base_objects() if o["kind"] == "Secret"):
        assert secret["type"] == "kubernetes.io/service-account-token" and not secret.get("data"), secret


def test_namespaced_objects_live_in_the_metrics_sched_namespace() -> None:
    assert one("Namespace")["metadata"]["name"] == NAMESPACE
    for obj in base_objects():
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding", "FlowSchema",
                               "PriorityLevelConfiguration"):
            assert obj["metadata"].get("namespace") == NAMESPACE, f"{obj['kind']}/{obj['metadata']['name']}"


# -- images -------------------------------------------------------------------------------------------
def test_no_image_is_untagged_or_latest() -> None:
    images = [(where, c["image"]) for where, spec in pod_specs_everywhere()
              for c in [*spec.get("containers", []), *spec.get("initContainers", [])]]
    assert len(images) >= 3
    for where, image in images:
        if "@sha256:" in image:
            continue
        name, _, tag = image.rpartition(":")
        assert name and "/" not in tag and tag, f"{where}: image {image!r} has no tag"
        assert tag != "latest", f"{where}: image {image!r} uses latest"
    for entry in kustomization().get("images", []):
        assert entry.get("digest") or entry.get("newTag") not in (None, "", "latest"), entry


def test_the_containerfile_builds_a_non_root_image_of_the_package() -> None:
    text = (DEPLOY / "Containerfile").read_text()
    instructions = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    froms = [line.split()[1] for line in instructions if line.startswith("FROM ")]
    assert froms and all(f == "${BASE}" for f in froms)
    assert re.search(r"^ARG BASE=docker.io/library/python:3\.11\.\d+-slim@sha256:", text, re.M)
    # The package's own wheel (its dependencies come from the hashed lock: tests/unit/test_image_lock.py).
    assert re.search(r"pip wheel --no-deps --no-build-isolation --wheel-dir /wheels \.", text)
    assert re.search(r"pip install --no-deps /wheels/metrics_sched-\*\.whl", text)
    users = [line.split()[1] for line in instructions if line.startswith("USER ")]
    assert users, "the image must not run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "USER must be a numeric non-root uid (kubelet checks runAsNonRoot)"
    assert str(pod_spec()["securityContext"]["runAsUser"]) == uid
    assert 'ENTRYPOINT ["metrics-sched"]' in instructions
    assert f"EXPOSE {PORT}" in instructions


# -- the Deployment -----------------------------------------------------------------------------------
def test_two_replicas_spread_over_nodes() -> None:
    dep = deployment()
    assert dep["spec"]["replicas"] == 2
    labels = dep["spec"]["template"]["metadata"]["labels"]
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    anti = pod_spec()["affinity"]["podAntiAffinity"]
    terms = [t.get("podAffinityTerm", t) for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
    terms += anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])
    assert any(t["topologyKey"] == "kubernetes.io/hostname" and t["labelSelector"]["matchLabels"].items()
               <= labels.items() for t in terms)


def test_the_pods_are_system_cluster_critical_and_the_comment_says_how_to_drop_it() -> None:
    """Like kube-scheduler's: not preempted when nodes are full. The comment's kustomize patch must name the
    field's real path, and say why the field may have to go."""
    assert pod_spec()["priorityClassName"] == "system-cluster-critical"
    text = (DEPLOY / "deployment.yaml").read_text()
    above = text[:text.index("      priorityClassName:")].splitlines()
    comment = "\n".join(itertools.takewhile(lambda line: line.lstrip().startswith("#"), reversed(above)))
    [path] = re.findall(r"op: remove, path: (/[\w/]+)", comment)
    node: Any = deployment()
    for key in path.strip("/").split("/"):
        node = node[key]
    assert node == "system-cluster-critical"
    assert "ResourceQuota" in comment and "kube-system" in comment


def test_the_container_runs_the_scheduler_with_the_mounted_config() -> None:
    c = container()
    assert c["args"] == ["run", "--config", "/etc/metrics-sched/config.yaml"]
    assert pod_spec()["serviceAccountName"] == SERVICE_ACCOUNT
    config_mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/etc/metrics-sched")
    volume = next(v for v in pod_spec()["volumes"] if v["name"] == config_mount["name"])
    assert volume["configMap"]["name"] == "metrics-sched-config"
    assert config_mount.get("readOnly") is True
    assert [p["containerPort"] for p in c["ports"]] == [PORT]


def test_security_context_is_locked_down() -> None:
    pod = pod_spec()["securityContext"]
    c = container()["securityContext"]
    assert pod["runAsNonRoot"] is True and c["runAsNonRoot"] is True
    assert pod["runAsUser"] != 0
    assert pod["seccompProfile"]["type"] == "RuntimeDefault"
    assert c.get("seccompProfile", pod["seccompProfile"])["type"] == "RuntimeDefault"
    assert c["readOnlyRootFilesystem"] is True
    assert c["allowPrivilegeEscalation"] is False
    assert c.get("privileged", False) is False
    assert c["capabilities"]["drop"] == ["ALL"] and not c["capabilities"].get("add")
    spec = pod_spec()
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert not any("hostPath" in v for v in spec["volumes"])


def test_probes_hit_healthz_and_readyz_on_the_server_port() -> None:
    c = container()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        http = c[probe]["httpGet"]
        assert http["path"] == path and http["scheme"] == "HTTPS"
        assert http["path"] in scheduler_config()["server"].get("authorizationAlwaysAllowPaths",
                                                                ["/healthz", "/readyz", "/livez"])
        assert ports.get(http["port"], http["port"]) == PORT
    assert scheduler_config()["server"]["port"] == PORT


def test_resources_have_requests_and_limits() -> None:
    resources = container()["resources"]
    for section in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources[section]), section


def test_the_cmdb_token_is_a_file_from_a_secret() -> None:
    secret_example = load_docs(DEPLOY / SECRET_EXAMPLE)
    assert len(secret_example) == 1 and secret_example[0]["kind"] == "Secret"
    secret = secret_example[0]
    assert secret["metadata"]["namespace"] == NAMESPACE

    token_file = Path(TOKEN_FILE)
    cmdb = next(s for s in scheduler_config()["sources"] if s["type"] == "cmdb")
    assert cmdb["auth"]["tokenFile"] == TOKEN_FILE
    mount = next(m for m in container()["volumeMounts"] if m["mountPath"] == str(token_file.parent))
    assert mount.get("readOnly") is True
    volume = next(v for v in pod_spec()["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    items = volume["secret"].get("items") or [{"key": k, "path": k} for k in secret["stringData"]]
    item = next(i for i in items if i["path"] == token_file.name)
    assert item["key"] in secret.get("stringData", {}) or item["key"] in secret.get("data", {})
    assert volume["secret"].get("defaultMode", 0o644) & 0o007 == 0, "the token file must not be world-readable"
    assert "env" not in container() or not any("secretKeyRef" in str(e) for e in container()["env"])


# -- RBAC ---------------------------------------------------------------------------------------------
def test_the_cluster_role_is_the_allowlist_without_wildcards_or_secrets() -> None:
    role = one("ClusterRole", "metrics-sched")
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule
        for key in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert not any("*" in value for value in rule.get(key, [])), f"wildcard in {rule}"
        assert "secrets" not in rule["resources"] and "configmaps" not in rule["resources"]
        assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"])
        # Two deletes: preemption's victims (pods), and the extended-resource claims the scheduler itself created
        # for an attempt that failed; nothing else.
        assert "delete" not in rule["verbs"] or (rule["apiGroups"], rule["resources"]) in (
            ([""], ["pods"]), (["resource.k8s.io"], ["resourceclaims"]))
    assert normalised_rules(role["rules"]) == CLUSTER_RULES
    assert "aggregationRule" not in role


def test_the_lease_role_is_limited_to_its_own_lease() -> None:
    role = one("Role", "metrics-sched-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert normalised_rules(role["rules"]) == LEASE_RULES
    election = scheduler_config()["leaderElection"]
    assert election["leaderElect"] is True
    assert (election["resourceNamespace"], election["resourceName"]) == (NAMESPACE, LEASE)


def test_flow_schemas_keep_the_scheduler_out_of_workload_low() -> None:
    """Lease calls on a priority level of their own (lending nothing), everything else on workload-high as
    kube-scheduler's calls, both ahead of the `service-accounts` schema (9000) that would put them on
    workload-low."""
    account = {"kind": "ServiceAccount", "serviceAccount": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}}
    schemas = {o["metadata"]["name"]: o for o in base_objects() if o["kind"] == "FlowSchema"}
    assert set(schemas) == {"metrics-sched-leader-election", "metrics-sched"}
    for schema in schemas.values():
        assert schema["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
        assert schema["spec"]["matchingPrecedence"] < 9000
        assert all(rule["subjects"] == [account] for rule in schema["spec"]["rules"])
    election, everything = schemas["metrics-sched-leader-election"]["spec"], schemas["metrics-sched"]["spec"]
    assert election["matchingPrecedence"] < everything["matchingPrecedence"]  # leases match the first
    [rule] = election["rules"]
    [leases] = rule["resourceRules"]
    lease_namespace = scheduler_config()["leaderElection"]["resourceNamespace"]
    assert leases["resources"] == ["leases"] and lease_namespace in leases["namespaces"]
    assert {"get", "create", "update"} <= set(leases["verbs"])
    level = one("PriorityLevelConfiguration", election["priorityLevelConfiguration"]["name"])
    assert level["spec"]["type"] == "Limited" and level["spec"]["limited"]["lendablePercent"] == 0
    assert everything["priorityLevelConfiguration"]["name"] == "workload-high"


def test_the_rebalance_role_only_creates_evictions_and_is_bound_to_the_service_account() -> None:
    docs = {doc["kind"]: doc for doc in load_docs(DEPLOY / REBALANCE_RBAC)}
    assert set(docs) == {"ClusterRole", "ClusterRoleBinding"}
    role, binding = docs["ClusterRole"], docs["ClusterRoleBinding"]
    assert normalised_rules(role["rules"]) == REBALANCE_RULES
    assert not REBALANCE_RULES & CLUSTER_RULES, "the base role must not evict"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]


@pytest.mark.parametrize(("kind", "role_kind", "role_name"), [
    ("ClusterRoleBinding", "ClusterRole", "metrics-sched"),
    ("RoleBinding", "Role", "metrics-sched-leader-election"),
])
def test_bindings_grant_the_roles_to_the_service_account_only(kind: str, role_kind: str, role_name: str) -> None:
    binding = one(kind, role_name)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]
    account = one("ServiceAccount", SERVICE_ACCOUNT)
    assert account["metadata"]["namespace"] == NAMESPACE


# -- the config, the Service, monitoring, the NetworkPolicy ----------------------------------------------
def test_the_config_is_valid_and_has_the_three_sources(tmp_path: Path) -> None:
    registry = in_tree_registry()
    config = scheduler_config()
    assert [p["schedulerName"] for p in config["profiles"]] == ["metrics-sched"]
    by_type = {s["type"]: s for s in config["sources"]}
    assert set(by_type) == {"prometheus", "cmdb", "metrics-server"}
    prometheus = by_type["prometheus"]
    assert prometheus["url"] == "http://prometheus-operated.monitoring.svc:9090"
    presets = {m.get("preset") for m in prometheus["metrics"]}
    assert {"dcgm_gpu_temp", "node_load_per_cpu", "opencost_node_hourly_cost"} <= presets
    assert by_type["cmdb"]["preset"] == "netbox"

    parsed = parse_config(config, registry.catalog())
    assert parsed.leader_election.resource_namespace == NAMESPACE
    # The rebalancer's example is valid and off (it needs rbac-rebalance.yaml), and dry when turned on.
    assert parsed.rebalance.rules and not parsed.rebalance.enabled and parsed.rebalance.dry_run
    # The sources' own validation reads the token file: point it at a stand-in.
    token = tmp_path / "token"
    token.write_text("t0ken")
    by_type["cmdb"]["auth"]["tokenFile"] = str(token)
    for source in build_sources(parse_config(config, registry.catalog()), tmp_path, None):
        source.close()


def test_the_service_and_service_monitor_reach_the_metrics_port() -> None:
    labels = deployment()["spec"]["template"]["metadata"]["labels"]
    service = one("Service")
    assert service["spec"]["selector"].items() <= labels.items()
    port = next(p for p in service["spec"]["ports"] if p["name"] == "https")
    ports = {p["name"]: p["containerPort"] for p in container()["ports"]}
    assert ports.get(port["targetPort"], port["targetPort"]) == PORT
    monitor = one("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == ("https", "/metrics", "https")
    # The scraper's token through `authorization` (not the deprecated bearerTokenFile), and the certificate verified
    # for the Service's name with the Secret's CA.
    assert "bearerTokenFile" not in endpoint
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {
        "name": "metrics-sched-metrics-scraper-token", "key": "token"}}
    token = one("Secret", "metrics-sched-metrics-scraper-token")
    scraper = one("ServiceAccount", "metrics-sched-metrics-scraper")
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"]["kubernetes.io/service-account.name"] == scraper["metadata"]["name"]
    binding = one("ClusterRoleBinding", "metrics-sched-metrics-scraper")
    assert binding["roleRef"]["name"] == "metrics-sched-metrics-reader"  # /metrics only
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": scraper["metadata"]["name"],
                                    "namespace": NAMESPACE}]
    tls = endpoint["tlsConfig"]
    assert "insecureSkipVerify" not in tls and tls["serverName"] == "metrics-sched.metrics-sched.svc"
    assert tls["ca"] == {"secret": {"name": "metrics-sched-serving-cert", "key": "ca.crt"}}
    volumes = {v["name"]: v for v in deployment()["spec"]["template"]["spec"]["volumes"]}
    assert volumes["serving-cert"]["secret"]["secretName"] == "metrics-sched-serving-cert"
    server = scheduler_config()["server"]
    assert not server.get("insecure")
    mount = next(m for m in container()["volumeMounts"] if m["name"] == "serving-cert")["mountPath"]
    assert (server["tlsCertFile"], server["tlsPrivateKeyFile"]) == (f"{mount}/tls.crt", f"{mount}/tls.key")


def test_readers_get_non_resource_urls_only_and_prometheus_only_metrics() -> None:
    reader, metrics = one("ClusterRole", "metrics-sched-reader"), one("ClusterRole", "metrics-sched-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics", "/decisions", "/sources", "/values", "/status"],
                                "verbs": ["get"]}]
    assert metrics["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    binding = one("ClusterRoleBinding", "metrics-sched-metrics-reader-prometheus")
    assert binding["roleRef"]["name"] == "metrics-sched-metrics-reader"
    assert [s["namespace"] for s in binding["subjects"]] == ["monitoring"]
    finder = one("Role", "metrics-sched-find-leader")
    assert finder["metadata"]["namespace"] == NAMESPACE
    assert normalised_rules(finder["rules"]) == {("", "services", "get", "metrics-sched"),
                                                 ("coordination.k8s.io", "leases", "get", LEASE),
                                                 ("discovery.k8s.io", "endpointslices", "list", None),
                                                 ("", "pods/proxy", "get", None)}


def test_the_prometheus_rule_has_the_four_alerts() -> None:
    rule = one("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    alerts: dict[str, dict[str, Any]] = {
        r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r}

    def squash(text: str) -> str:
        return re.sub(r"\s+", "", text)

    def expr_with(fragment: str) -> dict[str, Any]:
        found = [a for a in alerts.values() if squash(fragment) in squash(a["expr"])]
        assert len(found) == 1, f"expected one alert on {fragment}"
        return found[0]

    assert expr_with("metrics_sched_source_up == 0")["for"] == "5m"
    assert squash('metrics_sched_metric_coverage_ratio{metric="gpu_temperature"} < 0.5') in squash(
        expr_with("metrics_sched_metric_coverage_ratio")["expr"])
    pending = expr_with('scheduler_pending_pods{queue=~"active|backoff|unschedulable"}')
    assert pending["for"] == "10m" and squash(pending["expr"]).startswith("sum(") and squash(
        pending["expr"]).endswith(">100")
    expr_with('rate(metrics_sched_bind_results_total{result="error"}[5m]) > 0')
    for alert in alerts.values():
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_links_its_runbook_entry() -> None:
    rule = one("PrometheusRule")
    alerts = [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]
    page = RUNBOOKS.read_text()
    entries = dict(re.findall(r"^## ([^\n]+)\n(.*?)(?=^## |\Z)", page, flags=re.M | re.S))
    assert set(entries) == {a["alert"] for a in alerts}, "one runbook entry per alert, and no other"
    for alert in alerts:
        url = alert["annotations"]["runbook_url"]
        assert url == f"{RUNBOOK_BASE}#{github_anchor(alert['alert'])}", alert["alert"]
        body = entries[alert["alert"]]
        for part in ("**Means**", "**Check**", "**Do**"):
            assert part in body, f"{alert['alert']}'s runbook lacks {part}"
    # The deploying and observability pages link the runbooks.
    for linking in ("deploying.md", "observability.md"):
        assert "(runbooks.md" in (RUNBOOKS.parent / linking).read_text(), linking


def test_the_network_policy_opens_only_the_metrics_port_and_the_needed_egress() -> None:
    policy = one("NetworkPolicy")
    labels = deployment()["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    ingress_ports = [p for rule in policy["spec"]["ingress"] for p in rule["ports"]]
    assert ingress_ports == [{"protocol": "TCP", "port": PORT}]
    # Only from Prometheus's pods: no other pod may connect (the kubelet's probes are never blocked).
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                             "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]
    egress = {(p.get("protocol", "TCP"), p["port"]) for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert egress == {("UDP", 53), ("TCP", 53), ("TCP", 443), ("TCP", 6443), ("TCP", 9090)}
    assert all(rule.get("ports") for rule in policy["spec"]["egress"]), "an egress rule without ports opens all"


# -- examples -----------------------------------------------------------------------------------------
def test_examples_select_metrics_sched_and_request_gpus() -> None:
    examples = sorted((DEPLOY / "examples").glob("*.yaml"))
    kinds = set()
    for path in examples:
        for doc in load_docs(path):
            kinds.add(doc["kind"])
            spec: dict[str, Any] = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
            assert spec["schedulerName"] == "metrics-sched", path
            for c in spec["containers"]:
                resources = c["resources"]
                assert int(resources["requests"]["nvidia.com/gpu"]) >= 1, path
                assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"], path
    assert {"Pod", "Deployment"} <= kinds


def test_the_custom_metrics_role_reads_named_metrics_only_and_is_not_in_the_base_install() -> None:
    docs = {doc["kind"]: doc for doc in load_docs(DEPLOY / "rbac-custom-metrics.yaml")}
    assert set(docs) == {"ClusterRole", "ClusterRoleBinding"}
    role, binding = docs["ClusterRole"], docs["ClusterRoleBinding"]
    for rule in role["rules"]:
        assert rule["verbs"] == ["get"]
        assert rule["apiGroups"] in (["custom.metrics.k8s.io"], ["external.metrics.k8s.io"])
        assert not any("*" in r for r in rule["resources"]), "each metric is named"
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]
    resources = load_docs(DEPLOY / "kustomization.yaml")[0]["resources"]
    assert "rbac-custom-metrics.yaml" not in resources
