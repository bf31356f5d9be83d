"""The Helm chart (deploy/helm/metrics-sched) with the helm of deploy/local/versions.toml, built from Go modules by
`make control-plane`: lint, the schema's refusals, the default render against deploy/, the rendered objects applied to
the dev API server, the chart's ServiceAccount holding exactly deploy/'s RBAC allowlist, and the Helm-rendered install
(its config, its ServiceAccount's token) scheduling the example GPU pod.

The dev cluster has no kubelet running real containers, so the scheduler runs here as a process, with the chart's
rendered config and a TokenRequest token of the chart's ServiceAccount, as tests/e2e/test_deploy.py does for deploy/.
"""

from __future__ import annotations

import copy
import functools
import re
import secrets
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from adapters.prometheus.rules_manifest import manifest_text
from devcluster import DevCluster
from devcluster.build import BuildError, helm_binary
from devcluster.kubeapi import KubeAPI
from devcluster.ports import free_port
from grafana.build_configmap import configmap as dashboards_configmap
from tests.deploy_rbac import CLUSTER_RULES, LEASE, LEASE_RULES, REBALANCE_RULES, Rule
from tests.e2e import kube
from tests.e2e.test_deploy import (
    DEPLOY,
    apply,
    kustomization_objects,
    load_docs,
    resource_path,
    resource_rules,
    sa_client,
)

pytestmark = pytest.mark.e2e

CHART = DEPLOY / "helm" / "metrics-sched"
FULL_VALUES = CHART / "ci" / "full-values.yaml"
PROMETHEUS_ONLY_VALUES = CHART / "ci" / "prometheus-only-values.yaml"
SELF_SIGNED_VALUES = CHART / "ci" / "self-signed-values.yaml"
# The API server's addresses for the NetworkPolicy: `helm install` reads them from the cluster, `helm template` cannot
# (the chart then refuses to render rather than open 0.0.0.0/0). Given first, so any later --values may override.
API_SERVER_CIDR = "10.0.0.2/32"
# What a cluster with the Prometheus Operator reports (`helm template` has no cluster to ask).
OPERATOR_APIS = ("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
                 "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
# Kinds the chart renders that the dev API server does not serve: cert-manager's (serving.certManager). Linted and
# rendered here, not applied.
CERT_MANAGER_KINDS = frozenset({"Issuer", "Certificate"})
# In deploy/ but deliberately not in the chart: Helm installs into a namespace that exists (`--create-namespace`),
# and a chart that also owns its Namespace object collides with it. The README's install steps label it for the
# restricted Pod Security profile instead.
NOT_IN_CHART = frozenset({"Namespace"})


# -- helm -----------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def helm(cluster: DevCluster) -> Path:
    """The helm binary; the cluster fixture's build (`ensure_built`) made it."""
    try:
        path = helm_binary()
    except BuildError as exc:
        pytest.fail(str(exc), pytrace=False)
    if not path.is_file():
        pytest.fail(f"{path} is missing: `make control-plane` builds it", pytrace=False)
    return path


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)


@functools.cache
def api_server_values() -> str:
    path = Path(tempfile.mkdtemp(prefix="helm-e2e-")) / "api-server-values.yaml"
    path.write_text(yaml.safe_dump({"networkPolicy": {"apiServer": {"cidrs": [API_SERVER_CIDR]}}}))
    return str(path)


def render(helm: Path, release: str, namespace: str, *args: str) -> list[dict[str, Any]]:
    proc = run_helm(helm, "template", release, str(CHART), "--namespace", namespace,
                    "--values", api_server_values(), *args)
    assert proc.returncode == 0, f"helm template {' '.join(args)}:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def rules_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = obj["rules"]
    return rules


def config_of(objects: list[dict[str, Any]], fullname: str) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(one(objects, "ConfigMap", f"{fullname}-config")["data"]["config.yaml"])
    return config


def check_config(config: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"config-{secrets.token_hex(3)}.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run([sys.executable, "-m", "metrics_sched.app.cli", "check-config", str(path)],
                          capture_output=True, text=True, timeout=60)


# -- lint, schema, render -------------------------------------------------------------------------------------------
def test_helm_lint_strict_with_default_and_full_values(helm: Path) -> None:
    ci = sorted((CHART / "ci").glob("*.yaml"))
    assert {FULL_VALUES, PROMETHEUS_ONLY_VALUES, SELF_SIGNED_VALUES} <= set(ci)
    for args in ([], *(["--values", str(path)] for path in ci)):
        proc = run_helm(helm, "lint", "--strict", str(CHART), *args)
        assert proc.returncode == 0, f"helm lint --strict {' '.join(args)}:\n{proc.stdout}{proc.stderr}"
        assert "0 chart(s) failed" in proc.stdout


SCHEMA_REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"replicaCount": 0}, "/replicaCount"),
    ({"image": {"tag": "latest"}}, "/image/tag"),
    ({"replicas": 2}, "additional properties 'replicas' not allowed"),
    ({"serviceMonitor": {"enabled": "yes"}}, "/serviceMonitor/enabled"),
    ({"sources": {"cmdb": {"enabled": True, "url": "http://netbox.example.com/api/"}}}, "/sources/cmdb/url"),
    ({"sources": {"cmdb": {"enabled": True}}}, "/sources/cmdb/url"),
    ({"config": {"leaderElection": {"resourceNamespace": "kube-system"}}}, "resourceNamespace"),
    ({"config": {"server": {"insecure": True}}}, "insecure"),
    ({"config": {"extra": {"sources": []}}}, "sources"),
    ({"resources": {"limits": {"memory": "lots"}}}, "/resources/limits/memory"),
    ({"rbac": {"customMetrics": {"enabled": True, "nodeMetrics": ["*"]}}}, "/rbac/customMetrics/nodeMetrics/0"),
]
# Cross-field refusals are the templates' own (`fail`, `required`), each with its reason. `helm lint` renders in
# lint mode, where those only warn, so they are checked where they bite: `helm template` (and install, upgrade).
TEMPLATE_REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"config": {"rebalance": {"enabled": True}}}, "config.rebalance.enabled needs rbac.rebalance: true"),
    ({"rbac": {"customMetrics": {"enabled": True}}}, "rbac.customMetrics.enabled: name the metrics"),
    ({"serving": {"selfSigned": True, "certManager": True}}, "serving.selfSigned: the scheduler signs its own pair"),
    ({"serving": {"selfSigned": True, "certSecret": "mine"}}, "unset serving.certManager, serving.certSecret"),
    ({"networkPolicy": {"apiServer": {"cidrs": []}}}, "networkPolicy.apiServer.cidrs: name the API server"),
    ({"sources": {"cmdb": {"enabled": True, "url": "https://netbox.example.com/api/dcim/devices/"}}},
     "networkPolicy.cmdb.cidrs: the CMDB's addresses"),
    ({"serviceMonitor": {"enabled": True}, "rbac": {"readers": {"create": False}}},
     "serviceMonitor.tokenSecret.name: name the Secret"),
]


@pytest.mark.parametrize(("values", "refusal", "commands"),
                         [(v, r, ("template", "lint")) for v, r in SCHEMA_REFUSALS]
                         + [(v, r, ("template",)) for v, r in TEMPLATE_REFUSALS])
def test_bad_values_are_refused_naming_the_field(helm: Path, tmp_path: Path, values: dict[str, Any],
                                                 refusal: str, commands: tuple[str, ...]) -> None:
    path = tmp_path / "bad-values.yaml"
    path.write_text(yaml.safe_dump(values))
    for command in commands:
        proc = run_helm(helm, command, *(("x",) if command == "template" else ()), str(CHART),
                        "--values", api_server_values(), "--values", str(path))
        assert proc.returncode != 0, f"helm {command} accepted {values}"
        assert refusal in proc.stdout + proc.stderr, f"helm {command} {values}: {proc.stdout}{proc.stderr}"


def test_default_render_is_deploy(helm: Path, tmp_path: Path) -> None:
    """The chart's default render, released as metrics-sched in metrics-sched, has deploy/'s objects: the same kinds
    and names, the same RBAC rules, Deployment resources, alerts and probes."""
    chart = render(helm, "metrics-sched", "metrics-sched", *OPERATOR_APIS)
    deployed = kustomization_objects()
    assert {(o["kind"], o["metadata"]["name"]) for o in chart} == \
        {(o["kind"], o["metadata"]["name"]) for o in deployed if o["kind"] not in NOT_IN_CHART}
    for obj in chart:
        assert obj["metadata"].get("namespace", "metrics-sched") == "metrics-sched"
    for kind in ("ClusterRole", "Role"):
        for obj in (o for o in deployed if o["kind"] == kind):
            assert rules_of(one(chart, kind, obj["metadata"]["name"])) == rules_of(obj), obj["metadata"]["name"]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for obj in (o for o in deployed if o["kind"] == kind):
            mine = one(chart, kind, obj["metadata"]["name"])
            assert (mine["roleRef"], mine["subjects"]) == (obj["roleRef"], obj["subjects"]), obj["metadata"]["name"]
    for kind in ("FlowSchema", "PriorityLevelConfiguration", "PrometheusRule", "ServiceMonitor", "Service",
                 "PodDisruptionBudget"):
        for obj in (o for o in deployed if o["kind"] == kind):
            spec, mine = obj["spec"], one(chart, kind, obj["metadata"]["name"])["spec"]
            if "selector" in spec:  # the chart's selector adds app.kubernetes.io/instance (one release, its pods)
                mine = {**mine, "selector": spec["selector"]}
            assert mine == spec, f"{kind}/{obj['metadata']['name']}"

    pod, deployed_pod = (one(objs, "Deployment")["spec"]["template"]["spec"] for objs in (chart, deployed))
    container, deployed_container = pod["containers"][0], deployed_pod["containers"][0]
    for field in ("resources", "ports", "livenessProbe", "readinessProbe", "securityContext", "args"):
        assert container[field] == deployed_container[field], field
    for field in ("priorityClassName", "securityContext", "serviceAccountName", "terminationGracePeriodSeconds"):
        assert pod[field] == deployed_pod[field], field
    assert container["image"] == deployed_container["image"] == "metrics-sched:0.1.0"
    # Every volume of deploy/'s Deployment but the CMDB token's (the chart mounts it only with sources.cmdb).
    volumes, deployed_volumes = ({v["name"]: v for v in p["volumes"]} for p in (pod, deployed_pod))
    mounts, deployed_mounts = ({m["name"]: m for m in c["volumeMounts"]} for c in (container, deployed_container))
    assert set(volumes) == set(mounts) == set(deployed_volumes) - {"cmdb-token"}
    for name in volumes:
        assert (volumes[name], mounts[name]) == (deployed_volumes[name], deployed_mounts[name]), name

    # The config: deploy/'s Lease and server; the sources the chart enables by default; valid as rendered.
    config, deployed_config = config_of(chart, "metrics-sched"), yaml.safe_load(
        one(deployed, "ConfigMap")["data"]["config.yaml"])
    for section in ("leaderElection", "server", "profiles", "audit", "metrics"):
        assert config[section] == deployed_config[section], section
    assert [s["name"] for s in config["sources"]] == ["prometheus", "metrics-server"]
    assert {s["name"]: s for s in config["sources"]}["prometheus"] == \
        {s["name"]: s for s in deployed_config["sources"]}["prometheus"]
    checked = check_config(config, tmp_path)
    assert checked.returncode == 0, checked.stderr

    # With deploy/'s CMDB source configured, the config and the NetworkPolicy are deploy/'s, field for field.
    # deploy/ opens 0.0.0.0/0 (a kustomize base cannot know the addresses); the chart names them instead.
    cmdb = {s["name"]: s for s in deployed_config["sources"]}["cmdb"]
    with_cmdb = render(helm, "metrics-sched", "metrics-sched", "--set", "sources.cmdb.enabled=true",
                       "--set", f"sources.cmdb.url={cmdb['url']}", "--set", "networkPolicy.cmdb.cidrs={192.0.2.10/32}")
    assert config_of(with_cmdb, "metrics-sched") == deployed_config
    policy = one(with_cmdb, "NetworkPolicy")["spec"]
    deployed_policy = copy.deepcopy(one(deployed, "NetworkPolicy")["spec"])
    named = {443: "192.0.2.10/32", 6443: API_SERVER_CIDR}  # the CMDB's rule is on 443 only, the API server's on both
    for rule in deployed_policy["egress"]:
        if any("ipBlock" in peer for peer in rule["to"]):
            assert rule["to"][0]["ipBlock"]["cidr"] == "0.0.0.0/0"
            rule["to"] = [{"ipBlock": {"cidr": named[max(p["port"] for p in rule["ports"])]}}]
    assert {**policy, "podSelector": deployed_policy["podSelector"]} == deployed_policy
    assert "0.0.0.0/0" not in yaml.safe_dump(policy)


def test_full_render_has_the_optional_objects_of_deploy(helm: Path, tmp_path: Path) -> None:
    chart = render(helm, "metrics-sched", "metrics-sched", "--values", str(FULL_VALUES), "--include-crds")
    # deploy/crds (the chart's crds/: installed by `helm install` when absent, never upgraded or deleted by Helm).
    for crd in sorted((DEPLOY / "crds").glob("*.yaml")):
        for obj in load_docs(crd):
            assert one(chart, obj["kind"], obj["metadata"]["name"]) == obj, crd.name
    # rbac.rebalance and rbac.customMetrics are deploy/'s optional files; full-values names the same metrics.
    for path in ("rbac-rebalance.yaml", "rbac-custom-metrics.yaml"):
        for obj in load_docs(DEPLOY / path):
            mine = one(chart, obj["kind"], obj["metadata"]["name"])
            assert {k: mine[k] for k in obj if k in ("rules", "roleRef", "subjects")} == \
                {k: obj[k] for k in obj if k in ("rules", "roleRef", "subjects")}, path
    # serving.certManager renders deploy/serving-cert.example.yaml's Issuers and Certificates.
    for obj in load_docs(DEPLOY / "serving-cert.example.yaml"):
        assert one(chart, obj["kind"], obj["metadata"]["name"])["spec"] == obj["spec"]
    # The dashboards are grafana/dashboards' files, byte for byte (what grafana/build_configmap.py embeds).
    dashboards = one(chart, "ConfigMap", "metrics-sched-grafana-dashboards")
    assert dashboards["data"] == dashboards_configmap()["data"]
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's label
    assert dashboards["metadata"]["namespace"] == "monitoring"  # dashboards.namespace: where the sidecar looks
    generated = dashboards_configmap(namespace="monitoring")["metadata"]  # grafana/build_configmap.py --namespace
    assert generated["labels"].items() <= dashboards["metadata"]["labels"].items()
    assert (generated["namespace"], generated["annotations"]) == (dashboards["metadata"]["namespace"],
                                                                  dashboards["metadata"]["annotations"])
    # Runbook links rebased; the CMDB token mounted where its source reads it; replicas, image, placement.
    rule = one(chart, "PrometheusRule")
    urls = [r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert urls and all(u.startswith("https://docs.example.com/metrics-sched/runbooks.md#") for u in urls)
    deployment = one(chart, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 3 and "priorityClassName" not in pod
    assert pod["containers"][0]["image"] == "registry.example.com/platform/metrics-sched:0.1.0"
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    config = config_of(chart, "metrics-sched")
    cmdb = {s["name"]: s for s in config["sources"]}["cmdb"]
    assert cmdb["auth"]["tokenFile"] == f"{mounts['cmdb-token']}/token"
    assert [s["type"] for s in config["sources"]] == ["prometheus", "cmdb", "metrics-server", "custom-metrics"]
    assert config["percentageOfNodesToScore"] == 50 and config["rebalance"]["enabled"] is True
    # The container knobs: logLevel, extraArgs after the chart's, env, extra volumes and mounts, spread constraints
    # (an absent labelSelector filled with the pods' own selector).
    container = pod["containers"][0]
    assert container["args"] == ["run", "--config", "/etc/metrics-sched/config.yaml", "--log-level", "debug",
                                 "--log-format", "text"]
    assert [e["name"] for e in container["env"]] == ["HTTPS_PROXY", "NODE_NAME"]
    assert {"name": "cmdb-ca", "configMap": {"name": "cmdb-ca-bundle"}} in pod["volumes"]
    assert mounts["cmdb-ca"] == "/etc/metrics-sched-extra/ca"
    zone, host = pod["topologySpreadConstraints"]
    assert zone["labelSelector"] == deployment["spec"]["selector"]
    assert host["labelSelector"] == {"matchLabels": {"app.kubernetes.io/name": "metrics-sched"}}
    assert deployment["spec"]["template"]["metadata"]["annotations"]["example.com/team"] == "platform"
    # The NetworkPolicy's egress: the named API server and CMDB addresses, and the extra rule; never 0.0.0.0/0.
    egress = one(chart, "NetworkPolicy")["spec"]["egress"]
    blocks = [([p["ipBlock"]["cidr"] for p in r["to"] if "ipBlock" in p], [p["port"] for p in r["ports"]])
              for r in egress]
    assert [b for b in blocks if b[0]] == [(["10.0.0.2/32", "10.0.0.3/32"], [6443]), (["192.0.2.10/32"], [443]),
                                           (["198.51.100.7/32"], [9090])]
    # Prometheus scrapes with the chart's scraper token (`authorization`), verifying the cert-manager certificate.
    [endpoint] = one(chart, "ServiceMonitor")["spec"]["endpoints"]
    assert "bearerTokenFile" not in endpoint
    assert endpoint["authorization"]["credentials"] == {"name": "metrics-sched-metrics-scraper-token", "key": "token"}
    assert endpoint["tlsConfig"]["ca"]["secret"]["name"] == "metrics-sched-serving-cert"
    # Valid as rendered, once the token file it names exists (check-config reads it).
    token = tmp_path / "token"
    token.write_text("t")
    cmdb["auth"]["tokenFile"] = str(token)
    checked = check_config(config, tmp_path)
    assert checked.returncode == 0, checked.stderr
    # Prometheus only: one source, valid.
    only = config_of(render(helm, "metrics-sched", "metrics-sched", "--values", str(PROMETHEUS_ONLY_VALUES)),
                     "metrics-sched")
    assert [s["type"] for s in only["sources"]] == ["prometheus"]
    assert check_config(only, tmp_path).returncode == 0


def test_config_change_rolls_the_pods(helm: Path) -> None:
    before = one(render(helm, "r", "ns"), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    after = one(render(helm, "r", "ns", "--set", "config.leaderElection.leaseDuration=30s"),
                "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert before["checksum/config"] != after["checksum/config"]


def test_recording_rules_are_deploys_and_switch_the_source(helm: Path, tmp_path: Path) -> None:
    """sources.prometheus.recordingRules: the rules of deploy/recording-rules (generated from the adapter's own)
    installed as a PrometheusRule the operator's ruleSelector can pick, and the source reading them; off by
    default, and not rendered without the operator's API (a plain Prometheus loads the rule file itself)."""
    on = ("--set", "sources.prometheus.recordingRules=true", "--set", "prometheusRule.labels.release=kps")
    chart = render(helm, "r", "ns", *OPERATOR_APIS, *on)
    rule = one(chart, "PrometheusRule", "r-metrics-sched-recording")
    assert rule["metadata"]["namespace"] == "ns" and rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"] == yaml.safe_load(manifest_text())["spec"]
    config = config_of(chart, "r-metrics-sched")
    prometheus = {s["name"]: s for s in config["sources"]}["prometheus"]
    assert prometheus["recordingRules"] is True
    assert check_config(config | {"sources": [prometheus]}, tmp_path).returncode == 0
    # Off by default; on without the operator's API: the source alone.
    default = render(helm, "r", "ns", *OPERATOR_APIS)
    assert not [o for o in default if o["metadata"]["name"] == "r-metrics-sched-recording"]
    default_sources = {s["name"]: s for s in config_of(default, "r-metrics-sched")["sources"]}
    assert "recordingRules" not in default_sources["prometheus"]  # the source's default (off), as deploy/ has it
    plain = render(helm, "r", "ns", *on)
    assert not [o for o in plain if o["kind"] == "PrometheusRule"]


def test_notes_give_the_verify_steps(helm: Path, cluster: DevCluster) -> None:
    """NOTES.txt, as `helm install` prints it (a client-side dry run: helm only asks the API server its version)."""
    proc = subprocess.run([str(helm), "install", "metrics-sched", str(CHART), "--namespace", "metrics-sched",
                           "--dry-run=client", "--kubeconfig", str(cluster.kubeconfig),
                           "--values", api_server_values()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("NOTES:", 1)[1]
    for step in ("kubectl -n metrics-sched get lease metrics-sched",
                 "deploy/examples/gpu-pod.yaml",
                 r"annotations.metrics-sched\.io/decision",
                 "metrics-sched explain default/cuda-smoke --service metrics-sched/metrics-sched",
                 "Secret metrics-sched-serving-cert"):
        assert step in notes, f"NOTES.txt lacks {step!r}:\n{notes}"
    # serving.selfSigned: no Secret to create or read the CA from; the CA is in the pod's certDir.
    self_signed = subprocess.run([str(helm), "install", "metrics-sched", str(CHART), "--namespace", "metrics-sched",
                                  "--dry-run=client", "--kubeconfig", str(cluster.kubeconfig),
                                  "--values", api_server_values(), "--values", str(SELF_SIGNED_VALUES)],
                                 capture_output=True, text=True, timeout=120)
    assert self_signed.returncode == 0, self_signed.stderr
    notes = self_signed.stdout.split("NOTES:", 1)[1]
    assert "no Secret is needed" in notes and "/var/run/metrics-sched/serving/ca.crt" in notes, notes
    assert "get secret" not in notes and "Secret metrics-sched-serving-cert" not in notes, notes


# -- on the dev API server ------------------------------------------------------------------------------------------
class Release:
    """A chart render applied to the API server for real (server-side apply), removed afterwards."""

    def __init__(self, api: KubeAPI, objects: list[dict[str, Any]], namespace: str, fullname: str) -> None:
        self.api, self.objects, self.namespace, self.fullname = api, objects, namespace, fullname

    def install(self) -> None:
        self.api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": self.namespace, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
        failures, warnings = [], []
        for obj in self.objects:
            resp = apply(self.api, obj, dry_run=False)
            what = f"{obj['kind']}/{obj['metadata']['name']}"
            if resp.status_code >= 300:
                failures.append(f"{what}: HTTP {resp.status_code}: {resp.text[:500]}")
            warnings += [f"{what}: {w}" for w in resp.headers.get_list("warning")]
        assert not failures, "the API server refused:\n" + "\n".join(failures)
        assert not warnings, "the API server warned:\n" + "\n".join(warnings)
        for obj in self.objects:  # stored as rendered
            stored = self.api.get(resource_path(self.api, obj))
            assert stored["metadata"]["labels"]["app.kubernetes.io/instance"] == \
                obj["metadata"]["labels"]["app.kubernetes.io/instance"]

    def uninstall(self) -> None:
        for obj in reversed(self.objects):
            if "namespace" not in obj["metadata"]:  # cluster-scoped: the namespace's deletion does not take them
                self.api.request("DELETE", resource_path(self.api, obj), ok=(404,))
        self.api.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.fullname}",
                         ok=(404,))
        kube.delete_namespace(self.api, self.namespace)


@pytest.fixture(scope="module")
def release(helm: Path, api: KubeAPI, cluster: DevCluster, crds: list[str]) -> Iterator[Release]:
    """The chart with its default values, pointed at the dev cluster's Prometheus, installed as helm-e2e (a release
    name that does not say metrics-sched, so every name is the chart's "<release>-metrics-sched")."""
    assert cluster.endpoints is not None and cluster.endpoints.prometheus
    namespace = f"helm-e2e-{secrets.token_hex(2)}"
    objects = render(helm, "helm-e2e", namespace, *OPERATOR_APIS,
                     "--set", f"sources.prometheus.url={cluster.endpoints.prometheus}")
    installed = Release(api, objects, namespace, "helm-e2e-metrics-sched")
    try:
        installed.install()
        yield installed
    finally:
        installed.uninstall()


def test_full_render_applies_and_its_toggles_grant_their_rules(helm: Path, api: KubeAPI, cluster: DevCluster,
                                                               crds: list[str]) -> None:
    namespace = f"helm-full-{secrets.token_hex(2)}"
    # full-values puts the dashboards where the sidecar looks (monitoring): here, into the release's own namespace.
    objects = render(helm, "helm-full", namespace, "--values", str(FULL_VALUES),
                     "--set", f"dashboards.namespace={namespace}")
    applied = [o for o in objects if o["kind"] not in CERT_MANAGER_KINDS]
    assert {o["kind"] for o in applied} >= {"Deployment", "ConfigMap", "ServiceMonitor", "PrometheusRule",
                                            "NetworkPolicy", "PodDisruptionBudget", "FlowSchema", "ClusterRole"}
    full = Release(api, applied, namespace, "helm-full-metrics-sched")
    try:
        full.install()
        # rbac.rebalance and rbac.customMetrics add exactly their rules (the metrics full-values.yaml names).
        custom: set[Rule] = {("custom.metrics.k8s.io", "nodes/gpu_power_watts", "get", None),
                             ("external.metrics.k8s.io", "spot_price", "get", None)}
        lease_rules: set[Rule] = {(g, r, v, full.fullname if n == LEASE else n) for g, r, v, n in LEASE_RULES}
        with sa_client(cluster, token_for(api, namespace, full.fullname)) as sa_api:
            assert resource_rules(sa_api, namespace) == CLUSTER_RULES | lease_rules | REBALANCE_RULES | custom
    finally:
        full.uninstall()


def token_for(api: KubeAPI, namespace: str, service_account: str) -> str:
    """A bound token of the ServiceAccount from the TokenRequest API (what the kubelet would mount)."""
    review = api.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    token: str = review["status"]["token"]
    assert token
    return token


def test_chart_service_account_has_exactly_the_allowlist(release: Release, cluster: DevCluster, api: KubeAPI,
                                                         namespace: str) -> None:
    lease_rules: set[Rule] = {(g, r, v, release.fullname if n == LEASE else n) for g, r, v, n in LEASE_RULES}
    with sa_client(cluster, token_for(api, release.namespace, release.fullname)) as sa_api:
        assert resource_rules(sa_api, release.namespace) == CLUSTER_RULES | lease_rules
        assert resource_rules(sa_api, namespace) == CLUSTER_RULES
        assert not REBALANCE_RULES & resource_rules(sa_api, namespace)  # the rebalance toggle is off by default


def test_helm_install_schedules_the_example_gpu_pod(release: Release, cluster: DevCluster, api: KubeAPI,
                                                    namespace: str, tmp_path: Path) -> None:
    endpoints = cluster.endpoints
    assert endpoints is not None
    kubeconfig = kube.token_kubeconfig(endpoints, token_for(api, release.namespace, release.fullname),
                                       release.namespace, tmp_path, user="chart")
    # The rendered config as the pod would read it, but for what only exists in a pod: the serving certificate's
    # Secret mount (a self-signed pair instead) and the pod network (loopback here).
    config = config_of(release.objects, release.fullname)
    assert config["leaderElection"] == {**config["leaderElection"], "resourceName": release.fullname,
                                        "resourceNamespace": release.namespace}
    del config["server"]["tlsCertFile"], config["server"]["tlsPrivateKeyFile"]
    config["server"]["bindAddress"] = "127.0.0.1"
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))

    identity = f"helm-test-{secrets.token_hex(3)}"
    name = f"metrics-sched-helm-{secrets.token_hex(3)}"
    managed = cluster.group.start(name, [
        sys.executable, "-m", "metrics_sched.app.cli", "run", "--config", str(config_file),
        "--kubeconfig", str(kubeconfig),
        "--port", "0", "--identity", identity, "--log-format", "text",
    ])
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{release.namespace}/leases/{release.fullname}"

    def holder() -> str | None:
        if not managed.alive():
            raise AssertionError(managed.describe_exit())
        return lease_holder(api, lease_path)

    try:
        assert kube.poll(holder, 60, f"Lease {release.namespace}/{release.fullname} held") == identity
        (pod,) = load_docs(DEPLOY / "examples" / "gpu-pod.yaml")
        assert pod["spec"]["schedulerName"] == config["profiles"][0]["schedulerName"]
        api.post(f"/api/v1/namespaces/{namespace}/pods",
                 {**pod, "metadata": {**pod["metadata"], "namespace": namespace}})
        pod_path = f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}"

        def bound() -> dict[str, Any] | None:
            found = api.get(pod_path)
            return found if found["spec"].get("nodeName") else None

        placed = kube.poll(bound, 60, f"{pod['metadata']['name']} bound by the Helm-rendered scheduler")
        node = api.get(f"/api/v1/nodes/{placed['spec']['nodeName']}")
        assert int(node["status"]["allocatable"].get("nvidia.com/gpu", "0")) >= 1
        kube.poll(lambda: "metrics-sched.io/decision" in (api.get(pod_path)["metadata"].get("annotations") or {}),
                  20, "the decision annotation on the GPU pod")

        def scheduled_event() -> bool:
            items = api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
            return any(e["regarding"]["name"] == pod["metadata"]["name"] and e["reason"] == "Scheduled" for e in items)

        kube.poll(scheduled_event, 20, "the Scheduled event of the GPU pod")
        log = managed.log.read_text(errors="replace").lower()
        # 403 as a number of its own: the log also names the scheduler's port, which may be 403xx.
        assert "forbidden" not in log and not re.search(r"\b403\b", log), \
            f"the scheduler was refused something:\n{log[-3000:]}"
    finally:
        cluster.group.stop(name)
    # SIGTERM released the Lease (update on its own Lease, as the chart's Role allows).
    kube.poll(lambda: not lease_holder(api, lease_path), 15, "the Lease released")


def lease_holder(api: KubeAPI, lease_path: str) -> str | None:
    lease = api.request("GET", lease_path, ok=(404,))
    return (lease.get("spec") or {}).get("holderIdentity") if lease.get("kind") == "Lease" else None


def secret_references(pod: dict[str, Any]) -> list[str]:
    """Every Secret a pod spec would need: volumes (secret, projected), env and envFrom, image pull secrets."""
    found = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
    found += [s["secret"]["name"] for v in pod["volumes"] for s in v.get("projected", {}).get("sources", [])
              if "secret" in s]
    for c in [*pod["containers"], *pod.get("initContainers", [])]:
        found += [e["valueFrom"]["secretKeyRef"]["name"] for e in c.get("env", [])
                  if "secretKeyRef" in e.get("valueFrom", {})]
        found += [e["secretRef"]["name"] for e in c.get("envFrom", []) if "secretRef" in e]
    return found + [s["name"] for s in pod.get("imagePullSecrets", [])]


def test_self_signed_render_starts_without_any_secret(helm: Path, api: KubeAPI, cluster: DevCluster,
                                                      crds: list[str], tmp_path: Path) -> None:
    """serving.selfSigned: the pod needs no Secret (none mounted, none rendered but the scraper's token, which only
    Prometheus reads) and no cert-manager; applied to the API server in a namespace holding no Secret, the rendered
    config starts the scheduler, which signs its own pair into the certDir the pod's emptyDir holds and serves HTTPS
    verified with that pair's CA; the scraper's token reads /metrics."""
    endpoints = cluster.endpoints
    assert endpoints is not None and endpoints.prometheus
    # Without the Prometheus Operator: not one Secret in the render.
    assert not [o for o in render(helm, "ss", "ns", "--values", str(SELF_SIGNED_VALUES)) if o["kind"] == "Secret"]

    namespace = f"helm-ss-{secrets.token_hex(2)}"
    objects = render(helm, "helm-ss", namespace, *OPERATOR_APIS, "--values", str(SELF_SIGNED_VALUES),
                     "--set", f"sources.prometheus.url={endpoints.prometheus}")
    assert not {o["kind"] for o in objects} & CERT_MANAGER_KINDS
    fullname = "helm-ss-metrics-sched"
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert secret_references(pod) == [], "the scheduler's pod needs a Secret"
    [scraper_token] = [o for o in objects if o["kind"] == "Secret"]
    assert scraper_token["type"] == "kubernetes.io/service-account-token" and not scraper_token.get("data")
    config = config_of(objects, fullname)
    server = config["server"]
    assert "tlsCertFile" not in server and "tlsPrivateKeyFile" not in server
    [cert_volume] = [v for v in pod["volumes"]
                     if any(m["name"] == v["name"] and m["mountPath"] == server["certDir"]
                            for m in pod["containers"][0]["volumeMounts"])]
    assert cert_volume["emptyDir"]["medium"] == "Memory"
    # Prometheus cannot know a CA made in the pod: it skips verification (and still presents its token).
    [endpoint] = one(objects, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    assert endpoint["authorization"]["credentials"]["name"] == scraper_token["metadata"]["name"]

    release = Release(api, objects, namespace, fullname)
    try:
        release.install()
        # The namespace holds the scraper's (unfilled) token Secret only: nothing the scheduler reads.
        stored = api.get(f"/api/v1/namespaces/{namespace}/secrets")["items"]
        assert [s["metadata"]["name"] for s in stored] == [scraper_token["metadata"]["name"]]
        # The rendered config as the pod reads it, but for the pod's own filesystem and network: the emptyDir at
        # certDir (a directory here) and loopback.
        pair_dir = tmp_path / "serving-pair"
        config["server"] = {**server, "certDir": str(pair_dir), "bindAddress": "127.0.0.1"}
        config_file = tmp_path / "config.yaml"
        config_file.write_text(yaml.safe_dump(config))
        kubeconfig = kube.token_kubeconfig(endpoints, token_for(api, namespace, fullname), namespace, tmp_path,
                                           user="self-signed")
        port, identity = free_port(), f"helm-ss-{secrets.token_hex(3)}"
        name = f"metrics-sched-ss-{secrets.token_hex(3)}"
        managed = cluster.group.start(name, [
            sys.executable, "-m", "metrics_sched.app.cli", "run", "--config", str(config_file),
            "--kubeconfig", str(kubeconfig), "--port", str(port), "--identity", identity, "--log-format", "text",
        ])
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{fullname}"

        def holder() -> str | None:
            if not managed.alive():
                raise AssertionError(managed.describe_exit())
            return lease_holder(api, lease_path)

        try:
            assert kube.poll(holder, 60, f"Lease {namespace}/{fullname} held") == identity
            ca = pair_dir / "ca.crt"
            assert ca.is_file(), f"no self-signed pair in the certDir: {sorted(pair_dir.iterdir())}"
            scraper = token_for(api, namespace, f"{fullname}-metrics-scraper")
            with httpx.Client(verify=ssl.create_default_context(cafile=str(ca)), timeout=10) as http:
                base = f"https://127.0.0.1:{port}"
                assert http.get(f"{base}/readyz").status_code == 200
                metrics = http.get(f"{base}/metrics", headers={"Authorization": f"Bearer {scraper}"})
                assert metrics.status_code == 200 and "metrics_sched_leader" in metrics.text
                # /metrics only: the scraper reads no decisions.
                assert http.get(f"{base}/decisions", headers={"Authorization": f"Bearer {scraper}"}).status_code == 403
        finally:
            cluster.group.stop(name)
    finally:
        release.uninstall()


def test_packaged_chart_renders_as_the_checkout_with_deploys_alerts(helm: Path, tmp_path: Path) -> None:
    """`helm package` (docs/deploying.md, "Package and publish the chart"): a self-contained archive, its links to
    deploy/ and grafana/ resolved, rendering what the checkout renders; its PrometheusRule is deploy/'s alerts."""
    proc = run_helm(helm, "package", str(CHART), "--destination", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    [archive] = tmp_path.glob("metrics-sched-*.tgz")
    args = ("--values", str(FULL_VALUES), "--values", str(SELF_SIGNED_VALUES), "--set", "serving.certManager=false",
            *OPERATOR_APIS)
    packaged = run_helm(helm, "template", "r", str(archive), "--namespace", "ns", "--values", api_server_values(),
                        *args)
    assert packaged.returncode == 0, packaged.stderr
    assert [d for d in yaml.safe_load_all(packaged.stdout) if d] == render(helm, "r", "ns", *args)
    deployed = next(o for o in kustomization_objects() if o["kind"] == "PrometheusRule")
    rule = one(render(helm, "r", "ns", *OPERATOR_APIS), "PrometheusRule", "r-metrics-sched")
    assert rule["spec"] == deployed["spec"], "the chart's alerts drifted from deploy/prometheusrule.yaml"
