"""Issue 44, defect 1: every number a config holds is finite and in range, and every load error is exit 2 naming
the field (or the file). NaN passes every range check written as a comparison: `watchReadTimeout: .nan` was
accepted and the watch died on settimeout(nan); `rebalance.interval: .nan` evicted in a busy loop and `.inf`
killed the rebalancer thread with OverflowError; "999...9s" parsed as infinity; a file that is not UTF-8 (or
YAML that PyYAML cannot build) ended in a traceback."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from adapters.cmdb.config import parse_config as parse_cmdb
from adapters.custom_metrics.config import parse_config as parse_custom_metrics
from adapters.metrics_server.config import parse_config as parse_metrics_server
from adapters.prometheus.config import parse_config as parse_prometheus
from metrics_sched.app.cli import main
from metrics_sched.config import ConfigError, parse_config
from metrics_sched.config.durations import MAX_DURATION_SECONDS, parse_duration
from metrics_sched.config.reader import read_duration, read_float, read_int
from metrics_sched.plugins import in_tree_registry

CATALOG = in_tree_registry(third_party=False).catalog()
HUGE = 10**400  # YAML reads it as an int; float() of it raises OverflowError
NINES = "9" * 400 + "s"  # float("999...9") is inf
NOT_FINITE = [math.nan, math.inf, -math.inf, HUGE, NINES, 1e300]

DURATIONS: list[tuple[dict[str, Any], str]] = [
    ({"clientConnection": {"watchReadTimeout": None}}, "clientConnection.watchReadTimeout"),
    ({"rebalance": {"interval": None}}, "rebalance.interval"),
    ({"rebalance": {"limits": {"cooldown": None}}}, "rebalance.limits.cooldown"),
    ({"rebalance": {"rules": [{"name": "r", "metric": "m", "above": 1, "for": None}]}}, "rebalance.rules[0].for"),
    ({"leaderElection": {"leaseDuration": None}}, "leaderElection.leaseDuration"),
    ({"leaderElection": {"retryPeriod": None}}, "leaderElection.retryPeriod"),
    ({"podMaxBackoffSeconds": None}, "podMaxBackoffSeconds"),
    ({"podMaxInUnschedulablePodsDuration": None}, "podMaxInUnschedulablePodsDuration"),
    ({"cacheCompareInterval": None}, "cacheCompareInterval"),
    ({"metrics": {"gpu_temperature": {"ttl": None}}}, "metrics.gpu_temperature.ttl"),
    ({"server": {"authenticationTokenCacheTTL": None}}, "server.authenticationTokenCacheTTL"),
]


def _with(data: Any, value: object) -> Any:
    """`data` with its one None leaf replaced by `value`."""
    if isinstance(data, dict):
        return {k: value if v is None else _with(v, value) for k, v in data.items()}
    if isinstance(data, list):
        return [_with(v, value) for v in data]
    return data


@pytest.mark.parametrize("value", NOT_FINITE, ids=["nan", "inf", "-inf", "huge-int", "nines", "1e300"])
@pytest.mark.parametrize(("data", "field"), DURATIONS, ids=[d[1] for d in DURATIONS])
def test_a_non_finite_or_huge_duration_is_refused_naming_the_field(data: dict[str, Any], field: str,
                                                                   value: object) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_with(data, value), CATALOG)
    assert info.value.field == field
    assert len(str(info.value)) < 200  # a 400-digit value is not repeated in full


def test_durations_up_to_a_year_are_accepted_and_nan_fails_every_range() -> None:
    assert parse_duration("8784h", "f") == MAX_DURATION_SECONDS
    assert parse_duration(0, "f") == 0.0
    for kwargs in ({}, {"positive": False}, {"minimum": 1.0}, {"maximum": 10.0}):
        with pytest.raises(ConfigError, match="finite"):
            read_duration({"d": math.nan}, "d", "x", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [math.nan, math.inf, HUGE, -HUGE])
def test_numbers_are_finite_whatever_range_the_caller_asks(value: float) -> None:
    with pytest.raises(ConfigError, match=r"^x\.n: must be a finite number"):
        read_float({"n": value}, "n", "x", minimum=0)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, HUGE])
def test_integers_stay_within_64_bits(value: int) -> None:
    with pytest.raises(ConfigError, match=r"^x\.n: must be within a 64-bit integer's range"):
        read_int({"n": value}, "n", "x", minimum=0)
    assert read_int({"n": 2**63 - 1}, "n", "x") == 2**63 - 1


@pytest.mark.parametrize(("data", "field"), [
    ({"rebalance": {"margin": HUGE}}, "rebalance.margin"),
    ({"rebalance": {"rules": [{"name": "r", "metric": "m", "above": math.nan}]}}, "rebalance.rules[0].above"),
    ({"rebalance": {"rules": [{"name": "r", "metric": "m", "aboveQuantile": math.nan}]}},
     "rebalance.rules[0].aboveQuantile"),
    ({"clientConnection": {"qps": math.inf}}, "clientConnection.qps"),
    ({"clientConnection": {"burst": HUGE}}, "clientConnection.burst"),
    ({"audit": {"file": {"path": "/tmp/a", "maxBytes": 2**64}}}, "audit.file.maxBytes"),
    ({"rebalance": {"maxPriority": 2**70}}, "rebalance.maxPriority"),
])
def test_other_numbers_of_the_config(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data, CATALOG)
    assert info.value.field == field


def test_a_key_that_is_not_a_string_is_refused_anywhere() -> None:
    # Inside a source's spec (validated later by its type) it broke the config hash's sort: TypeError.
    data = {"sources": [{"name": "s", "type": "cmdb", "fields": {1: "a", "b": "c"}}]}
    with pytest.raises(ConfigError) as info:
        parse_config(data, CATALOG)
    assert info.value.field == "sources[0].fields"


URL = {"url": "http://127.0.0.1:1"}
SOURCES: list[tuple[Any, dict[str, Any], str]] = [
    (parse_prometheus, {**URL, "metrics": [{"name": "a", "query": "up"}], "interval": None}, "interval"),
    (parse_prometheus, {**URL, "metrics": [{"name": "a", "query": "up"}], "timeout": None}, "timeout"),
    (parse_prometheus, {**URL, "metrics": [{"name": "a", "query": "up", "scale": None}]}, "metrics[0].scale"),
    (parse_prometheus, {**URL, "metrics": [{"name": "a", "query": "up", "sentinelAbove": None}]},
     "metrics[0].sentinelAbove"),
    (parse_cmdb, {**URL, "nodeKey": "n", "fields": {"v": "v"}, "interval": None}, "interval"),
    (parse_cmdb, {**URL, "nodeKey": "n", "fields": {"v": "v"}, "circuitBreaker": {"coolDown": None}},
     "circuitBreaker.coolDown"),
    (parse_cmdb, {**URL, "nodeKey": "n", "fields": {"v": {"path": "v", "scale": None}}}, "fields.v.scale"),
    (parse_cmdb, {**URL, "nodeKey": "n", "fields": {"v": "v"}, "params": {"window": None}}, "params.window"),
    (parse_cmdb, {**URL, "nodeKey": "n", "fields": {"v": "v"}, "match": {"role": None}}, "match.role"),
    (parse_metrics_server, {"interval": None}, "interval"),
    (parse_metrics_server, {"timeout": None}, "timeout"),
    (parse_custom_metrics, {"nodeMetrics": [{"name": "a", "scale": None}]}, "nodeMetrics[0].scale"),
    (parse_custom_metrics, {"nodeMetrics": [{"name": "a"}], "interval": None}, "interval"),
]


@pytest.mark.parametrize("value", [math.nan, math.inf, HUGE], ids=["nan", "inf", "huge-int"])
@pytest.mark.parametrize(("parse", "spec", "field"), SOURCES, ids=[f"{s[0].__module__}:{s[2]}" for s in SOURCES])
def test_the_sources_numbers_follow_the_same_rule(parse: Any, spec: dict[str, Any], field: str, value: object,
                                                  tmp_path: Path) -> None:
    kwargs = {"base_dir": tmp_path} if parse in (parse_prometheus, parse_cmdb) else {}
    with pytest.raises(ConfigError) as info:
        parse(_with(spec, value), **kwargs)
    assert info.value.field == field


def _plugin_args(plugin: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"profiles": [{"schedulerName": "metrics-sched", "pluginConfig": [{"name": plugin, "args": args}]}]}


SPREAD = {"defaultingType": "List",
          "defaultConstraints": [{"maxSkew": None, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]}
PLUGIN_FLOATS: list[tuple[str, dict[str, Any], str]] = [
    ("GPUTemperature", {"threshold": None}, "threshold"),
    ("GPUTemperature", {"normalization": {"max": None}}, "normalization.max"),
]
PLUGIN_INTS: list[tuple[str, dict[str, Any], str]] = [
    ("DefaultPreemption", {"minCandidateNodesAbsolute": None}, "minCandidateNodesAbsolute"),
    ("PodTopologySpread", SPREAD, "defaultConstraints[0].maxSkew"),
]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, HUGE], ids=["nan", "inf", "-inf", "huge-int"])
@pytest.mark.parametrize(("plugin", "args", "field"), PLUGIN_FLOATS + PLUGIN_INTS,
                         ids=[f"{p}.{f}" for p, _, f in PLUGIN_FLOATS + PLUGIN_INTS])
def test_plugin_args_follow_the_same_rule(plugin: str, args: dict[str, Any], field: str, value: object) -> None:
    """framework/args.py read plugin args apart from the config's readers: a 400-digit float field ended in
    OverflowError, and an integer field took any size (maxSkew, minCandidateNodesAbsolute)."""
    with pytest.raises(ConfigError) as info:
        parse_config(_plugin_args(plugin, _with(args, value)), CATALOG)
    assert info.value.field == f"profiles[0].pluginConfig[0].args.{field}"


@pytest.mark.parametrize(("plugin", "args", "field"), PLUGIN_INTS, ids=[f"{p}.{f}" for p, _, f in PLUGIN_INTS])
def test_plugin_integer_args_stay_within_64_bits(plugin: str, args: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match="must be within a 64-bit integer's range") as info:
        parse_config(_plugin_args(plugin, _with(args, 2**63)), CATALOG)
    assert info.value.field == f"profiles[0].pluginConfig[0].args.{field}"


def _check_config(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["check-config", str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = err.strip().splitlines()
    return line


@pytest.mark.parametrize(("text", "expected"), [
    ("clientConnection:\n  watchReadTimeout: .nan\n", "clientConnection.watchReadTimeout: must be a finite number"),
    ("rebalance:\n  interval: .inf\n", "rebalance.interval: must be a finite number"),
    (f"rebalance:\n  interval: {NINES}\n", "rebalance.interval: must be at most 366 days"),
    ("sources:\n- {name: p, type: prometheus, url: 'http://p', timeout: .nan, metrics: [{name: a, query: up}]}\n",
     "sources[0].timeout: must be a finite number"),
    ("leaderElection:\n  leaseDuration: 2024-13-45\n", "cannot be read as YAML: ValueError"),
    ("profiles:\n- pluginConfig:\n  - {name: GPUTemperature, args: {threshold: " + "9" * 400 + "}}\n",
     "profiles[0].pluginConfig[0].args.threshold: must be a finite number, got an integer of 1329 bits"),
    ("profiles:\n- pluginConfig:\n  - {name: GPUTemperature, args: {threshold: .nan}}\n",
     "profiles[0].pluginConfig[0].args.threshold: must be a finite number, got nan"),
    ("profiles:\n- pluginConfig:\n  - {name: DefaultPreemption, args: {minCandidateNodesAbsolute: " + "9" * 400
     + "}}\n",
     "profiles[0].pluginConfig[0].args.minCandidateNodesAbsolute: must be within a 64-bit integer's range"),
    ("profiles: " + "[" * 5000 + "]" * 5000 + "\n", "cannot be read as YAML: RecursionError"),
    # Found by tests/unit/test_fuzz_config.py: a recursive alias made check_json_shaped loop forever (the
    # command hung, its memory growing), and aliases of aliases expanded exponentially ("billion laughs").
    # Found by tests/unit/test_fuzz_config.py: a key's control characters went out raw, breaking the one line.
    ('"a\\rb\\nc": 1\n', "a\\rb\\nc: unknown field"),
    ("metrics: &x {a: *x}\n", "metrics.a: contains itself (a recursive YAML alias)"),
    ("profiles: &p [*p]\n", "profiles[0]: contains itself"),
    ("metrics:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n"
     + "".join(f"  {n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcde", "bcdef", strict=True)),
     "expands to more than 100000 values (YAML aliases?)"),
])
def test_check_config_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                                expected: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    assert expected in _check_config(path, capsys)


def test_a_config_file_that_is_not_utf8_exits_2_naming_the_file(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("profiles:\n- schedulerName: café\n".encode("latin-1"))
    line = _check_config(path, capsys)
    assert f"{path} is not UTF-8 text (byte 0xe9 at offset" in line
