"""Coscheduling in the configuration: the default profile, its args, and upstream's GangScheduling named in a file."""

from __future__ import annotations

import pytest

from metrics_sched.config import ConfigError, parse_config
from metrics_sched.plugins import in_tree_registry

CATALOG = in_tree_registry(third_party=False).catalog()


def test_the_default_profile_honours_gangs_at_every_point() -> None:
    profile = parse_config({}, CATALOG).profiles[0]
    for point in ("queueSort", "preFilter", "filter", "postFilter", "reserve", "permit"):
        assert "Coscheduling" in [r.name for r in profile.enabled(point)], point
    # Preemption first, for the whole gang; Coscheduling then fails the gang's attempt if preemption cannot help.
    assert [r.name for r in profile.enabled("postFilter")][:2] == ["DefaultPreemption", "Coscheduling"]
    assert [r.name for r in profile.enabled("queueSort")] == ["Coscheduling"]
    # Naming another queueSort (upstream's PrioritySort, e.g. in a dump's multiPoint) replaces the default.
    for plugins in ({"queueSort": {"enabled": [{"name": "PrioritySort"}]}},
                    {"multiPoint": {"enabled": [{"name": "PrioritySort"}]}}):
        named = parse_config({"profiles": [{"plugins": plugins}]}, CATALOG).profiles[0]
        assert [r.name for r in named.enabled("queueSort")] == ["PrioritySort"], plugins


@pytest.mark.parametrize(("args", "field"), [
    ({"permitWaitingTimeSeconds": 0}, "permitWaitingTimeSeconds"),
    ({"permitWaitingTimeSeconds": 901}, "permitWaitingTimeSeconds"),
    ({"podGroupBackoffSeconds": -1}, "podGroupBackoffSeconds"),
    ({"gangPlacement": "Greedy"}, "gangPlacement"),
    ({"topologyKey": ""}, "topologyKey"),
])
def test_bad_args_name_the_field(args: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"pluginConfig\[0\]\.args\.{field}"):
        parse_config({"profiles": [{"pluginConfig": [{"name": "Coscheduling", "args": args}]}]}, CATALOG)


@pytest.mark.parametrize("verb", ["enabled", "disabled"])
def test_upstream_gang_scheduling_in_a_file_points_to_coscheduling(verb: str) -> None:
    config = parse_config({"profiles": [{"plugins": {"multiPoint": {verb: [{"name": "GangScheduling"}]}}}]}, CATALOG)
    [warning] = [w for w in config.warnings if "GangScheduling" in w.message]
    assert "enable or disable Coscheduling instead" in warning.message
