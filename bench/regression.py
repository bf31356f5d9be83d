"""The regression check of `make bench-quick`: the core's decisions/s against the committed figure.

The baseline is the `bench/results/latest.json` of git HEAD (what was last committed from a complete
`make bench` or `make bench-quick`). It counts only for the same machine class (CPU model and core count,
from the report's `machine`): another machine's figure says nothing about this one, so the check then
passes, saying there is no baseline. The figure compared is the core bench's decisions/s at 5,000 nodes
(or, if either report lacks that size, at the largest size both have); the check fails when the current
figure is more than TOLERANCE (20 %) below the baseline's.

    python -m bench.regression [--current bench/results/latest.json] [--baseline FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LATEST = "bench/results/latest.json"
TOLERANCE = 0.20
PREFERRED_NODES = 5000


@dataclass(frozen=True)
class Verdict:
    ok: bool
    message: str


def machine_class(report: dict[str, Any]) -> str:
    machine = report.get("machine") or {}
    return f"{machine.get('cpu', '?')} x {machine.get('cores', '?')} cores"


def core_rates(report: dict[str, Any]) -> dict[int, float]:
    """Decisions/s of the core bench by node count."""
    sizes = (report.get("core") or {}).get("sizes") or []
    return {int(row["nodes"]): float(row["decisions_per_second"]) for row in sizes
            if row.get("nodes") and row.get("decisions_per_second")}


def compare(current: dict[str, Any], baseline: dict[str, Any] | None, tolerance: float = TOLERANCE) -> Verdict:
    if baseline is None:
        return Verdict(True, "no committed baseline (bench/results/latest.json at HEAD): nothing to compare")
    mine, theirs = machine_class(current), machine_class(baseline)
    if mine != theirs:
        return Verdict(True, f"no baseline for this machine class ({mine}; the committed figures are from "
                             f"{theirs}): nothing to compare")
    now, then = core_rates(current), core_rates(baseline)
    if not now:
        return Verdict(False, "the current report has no core figures to check (was the core bench skipped?)")
    common = sorted(set(now) & set(then))
    if not common:
        return Verdict(True, f"the committed report has no core figure at the sizes measured now ({sorted(now)}): "
                             "nothing to compare")
    nodes = PREFERRED_NODES if PREFERRED_NODES in common else common[-1]
    floor = then[nodes] * (1 - tolerance)
    summary = (f"core decisions/s at {nodes} nodes: {now[nodes]:.1f} now, {then[nodes]:.1f} committed "
               f"({now[nodes] / then[nodes] - 1:+.1%}; the floor is {floor:.1f}, {tolerance:.0%} below)")
    if now[nodes] < floor:
        return Verdict(False, f"REGRESSION: {summary}")
    return Verdict(True, f"no regression: {summary}")


def committed_report(path: str = LATEST, root: Path = ROOT) -> dict[str, Any] | None:
    """The report as committed at git HEAD, or None if there is none."""
    shown = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=root, capture_output=True, text=True)
    if shown.returncode != 0:
        return None
    report: dict[str, Any] = json.loads(shown.stdout)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="fails when core decisions/s regressed > 20 %")
    parser.add_argument("--current", type=Path, default=ROOT / LATEST)
    parser.add_argument("--baseline", type=Path, default=None, help="default: bench/results/latest.json at HEAD")
    args = parser.parse_args(argv)
    current = json.loads(args.current.read_text())
    baseline = json.loads(args.baseline.read_text()) if args.baseline else committed_report()
    verdict = compare(current, baseline)
    print(f"[bench] {verdict.message}", file=sys.stderr)
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
