"""The config's JSON Schema: generated from config/schema.py, shipped as a file, and in agreement with the loader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from metrics_sched.app.cli import main
from metrics_sched.config import parse_config
from metrics_sched.config.schema import json_schema, keys, render, schema_errors
from metrics_sched.plugins import in_tree_registry
from tests.unit.test_config_upstream import DOCS_MINIMAL, DOCS_MULTIPLE_PROFILES, UPSTREAM_DUMP

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "metrics-sched-config.schema.json"
CATALOG = in_tree_registry(third_party=False).catalog()


def test_the_shipped_schema_is_the_generated_one() -> None:
    # Regenerate with: metrics-sched config schema > deploy/metrics-sched-config.schema.json
    assert SHIPPED.read_text() == render()


def test_config_schema_command_prints_a_valid_2020_12_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    Draft202012Validator.check_schema(printed)
    assert printed == json_schema()


def deploy_config() -> Any:
    manifest = yaml.safe_load((ROOT / "deploy" / "configmap.yaml").read_text())
    return yaml.safe_load(manifest["data"]["config.yaml"])


@pytest.mark.parametrize("text", [DOCS_MINIMAL, DOCS_MULTIPLE_PROFILES, UPSTREAM_DUMP], ids=["docs-minimal",
                                                                                            "docs-profiles", "dump"])
def test_upstream_files_match_the_schema(text: str) -> None:
    assert schema_errors(yaml.safe_load(text)) == []


def test_the_shipped_deployment_config_matches_the_schema() -> None:
    data = deploy_config()
    parse_config(data, CATALOG)
    assert schema_errors(data) == []


@pytest.mark.parametrize(("data", "field"), [
    ({"profile": []}, "profile"),
    ({"clientConnection": {"qps": "fast"}}, "clientConnection.qps"),
    ({"profiles": [{"plugins": {"score": {"enabled": [{"weight": 2}]}}}]}, "profiles[0].plugins.score.enabled[0]"),
    ({"leaderElection": {"leaseDuration": "soon"}}, "leaderElection.leaseDuration"),
    ({"extenders": [{"urlPrefix": "http://x"}]}, "extenders"),
    ({"rebalance": {"rules": [{"name": "hot", "metric": "m", "abvoe": 1}]}}, "rebalance.rules[0].abvoe"),
])
def test_the_schema_refuses_naming_the_field_as_the_loader_does(data: dict[str, Any], field: str) -> None:
    [error] = schema_errors(data)
    assert error.startswith(f"{field}: ")


def defaults(node: dict[str, Any]) -> dict[str, Any]:
    """A config made of every default the schema states (nested sections included)."""
    out: dict[str, Any] = {}
    for name, prop in node.get("properties", {}).items():
        if "default" in prop:
            out[name] = prop["default"]
        elif "properties" in prop and "required" not in prop and defaults(prop):
            out[name] = defaults(prop)
    return out


def test_the_schemas_defaults_are_the_loaders() -> None:
    spelled_out = defaults(json_schema())
    assert {"parallelism", "leaderElection", "clientConnection", "enableProfiling", "audit"} <= set(spelled_out)
    assert schema_errors(spelled_out) == []
    config, implicit = parse_config(spelled_out, CATALOG), parse_config({}, CATALOG)
    assert config.warnings == ()
    for name in ("profiles", "leader_election", "client_connection", "server", "bind_workers", "pod_initial_backoff",
                 "pod_max_backoff", "pod_max_in_unschedulable", "cache_compare_interval", "audit", "rebalance",
                 "enable_profiling", "percentage_of_nodes_to_score", "replaces_default_scheduler"):
        assert getattr(config, name) == getattr(implicit, name), name


def test_every_field_of_the_schema_is_one_the_loader_reads() -> None:
    # The loader's key sets are the schema's (keys()); an unknown key is refused by both.
    assert "multiPoint" in keys("profiles", "plugins") and "shadow" in keys("profiles")
    assert {"contentType", "acceptContentTypes", "kubeconfig"} <= keys("clientConnection")
    assert schema_errors({"clientConnection": {"contentTyp": "x"}})
