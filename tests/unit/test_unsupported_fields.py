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
    {"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]},  # DynamicResources' (issue 43)
])
def test_a_pod_using_only_supported_fields_passes(spec: dict[str, Any]) -> None:
    assert verdict(plugin(), **spec)[0] == Code.SUCCESS


def test_paths_refused_before_their_plugins_existed_are_accepted_in_ignore_and_do_nothing() -> None:
    p = plugin(ignore=["spec.volumes[*].persistentVolumeClaim", "spec.schedulingGroup", "spec.resourceClaims"])
    claims = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
    assert verdict(p, volumes=[PVC], schedulingGroup={"podGroupName": "train"}, resourceClaims=claims) == (
        Code.SUCCESS, "")


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


def test_a_pod_with_a_device_claim_is_no_longer_refused_here_but_waits_for_its_claim() -> None:
    """DynamicResources honours claims now: a pod whose claim does not exist is kept out of the queue by its
    PreEnqueue (tests/unit/test_dra_plugin.py), never bound, and not refused by this plugin."""
    scheduler, api = make()
    scheduler.handlers.on_node_event("ADDED", node("a"))
    api.add_pod(pod("claim", resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu-claim"}]))
    drain(scheduler, api)
    assert api.binds == []
    assert api.events_for("default/claim", "FailedScheduling") == []
    assert scheduler.queue.lengths()["gated"] == 1


@pytest.mark.parametrize("kind", ["persistentVolumeClaim", "ephemeral", "gcePersistentDisk", "awsElasticBlockStore",
                                  "rbd", "iscsi", "csi"])
def test_volumes_are_no_longer_refused(kind: str) -> None:
    """The volume plugins place them now (tests/unit/test_volume_*.py)."""
    spec = {"volumes": [{"name": "cfg", "configMap": {"name": "x"}}, {"name": "data", kind: {}}]}
    assert unsupported_fields(spec) == []
