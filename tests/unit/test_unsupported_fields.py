"""UnsupportedFields: a pod using a field metrics-sched does not honour yet is refused, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from metrics_sched.config import parse_config
from metrics_sched.config.errors import ConfigError
from metrics_sched.framework import ArgsError, Code, CycleState, Handle
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins import BUILTIN, in_tree_registry
from metrics_sched.plugins.unsupported_fields.plugin import FIELDS, UnsupportedFields, unsupported_fields
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore
from tests.unit.fakes import FakeAPI, node, pod
from tests.unit.test_scheduler import drain, make

pytestmark = pytest.mark.unit

TERM = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
REQUIRED = {"requiredDuringSchedulingIgnoredDuringExecution": [TERM]}
PREFERRED = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": TERM}]}
PVC = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
EPHEMERAL = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}}
EMPTY_DIR = {"name": "tmp", "emptyDir": {}}
SPREAD = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"app": "x"}}}]


def plugin(**args: Any) -> UnsupportedFields:
    handle = Handle(ClusterState(), MetricCache(), InFlightLedgerStore(), FakeAPI())
    return UnsupportedFields(args, handle)


def verdict(p: UnsupportedFields, **spec: Any) -> tuple[Code, str]:
    status = p.pre_filter(CycleState(), parse_pod(pod("p", **spec)))
    return status.code, status.reason


@pytest.mark.parametrize(("spec", "field"), [
    ({"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]}, "spec.resourceClaims"),
    # Several: the first in FIELDS order is named (inter-pod affinity, spreading and volumes are supported now).
    ({"affinity": {"podAntiAffinity": REQUIRED}, "volumes": [PVC], "topologySpreadConstraints": SPREAD,
      "schedulingGroup": {"podGroupName": "train"},
      "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]},
     "spec.resourceClaims"),
])
def test_a_pod_using_an_unsupported_field_is_refused_naming_it(spec: dict[str, Any], field: str) -> None:
    expected = f"pod uses {field}, which metrics-sched does not support yet"
    assert verdict(plugin(), **spec) == (Code.UNRESOLVABLE, expected)


@pytest.mark.parametrize("spec", [
    {},
    {"affinity": {"podAffinity": {}, "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}]}}}},
    {"topologySpreadConstraints": []},
    # honoured by InterPodAffinity and PodTopologySpread
    {"affinity": {"podAffinity": REQUIRED, "podAntiAffinity": PREFERRED}},
    {"topologySpreadConstraints": SPREAD},
    {"volumes": [EMPTY_DIR, {"name": "cfg", "configMap": {"name": "cfg"}}]},
    {"resourceClaims": []},
    # honoured by the volume plugins
    {"volumes": [EMPTY_DIR, PVC, EPHEMERAL, {"name": "d", "csi": {"driver": "d.example.com"}}]},
    {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]},  # NodePorts' business
    {"schedulingGroup": {"podGroupName": "train"}},  # a gang member: Coscheduling's business (issue 13)
])
def test_a_pod_using_only_supported_fields_passes(spec: dict[str, Any]) -> None:
    assert verdict(plugin(), **spec)[0] == Code.SUCCESS


def test_ignored_fields_are_not_refused_and_the_next_one_is_named() -> None:
    # Paths refused before the volume and gang plugins are still accepted, and do nothing.
    p = plugin(ignore=["spec.volumes[*].persistentVolumeClaim", "spec.schedulingGroup"])
    claims = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
    assert verdict(p, volumes=[PVC], schedulingGroup={"podGroupName": "train"})[0] == Code.SUCCESS
    code, reason = verdict(p, resourceClaims=claims, schedulingGroup={"podGroupName": "train"})
    assert code == Code.UNRESOLVABLE and reason.startswith("pod uses spec.resourceClaims,")


def test_ignore_accepts_only_known_fields() -> None:
    with pytest.raises(ArgsError, match=r"ignore\[1\]: unknown field 'spec.hostPorts'"):
        UnsupportedFields.parse_args({"ignore": ["spec.resourceClaims", "spec.hostPorts"]})
    assert UnsupportedFields.parse_args({"ignore": list(FIELDS)}).ignore == FIELDS
    catalog = in_tree_registry(third_party=False).catalog()
    config = {"profiles": [{"pluginConfig": [{"name": "UnsupportedFields", "args": {"ignore": ["nope"]}}]}]}
    with pytest.raises(ConfigError, match="ignore"):
        parse_config(config, catalog)


def test_it_is_built_in_and_first_in_the_default_pre_filters() -> None:
    assert BUILTIN["UnsupportedFields"] is UnsupportedFields
    profile = parse_config({}, in_tree_registry(third_party=False).catalog()).profiles[0]
    assert profile.enabled("preFilter")[0].name == "UnsupportedFields"


def test_the_scheduler_reports_parks_and_never_binds_an_unsupported_pod() -> None:
    scheduler, api = make()
    scheduler.handlers.on_node_event("ADDED", node("a"))
    api.add_pod(pod("claim", resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu-claim"}]))
    drain(scheduler, api)
    assert api.binds == []
    assert api.conditions["default/claim"]["status"] == "False"
    assert api.conditions["default/claim"]["reason"] == "Unschedulable"
    [event] = api.events_for("default/claim", "FailedScheduling")
    assert "pod uses spec.resourceClaims, which metrics-sched does not support yet" in event.note
    assert scheduler.queue.lengths()["unschedulable"] == 1
    # No cluster event moves it: a new node cannot make the field supported.
    scheduler.handlers.on_node_event("ADDED", node("b"))
    assert scheduler.queue.lengths()["unschedulable"] == 1
    drain(scheduler, api)
    assert api.binds == []


@pytest.mark.parametrize("kind", ["persistentVolumeClaim", "ephemeral", "gcePersistentDisk", "awsElasticBlockStore",
                                  "rbd", "iscsi", "csi"])
def test_volumes_are_no_longer_refused(kind: str) -> None:
    """The volume plugins place them now (tests/unit/test_volume_*.py)."""
    spec = {"volumes": [{"name": "cfg", "configMap": {"name": "x"}}, {"name": "data", kind: {}}]}
    assert unsupported_fields(spec) == []
