"""The regression check of `make bench-quick`: core decisions/s against the committed figure of the same
machine class."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench import core_ab
from bench.core_ab import Pairs
from bench.regression import (
    ROOT,
    baseline_commit,
    check,
    checkout_commit,
    committed_report,
    compare,
    main,
    same_run,
)

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
    assert main(["--current", str(current), "--baseline", str(baseline), "--absolute"]) == 1
    assert "REGRESSION" in capsys.readouterr().err
    current.write_text(json.dumps(report({5000: 440.0})))
    assert main(["--current", str(current), "--baseline", str(baseline), "--absolute"]) == 0


# -- the same-run check: the committed figure's code measured again, alternately with this checkout --------------
def test_same_run_judges_the_code_not_the_host() -> None:
    # The host runs everything at two thirds of the committed figure's speed today: the same code is no regression.
    pairs = Pairs(current=[600.0, 606.0, 594.0], baseline=[600.0, 600.0, 600.0])
    verdict = same_run(pairs, 5000, "a" * 40, "the commit the report records", committed=911.6)
    assert verdict.ok and verdict.message.startswith("no regression: core decisions/s at 5000 nodes")
    assert "3 pairs of blocks: 1.00x (pairs 0.99-1.01; medians 600.0 and 600.0)" in verdict.message
    assert "this host runs that code at 0.66x of it now" in verdict.message
    assert not compare(report({5000: 600.0}), report({5000: 911.6})).ok  # what the absolute figures alone said


def test_same_run_regression_fails() -> None:
    pairs = Pairs(current=[450.0, 470.0, 440.0], baseline=[600.0, 610.0, 590.0])
    verdict = same_run(pairs, 5000, "b" * 40, "how", committed=600.0)
    assert not verdict.ok and verdict.message.startswith("REGRESSION: ") and "the floor is 0.80x" in verdict.message


def test_pairs_ratio_is_the_median_of_back_to_back_ratios() -> None:
    pairs = Pairs(current=[100.0, 300.0, 90.0], baseline=[100.0, 200.0, 100.0])
    assert pairs.ratios() == [1.0, 1.5, 0.9] and pairs.ratio() == 1.0
    assert pairs.as_dict()["ratio"] == 1.0


def test_check_measures_the_committed_code_and_reports_the_absolute_figures() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    def alternate(commit: str, **options: Any) -> Pairs:
        calls.append((commit, options))
        return Pairs(current=[500.0, 505.0, 495.0], baseline=[510.0, 500.0, 500.0])

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    baseline = report({1000: 900.0, 5000: 911.6})
    baseline["commit"] = {"sha": head, "dirty": False}
    verdict = check(report({1000: 700.0, 5000: 600.0}), baseline, alternate=alternate)
    assert verdict.ok, verdict.message
    assert calls == [(head, {"blocks": 24, "block": 250, "nodes": 5000, "warmup": 100, "say": calls[0][1]["say"],
                             "root": ROOT})]
    assert "the commit the report records" in verdict.message
    assert "Absolute: REGRESSION: core decisions/s at 5000 nodes: 600.0 now, 911.6 committed" in verdict.message


def test_check_falls_back_to_the_absolute_figures_when_the_code_cannot_be_measured() -> None:
    def alternate(commit: str, **options: Any) -> Pairs:
        raise RuntimeError("the core bench of /tmp/x failed (exit 1)")

    verdict = check(report({5000: 600.0}), report({5000: 911.6}), alternate=alternate)
    assert not verdict.ok and "could not be measured: the core bench of /tmp/x failed" in verdict.message
    assert check(report({5000: 900.0}), report({5000: 911.6}), alternate=alternate).ok


def test_check_without_a_comparable_baseline_measures_nothing() -> None:
    def alternate(commit: str, **options: Any) -> Pairs:
        raise AssertionError("nothing to measure against")

    assert "no committed baseline" in check(report({5000: 1.0}), None, alternate=alternate).message
    assert "no baseline for this machine class" in check(report({5000: 1.0}, cores=4), report({5000: 450.0}),
                                                         alternate=alternate).message
    # No figure at a size the committed report has, or none at all: compare()'s verdict, nothing measured.
    assert "no core figure at the sizes measured now" in check(report({1000: 1.0}), report({5000: 450.0}),
                                                               alternate=alternate).message
    assert not check({"machine": {"cpu": "AMD EPYC", "cores": 2}}, report({5000: 450.0}), alternate=alternate).ok


def test_a_garbled_child_reply_falls_back_to_the_absolute_figures() -> None:
    def alternate(commit: str, **options: Any) -> Pairs:
        raise ValueError("Expecting value: line 1 column 1 (char 0)")  # json.loads of a stray stdout line

    verdict = check(report({5000: 900.0}), report({5000: 911.6}), alternate=alternate)
    assert verdict.ok and "could not be measured: Expecting value" in verdict.message


def test_the_baseline_commit_is_the_recorded_one_or_the_parent_of_the_results_commit() -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "HEAD")
    assert baseline_commit({"commit": {"sha": head, "dirty": False}}) == (head, "the commit the report records")
    last = git("log", "-1", "--format=%H", "--", "bench/results/latest.json")
    parent = git("rev-parse", "--verify", "--quiet", f"{last}^^{{commit}}")  # none in a clone cut at that commit
    derived = (parent, f"the parent of {last[:10]}, which last changed the report") if parent else None
    assert baseline_commit({}) == derived
    assert baseline_commit({"commit": {"sha": head, "dirty": True}}) == derived  # measured on a dirty tree: not it
    assert baseline_commit({"commit": {"sha": "0" * 40, "dirty": False}}) == derived  # not in this clone


def test_a_report_records_the_code_it_measured() -> None:
    recorded = checkout_commit()
    assert recorded is not None and len(recorded["sha"]) == 40 and isinstance(recorded["dirty"], bool)


def test_alternate_takes_turns_and_swaps_which_tree_goes_first() -> None:
    order: list[str] = []

    class FakeChild:
        def __init__(self, src: Path, nodes: int, pods: int, warmup: int) -> None:
            self.name = "current" if src == ROOT else "baseline"
            assert self.name == "current" or (src / "metrics_sched" / "__init__.py").exists()  # the commit's tree
            assert (nodes, pods, warmup) == (10, 1 + 3 * 5, 1)
            self.closed = False
            made.append(self)

        def rate(self, decisions: int) -> float:
            assert decisions == 5
            order.append(self.name)
            return 100.0 if self.name == "current" else 125.0

        def close(self) -> None:
            self.closed = True

    made: list[FakeChild] = []
    pairs = core_ab.alternate("HEAD", blocks=3, block=5, nodes=10, warmup=1,
                              child=FakeChild)  # type: ignore[arg-type]
    assert order == ["current", "baseline", "baseline", "current", "current", "baseline"]
    assert pairs.current == [100.0] * 3 and pairs.baseline == [125.0] * 3 and pairs.ratio() == 0.8
    assert [c.closed for c in made] == [True, True]


def test_the_trees_take_turns_in_processes_of_their_own(tmp_path: Path) -> None:
    # The real children (small: 50 nodes): each runs its tree's scheduler and answers a block's rate.
    pairs = core_ab.alternate("HEAD", blocks=2, block=10, nodes=50, warmup=5)
    assert len(pairs.current) == len(pairs.baseline) == 2 and min(pairs.current + pairs.baseline) > 0
    # A tree without the code: the installed checkout's metrics_sched would be imported instead; refused.
    with pytest.raises(RuntimeError, match=f"the child of {tmp_path} runs {ROOT / 'metrics_sched'}"):
        core_ab.Child(tmp_path, 50, 10, 1)
