"""KubeSchedulerConfiguration v1 files load: every upstream field is accepted, those that apply are honoured,
those without effect are warned once each, by name."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from metrics_sched.app.cli import main
from metrics_sched.config import ConfigError, PluginRef, load_config, parse_config
from metrics_sched.config.loader import DEFAULT_PLUGINS
from metrics_sched.plugins import in_tree_registry

pytestmark = pytest.mark.unit

CATALOG = in_tree_registry(third_party=False).catalog()

# kube-scheduler's "Scheduler Configuration" page (kubernetes.io/docs/reference/scheduling/config/), written out
# for this test: the minimal configuration it opens with.
DOCS_MINIMAL = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /etc/srv/kubernetes/kube-scheduler/kubeconfig
"""

# The same page's "multiple profiles" example. `default-scheduler` is kube-scheduler's own name: here it takes
# `replacesDefaultScheduler: true` (the one line added), else both schedulers would race for the same pods.
DOCS_MULTIPLE_PROFILES = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
replacesDefaultScheduler: true
profiles:
  - schedulerName: default-scheduler
  - schedulerName: no-scoring-scheduler
    plugins:
      preScore:
        disabled:
        - name: '*'
      score:
        disabled:
        - name: '*'
"""

# What `kube-scheduler --config ... --write-config-to` prints for v1.36's defaults (abridged plugin list, every
# top-level field kept): the shape a user migrating from kube-scheduler arrives with.
UPSTREAM_DUMP = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
replacesDefaultScheduler: true
clientConnection:
  acceptContentTypes: ""
  burst: 100
  contentType: application/vnd.kubernetes.protobuf
  kubeconfig: /etc/kubernetes/scheduler.conf
  qps: 50
delayCacheUntilActive: false
enableContentionProfiling: true
enableProfiling: true
extenders: null
leaderElection:
  leaderElect: true
  leaseDuration: 15s
  renewDeadline: 10s
  resourceLock: leases
  resourceName: kube-scheduler
  resourceNamespace: kube-system
  retryPeriod: 2s
parallelism: 16
percentageOfNodesToScore: 0
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 10
profiles:
- pluginConfig:
  - args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: DefaultPreemptionArgs
      minCandidateNodesAbsolute: 100
      minCandidateNodesPercentage: 10
    name: DefaultPreemption
  - args:
      apiVersion: kubescheduler.config.k8s.io/v1
      hardPodAffinityWeight: 1
      ignorePreferredTermsOfExistingPods: false
      kind: InterPodAffinityArgs
    name: InterPodAffinity
  - args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeAffinityArgs
    name: NodeAffinity
  - args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesBalancedAllocationArgs
      resources:
      - name: cpu
        weight: 1
      - name: memory
        weight: 1
    name: NodeResourcesBalancedAllocation
  - args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitArgs
      scoringStrategy:
        resources:
        - name: cpu
          weight: 1
        - name: memory
          weight: 1
        type: LeastAllocated
    name: NodeResourcesFit
  - args:
      apiVersion: kubescheduler.config.k8s.io/v1
      defaultingType: System
      kind: PodTopologySpreadArgs
    name: PodTopologySpread
  - args:
      apiVersion: kubescheduler.config.k8s.io/v1
      bindTimeoutSeconds: 600
      kind: VolumeBindingArgs
    name: VolumeBinding
  plugins:
    bind: {}
    filter: {}
    multiPoint:
      enabled:
      - name: SchedulingGates
        weight: 0
      - name: PrioritySort
        weight: 0
      - name: NodeUnschedulable
        weight: 0
      - name: NodeName
        weight: 0
      - name: TaintToleration
        weight: 3
      - name: NodeAffinity
        weight: 2
      - name: NodePorts
        weight: 0
      - name: NodeResourcesFit
        weight: 1
      - name: VolumeRestrictions
        weight: 0
      - name: NodeVolumeLimits
        weight: 0
      - name: VolumeBinding
        weight: 0
      - name: VolumeZone
        weight: 0
      - name: PodTopologySpread
        weight: 2
      - name: InterPodAffinity
        weight: 2
      - name: DefaultPreemption
        weight: 0
      - name: NodeResourcesBalancedAllocation
        weight: 1
      - name: ImageLocality
        weight: 1
      - name: DefaultBinder
        weight: 0
    permit: {}
    postBind: {}
    postFilter: {}
    preBind: {}
    preEnqueue: {}
    preFilter: {}
    preScore: {}
    queueSort: {}
    reserve: {}
    score: {}
  schedulerName: default-scheduler
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_the_docs_minimal_example_loads_and_its_kubeconfig_is_used(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, DOCS_MINIMAL), CATALOG)
    assert config.client_connection.kubeconfig == "/etc/srv/kubernetes/kube-scheduler/kubeconfig"
    assert config.warnings == ()
    assert config.profiles == parse_config({}, CATALOG).profiles


def test_the_docs_multiple_profiles_example_loads(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, DOCS_MULTIPLE_PROFILES), CATALOG)
    default, no_scoring = config.profiles
    assert default.scheduler_name == "default-scheduler" and default.enabled("score")
    assert no_scoring.enabled("score") == () and no_scoring.enabled("preScore") == ()
    assert no_scoring.enabled("filter") == default.enabled("filter")
    assert config.warnings == ()


def test_an_upstream_dump_loads_honours_what_applies_and_warns_once_per_field(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, UPSTREAM_DUMP), CATALOG)
    assert config.client_connection.qps == 50 and config.client_connection.burst == 100
    assert config.client_connection.kubeconfig == "/etc/kubernetes/scheduler.conf"
    assert config.bind_workers == 16 and config.enable_profiling
    assert config.percentage_of_nodes_to_score == 100  # upstream's 0 (adaptive) reads as "all"
    assert config.leader_election.resource_name == "kube-scheduler"
    [profile] = config.profiles
    # multiPoint adds nothing to the defaults it names; weight 0 keeps a plugin's default weight.
    defaults = parse_config({}, CATALOG).profiles[0]
    assert profile.enabled("filter") == defaults.enabled("filter")
    assert profile.enabled("score") == defaults.enabled("score")
    assert profile.enabled("bind") == (PluginRef("DefaultBinder"),)
    # SchedulingGates is enabled there: the queue honours gates always, so nothing to warn about.
    assert {w.field: w.message for w in config.warnings} == {
        "clientConnection.contentType": "only application/json is spoken; JSON is used",
        "enableContentionProfiling": "accepted but has no effect (no lock contention profile here)",
    }


def test_multi_point_enables_a_plugin_at_every_point_it_implements() -> None:
    config = parse_config({"profiles": [{"plugins": {"multiPoint": {"enabled": [{"name": "NodeLabelScore",
                                                                                  "weight": 4},
                                                                                 {"name": "NodeLabelFilter"}]}},
                                         "pluginConfig": [{"name": "NodeLabelFilter",
                                                           "args": {"presentLabels": ["gpu-ready"]}},
                                                          {"name": "NodeLabelScore",
                                                           "args": {"labelWeights": {"disk": {"ssd": 100}}}}]}]},
                          CATALOG)
    [profile] = config.profiles
    assert profile.enabled("score")[-1] == PluginRef("NodeLabelScore", 4)
    assert profile.enabled("filter")[-1] == PluginRef("NodeLabelFilter")
    # a weight given in multiPoint counts at score only
    config = parse_config({"profiles": [{"plugins": {"multiPoint": {"enabled": [{"name": "GPUTemperature",
                                                                                  "weight": 7}]}}}]}, CATALOG)
    [profile] = config.profiles
    assert PluginRef("GPUTemperature", 7) in profile.enabled("score")
    assert PluginRef("GPUTemperature") in profile.enabled("filter")


def test_multi_point_precedence_follows_upstream() -> None:
    config = parse_config({"profiles": [{"plugins": {
        # multiPoint disables every default, then enables a few again ...
        "multiPoint": {"disabled": [{"name": "*"}],
                       "enabled": [{"name": "PrioritySort"}, {"name": "DefaultBinder"}, {"name": "NodeLoad"},
                                   {"name": "NodeResourcesFit", "weight": 2}]},
        # ... and a specific point still has the last word
        "filter": {"disabled": [{"name": "NodeLoad"}]},
        "score": {"enabled": [{"name": "NodeResourcesFit", "weight": 9}]},
    }}]}, CATALOG)
    [profile] = config.profiles
    assert profile.enabled("filter") == (PluginRef("NodeResourcesFit"),)
    assert profile.enabled("score") == (PluginRef("NodeLoad"), PluginRef("NodeResourcesFit", 9))
    assert profile.enabled("preFilter") == (PluginRef("NodeResourcesFit"),)
    assert profile.enabled("queueSort") == (PluginRef("PrioritySort"),)
    assert profile.enabled("reserve") == ()


def test_multi_point_disabled_removes_a_default_everywhere() -> None:
    config = parse_config({"profiles": [{"plugins": {"multiPoint": {"disabled": [{"name": "PodTopologySpread"}]}}}]},
                          CATALOG)
    [profile] = config.profiles
    for point, defaults in DEFAULT_PLUGINS.items():
        assert [r for r in profile.enabled(point) if r.name == "PodTopologySpread"] == [], point
        assert len(profile.enabled(point)) == len([r for r in defaults if r.name != "PodTopologySpread"])


def test_plugin_args_wrappers_are_stripped_and_must_name_the_plugin() -> None:
    wrapped = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "InterPodAffinityArgs",
               "hardPodAffinityWeight": 5}
    plain = parse_config({"profiles": [{"pluginConfig": [{"name": "InterPodAffinity",
                                                          "args": {"hardPodAffinityWeight": 5}}]}]}, CATALOG)
    config = parse_config({"profiles": [{"pluginConfig": [{"name": "InterPodAffinity", "args": wrapped}]}]}, CATALOG)
    assert config.profiles[0].plugin_args["InterPodAffinity"] == plain.profiles[0].plugin_args["InterPodAffinity"]
    with pytest.raises(ConfigError) as info:
        parse_config({"profiles": [{"pluginConfig": [{"name": "InterPodAffinity",
                                                      "args": {**wrapped, "kind": "NodeAffinityArgs"}}]}]}, CATALOG)
    assert info.value.field == "profiles[0].pluginConfig[0].args.kind"


@pytest.mark.parametrize(("data", "field", "words"), [
    ({"extenders": [{"urlPrefix": "http://127.0.0.1:8888/", "filterVerb": "filter"}]}, "extenders",
     "not supported"),
    ({"parallelism": 8, "bindWorkers": 4}, "parallelism", "bindWorkers"),
    ({"parallelism": 0}, "parallelism", ">= 1"),
    ({"percentageOfNodesToScore": 101}, "percentageOfNodesToScore", "<= 100"),
    ({"clientConnection": {"contentType": "application/yaml"}}, "clientConnection.contentType", "application/json"),
    ({"enableProfiling": "yes"}, "enableProfiling", "true or false"),
    ({"profiles": [{"shadow": 1}]}, "profiles[0].shadow", "true or false"),
    ({"profiles": [{"plugins": {"multiPoint": {"enabled": [{"name": "MyCustomPluginA"}]}}}]},
     "profiles[0].plugins.multiPoint.enabled[0].name", "unknown plugin"),
    ({"profiles": [{"plugins": {"multiPoint": {"enabled": [{"name": "Cost"}, {"name": "Cost"}]}}}]},
     "profiles[0].plugins.multiPoint.enabled", "twice"),
    ({"profiles": [{"pluginConfig": [{"name": "MyPlugin", "args": {}}]}]}, "profiles[0].pluginConfig[0].name",
     "unknown plugin"),
    ({"profile": []}, "profile", "unknown field"),  # a typo is still refused, upstream field or not
])
def test_refused_naming_the_field(data: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data, CATALOG)
    assert info.value.field == field and words in info.value.message


def test_honoured_fields() -> None:
    config = parse_config({"parallelism": 4, "podInitialBackoffSeconds": 2, "podMaxBackoffSeconds": 20,
                           "enableProfiling": True, "extenders": [],
                           "clientConnection": {"contentType": "application/json", "qps": 5, "burst": 10},
                           "leaderElection": {"leaseDuration": "30s", "renewDeadline": "20s", "retryPeriod": "4s"},
                           "profiles": [{"schedulerName": "a", "shadow": True}, {"schedulerName": "b"}]}, CATALOG)
    assert config.bind_workers == 4 and config.enable_profiling
    assert (config.pod_initial_backoff, config.pod_max_backoff) == (2, 20)
    assert config.leader_election.lease_duration == 30 and config.leader_election.retry_period == 4
    assert [p.shadow for p in config.profiles] == [True, False]
    assert config.warnings == ()
    assert not parse_config({}, CATALOG).enable_profiling  # off unless asked (upstream: on)


def test_accepted_fields_without_effect_warn_once_each_by_name() -> None:
    config = parse_config({
        "percentageOfNodesToScore": 50, "enableContentionProfiling": True, "delayCacheUntilActive": True,
        "clientConnection": {"acceptContentTypes": "application/vnd.kubernetes.protobuf,application/json"},
        "profiles": [{"schedulerName": "a", "percentageOfNodesToScore": 30,
                      "plugins": {"placementScore": {"enabled": [{"name": "PodGroupPodsCount"}]},
                                  "postFilter": {"enabled": [{"name": "DefaultPreemption"}]},
                                  "preEnqueue": {"disabled": [{"name": "SchedulingGates"}]}}},
                     {"schedulerName": "b"}],
    }, CATALOG)
    assert [w.field for w in config.warnings] == [
        "percentageOfNodesToScore",
        "profiles[0].plugins.placementScore.enabled[0].name",
        "profiles[0].plugins.preEnqueue.disabled[0].name",
        "profiles[0].percentageOfNodesToScore",
        "clientConnection.acceptContentTypes",
        "enableContentionProfiling",
        "delayCacheUntilActive",
    ]
    a, b = config.profiles
    assert (config.percentage_of_nodes_to_score, a.percentage_of_nodes_to_score, b.percentage_of_nodes_to_score) \
        == (50, 30, 50)
    assert "only that share of the nodes is scored" in config.warnings[0].message


def test_check_config_prints_each_warning_and_the_run_path_logs_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, DOCS_MINIMAL + "enableContentionProfiling: true\npercentageOfNodesToScore: 40\n")
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["warning: percentageOfNodesToScore: 40%: only that share of the nodes is scored, so a "
                       "cooler or cheaper node outside the sample is never seen",
                       "warning: enableContentionProfiling: accepted but has no effect (no lock contention "
                       "profile here)"]
    assert out[2].endswith("valid (1 profile(s): metrics-sched; config hash " + out[2].rsplit(" ", 1)[1])

    from metrics_sched.app.cli.config_cmd import load_or_exit

    with caplog.at_level(logging.WARNING, logger="metrics_sched.config"):
        load_or_exit(path, in_tree_registry(third_party=False))
    assert [vars(r)["field"] for r in caplog.records] == ["percentageOfNodesToScore", "enableContentionProfiling"]


def test_the_upstream_dump_is_valid_for_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(write(tmp_path, UPSTREAM_DUMP))]) == 0
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if line.startswith("warning: ")]) == 2
    assert "SchedulingGates" not in out  # the dump enables it; the queue honours gates
    assert yaml.safe_load(UPSTREAM_DUMP)["kind"] == "KubeSchedulerConfiguration"


def test_scheduling_gates_is_built_in_enabling_it_is_silent_disabling_it_is_warned() -> None:
    """The queue honours spec.schedulingGates (scheduler/queue.py): check-config must not call it ignored."""
    enabled = parse_config({"profiles": [{"plugins": {"preEnqueue": {"enabled": [{"name": "SchedulingGates"}]},
                                                      "multiPoint": {"enabled": [{"name": "SchedulingGates"}]}}}]},
                           CATALOG)
    assert enabled.warnings == ()
    disabled = parse_config({"profiles": [{"plugins": {"multiPoint": {"disabled": [{"name": "SchedulingGates"}]}}}]},
                            CATALOG)
    assert [(w.field, w.message) for w in disabled.warnings] == [
        ("profiles[0].plugins.multiPoint.disabled[0].name",
         "kube-scheduler's plugin 'SchedulingGates' cannot be disabled in metrics-sched: the queue always holds "
         "back pods with spec.schedulingGates until they are removed")]
