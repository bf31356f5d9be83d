"""kube-scheduler's flags as kube users type them, on `metrics-sched run`: --secure-port, -v/--v, --leader-elect."""

from __future__ import annotations

import pytest

from metrics_sched.app.cli import build_parser
from metrics_sched.app.cli.run_cmd import effective_log_level, with_flag_overrides
from metrics_sched.config import parse_config
from metrics_sched.plugins import in_tree_registry

pytestmark = pytest.mark.unit

CATALOG = in_tree_registry(third_party=False).catalog()


def parse(*flags: str) -> object:
    return build_parser(commands=()).parse_args(["run", "--config", "c.yaml", *flags])


def test_secure_port_is_port() -> None:
    assert parse("--secure-port", "10300").port == 10300  # type: ignore[attr-defined]
    assert parse("--secure-port=0").port == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(("flags", "level"), [
    ((), "info"), (("-v", "2"), "info"), (("-v=4",), "debug"), (("--v=5",), "debug"), (("-v3",), "info"),
    (("--log-level", "warning"), "warning"),
])
def test_klog_verbosity_maps_to_a_log_level(flags: tuple[str, ...], level: str) -> None:
    assert effective_log_level(parse(*flags)) == level  # type: ignore[arg-type]


def test_verbosity_and_log_level_are_one_or_the_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse("-v", "4", "--log-level", "info")
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse("--v=loud")


@pytest.mark.parametrize(("flags", "elect"), [
    ((), True), (("--leader-elect",), True), (("--leader-elect=false",), False), (("--leader-elect", "true"), True),
])
def test_leader_elect_overrides_the_config(flags: tuple[str, ...], elect: bool) -> None:
    config = with_flag_overrides(parse_config({"leaderElection": {"leaderElect": True}}, CATALOG), parse(*flags))  # type: ignore[arg-type]
    assert config.leader_election.leader_elect is elect
    off = with_flag_overrides(parse_config({"leaderElection": {"leaderElect": False}}, CATALOG),
                              parse("--leader-elect"))  # type: ignore[arg-type]
    assert off.leader_election.leader_elect is True


def test_kubeconfig_is_a_flag_of_run() -> None:
    assert str(parse("--kubeconfig", "/tmp/k").kubeconfig) == "/tmp/k"  # type: ignore[attr-defined]
