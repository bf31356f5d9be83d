"""Config loading: defaults, plugin set merging, and errors that name the field (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from metrics_sched.app.cli import main
from metrics_sched.config import ConfigError, parse_config
from metrics_sched.plugins import in_tree_registry

CATALOG = in_tree_registry(third_party=False).catalog()


def test_defaults() -> None:
    config = parse_config({}, CATALOG)
    [profile] = config.profiles
    assert profile.scheduler_name == "metrics-sched"
    assert [r.name for r in profile.enabled("filter")] == [
        "NodeUnschedulable", "NodeReady", "NodeName", "NodePorts", "TaintToleration", "NodeAffinity",
        "NodeResourcesFit", "VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone",
        "PodTopologySpread", "InterPodAffinity", "DynamicResources", "GPUTemperature", "Coscheduling"]
    # kube-scheduler's default weights for the constraint plugins
    weights = {r.name: r.weight for r in profile.enabled("score")}
    assert weights["InterPodAffinity"] == 2 and weights["PodTopologySpread"] == 2
    assert weights["NodeResourcesBalancedAllocation"] == 1 and weights["ImageLocality"] == 1
    assert "ZoneSpread" not in weights  # PodTopologySpread's system defaults spread replicas over zones
    assert config.leader_election.lease_duration == 15 and config.leader_election.renew_deadline == 10
    assert config.pod_initial_backoff == 1 and config.pod_max_backoff == 10
    assert config.pod_max_in_unschedulable == 300


def test_enabled_disabled_and_weights_merge_like_kube_scheduler() -> None:
    config = parse_config({
        "profiles": [{
            "schedulerName": "gpu",
            "plugins": {
                "score": {
                    "enabled": [{"name": "NodeResourcesFit", "weight": 5}, {"name": "NodeLabelScore", "weight": 2}],
                    "disabled": [{"name": "PodTopologySpread"}],
                },
                "filter": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit"}]},
            },
            "pluginConfig": [{"name": "NodeLabelScore", "args": {"labelWeights": {"disk-type": {"ssd": 100}}}}],
        }],
        "leaderElection": {"leaseDuration": "20s", "renewDeadline": "15s", "retryPeriod": "2s"},
    }, CATALOG)
    profile = config.profiles[0]
    assert [(r.name, r.weight) for r in profile.enabled("score")] == [
        ("NodeResourcesFit", 5), ("NodeResourcesBalancedAllocation", 1), ("ImageLocality", 1), ("NodeAffinity", 2),
        ("TaintToleration", 3), ("InterPodAffinity", 2), ("GPUTemperature", 3), ("NodeLoad", 2), ("Cost", 2),
        ("DynamicResources", 1), ("NodeLabelScore", 2)]
    assert [r.name for r in profile.enabled("filter")] == ["NodeResourcesFit"]
    assert config.leader_election.lease_duration == 20


BAD: list[tuple[dict[str, Any], str]] = [
    ({"profiles": [{"plugins": {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": -1}]}}}]},
     "profiles[0].plugins.score.enabled[0].weight"),
    ({"profiles": [{"plugins": {"filter": {"enabled": [{"name": "Nope"}]}}}]},
     "profiles[0].plugins.filter.enabled[0].name"),
    ({"profiles": [{"plugins": {"queueSort": {"enabled": [{"name": "NodeReady"}]}}}]},
     "profiles[0].plugins.queueSort.enabled[0].name"),
    ({"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]}, "profiles[1].schedulerName"),
    ({"profiles": [{"pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Nope"}}}]}]},
     "profiles[0].pluginConfig[0].args.scoringStrategy.type"),
    ({"profiles": [{"pluginConfig": [{"name": "NodeLabelScore", "args": {"labelWeights": {"d": {"ssd": 300}}}}]}]},
     "profiles[0].pluginConfig[0].args.labelWeights.d.ssd"),
    ({"leaderElection": {"leaseDuration": "10s", "renewDeadline": "15s"}}, "leaderElection.renewDeadline"),
    ({"leaderElection": {"retryPeriod": "soon"}}, "leaderElection.retryPeriod"),
    ({"bindWorkers": 0}, "bindWorkers"),
    ({"profilez": []}, "profilez"),
    ({"profiles": [{"plugins": {"score": {"enabled": [{"name": "NodeLabelScore"}]}}}]},
     "profiles[0].pluginConfig"),
    ({"metrics": {"gpu_temperature": {"ttl": 0}}}, "metrics.gpu_temperature.ttl"),
    ({"metrics": {"gpu_temperature": {"onMissing": "skip"}}}, "metrics.gpu_temperature.onMissing"),
    ({"metrics": {"gpu_temperature": {"maxage": "1m"}}}, "metrics.gpu_temperature.maxage"),
    ({"sources": [{"name": "p", "type": "prometheus"}, {"name": "p", "type": "cmdb"}]}, "sources[1].name"),
    ({"sources": [{"name": "p"}]}, "sources[0].type"),
    ({"sources": [{"name": "", "type": "cmdb"}]}, "sources[0].name"),
    ({"audit": {"annotatePods": "yes"}}, "audit.annotatePods"),
    ({"server": {"port": 1.5}}, "server.port"),
    ({"clientConnection": {"qps": -1}}, "clientConnection.qps"),
    # Dangerous values (issue 14, item 9): each would be accepted into a scheduler that misbehaves.
    ({"clientConnection": {"watchReadTimeout": 0}}, "clientConnection.watchReadTimeout"),  # blind after the list
    ({"clientConnection": {"watchReadTimeout": "2h"}}, "clientConnection.watchReadTimeout"),
    ({"leaderElection": {"retryPeriod": "0s"}}, "leaderElection.retryPeriod"),
    ({"leaderElection": {"retryPeriod": "1ms"}}, "leaderElection.retryPeriod"),  # spins on the API server
    ({"leaderElection": {"leaseDuration": "100h", "renewDeadline": "99h"}}, "leaderElection.leaseDuration"),
    ({"podInitialBackoffSeconds": 0}, "podInitialBackoffSeconds"),  # a failing pod retried in a tight loop
    ({"podInitialBackoffSeconds": 0, "podMaxBackoffSeconds": 0}, "podInitialBackoffSeconds"),
    ({"podMaxBackoffSeconds": 0}, "podMaxBackoffSeconds"),
    ({"podMaxInUnschedulablePodsDuration": 0}, "podMaxInUnschedulablePodsDuration"),
    ({"server": {"port": 99999}}, "server.port"),
    ({"server": {"port": 0}}, "server.port"),
    ({"bindWorkers": 100_000}, "bindWorkers"),
    ({"audit": {"ringSize": 10**9}}, "audit.ringSize"),
    ({"audit": {"topCandidates": 10**6}}, "audit.topCandidates"),
    ({"profiles": [{"schedulerName": "default-scheduler"}]}, "profiles[0].schedulerName"),  # races kube-scheduler
    ({"profiles": [{}, {"schedulerName": "default-scheduler"}], "replacesDefaultScheduler": False},
     "profiles[1].schedulerName"),
    ({"replacesDefaultScheduler": "yes"}, "replacesDefaultScheduler"),
    ({"cpuAffinity": "two"}, "cpuAffinity"),
]


@pytest.mark.parametrize(("data", "field"), BAD, ids=[b[1] for b in BAD])
def test_errors_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data, CATALOG)
    assert info.value.field == field
    assert str(info.value).startswith(field + ":")


def test_check_config_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("apiVersion: metrics-sched.io/v1alpha1\nkind: MetricsSchedulerConfiguration\n")
    assert main(["check-config", str(good)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeResourcesFit\n        weight: 0\n"
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["check-config", str(bad)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "profiles[0].plugins.score.enabled[0].weight" in err[0]
    broken = tmp_path / "broken.yaml"
    broken.write_text("profiles: [\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["check-config", str(broken)])
    assert exit_info.value.code == 2


@pytest.mark.parametrize(("source", "field"), [
    ({"name": "s", "type": "graphite"}, "sources[0].type"),
    ({"name": "s", "type": "prometheus", "url": "http://p", "metrics": [{"name": "a", "query": "up", "scale": 0}]},
     "sources[0].metrics[0].scale"),
    ({"name": "s", "type": "cmdb", "url": "https://c.test", "nodeKey": "name", "fields": {"v": "v"},
      "circuitBreaker": {"coolDown": "never"}}, "sources[0].circuitBreaker.coolDown"),
    ({"name": "s", "type": "metrics-server", "interval": 0}, "sources[0].interval"),
])
def test_check_config_names_a_bad_source_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               source: dict[str, Any], field: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"sources": [source]}))
    with pytest.raises(SystemExit) as exit_info:
        main(["check-config", str(path)])
    assert exit_info.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f": {field}: " in line
    if field.endswith(".type"):
        assert "cmdb, custom-metrics, metrics-server, prometheus" in line  # the known types, from the entry points


def test_check_config_accepts_every_built_in_source_type(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"sources": [
        {"name": "p", "type": "prometheus", "url": "http://p", "metrics": [{"name": "a", "preset": "dcgm_gpu_temp"}]},
        {"name": "m", "type": "metrics-server"},
        {"name": "c", "type": "cmdb", "url": "https://c.test", "nodeKey": "name", "fields": {"v": "v"}},
    ]}))
    assert main(["check-config", str(path)]) == 0
