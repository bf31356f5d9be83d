"""The regression check of `make bench-quick`: core decisions/s against the committed figure of the same
machine class."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.regression import committed_report, compare, main

pytestmark = pytest.mark.unit


def report(rates: dict[int, float], cpu: str = "AMD EPYC", cores: int = 2) -> dict[str, Any]:
    return {"machine": {"cpu": cpu, "cores": cores},
            "core": {"sizes": [{"nodes": n, "decisions_per_second": r} for n, r in rates.items()]}}


def test_within_twenty_percent_passes() -> None:
    verdict = compare(report({1000: 800.0, 5000: 361.0}), report({1000: 900.0, 5000: 450.0}))
    assert verdict.ok and "no regression" in verdict.message and "at 5000 nodes" in verdict.message


def test_more_than_twenty_percent_below_fails() -> None:
    verdict = compare(report({5000: 359.0}), report({5000: 450.0}))
    assert not verdict.ok
    assert verdict.message.startswith("REGRESSION: core decisions/s at 5000 nodes: 359.0 now, 450.0 committed")


def test_faster_passes() -> None:
    assert compare(report({5000: 2000.0}), report({5000: 450.0})).ok


def test_another_machine_class_has_no_baseline() -> None:
    for other in (report({5000: 10.0}, cpu="Intel Xeon"), report({5000: 10.0}, cores=4)):
        verdict = compare(other, report({5000: 450.0}))
        assert verdict.ok and "no baseline for this machine class" in verdict.message


def test_no_committed_report_passes_saying_so() -> None:
    verdict = compare(report({5000: 1.0}), None)
    assert verdict.ok and "no committed baseline" in verdict.message


def test_without_5000_nodes_the_largest_common_size_counts() -> None:
    verdict = compare(report({1000: 500.0, 2000: 100.0}), report({1000: 800.0, 2000: 110.0, 15000: 50.0}))
    assert verdict.ok and "at 2000 nodes" in verdict.message
    assert not compare(report({1000: 500.0}), report({1000: 800.0, 15000: 50.0})).ok


def test_a_report_without_core_figures_fails() -> None:
    verdict = compare({"machine": {"cpu": "AMD EPYC", "cores": 2}}, report({5000: 450.0}))
    assert not verdict.ok and "no core figures" in verdict.message


def test_the_baseline_is_the_committed_report() -> None:
    committed = committed_report()  # bench/results/latest.json at git HEAD, whatever the working copy holds
    assert committed is not None and committed["machine"]["cores"] and committed["core"]["sizes"]
    assert committed_report("bench/results/no-such-report.json") is None


def test_main_exits_non_zero_on_a_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    current, baseline = tmp_path / "current.json", tmp_path / "baseline.json"
    current.write_text(json.dumps(report({5000: 300.0})))
    baseline.write_text(json.dumps(report({5000: 450.0})))
    assert main(["--current", str(current), "--baseline", str(baseline)]) == 1
    assert "REGRESSION" in capsys.readouterr().err
    current.write_text(json.dumps(report({5000: 440.0})))
    assert main(["--current", str(current), "--baseline", str(baseline)]) == 0
