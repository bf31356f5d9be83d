"""`metrics-sched config defaults`: the effective default configuration, which loads back to the defaults."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from metrics_sched.app.cli import main
from metrics_sched.config import SchedulerConfig, load_config, parse_config
from metrics_sched.config.schema import schema_errors
from metrics_sched.plugins import in_tree_registry

pytestmark = pytest.mark.unit

CATALOG = in_tree_registry(third_party=False).catalog()


def effective(config: SchedulerConfig) -> SchedulerConfig:
    """All but the hash of the document (two documents that mean the same differ in it)."""
    return dataclasses.replace(config, config_hash="")


def test_defaults_print_a_config_that_loads_back_to_the_defaults(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "defaults"]) == 0
    printed = capsys.readouterr().out
    path = tmp_path / "defaults.yaml"
    path.write_text(printed)
    loaded = load_config(path, CATALOG)
    assert effective(loaded) == effective(parse_config({}, CATALOG))
    assert loaded.warnings == ()
    assert schema_errors(yaml.safe_load(printed)) == []
    # It is what an operator reads: the values, not a bare `{}`.
    document = yaml.safe_load(printed)
    assert document["server"]["port"] == 10259 and document["leaderElection"]["leaseDuration"] == "15s"
    score = document["profiles"][0]["plugins"]["score"]["enabled"]
    assert {"name": "GPUTemperature", "weight": 3} in score


def test_check_config_accepts_the_defaults_without_warnings(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "defaults"]) == 0
    path = tmp_path / "defaults.yaml"
    path.write_text(capsys.readouterr().out)
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "warning" not in out and "valid (1 profile(s): metrics-sched" in out
