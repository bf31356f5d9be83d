"""The regression check of `make bench-quick`: the core's decisions/s against the committed figure.

The baseline is the `bench/results/latest.json` of git HEAD (what was last committed from a complete
`make bench` or `make bench-quick`). It counts only for the same machine class (CPU model and core count,
from the report's `machine`): another machine's figure says nothing about this one, so the check then
passes, saying there is no baseline. The figure compared is the core bench's decisions/s at 5,000 nodes
(or, if either report lacks that size, at the largest size both have); the check fails when the current
figure is more than TOLERANCE (20 %) below the baseline's.

Measured on the same host in the same minutes (`check`, what `make bench-quick` runs): the code that produced
the committed figure (the commit the report records, or for a report from before it recorded one, the parent
of the commit that last changed it) is measured again, taking turns with this checkout (bench.core_ab), and
the check fails when this checkout's decisions/s are more than TOLERANCE below that code's: the committed
figure as this host runs it today. On the shared dev VM the same code's figure moved by 1.8x within an
afternoon, so a comparison with the absolute figure failed (or passed) on the host's speed; the absolute
comparison (`compare`) is what remains when the committed code cannot be measured (not a git checkout, the
commit gone), and is reported next to the same-run one.

    python -m bench.regression [--current bench/results/latest.json] [--baseline FILE] [--absolute]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import core_ab

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


def compared_size(now: dict[int, float], then: dict[int, float]) -> int | None:
    """The node count whose figures are compared: PREFERRED_NODES, else the largest both reports have (None: none)."""
    common = sorted(set(now) & set(then))
    if not common:
        return None
    return PREFERRED_NODES if PREFERRED_NODES in common else common[-1]


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
    nodes = compared_size(now, then)
    if nodes is None:
        return Verdict(True, f"the committed report has no core figure at the sizes measured now ({sorted(now)}): "
                             "nothing to compare")
    floor = then[nodes] * (1 - tolerance)
    summary = (f"core decisions/s at {nodes} nodes: {now[nodes]:.1f} now, {then[nodes]:.1f} committed "
               f"({now[nodes] / then[nodes] - 1:+.1%}; the floor is {floor:.1f}, {tolerance:.0%} below)")
    if now[nodes] < floor:
        return Verdict(False, f"REGRESSION: {summary}")
    return Verdict(True, f"no regression: {summary}")


def baseline_commit(baseline: dict[str, Any], root: Path = ROOT, path: str = LATEST) -> tuple[str, str] | None:
    """(commit, how it was found) of the code that measured the committed report, or None when it cannot be told:
    the commit the report records (measured on a clean checkout), else the parent of the commit that last changed
    the report (a results commit holds results and docs only)."""
    recorded = baseline.get("commit") or {}
    candidates: list[tuple[str, str]] = []
    if recorded.get("sha") and not recorded.get("dirty"):
        candidates.append((str(recorded["sha"]), "the commit the report records"))
    last = _git(root, "log", "-1", "--format=%H", "--", path)
    if last:
        candidates.append((f"{last}^", f"the parent of {last[:10]}, which last changed the report"))
    for commit, how in candidates:
        sha = _git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
        if sha:
            return sha, how
    return None


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def checkout_commit(root: Path = ROOT) -> dict[str, Any] | None:
    """What a report records of the code it measured: HEAD, and whether the measured parts (TREE_PARTS, the
    results aside) differed from it."""
    sha = _git(root, "rev-parse", "HEAD")
    if not sha:
        return None
    status = _git(root, "status", "--porcelain", "--", *core_ab.TREE_PARTS, ":(exclude)bench/results")
    return {"sha": sha, "dirty": bool(status)}


def same_run(pairs: core_ab.Pairs, nodes: int, commit: str, how: str, committed: float | None,
             tolerance: float = TOLERANCE) -> Verdict:
    """The verdict from this checkout's and the committed code's decisions/s measured alternately."""
    ratios = pairs.ratios()
    ratio = pairs.ratio()
    now, then = statistics.median(pairs.current), statistics.median(pairs.baseline)
    summary = (f"core decisions/s at {nodes} nodes, this checkout against the committed figure's code ({commit[:10]}, "
               f"{how}) measured in turns, {len(ratios)} pairs of blocks: {ratio:.2f}x (pairs {min(ratios):.2f}-"
               f"{max(ratios):.2f}; medians {now:.1f} and {then:.1f}); the floor is {1 - tolerance:.2f}x")
    if committed:
        summary += (f"; the committed figure {committed:.1f} (this host runs that code at {then / committed:.2f}x of "
                    "it now)")
    if ratio < 1 - tolerance:
        return Verdict(False, f"REGRESSION: {summary}")
    return Verdict(True, f"no regression: {summary}")


def check(current: dict[str, Any], baseline: dict[str, Any] | None, blocks: int = 24, block: int = 250,
          warmup: int = 100, say: Callable[[str], None] = lambda _: None,
          alternate: Callable[..., core_ab.Pairs] = core_ab.alternate, root: Path = ROOT) -> Verdict:
    """The same-run check (see the module docstring), or the absolute comparison when the committed code cannot be
    measured; the absolute comparison's verdict is reported beside the same-run one either way."""
    absolute = compare(current, baseline)
    if baseline is None or machine_class(current) != machine_class(baseline):
        return absolute
    then = core_rates(baseline)
    nodes = compared_size(core_rates(current), then)
    if nodes is None:  # no current figures, or none at a size the committed report has: compare() said which
        return absolute
    found = baseline_commit(baseline, root)
    if found is None:
        return Verdict(absolute.ok, f"{absolute.message} (the committed figure's code could not be found: absolute "
                                    "figures compared)")
    commit, how = found
    say(f"the core at {nodes} nodes, this checkout and {commit[:10]} taking turns ({blocks} blocks of {block})")
    try:
        measured = alternate(commit, blocks=blocks, block=block, nodes=nodes, warmup=warmup, say=say, root=root)
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:  # ValueError: a child's reply
        return Verdict(absolute.ok, f"{absolute.message} (the committed figure's code {commit[:10]} could not be "
                                    f"measured: {exc}; absolute figures compared)")
    verdict = same_run(measured, nodes, commit, how, then.get(nodes))
    return Verdict(verdict.ok, f"{verdict.message}. Absolute: {absolute.message}")


def committed_report(path: str = LATEST, root: Path = ROOT) -> dict[str, Any] | None:
    """The report as committed at git HEAD, or None if there is none."""
    shown = _git(root, "show", f"HEAD:{path}")
    if not shown:
        return None
    report: dict[str, Any] = json.loads(shown)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="fails when core decisions/s regressed > 20 %")
    parser.add_argument("--current", type=Path, default=ROOT / LATEST)
    parser.add_argument("--baseline", type=Path, default=None, help="default: bench/results/latest.json at HEAD")
    parser.add_argument("--absolute", action="store_true", help="compare the reports' figures only (no same-run "
                                                                "measurement of the committed code)")
    args = parser.parse_args(argv)
    current = json.loads(args.current.read_text())
    baseline = json.loads(args.baseline.read_text()) if args.baseline else committed_report()
    verdict = compare(current, baseline) if args.absolute else check(
        current, baseline, say=lambda m: print(f"[bench] {m}", file=sys.stderr, flush=True))
    print(f"[bench] {verdict.message}", file=sys.stderr)
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
