"""The dev cluster runs the Kubernetes version selected for this run (`make test` the default, `make test-matrix`
each `kubernetes_matrix` version) and serves what that version serves, asserted per version."""

from __future__ import annotations

import pytest

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI

pytestmark = pytest.mark.e2e


def test_the_control_plane_is_the_selected_kubernetes_version(cluster: DevCluster, api: KubeAPI) -> None:
    versions = cluster.versions
    assert versions.kubernetes in versions.tested_kubernetes
    served = api.get("/version")
    assert served["gitVersion"] == f"v{versions.kubernetes}"
    assert (served["major"], served["minor"]) == ("1", str(versions.kubernetes_minor))


def test_the_workload_api_is_served_at_the_version_of_this_minor(cluster: DevCluster, api: KubeAPI) -> None:
    workload_api = cluster.versions.workload_api
    expected = {36: "scheduling.k8s.io/v1alpha2", 37: "scheduling.k8s.io/v1beta1"}
    assert workload_api.group_version == expected[cluster.versions.kubernetes_minor]
    resources = {r["name"] for r in api.get(f"/apis/{workload_api.group_version}")["resources"]}
    assert {"workloads", "podgroups", "podgroups/status"} <= resources
    # Only that version among the Workload API's: another would mean a flag meant for another minor.
    group = next(g for g in api.get("/apis")["groups"] if g["name"] == "scheduling.k8s.io")
    with_workloads = [v["groupVersion"] for v in group["versions"]
                      if "workloads" in {r["name"] for r in api.get(f"/apis/{v['groupVersion']}")["resources"]}]
    assert with_workloads == [workload_api.group_version]
