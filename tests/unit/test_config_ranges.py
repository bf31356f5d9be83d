"""Config ranges (issue 14, item 9): the edges of each range are accepted, kube-scheduler's name only on
request, and a dangerous value ends `check-config` with exit 2 and one line naming the field. The refused
values themselves are in test_config.BAD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.demo import scheduler_config as demo_config
from metrics_sched.app.cli import main
from metrics_sched.config import parse_config
from metrics_sched.plugins import in_tree_registry

CATALOG = in_tree_registry(third_party=False).catalog()

EDGES: list[tuple[dict[str, Any], str, Any]] = [
    ({"clientConnection": {"watchReadTimeout": "1s"}}, "client_connection.watch_read_timeout", 1.0),
    ({"clientConnection": {"watchReadTimeout": "10m"}}, "client_connection.watch_read_timeout", 600.0),
    ({"leaderElection": {"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"}},
     "leader_election.retry_period", 0.5),
    ({"leaderElection": {"leaseDuration": "1h", "renewDeadline": "50m"}}, "leader_election.lease_duration", 3600.0),
    ({"podInitialBackoffSeconds": 0.1, "podMaxBackoffSeconds": 0.1}, "pod_max_backoff", 0.1),
    ({"podMaxInUnschedulablePodsDuration": "1s"}, "pod_max_in_unschedulable", 1.0),
    ({"server": {"port": 1}}, "server.port", 1),
    ({"server": {"port": 65535}}, "server.port", 65535),
    ({"bindWorkers": 128}, "bind_workers", 128),
    ({"audit": {"ringSize": 50_000, "topCandidates": 20}}, "audit.ring_size", 50_000),
]


@pytest.mark.parametrize(("data", "attribute", "expected"), EDGES, ids=[e[1] + "=" + str(e[2]) for e in EDGES])
def test_the_edges_of_each_range_are_accepted(data: dict[str, Any], attribute: str, expected: Any) -> None:
    value: Any = parse_config(data, CATALOG)
    for part in attribute.split("."):
        value = getattr(value, part)
    assert value == expected


def test_default_scheduler_only_when_the_config_says_it_replaces_kube_scheduler() -> None:
    data: dict[str, Any] = {"profiles": [{"schedulerName": "default-scheduler"}], "replacesDefaultScheduler": True}
    config = parse_config(data, CATALOG)
    assert config.replaces_default_scheduler and config.scheduler_names == {"default-scheduler"}
    assert not parse_config({}, CATALOG).replaces_default_scheduler


@pytest.mark.parametrize(("data", "field"), [
    ({"clientConnection": {"watchReadTimeout": 0}}, "clientConnection.watchReadTimeout"),
    ({"leaderElection": {"retryPeriod": "10ms"}}, "leaderElection.retryPeriod"),
    ({"profiles": [{"schedulerName": "default-scheduler"}]}, "profiles[0].schedulerName"),
])
def test_check_config_exits_2_with_one_line_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any], field: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SystemExit) as exit_info:
        main(["check-config", str(path)])
    assert exit_info.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"{field}: " in line


def test_the_demo_config_is_within_range() -> None:
    parse_config(demo_config([], 10260), in_tree_registry().catalog())
