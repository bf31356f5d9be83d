"""The Helm chart's files without helm (tests/e2e/test_helm.py renders it): its values against its schema, its links
to deploy/ and grafana/ (one copy of the RBAC allowlist, the alerts and the dashboards), the sizing of its values and
of deploy/deployment.yaml from the measured RSS, and helm in the control-plane build plan."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from devcluster.build import components, helm_binary
from devcluster.versions import Versions, load_versions

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "metrics-sched"
SIZING = ROOT / "bench" / "results" / "sizing.json"
HEADROOM = 1.5  # limits.memory = peak RSS x this (README, "Sizing")
DOCUMENTED_NODES = 5000  # the README's benchmark scale: sizing.json must reach it


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's values merge: maps merge key by key, anything else replaces."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def mebibytes(quantity: str) -> float:
    match = re.fullmatch(r"([0-9.]+)(Mi|Gi)", quantity)
    assert match, f"memory quantity {quantity!r}: write it in Mi or Gi"
    return float(match[1]) * (1024 if match[2] == "Gi" else 1)


def test_default_and_ci_values_meet_the_schema() -> None:
    validator = jsonschema.Draft7Validator(schema())
    validator.check_schema(schema())
    validator.validate(values())
    for path in sorted((CHART / "ci").glob("*.yaml")):
        validator.validate(merged(values(), yaml.safe_load(path.read_text())))


def test_schema_refuses_unknown_keys_at_every_level() -> None:
    validator = jsonschema.Draft7Validator(schema())
    for override in ({"replicas": 2}, {"image": {"tga": "1"}}, {"sources": {"prometheus": {"uri": "http://x"}}},
                     {"rbac": {"rebalanse": True}}, {"config": {"leaderElection": {"resourceName": "x"}}}):
        errors = list(validator.iter_errors(merged(values(), override)))
        assert errors, f"accepted {override}"


def test_chart_links_to_deploy_and_grafana_instead_of_copying() -> None:
    for link, target in [("files/clusterrole.yaml", "deploy/clusterrole.yaml"),
                         ("files/prometheusrule.yaml", "deploy/prometheusrule.yaml"),
                         ("files/recording-rules.yaml", "deploy/recording-rules/prometheusrule.yaml"),
                         ("dashboards", "grafana/dashboards"),
                         *((f"crds/{crd.name}", f"deploy/crds/{crd.name}")
                           for crd in (ROOT / "deploy" / "crds").glob("*.yaml"))]:
        path = CHART / link
        assert path.is_symlink(), f"{link} must link to {target}, not copy it"
        assert path.resolve() == (ROOT / target).resolve()


def test_resources_come_from_the_measured_rss() -> None:
    sizes = json.loads(SIZING.read_text())["sizes"]
    assert any(s["nodes"] >= DOCUMENTED_NODES for s in sizes), f"no measurement at {DOCUMENTED_NODES} nodes in {SIZING}"
    largest = max(sizes, key=lambda s: s["steady_rss_mb"])  # the defaults cover every measured size
    chart = values()["resources"]
    request, limit = mebibytes(chart["requests"]["memory"]), mebibytes(chart["limits"]["memory"])
    steady, peak = largest["steady_rss_mb"], largest["peak_rss_mb"]  # MB = MiB here (bench: bytes / 2**20)
    assert steady <= request < steady * 1.25, f"requests.memory {request} Mi is not ≈ the steady {steady} MiB"
    assert math.ceil(peak * HEADROOM) <= limit < peak * HEADROOM + 64, \
        f"limits.memory {limit} Mi is not the peak {peak} MiB x {HEADROOM}, rounded up"
    deployment = yaml.safe_load((ROOT / "deploy" / "deployment.yaml").read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == chart, "deploy/deployment.yaml and the chart's values.yaml size differently"


def test_helm_is_built_like_the_control_plane() -> None:
    versions = Versions(kubernetes="1.36.3", etcd="3.6.16", kwok="0.8.0", go_toolchain="", helm="3.22.0")
    helm = next(c for c in components(versions, with_staging=False) if c.name == "helm")
    assert "require helm.sh/helm/v3 v3.22.0" in helm.go_mod()
    assert "tool (\n\thelm.sh/helm/v3/cmd/helm\n)" in helm.go_mod()
    assert helm_binary(versions) == helm.bin_dir / "helm" and helm.bin_dir.name == "helm-v3.22.0"
    assert "-X helm.sh/helm/v3/internal/version.version=v3.22.0" in helm.ldflags
    # Without a helm version nothing else changes; versions.toml names one.
    assert all(c.name != "helm" for c in components(
        Versions(kubernetes="1.36.3", etcd="3.6.16", kwok="0.8.0", go_toolchain=""), with_staging=False))
    assert load_versions().helm


def test_schema_checks_a_metrics_device_labels() -> None:
    validator = jsonschema.Draft7Validator(schema())

    def with_temperature(metric: dict[str, Any]) -> dict[str, Any]:
        return merged(values(), {"sources": {"prometheus": {"metrics": [
            {"name": "gpu_temperature", "preset": "dcgm_gpu_temp", **metric}]}}})

    assert not list(validator.iter_errors(with_temperature({"deviceLabels": ["UUID", "gpu"]})))
    for bad in ("UUID", [], ["UUID", "UUID"], ["pci-bus"], [3]):
        assert list(validator.iter_errors(with_temperature({"deviceLabels": bad}))), f"accepted {bad!r}"


# Every knob of issue 46's chart work: a value the schema takes, and values it refuses (naming the field).
NEW_KNOBS: list[tuple[dict[str, Any], list[dict[str, Any]]]] = [
    ({"serving": {"selfSigned": True}}, [{"serving": {"selfSigned": "yes"}}]),
    ({"logLevel": "debug"}, [{"logLevel": "verbose"}, {"logLevel": 4}]),
    ({"extraArgs": ["--log-format", "text"]}, [{"extraArgs": "--log-format text"}, {"extraArgs": [""]}]),
    ({"env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
              {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]},
     [{"env": {"HTTPS_PROXY": "x"}}, {"env": [{"value": "x"}]}, {"env": [{"name": "A", "vaule": "x"}]}]),
    ({"extraVolumes": [{"name": "ca", "configMap": {"name": "ca-bundle"}}],
      "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ca", "readOnly": True}]},
     [{"extraVolumes": [{"configMap": {"name": "x"}}]}, {"extraVolumeMounts": [{"name": "ca"}]},
      {"extraVolumeMounts": [{"name": "ca", "mountPath": "etc/ca"}]}]),
    ({"podAnnotations": {"example.com/team": "platform"}}, [{"podAnnotations": {"a": 1}}]),
    ({"priorityClassName": ""}, [{"priorityClassName": None}]),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                     "whenUnsatisfiable": "ScheduleAnyway"}]},
     [{"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "ScheduleAnyway"}]},
      {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "Sometimes"}]},
      {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z"}]}]),
    ({"serviceMonitor": {"tokenSecret": {"name": "prometheus-scrape-token", "key": "token"}}},
     [{"serviceMonitor": {"tokenSecret": {"name": "x", "key": ""}}},
      {"serviceMonitor": {"bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}}]),
    ({"dashboards": {"namespace": "monitoring", "labels": {"grafana_dashboard": "1"}}},
     [{"dashboards": {"namespace": "Monitoring"}}, {"dashboards": {"labels": {"grafana_dashboard": 1}}},
      {"dashboards": {"enabled": True, "folder": 3}}]),
    ({"networkPolicy": {"apiServer": {"cidrs": ["10.0.0.2/32", "fd00::1/128"], "ports": [6443]},
                        "cmdb": {"cidrs": ["192.0.2.10/32"], "ports": [443]},
                        "extraEgress": [{"to": [{"ipBlock": {"cidr": "198.51.100.7/32"}}],
                                         "ports": [{"protocol": "TCP", "port": 9090}]}]}},
     [{"networkPolicy": {"apiServer": {"cidrs": ["0.0.0.0/0"]}}}, {"networkPolicy": {"cmdb": {"cidrs": ["::/0"]}}},
      {"networkPolicy": {"apiServer": {"cidrs": ["10.0.0.2"]}}}, {"networkPolicy": {"apiServer": {"ports": []}}},
      {"networkPolicy": {"extraEgress": [{"to": [{"ipBlock": {"cidr": "198.51.100.7/32"}}]}]}},
      {"networkPolicy": {"apiServerCidr": "10.0.0.0/24"}}]),
]


@pytest.mark.parametrize(("good", "bad"), NEW_KNOBS, ids=[next(iter(g)) for g, _ in NEW_KNOBS])
def test_schema_takes_each_new_knob_and_refuses_its_bad_values(good: dict[str, Any],
                                                               bad: list[dict[str, Any]]) -> None:
    validator = jsonschema.Draft7Validator(schema())
    errors = [e.message for e in validator.iter_errors(merged(values(), good))]
    assert not errors, f"refused {good}: {errors}"
    for override in bad:
        assert list(validator.iter_errors(merged(values(), override))), f"accepted {override}"


def test_new_knobs_have_their_documented_defaults() -> None:
    """The defaults operators rely on: each knob off unless asked for, the critical priority class, and a
    certificate from a Secret by default (selfSigned scrapes unverified, so it is asked for, not assumed)."""
    v = values()
    assert v["serving"]["selfSigned"] is False and v["serving"]["certManager"] is False
    assert v["priorityClassName"] == "system-cluster-critical"
    assert v["logLevel"] == "info"
    for knob in ("extraArgs", "env", "extraVolumes", "extraVolumeMounts", "topologySpreadConstraints"):
        assert v[knob] == [], knob
    assert v["podAnnotations"] == {}
    assert v["serviceMonitor"]["tokenSecret"] == {"name": "", "key": "token"}
    assert v["dashboards"]["namespace"] == "" and v["dashboards"]["labels"] == {"grafana_dashboard": "1"}
    assert v["networkPolicy"]["apiServer"] == {"cidrs": [], "ports": [443, 6443]}
    assert v["networkPolicy"]["cmdb"]["cidrs"] == [] and v["networkPolicy"]["extraEgress"] == []
    # Every top-level value is in the schema (which refuses unknown keys) and described there or in values.yaml.
    assert set(v) <= set(schema()["properties"])


def test_self_signed_ci_values_take_no_certificate_from_elsewhere() -> None:
    """ci/self-signed-values.yaml, which tests/e2e/test_helm.py starts on the dev cluster."""
    ci = yaml.safe_load((CHART / "ci" / "self-signed-values.yaml").read_text())
    serving = merged(values(), ci)["serving"]
    assert serving["selfSigned"] is True
    assert not (serving["certManager"] or serving["certSecret"] or serving["localhostSAN"])
