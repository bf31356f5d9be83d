"""The `rebalance:` section: every field parsed, every mistake refused naming its field (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from metrics_sched.app.cli import main
from metrics_sched.config import ConfigError, SchedulerConfig, parse_config
from metrics_sched.config.model import SelectorExpression
from metrics_sched.plugins import in_tree_registry
from metrics_sched.rebalance.model import EvictionLimits, NodeRule, RebalanceConfig, RuleKind

pytestmark = pytest.mark.unit

CATALOG = in_tree_registry().catalog()
HOT = {"name": "hot-gpu", "metric": "gpu_temperature", "above": 85, "for": "5m"}
EXPENSIVE = {"name": "expensive", "metric": "node_hourly_cost", "aboveQuantile": 0.9, "for": "10m"}


def parse(section: Any) -> SchedulerConfig:
    return parse_config({"rebalance": section}, CATALOG)


def test_absent_means_disabled_with_the_defaults() -> None:
    assert parse_config({}, CATALOG).rebalance == RebalanceConfig()
    assert parse(None).rebalance == RebalanceConfig()
    assert RebalanceConfig().enabled is False and RebalanceConfig().dry_run is True
    assert RebalanceConfig().gangs == "never"  # issue 44: a gang stays unless asked


def test_every_field() -> None:
    config = parse({
        "enabled": True, "interval": "1m30s", "dryRun": False, "margin": 12.5, "maxPriority": 1000,
        "rules": [HOT, EXPENSIVE],
        "limits": {"perNode": 2, "perNamespace": 3, "cluster": 4, "cooldown": "45m"},
        "podSelector": {"matchLabels": {"team": "ml", "rebalance": "yes"},
                        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web", "db"]},
                                             {"key": "pinned", "operator": "DoesNotExist"}]},
        "evictLocalStoragePods": True, "gangs": "whole",
    }).rebalance
    assert config == RebalanceConfig(
        enabled=True, interval_seconds=90.0, dry_run=False, margin=12.5, max_priority=1000,
        rules=(NodeRule(name="hot-gpu", metric="gpu_temperature", kind=RuleKind.ABOVE, threshold=85.0,
                        for_seconds=300.0),
               NodeRule(name="expensive", metric="node_hourly_cost", kind=RuleKind.QUANTILE, quantile=0.9,
                        for_seconds=600.0)),
        limits=EvictionLimits(per_node=2, per_namespace=3, cluster=4, cooldown_seconds=2700.0),
        pod_selector={"team": "ml", "rebalance": "yes"},
        pod_selector_expressions=(SelectorExpression("tier", "NotIn", ("db", "web")),
                                  SelectorExpression("pinned", "DoesNotExist")),
        evict_local_storage_pods=True, gangs="whole",
    )


def test_defaults_of_a_rule_and_of_the_limits() -> None:
    config = parse({"rules": [{"name": "load", "metric": "node_load_per_cpu", "above": 1.5}], "limits": {},
                    "podSelector": {}, "maxPriority": None}).rebalance
    assert config.rules == (NodeRule(name="load", metric="node_load_per_cpu", threshold=1.5, for_seconds=300.0),)
    assert config.limits == EvictionLimits() and config.pod_selector == {} and config.max_priority is None
    assert config.pod_selector_expressions == () and config.evict_local_storage_pods is False
    # Plain seconds are durations too, and a cooldown may be 0 (no cooldown).
    config = parse({"interval": 30, "limits": {"cooldown": 0}, "rules": [{**HOT, "for": 0}]}).rebalance
    assert (config.interval_seconds, config.limits.cooldown_seconds) == (30.0, 0.0)
    assert config.rules[0].for_seconds == 0.0  # bad at the first tick that sees it above


@pytest.mark.parametrize(("section", "field"), [
    ("yes", "rebalance"),
    ({"enable": True}, "rebalance.enable"),
    ({"enabled": "true"}, "rebalance.enabled"),
    ({"enabled": True}, "rebalance.rules"),
    ({"enabled": True, "rules": []}, "rebalance.rules"),
    ({"interval": "fast"}, "rebalance.interval"),
    ({"interval": "1s"}, "rebalance.interval"),
    ({"interval": 0}, "rebalance.interval"),
    ({"dryRun": "no"}, "rebalance.dryRun"),
    ({"margin": -1}, "rebalance.margin"),
    ({"margin": 101}, "rebalance.margin"),
    ({"margin": "10"}, "rebalance.margin"),
    ({"maxPriority": 1.5}, "rebalance.maxPriority"),
    ({"rules": {"hot": HOT}}, "rebalance.rules"),
    ({"rules": ["hot"]}, "rebalance.rules[0]"),
    ({"rules": [{**HOT, "below": 20}]}, "rebalance.rules[0].below"),
    ({"rules": [{**HOT, "name": ""}]}, "rebalance.rules[0].name"),
    ({"rules": [{**HOT, "name": "Hot GPU"}]}, "rebalance.rules[0].name"),
    ({"rules": [{k: v for k, v in HOT.items() if k != "name"}]}, "rebalance.rules[0].name"),
    ({"rules": [HOT, {**EXPENSIVE, "name": "hot-gpu"}]}, "rebalance.rules[1].name"),
    ({"rules": [{k: v for k, v in HOT.items() if k != "metric"}]}, "rebalance.rules[0].metric"),
    ({"rules": [{**HOT, "metric": "gpu temp"}]}, "rebalance.rules[0].metric"),
    ({"rules": [{k: v for k, v in HOT.items() if k != "above"}]}, "rebalance.rules[0].above"),
    ({"rules": [{**HOT, "above": "85"}]}, "rebalance.rules[0].above"),
    ({"rules": [{**HOT, "aboveQuantile": 0.9}]}, "rebalance.rules[0].aboveQuantile"),
    ({"rules": [{**EXPENSIVE, "aboveQuantile": 1}]}, "rebalance.rules[0].aboveQuantile"),
    ({"rules": [{**EXPENSIVE, "aboveQuantile": 0}]}, "rebalance.rules[0].aboveQuantile"),
    ({"rules": [{**HOT, "for": "5 minutes"}]}, "rebalance.rules[0].for"),
    ({"rules": [{**HOT, "for": "-5m"}]}, "rebalance.rules[0].for"),
    ({"limits": [1]}, "rebalance.limits"),
    ({"limits": {"perPod": 1}}, "rebalance.limits.perPod"),
    ({"limits": {"perNode": 0}}, "rebalance.limits.perNode"),
    ({"limits": {"perNamespace": 1.0}}, "rebalance.limits.perNamespace"),
    ({"limits": {"cluster": 100_000}}, "rebalance.limits.cluster"),
    ({"limits": {"cooldown": "-1m"}}, "rebalance.limits.cooldown"),
    ({"podSelector": {"matchExpressions": {}}}, "rebalance.podSelector.matchExpressions"),
    ({"podSelector": {"matchExpressions": ["tier"]}}, "rebalance.podSelector.matchExpressions[0]"),
    ({"podSelector": {"matchExpressions": [{"key": "t", "operator": "Is", "values": ["a"]}]}},
     "rebalance.podSelector.matchExpressions[0].operator"),
    ({"podSelector": {"matchExpressions": [{"key": "t", "operator": "In"}]}},
     "rebalance.podSelector.matchExpressions[0].values"),
    ({"podSelector": {"matchExpressions": [{"key": "t", "operator": "Exists", "values": ["a"]}]}},
     "rebalance.podSelector.matchExpressions[0].values"),
    ({"podSelector": {"matchExpressions": [{"operator": "Exists"}]}}, "rebalance.podSelector.matchExpressions[0].key"),
    ({"podSelector": {"matchExpressions": [{"key": "t", "operator": "In", "values": [1]}]}},
     "rebalance.podSelector.matchExpressions[0].values"),
    ({"podSelector": {"matchExpressions": [{"key": "t", "operator": "Exists", "value": "a"}]}},
     "rebalance.podSelector.matchExpressions[0].value"),
    ({"evictLocalStoragePods": "yes"}, "rebalance.evictLocalStoragePods"),
    ({"gangs": "half"}, "rebalance.gangs"),
    ({"gangs": True}, "rebalance.gangs"),
    ({"podSelector": {"matchLabels": ["a"]}}, "rebalance.podSelector.matchLabels"),
    ({"podSelector": {"matchLabels": {"team": 7}}}, "rebalance.podSelector.matchLabels.team"),
])
def test_each_mistake_names_its_field(section: Any, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(section)
    assert info.value.field == field, str(info.value)


def write(tmp_path: Path, section: Any) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"rebalance": section}))
    return path


def test_check_config_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(write(tmp_path, {"enabled": True, "rules": [HOT]}))]) == 0
    with pytest.raises(SystemExit) as info:
        main(["check-config", str(write(tmp_path, {"rules": [{**HOT, "for": "soon"}]}))])
    assert info.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "rebalance.rules[0].for:" in line and "'soon'" in line


def test_the_rebalance_command_refuses_a_config_without_rules(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Refused before it connects anywhere: no cluster is needed to tell.
    assert main(["rebalance", "--config", str(write(tmp_path, {}))]) == 2
    assert "rebalance.rules" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["rebalance", "--config", str(write(tmp_path, {"margin": "a lot"}))])
    assert info.value.code == 2
    assert "rebalance.margin" in capsys.readouterr().err
