"""What-if replay: records from a real (in-memory) scheduler, exported as JSONL, re-scored with new weights and
args; the /decisions JSONL export and the rotating file sink."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from metrics_sched.app.cli import main
from metrics_sched.audit import DecisionRing
from metrics_sched.audit.auditor import Auditor
from metrics_sched.audit.record import Candidate, DecisionRecord
from metrics_sched.audit.replay import plans_of, read_jsonl, replay
from metrics_sched.audit.sink import JsonlFileSink
from metrics_sched.config import ConfigError, parse_config
from metrics_sched.plugins import in_tree_registry
from metrics_sched.serving.decisions import decisions
from metrics_sched.serving.route import BadRequest
from tests.unit.fakes import pod
from tests.unit.test_scheduler import drain
from tests.unit.test_telemetry_scoring import feed, gpu_nodes, make

TEMPS = {"cold": 35.0, "cheap": 80.0, "mid": 60.0}
COSTS = {"cold": 30.0, "cheap": 2.0, "mid": 10.0}


def weights_config(weights: dict[str, int], args: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    enabled = [{"name": n, "weight": w} for n, w in weights.items()]
    profile: dict[str, Any] = {"plugins": {"score": {"disabled": [{"name": "*"}], "enabled": enabled}}}
    if args:
        profile["pluginConfig"] = [{"name": n, "args": a} for n, a in args.items()]
    return {"profiles": [profile]}


def recorded(n: int = 6) -> list[dict[str, Any]]:
    """n GPU pods placed by a scheduler that weighs temperature over cost, exported as JSONL and read back."""
    scheduler, api, cache = make(weights_config({"GPUTemperature": 10, "Cost": 1}))
    ring = DecisionRing(100)
    auditor = Auditor(scheduler.state, ring, config_hash="x", log_decisions=False)
    scheduler.cycle_observers.append(auditor.on_cycle)
    gpu_nodes(scheduler, list(TEMPS))
    feed(cache, {"gpu_temperature": TEMPS, "node_hourly_cost": COSTS})
    for i in range(n):
        api.add_pod(pod(f"p{i}", gpus=1))
    drain(scheduler, api)
    status, content_type, body = decisions(ring, {"format": ["jsonl"]})
    assert status == 200 and content_type == "application/jsonl"
    assert not isinstance(body, bytes)
    text = b"".join(body).decode()
    return list(read_jsonl(text.splitlines()))


def plans(config: dict[str, Any]) -> Any:
    registry = in_tree_registry(third_party=False)
    return plans_of(parse_config(config, registry.catalog()), registry.plugins)


def test_jsonl_export_is_one_record_a_line_oldest_first() -> None:
    records = recorded(4)
    assert [r["pod"] for r in records] == [f"default/p{i}" for i in range(4)]
    assert all(r["kind"] == "placement" and r["node"] == "cold" for r in records)


def test_same_config_changes_nothing_and_raising_cost_moves_winners_to_cheaper_nodes() -> None:
    records = recorded()
    same = replay(records, plans(weights_config({"GPUTemperature": 10, "Cost": 1})))
    assert len(same.decisions) == 6 and same.changed == 0
    assert all(abs(d.after_total - d.before_total) < 1e-3 for d in same.decisions)

    cheap = replay(records, plans(weights_config({"GPUTemperature": 1, "Cost": 20})))
    assert cheap.changed == 6 and cheap.changed_share == 1.0
    assert {d.after for d in cheap.decisions} == {"cheap"}
    assert cheap.mean("node_hourly_cost", "before") == 30.0
    assert cheap.mean("node_hourly_cost", "after") == 2.0
    assert cheap.mean("gpu_temperature", "after") == 80.0


def test_new_normalisation_args_are_applied_to_the_recorded_values() -> None:
    records = recorded(1)
    # A range of 0-100 $/h: cost differences of a few dollars barely count; temperature (weight 2) wins again.
    config = weights_config({"GPUTemperature": 2, "Cost": 3}, {"Cost": {"normalization": {"min": 0, "max": 100}}})
    report = replay(records, plans(config))
    assert "Cost" in report.decisions[0].renormalised and not report.decisions[0].changed
    # The same weights with the recorded min-max (every feasible node was recorded): cost wins.
    assert replay(records, plans(weights_config({"GPUTemperature": 2, "Cost": 3}))).decisions[0].after == "cheap"


def test_a_plugin_the_records_lack_is_reported_and_records_without_candidates_are_skipped() -> None:
    records = [*recorded(1), {"kind": "placement", "result": "unschedulable", "candidates": []},
               {"kind": "eviction", "pod": "x"}]
    report = replay(records, plans(weights_config({"GPUTemperature": 1, "NodeLoad": 5})))
    assert report.unreplayable == {"NodeLoad": 1} and report.skipped == 2
    assert not report.decisions[0].changed  # Cost dropped out, temperature decides alone


def test_replay_command_prints_changes_and_means(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    export = tmp_path / "decisions.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in recorded(3)))
    new = tmp_path / "new.yaml"
    new.write_text(json.dumps(weights_config({"GPUTemperature": 1, "Cost": 20})))
    assert main(["replay", "--decisions", str(export), "--config", str(new)]) == 0
    out = capsys.readouterr().out
    assert "CHANGED cold -> cheap" in out and "winner changed in 3 (100.0%)" in out
    assert "node_hourly_cost" in out and "30.00" in out and "2.00" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({"profiles": [{"plugins": {"score": {"enabled": [{"name": "Nope"}]}}}]}))
    assert main(["replay", "--decisions", str(export), "--config", str(bad)]) == 2
    assert "profiles[0].plugins.score.enabled[0]" in capsys.readouterr().err


def test_bad_jsonl_names_the_line() -> None:
    with pytest.raises(ValueError, match="line 2"):
        list(read_jsonl(['{"a": 1}', "nope"]))


def test_unknown_format_is_a_bad_request() -> None:
    with pytest.raises(BadRequest, match="format"):
        decisions(DecisionRing(10), {"format": ["xml"]})


def record(i: int) -> DecisionRecord:
    return DecisionRecord(id=i, time=0.0, pod=f"default/p{i}", uid=str(i), profile="metrics-sched", config_hash="x",
                          result="scheduled", node="a", message="", nodes_total=1, feasible=1, rejections={},
                          candidates=[Candidate("a", 50.0, 0, [])], margin=None, duration_ms=1.0, attempts=1)


def test_file_sink_rotates_by_size(tmp_path: Path) -> None:
    path = tmp_path / "audit" / "decisions.jsonl"
    line = len(json.dumps(record(0).as_dict())) + 1
    sink = JsonlFileSink(path, max_bytes=int(line * 2.5), backups=2)
    for i in range(7):
        sink.on_record(record(i))
    sink.close()
    assert sorted(p.name for p in path.parent.iterdir()) == ["decisions.jsonl", "decisions.jsonl.1",
                                                            "decisions.jsonl.2"]
    ids = [json.loads(x)["id"] for name in ("decisions.jsonl.2", "decisions.jsonl.1", "decisions.jsonl")
           for x in (path.parent / name).read_text().splitlines()]
    assert ids == [2, 3, 4, 5, 6] and sink.dropped == 0


def test_audit_file_config_names_its_fields() -> None:
    catalog = in_tree_registry(third_party=False).catalog()
    config = parse_config({"audit": {"file": {"path": "d.jsonl", "maxBytes": 8192, "backups": 1}}}, catalog)
    assert config.audit.file is not None and config.audit.file.max_bytes == 8192
    with pytest.raises(ConfigError, match=r"audit\.file\.maxBytes"):
        parse_config({"audit": {"file": {"path": "d.jsonl", "maxBytes": 10}}}, catalog)
